"""Probe: does the backward half of a bidirectional chain hurt phrase-level training on SST?

With ``--supervision phrase`` a sequential model is trained on the label of every prefix of
the chain that is a constituent; a bidirectional model fits that label from
``[h→_t ; h←_t]``, and the backward half ``h←_t`` has read the words *after* the prefix. This
runs ``gnn-treelstm train`` with every argument passed through, but with the phrase
classifier reading ``[h→_t ; 0]`` (the backward half zeroed; the sentence label is still
predicted from both directions' final states, Tai's sentence vector). If the backward half at
the prefixes is what holds the bidirectional rows back, root accuracy rises. A probe, not a
model of the registry: nothing here changes the library.

    .venv/bin/python scripts/probe_bilstm_prefix_labels.py --task sst-5 --model bilstm \\
        --tree chain --supervision phrase --data DATA/sst --embeddings GLOVE --hidden 168 \\
        --engine level --epochs 10 --seeds 3
"""

from __future__ import annotations

import sys

import torch

import gnn_treelstm  # noqa: F401  (before anything that imports dgl)
from gnn_treelstm.cells.sequential import SequentialLSTM


def _forward_half(self: SequentialLSTM, graph, h: torch.Tensor) -> torch.Tensor:
    """Per-node classifier input: the forward direction's state, the backward half zeroed
    (unidirectional models: ``h`` as it is)."""
    if not self.bidirectional:
        return h
    half = h.shape[1] // 2
    return torch.cat([h[:, :half], torch.zeros_like(h[:, half:])], dim=1)


def main(argv: list[str] | None = None) -> int:
    SequentialLSTM.node_vectors = _forward_half  # the model sees it as the cell's node vectors
    from gnn_treelstm.commands.train import main as train_main

    return train_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

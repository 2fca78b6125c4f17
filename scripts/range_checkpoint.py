"""The checkpoints that cross the declared torch range: one small file written by each end.

``python scripts/range_checkpoint.py DIR`` writes ``DIR/torch-<version>.pt`` with the running
torch: a seeded N-ary Tree-LSTM model for SST-5 (194 weights), saved by
:func:`gnn_treelstm.models.checkpoint.save_checkpoint`, with in its ``meta`` the versions that
wrote it and the model's outputs on one fixed tree (:data:`PROBE`).
``tests/test_environment.py`` loads every such file under every torch it runs on (the pinned
one and both ends in CI) and compares the outputs: a file written under torch 2.15 loads
under 2.4 and the reverse.

Run it once in each end's venv (``.ci/stack`` builds them; docs/install.md has the commands)::

    ~/.cache/gnn_treelstm/stacks/py3.10-torch2.4.1-dgl2.1.0/bin/python \\
        scripts/range_checkpoint.py tests/range_checkpoints
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import dgl
import torch

import gnn_treelstm
from gnn_treelstm.models.checkpoint import save_checkpoint
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

#: "a witty film": the root (3) over "a" (0) and a phrase (4) over "witty" (1) and "film" (2)
PROBE = {"parents": [3, 4, 4, -1, 3], "words": [1, 2, 5, -1, -1]}
VOCAB = ["<unk>", "a", "witty", "dull", "plot", "film"]
CONFIG = {"task": "sst-5", "cell": "nary", "vocab_size": len(VOCAB), "emb_dim": 4, "hidden": 3}


def probe_graph() -> dgl.DGLGraph:
    return dgl.batch([gnn_treelstm.make_tree(**PROBE)])


def outputs(model: TreeLSTMModel) -> dict[str, list]:
    """The model's outputs on :data:`PROBE`, as nested lists of floats."""
    with torch.no_grad():
        return {k: v.tolist() for k, v in sorted(model.eval()(probe_graph()).items())}


def write(folder: Path) -> Path:
    torch.manual_seed(0)
    model = TreeLSTMModel(ModelConfig(**CONFIG)).eval()
    versions = {"torch": torch.__version__.split("+")[0], "dgl": dgl.__version__,
                "python": platform.python_version()}
    meta = {"written_by": versions, "probe": PROBE, "outputs": outputs(model)}
    return save_checkpoint(folder / f"torch-{versions['torch']}.pt", model, vocab=VOCAB,
                           label_names=[str(i) for i in range(5)], meta=meta)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/range_checkpoint.py DIR")
    print(write(Path(sys.argv[1])))

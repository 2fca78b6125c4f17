"""A synthetic SNLI-sized corpus: parsed sentence pairs with SNLI's shapes, as JSON Lines.

Every generated pair takes the dependency trees (head of every token, relation of every
arc) of a pair of the real SNLI dev set, drawn uniformly with replacement, so the lengths
and depths of premises and hypotheses (and how the two go together) follow the dev set's;
the words are drawn from a Zipf law over a vocabulary of SNLI's size (``w0``, ``w1``, ...)
and the labels uniformly. The rows are what ``gnn-treelstm build --dataset jsonl`` reads
(``tokens`` + ``heads`` + ``deprels``, so nothing is parsed)::

    gnn-treelstm build --dataset snli --src ../shared/data --out /tmp/snli-dev \\
        --trees dependency
    python scripts/synthetic_snli.py /tmp/snli-dev /tmp/synth --pairs 550000
    gnn-treelstm build --dataset jsonl --name snli \\
        --labels entailment neutral contradiction --trees dependency \\
        --src /tmp/synth/train.jsonl /tmp/synth/dev.jsonl /tmp/synth/test.jsonl \\
        --out /tmp/synth-built --workers 2

A tool for measuring scale, not part of the package; it reads the built dev set through
the package's loader.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.packed import PackedTrees

LABELS = ["entailment", "neutral", "contradiction"]
#: SNLI's training vocabulary has about 36,000 distinct tokens
VOCAB = 36_000


def shapes(trees: PackedTrees, relations: list[str]) -> list[str]:
    """Per tree the JSON text of its ``"heads": [...], "deprels": [...]`` (CoNLL-U heads:
    1-based, 0 for the root; the root's relation ``ROOT``)."""
    a = trees.arrays
    no, eo = np.asarray(a["node_offsets"]), np.asarray(a["edge_offsets"])
    src, dst = np.asarray(a["src"]), np.asarray(a["dst"])
    rel = np.asarray(a["e.rel"])
    out = []
    for t in range(len(trees)):
        n = int(no[t + 1] - no[t])
        heads, rels = [0] * n, ["ROOT"] * n
        for e in range(int(eo[t]), int(eo[t + 1])):
            heads[int(src[e])] = int(dst[e]) + 1
            rels[int(src[e])] = relations[int(rel[e])]
        out.append(f'"heads": {json.dumps(heads)}, "deprels": {json.dumps(rels)}')
    return out


def write_split(path: Path, count: int, shapes_a: list[str], shapes_b: list[str],
                lengths: np.ndarray, rng: np.random.Generator) -> None:
    """``count`` pairs, each with the trees of a dev pair drawn at random."""
    pick = rng.integers(0, len(shapes_a), count)
    words = rng.zipf(1.2, int(lengths[pick].sum())) % VOCAB
    labels = rng.integers(0, len(LABELS), count)
    at = 0
    with open(path, "w", encoding="utf-8") as fh:
        for i, p in enumerate(pick.tolist()):
            la, lb = int(lengths[p, 0]), int(lengths[p, 1])
            ta = json.dumps([f"w{w}" for w in words[at:at + la].tolist()])
            tb = json.dumps([f"w{w}" for w in words[at + la:at + la + lb].tolist()])
            at += la + lb
            fh.write(f'{{"a": {{"tokens": {ta}, {shapes_a[p]}}}, '
                     f'"b": {{"tokens": {tb}, {shapes_b[p]}}}, '
                     f'"label": "{LABELS[labels[i]]}"}}\n')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dev_data", type=Path,
                    help="a built SNLI directory with dependency trees of its dev split")
    ap.add_argument("out", type=Path, help="directory for train/dev/test.jsonl")
    ap.add_argument("--pairs", type=int, default=550_000, help="training pairs")
    ap.add_argument("--eval-pairs", type=int, default=10_000, help="dev and test pairs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        split = D.load_split(args.dev_data, "dev", "dependency")
        relations = D.load_relations(args.dev_data, "dependency").names
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not isinstance(split.graphs, PackedTrees) or split.graphs_b is None:
        print(f"error: {args.dev_data} is not a built pair data set", file=sys.stderr)
        return 2
    sa, sb = shapes(split.graphs, relations), shapes(split.graphs_b, relations)
    lengths = np.stack([split.graphs.sizes()[0], split.graphs_b.sizes()[0]], axis=1)
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", args.pairs), ("dev", args.eval_pairs),
                        ("test", args.eval_pairs)):
        write_split(args.out / f"{name}.jsonl", count, sa, sb, lengths, rng)
        print(f"{name}: {count} pairs -> {args.out / f'{name}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A tiny built-data directory in the layout of ``docs/design.md`` (for training tests).

``build_tiny(root, dataset)`` writes ``root/<dataset>/`` with meta.json, vocab.json,
relations/<tree>.json, <tree>/<split>.bin (pairs: .a.bin/.b.bin) and text/<split>.jsonl,
from random hand-built trees (tests/handbuilt.py), so train -> save -> load -> evaluate runs in
seconds without the data builder or spaCy.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import dgl
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.trees.graph import IGNORE, make_tree
from tests.handbuilt import random_dependency_tree, random_tree

WORDS = ["<unk>", "not", "no", "n't"] + [f"w{i}" for i in range(36)]
SIZES = {"train": 16, "dev": 8, "test": 8}
LABEL_NAMES = {
    "sst": ["very negative", "negative", "neutral", "positive", "very positive"],
    "sick": ["ENTAILMENT", "CONTRADICTION", "NEUTRAL"],
    "trec": ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"],
    "snli": ["entailment", "neutral", "contradiction"],
}
NUM_CLASSES = {"sst": 5, "sick": 3, "trec": 6, "snli": 3}
DEP_RELS = ["nsubj", "dobj", "amod", "det", "neg"]


def _chain(words: list[int]) -> dgl.DGLGraph:
    n = len(words)
    return make_tree(list(range(1, n)) + [-1], words, spans=[[0, i + 1] for i in range(n)])


def _sentence(rng: random.Random, tree: str, n_words: int, label: int | None,
              max_children: int | None) -> tuple[dgl.DGLGraph, list[str]]:
    if tree == "constituency":
        g = random_tree(rng, n_words, max_children=2, exact_children=True, words="leaves",
                        vocab_size=len(WORDS))
        if label is None:
            g.ndata["label"] = torch.full((g.num_nodes(),), IGNORE, dtype=torch.int64)
    elif tree == "dependency":
        g = random_dependency_tree(rng, n_words, num_relations=len(DEP_RELS),
                                   max_children=max_children, vocab_size=len(WORDS))
        if label is not None:  # SST-style: a few labelled phrases
            lab = torch.tensor([rng.randrange(5) if rng.random() < 0.5 else IGNORE
                                for _ in range(g.num_nodes())])
            g.ndata["label"] = lab
    else:
        g = _chain([rng.randrange(len(WORDS)) for _ in range(n_words)])
    if label is not None:
        lab = g.ndata["label"].clone()
        lab[g.ndata["root"]] = label
        g.ndata["label"] = lab
    words = g.ndata["word"]
    toks = [WORDS[int(w)] for w in words[words >= 0]]
    return g, toks


def build_tiny(root: Path, dataset: str, *, seed: int = 0, dep_max_children: int | None = 4,
               sizes: dict[str, int] | None = None) -> Path:
    """Write a tiny built ``dataset`` directory under ``root``; return its path."""
    rng = random.Random(seed)
    out = Path(root) / dataset
    pair = dataset in ("sick", "snli")
    trees = {"sst": ["constituency", "dependency", "chain"],
             "sick": ["dependency", "constituency", "chain"],
             "trec": ["constituency", "dependency", "chain"],
             "snli": ["dependency", "chain"]}[dataset]
    sizes = sizes or SIZES
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps(WORDS))
    rel_names = {"constituency": ["left", "right"], "dependency": DEP_RELS, "chain": ["next"]}
    (out / "relations").mkdir(exist_ok=True)
    (out / "text").mkdir(exist_ok=True)
    for t in trees:
        (out / "relations" / f"{t}.json").write_text(json.dumps(rel_names[t]))
    for split, n in sizes.items():
        labels = [rng.randrange(NUM_CLASSES[dataset]) for _ in range(n)]
        scores = [round(rng.uniform(1, 5), 2) for _ in range(n)]
        lengths = [(rng.randint(2, 9), rng.randint(2, 9)) for _ in range(n)]
        texts = []
        for t in trees:
            (out / t).mkdir(exist_ok=True)
            trng = random.Random(f"{seed}-{split}")  # same words per example across trees
            ga, gb = [], []
            for i in range(n):
                node_label = labels[i] if dataset == "sst" else None
                g, toks = _sentence(trng, t, lengths[i][0], node_label, dep_max_children)
                ga.append(g)
                rec: dict = {"label": labels[i]}
                if pair:
                    g2, toks2 = _sentence(trng, t, lengths[i][1], None, dep_max_children)
                    gb.append(g2)
                    rec.update(a=toks, b=toks2, score=scores[i])
                else:
                    rec.update(tokens=toks)
                if t == trees[0]:
                    texts.append(rec)
            targets = {"label": torch.tensor(labels, dtype=torch.int64)}
            if dataset == "sick":
                targets["score"] = torch.tensor(scores, dtype=torch.float32)
            if pair:
                dgl.save_graphs(str(out / t / f"{split}.a.bin"), ga, targets)
                dgl.save_graphs(str(out / t / f"{split}.b.bin"), gb)
            else:
                dgl.save_graphs(str(out / t / f"{split}.bin"), ga, targets)
        (out / "text" / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in texts))
    meta = {"dataset": dataset, "pair": pair, "trees": trees, "splits": dict(sizes),
            "label_names": LABEL_NAMES[dataset],
            "num_relations": {t: len(rel_names[t]) for t in trees},
            "vocab_size": len(WORDS), "sample": True, "src": str(out / "_no_raw"),
            "built_with": {"tests": "tiny_data"}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return out

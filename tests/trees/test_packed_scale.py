"""A million packed trees: generated vectorised, written, mapped in well under 2 s, and
resident at <= 40 bytes a node once every page of the split was read."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import torch

from gnn_treelstm.trees import packed as P
from gnn_treelstm.trees.graph import make_tree, validate_tree

TREES = 1_000_000
MAX_NODES = 25  # 1-25 nodes a tree: 13 on average, SNLI's sentences are 14 and 8 words


def random_forest(rng: np.random.Generator, trees: int, max_nodes: int
                  ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Packed arrays of ``trees`` random trees (node ``i``'s parent a later node, the last
    node the root, children numbered in node order as ``make_tree`` numbers them)."""
    nn = rng.integers(1, max_nodes + 1, trees)
    no = np.concatenate([[0], np.cumsum(nn)])
    n = int(no[-1])
    tree = np.repeat(np.arange(trees), nn)
    local = np.arange(n) - no[:-1][tree]
    size = nn[tree]
    child = local < size - 1
    par = local + 1 + (rng.random(n) * (size - 1 - local)).astype(np.int64)
    src, dst = local[child], par[child]
    gpar = dst + no[:-1][tree[child]]
    order = np.argsort(gpar, kind="stable")
    ranked = gpar[order]
    pos = np.empty(len(src), dtype=np.int64)
    pos[order] = np.arange(len(src)) - np.searchsorted(ranked, ranked, side="left")
    has_child = np.zeros(n, dtype=bool)
    has_child[gpar] = True
    arrays = {
        "node_offsets": no, "edge_offsets": np.concatenate([[0], np.cumsum(nn - 1)]),
        "src": src, "dst": dst,
        "n.word": rng.integers(-1, 40_000, n), "n.leaf": ~has_child,
        "n.label": rng.integers(-1, 5, n),
        "n.span": np.stack([local, local + 1], axis=1), "n.root": ~child,
        "e.rel": rng.integers(0, 45, len(src)), "e.pos": pos,
    }
    dtypes = {k: ("bool" if arrays[k].dtype == bool else "int64")
              for k in arrays if k[:2] in ("n.", "e.")}
    return arrays, dtypes


MEASURE = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from gnn_treelstm.trees import data as D

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    before = rss()
    t0 = time.perf_counter()
    split = D.load_split(sys.argv[1], "train", "dependency")
    load_s = time.perf_counter() - t0
    loaded = rss()
    trees = split.graphs
    for arr in trees.arrays.values():  # every page of every array, as an epoch reads them
        np.add.reduce(np.asarray(arr).reshape(-1).view(np.uint8), dtype=np.uint64)
    touched = rss()
    nodes = int(trees.arrays["node_offsets"][-1])
    batch = D.collate(D.TreeDataset(split).__getitems__([0, len(split) - 1]), schedule=True)
    print(json.dumps({"load_s": load_s, "nodes": nodes, "trees": len(split),
                      "loaded_bytes": loaded - before, "resident_bytes": touched - before,
                      "batch_nodes": batch.graph.num_nodes()}))
""")


def test_a_million_trees(tmp_path):
    rng = np.random.default_rng(0)
    arrays, dtypes = random_forest(rng, TREES, MAX_NODES)
    for t in (0, 1, 777_777):  # the generator makes what make_tree makes
        lo, hi = arrays["node_offsets"][t:t + 2]
        elo, ehi = arrays["edge_offsets"][t:t + 2]
        par = np.full(hi - lo, -1)
        par[arrays["src"][elo:ehi]] = arrays["dst"][elo:ehi]
        g = make_tree(par.tolist(), arrays["n.word"][lo:hi].tolist())
        assert g.ndata["leaf"].numpy().tolist() == arrays["n.leaf"][lo:hi].tolist()
        assert g.edata["pos"].numpy().tolist() == arrays["e.pos"][elo:ehi].tolist()
    out = tmp_path / "big"
    labels = {"label": torch.from_numpy(rng.integers(0, 3, TREES))}
    P.write_packed(out / "dependency" / "train.packed", arrays, dtypes, labels)
    nodes = int(arrays["node_offsets"][-1])
    del arrays
    (out / "meta.json").write_text(json.dumps({
        "dataset": "jsonl", "pair": False, "trees": ["dependency"],
        "splits": {"train": TREES}}))
    res = subprocess.run([sys.executable, "-c", MEASURE, str(out)], capture_output=True,
                         text=True, check=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["trees"] == TREES and got["nodes"] == nodes
    assert got["load_s"] < 2.0, got
    assert got["loaded_bytes"] / nodes < 1.0, got  # mapped, not read
    assert got["resident_bytes"] / nodes <= 40, got
    assert got["batch_nodes"] > 0
    split = P.load_packed(out / "dependency" / "train.packed")[0]
    for i in (0, TREES - 1):
        validate_tree(split[i])
    print(f"\n1M trees, {nodes} nodes: load {got['load_s']:.3f} s, resident "
          f"{got['resident_bytes'] / nodes:.1f} bytes a node after reading every page")

"""Mean vectors (Tai Table 3 baseline): subtree means against a node-by-node reference."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells import build_cell
from gnn_treelstm.trees.graph import NO_WORD, WORD, batch_roots
from tests.handbuilt import chain, random_batch, random_dependency_tree


def _reference(g: dgl.DGLGraph, x: torch.Tensor) -> torch.Tensor:
    """Straight from the definition: for every node, the mean of the word vectors in its
    subtree, found by walking the child lists one node at a time."""
    src, dst = (t.tolist() for t in g.edges())
    children: dict[int, list[int]] = {}
    for s, d in zip(src, dst):
        children.setdefault(d, []).append(s)
    words = g.ndata[WORD].tolist()

    def subtree(j: int) -> list[int]:
        out = [j]
        for k in children.get(j, []):
            out += subtree(k)
        return out

    rows = []
    for j in range(g.num_nodes()):
        ws = [k for k in subtree(j) if words[k] != NO_WORD]
        rows.append(torch.stack([x[k] for k in ws]).mean(0) if ws else torch.zeros_like(x[0]))
    return torch.stack(rows)


def _graphs(kind: str) -> list[dgl.DGLGraph]:
    if kind == "constituency":
        return random_batch(seed=4, count=10, words="leaves", exact_children=True)
    rng = random.Random(5)
    return [random_dependency_tree(rng, rng.randint(1, 9)) for _ in range(10)]


@pytest.mark.parametrize("engine", ["dgl", "level"])
@pytest.mark.parametrize("kind", ["constituency", "dependency"])
def test_matches_reference_and_gradient(engine, kind):
    g = dgl.batch(_graphs(kind))
    x = torch.randn(g.num_nodes(), 4, dtype=torch.float64, requires_grad=True)
    h, c = build_cell("mean", 4, 4, engine=engine)(g, x)
    ref = _reference(g, x)
    torch.testing.assert_close(h, ref, rtol=1e-12, atol=1e-12)
    words = (g.ndata[WORD] != NO_WORD).unsqueeze(-1)
    assert torch.equal(c.detach() != 0, (h.detach() != 0))          # c is the subtree sum
    w = torch.randn_like(h)
    (gx,) = torch.autograd.grad((h * w).sum(), x)
    (gr,) = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(gx, gr, rtol=1e-12, atol=1e-12)
    assert (gx[~words.squeeze(-1)] == 0).all()                       # no word, no gradient


def test_batched_equals_tree_by_tree_and_graph_unchanged():
    graphs = _graphs("dependency")
    g = dgl.batch(graphs)
    before = {k: v.clone() for k, v in g.ndata.items()}
    x = torch.randn(g.num_nodes(), 3)
    cell = build_cell("mean", 3, 3)
    h, _ = cell(g, x)
    parts = torch.split(x, [t.num_nodes() for t in graphs])
    torch.testing.assert_close(h, torch.cat([cell(t, p)[0] for t, p in zip(graphs, parts)]))
    assert set(g.ndata) == set(before) and all(torch.equal(g.ndata[k], v)
                                               for k, v in before.items())


def test_chain_root_is_the_sentence_mean():
    g = chain(6)
    x = torch.randn(6, 5)
    h, _ = build_cell("mean", 5, 5, engine="level")(g, x)
    torch.testing.assert_close(h[batch_roots(g)][0], x.mean(0))
    torch.testing.assert_close(h[0], x[0])                           # the first word's subtree


def test_no_parameters_and_sizes():
    cell = build_cell("mean", 7, 150)
    assert list(cell.parameters()) == [] and cell.out_size == 7
    h, c = cell(chain(3), torch.randn(3, 7))
    assert h.shape == c.shape == (3, 7)
    with pytest.raises(ValueError, match="x has shape"):
        cell(chain(3), torch.randn(3, 5))

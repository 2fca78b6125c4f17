"""Tran & Cheng (2018): mTreeLSTM, addTreeLSTM, fullTreeLSTM (MTreeLSTM, AddTreeLSTM,
FullTreeLSTM, the subclasses of MultiplicativeTreeLSTM)."""

from __future__ import annotations

import math
import random

import dgl
import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
from gnn_treelstm.cells.multiplicative import (
    VARIANTS,
    AddTreeLSTM,
    FullTreeLSTM,
    MTreeLSTM,
    MultiplicativeTreeLSTM,
)
from gnn_treelstm.trees.graph import make_tree
from tests.handbuilt import random_dependency_tree, random_tree
from tests.reference.tran import tran_forward

R = 6  # relations
X, H, RS = 7, 5, 4  # x_size, h_size, rel_size
NAMES = {"mult": "mtree", "add": "mtree-add", "full": "mtree-full"}
CLASSES = {"mult": MTreeLSTM, "add": AddTreeLSTM, "full": FullTreeLSTM}


def _trees(seed: int = 0) -> list[dgl.DGLGraph]:
    """24 trees of varied shape: dependency-style (any fan-out) and bottom-up merged trees,
    single nodes included."""
    rng = random.Random(seed)
    trees = [random_dependency_tree(rng, n, num_relations=R) for n in (1, 2, 3)]
    trees += [random_dependency_tree(rng, rng.randint(4, 14), num_relations=R)
              for _ in range(9)]
    trees += [random_tree(rng, rng.randint(1, 9), max_children=k, num_relations=R)
              for k in (1, 2, 3, 4, None) for _ in range(2)]
    trees += [random_tree(rng, 6, max_children=3, exact_children=True, num_relations=R),
              random_tree(rng, 8, max_children=2, exact_children=True, num_relations=R)]
    assert len(trees) >= 20
    return trees


def _cell(variant: str, dtype=torch.float32, seed: int = 0, scramble: bool = True):
    torch.manual_seed(seed)
    cell = build_cell(NAMES[variant], X, H, num_relations=R, rel_size=RS)
    if scramble:  # larger weights than the default init, so every path matters numerically
        with torch.no_grad():
            for p in cell.parameters():
                p.uniform_(-0.6, 0.6)
    return cell.to(dtype)


def _parents_rels(graph: dgl.DGLGraph) -> tuple[list[int], list[int]]:
    src, dst = (t.tolist() for t in graph.edges())
    parents = [-1] * graph.num_nodes()
    rels = [0] * graph.num_nodes()
    for s, d, r in zip(src, dst, graph.edata["rel"].tolist()):
        parents[s] = d
        rels[s] = r
    return parents, rels


def _grads(cell, h, c, wh, wc):
    cell.zero_grad()
    ((h * wh).sum() + (c * wc).sum()).backward()
    return {n: p.grad.clone() for n, p in cell.named_parameters()}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_matches_reference_states_and_gradients(variant, dtype, tol):
    graph = dgl.batch(_trees())
    cell = _cell(variant, dtype)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(graph.num_nodes(), X, generator=gen, dtype=dtype)
    # loss = per-node mean of random projections of h and c (a training loss is a mean;
    # a plain sum over 250 nodes would make float32 round-off alone exceed 1e-5)
    wh = torch.randn(graph.num_nodes(), H, generator=gen, dtype=dtype) / graph.num_nodes()
    wc = torch.randn(graph.num_nodes(), H, generator=gen, dtype=dtype) / graph.num_nodes()

    h, c = cell(graph, x)
    g_cell = _grads(cell, h, c, wh, wc)
    parents, rels = _parents_rels(graph)
    h_ref, c_ref = tran_forward(cell, parents, rels, x)
    g_ref = _grads(cell, h_ref, c_ref, wh, wc)

    assert h.dtype == dtype and h.shape == (graph.num_nodes(), H) and c.shape == h.shape
    torch.testing.assert_close(h, h_ref, atol=tol, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=tol, rtol=0)
    assert set(g_cell) == set(g_ref)
    for name in g_cell:
        torch.testing.assert_close(g_cell[name], g_ref[name], atol=tol, rtol=0, msg=name)
        # and relative to each gradient's own scale (some are ~1e-3, so atol alone is weak)
        scale = float(g_ref[name].abs().max())
        assert scale > 0, name
        assert float((g_cell[name] - g_ref[name]).abs().max()) <= tol * scale, name
    # the relation-dependent parameters really are exercised by the comparison
    rel_params = {"mult": "W_mr.weight", "add": "W_r.weight", "full": "W_hh"}[variant]
    assert g_ref[rel_params].abs().max() > 1e-4


@pytest.mark.parametrize("variant", VARIANTS)
def test_batched_equals_tree_by_tree(variant):
    trees = _trees(seed=3)[::2]  # 12 shapes, single nodes and every generator included
    cell = _cell(variant)
    xs = [torch.randn(t.num_nodes(), X) for t in trees]
    h, c = cell(dgl.batch(trees), torch.cat(xs))
    parts = [cell(t, x) for t, x in zip(trees, xs)]
    torch.testing.assert_close(h, torch.cat([p[0] for p in parts]), atol=1e-6, rtol=0)
    torch.testing.assert_close(c, torch.cat([p[1] for p in parts]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_callers_graph_unchanged(variant):
    graph = dgl.batch(_trees(seed=4))
    before_n = {k: v.clone() for k, v in graph.ndata.items()}
    before_e = {k: v.clone() for k, v in graph.edata.items()}
    edges = [t.clone() for t in graph.edges()]
    _cell(variant)(graph, torch.randn(graph.num_nodes(), X))
    assert set(graph.ndata) == set(before_n) and set(graph.edata) == set(before_e)
    for k, v in before_n.items():
        assert torch.equal(graph.ndata[k], v), k
    for k, v in before_e.items():
        assert torch.equal(graph.edata[k], v), k
    assert all(torch.equal(a, b) for a, b in zip(graph.edges(), edges))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_parameter_gets_a_gradient(variant):
    graph = dgl.batch(_trees(seed=5))
    cell = _cell(variant, torch.float64, scramble=False)  # the real initialization
    x = torch.randn(graph.num_nodes(), X, dtype=torch.float64)
    h, c = cell(graph, x)
    (h.pow(2).sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name


@pytest.mark.parametrize("variant", VARIANTS)
def test_reset_parameters_changes_weights(variant):
    cell = _cell(variant)
    with torch.no_grad():
        for p in cell.parameters():
            p.fill_(7.0)
    before = {n: p.clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        assert not torch.equal(p, before[n]), n
        assert (p.abs() < 1).all(), n  # back to a sane initialization
    first = {n: p.clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        if n != "W_x.bias":  # biases are reset to zero
            assert not torch.equal(p, first[n]), n
    assert math.isclose(float(cell.W_x.bias.detach().abs().sum()), 0.0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_repr_shows_sizes(variant):
    s = repr(_cell(variant))
    for part in (f"x_size={X}", f"h_size={H}", f"num_relations={R}", f"variant='{variant}'"):
        assert part in s
    if variant != "full":
        assert f"rel_size={RS}" in s


def test_registry_names_and_class_attributes():
    for variant, name in NAMES.items():
        assert cells.get(name) is CLASSES[variant] and CLASSES[variant].variant == variant
        cell = build_cell(name, X, H, num_relations=R)
        assert isinstance(cell, MultiplicativeTreeLSTM) and cell.variant == variant
        assert cell.rel_size == 100 and cell.out_size == H
        # the variant's own name is accepted (model configs of older checkpoints hold it)
        assert type(build_cell(name, X, H, num_relations=R, variant=variant)) is CLASSES[variant]
    assert MultiplicativeTreeLSTM.uses_relations is True
    assert set(MultiplicativeTreeLSTM.tree_kinds) == {"dependency", "amr", "constituency"}
    with pytest.raises(ValueError, match="MTreeLSTM is the variant 'mult', got variant='full'"):
        build_cell("mtree", X, H, num_relations=R, variant="full")
    with pytest.raises(ValueError, match="variant"):
        FullTreeLSTM(X, H, R, variant="other")
    with pytest.raises(ValueError, match="unknown engine"):
        MTreeLSTM(X, H, R, engine="levels")
    with pytest.raises(ValueError, match="FullTreeLSTM .mtree-full. has none"):
        FullTreeLSTM(X, H, R, rel_init="normal")


def test_only_mtree_brings_the_authors_run_defaults():
    assert dict(MTreeLSTM.run_defaults) == {"optimizer": "adam", "loss_reduction": "sum"}
    assert not AddTreeLSTM.run_defaults and not FullTreeLSTM.run_defaults


@pytest.mark.parametrize("variant", VARIANTS)
def test_relations_change_the_output(variant):
    """Same tree, different relation ids -> different internal states, same leaf states
    (except ``add``, where every node reads its own relation)."""
    rng = random.Random(7)
    tree = random_dependency_tree(rng, 10, num_relations=R)
    other = tree.clone()
    other.edata["rel"] = (tree.edata["rel"] + 1) % R
    cell = _cell(variant)
    x = torch.randn(tree.num_nodes(), X)
    h1, _ = cell(tree, x)
    h2, _ = cell(other, x)
    leaf = tree.ndata["leaf"]
    assert not torch.allclose(h1[~leaf], h2[~leaf])
    if variant != "add":
        torch.testing.assert_close(h1[leaf], h2[leaf])


def test_add_root_uses_its_own_relation_embedding():
    """addTreeLSTM: the root (no edge) reads the extra embedding row ``num_relations``."""
    cell = _cell("add")
    tree = make_tree([-1], [3])
    x = torch.randn(1, X)
    h1, _ = cell(tree, x)
    with torch.no_grad():
        cell.rel_emb.weight[R].add_(1.0)
    h2, _ = cell(tree, x)
    assert not torch.allclose(h1, h2)
    assert cell.rel_emb.num_embeddings == R + 1


# ---------------------------------------------------------------- identities
def _childsum_and_copy(variant: str):
    """A scrambled Child-Sum cell and an mtree cell with the same gate weights, mapped
    through Child-Sum's public ``paper_weights()`` (Tai's named matrices)."""
    torch.manual_seed(11)
    cs = build_cell("childsum", X, H).double()
    assert isinstance(cs, ChildSumTreeLSTM)
    with torch.no_grad():
        for p in cs.parameters():
            p.uniform_(-0.6, 0.6)
    cell = _cell(variant, torch.float64, seed=12)  # scrambled: nothing shared by accident
    pw = cs.paper_weights()
    with torch.no_grad():
        for k, g in enumerate("iouf"):
            cell.W_x.weight[k * H:(k + 1) * H] = pw[f"W_{g}"]
            cell.W_x.bias[k * H:(k + 1) * H] = pw[f"b_{g}"]
        for k, g in enumerate("iou"):
            cell.U_iou.weight[k * H:(k + 1) * H] = pw[f"U_{g}"]
        cell.U_f.weight.copy_(pw["U_f"])
    return cs, cell


def test_full_with_identity_relation_matrices_equals_childsum():
    """Tran eq 2 with every W_hh^r = I is Tai's child sum (eq 2): mtree-full == Child-Sum."""
    graph = dgl.batch(_trees(seed=13))
    cs, cell = _childsum_and_copy("full")
    with torch.no_grad():
        cell.W_hh.copy_(torch.eye(H, dtype=torch.float64).expand(R, H, H))
    x = torch.randn(graph.num_nodes(), X, dtype=torch.float64)
    h, c = cell(graph, x)
    h_cs, c_cs = cs(graph, x)
    torch.testing.assert_close(h, h_cs, atol=1e-12, rtol=0)
    torch.testing.assert_close(c, c_cs, atol=1e-12, rtol=0)
    # and not by accident: a non-identity relation matrix changes the internal nodes
    with torch.no_grad():
        cell.W_hh[0].mul_(0.5)
    h2, _ = cell(graph, x)
    assert not torch.allclose(h2[~graph.ndata["leaf"]], h_cs[~graph.ndata["leaf"]])


def test_mult_with_unit_factors_equals_childsum():
    """Tran eq 3 with W_mh = W_hm = I and W_mr e_r = 1 for every relation is the identity
    transition, so mtree (m_size = h) equals Child-Sum too."""
    graph = dgl.batch(_trees(seed=14))
    cs, cell = _childsum_and_copy("mult")
    with torch.no_grad():
        cell.W_mh.weight.copy_(torch.eye(H))
        cell.W_hm.weight.copy_(torch.eye(H))
        cell.rel_emb.weight.zero_()
        cell.rel_emb.weight[:, 0] = 1.0
        cell.W_mr.weight.zero_()
        cell.W_mr.weight[:, 0] = 1.0
    x = torch.randn(graph.num_nodes(), X, dtype=torch.float64)
    h, c = cell(graph, x)
    h_cs, c_cs = cs(graph, x)
    torch.testing.assert_close(h, h_cs, atol=1e-12, rtol=0)
    torch.testing.assert_close(c, c_cs, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- bad input
def _tree():
    return random_dependency_tree(random.Random(9), 6, num_relations=R)


class _NoCompute(Exception):
    pass


def _guarded(variant):
    """A cell whose computation raises, so a ValueError proves validation ran first."""
    cell = _cell(variant)

    def boom(*a, **k):
        raise _NoCompute

    cell.input_terms = boom
    cell.edge_message = boom
    return cell


@pytest.mark.parametrize("variant", VARIANTS)
def test_bad_relation_ids(variant):
    g = _tree()
    g.edata["rel"][0] = R
    with pytest.raises(ValueError, match="num_relations"):
        _guarded(variant)(g, torch.randn(g.num_nodes(), X))
    g.edata["rel"][0] = -1
    with pytest.raises(ValueError, match="relation ids"):
        _guarded(variant)(g, torch.randn(g.num_nodes(), X))
    g.edata["rel"] = g.edata["rel"].float()
    with pytest.raises(ValueError, match="integer"):
        _guarded(variant)(g, torch.randn(g.num_nodes(), X))


@pytest.mark.parametrize("variant", VARIANTS)
def test_missing_rel_field(variant):
    g = _tree()
    del g.edata["rel"]
    with pytest.raises(ValueError, match="'rel'"):
        _guarded(variant)(g, torch.randn(g.num_nodes(), X))


@pytest.mark.parametrize("variant", VARIANTS)
def test_cycle(variant):
    g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 0, 2])), num_nodes=4)
    g.edata["rel"] = torch.zeros(4, dtype=torch.int64)
    g.edata["pos"] = torch.tensor([0, 0, 0, 1])
    with pytest.raises(ValueError, match="cycle"):
        _guarded(variant)(g, torch.randn(4, X))


@pytest.mark.parametrize("variant", VARIANTS)
def test_wrong_feature_size(variant):
    g = _tree()
    with pytest.raises(ValueError, match="x_size"):
        _guarded(variant)(g, torch.randn(g.num_nodes(), X + 1))
    with pytest.raises(ValueError, match="rows"):
        _guarded(variant)(g, torch.randn(g.num_nodes() + 1, X))
    with pytest.raises(ValueError, match="float"):
        _guarded(variant)(g, torch.zeros(g.num_nodes(), X, dtype=torch.int64))
    with pytest.raises(ValueError, match="dtype"):
        _guarded(variant)(g, torch.zeros(g.num_nodes(), X, dtype=torch.float64))


@pytest.mark.parametrize("variant", VARIANTS)
def test_single_node_without_edge_fields(variant):
    """A one-word sentence has no edges, so no relation field is needed."""
    g = dgl.graph((torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)),
                  num_nodes=1)
    cell = _cell(variant, torch.float64)
    x = torch.randn(1, X, dtype=torch.float64)
    h, c = cell(g, x)
    h_ref, c_ref = tran_forward(cell, [-1], [0], x)
    torch.testing.assert_close(h, h_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-12, rtol=0)


def test_bad_constructor_sizes():
    for kw in ({"num_relations": 0}, {"num_relations": R, "rel_size": 0},
               {"num_relations": R, "m_size": 0}):
        with pytest.raises(ValueError):
            MTreeLSTM(X, H, **kw)


# ---------------------------------------------------------------- paper sizes
def _count(module) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not n.startswith("rel_emb"))


@pytest.mark.parametrize("variant,rel_size,paper_k", [
    ("mult", 50, 354), ("mult", 75, 358), ("mult", 100, 361), ("mult", 200, 376),
    ("add", 100, 361), ("full", 100, 1100),
])
def test_parameter_counts_match_tran_tables_5_6(variant, rel_size, paper_k):
    """Tran Tables 5-6 (SICK NLI, x 300, h 150, 37 Stanford relations) count the whole model
    without embeddings: the cell, the NLI classifier (4h -> 50 -> 3, Tran §5.3/§6.1), and a
    second bias per gate (the authors' code has biased Linear layers for both W x and U h;
    Tai's equations, and this cell, have one bias per gate)."""
    x, h, rels = 300, 150, 37
    cell = CLASSES[variant](x, h, rels, rel_size=rel_size)
    classifier = (4 * h * 50 + 50) + (50 * 3 + 3)
    total = _count(cell) + classifier + 4 * h
    if paper_k >= 1000:
        assert round(total / 1e5) / 10 == paper_k / 1000  # "1.1M"
    else:
        assert round(total / 1000) == paper_k


@pytest.mark.parametrize("variant", ["mult", "add"])
def test_relation_embedding_init_paper_and_code(variant):
    torch.manual_seed(0)
    paper = CLASSES[variant](6, 5, 40)
    assert paper.rel_emb.weight.abs().max() <= 0.05           # Tran §6.1: U(-0.05, 0.05)
    code = CLASSES[variant](6, 5, 40, rel_init="normal")
    std = float(code.rel_emb.weight.std())
    assert 0.9 < std < 1.1                                    # N(0, 1), the authors' code
    with pytest.raises(ValueError, match="unknown rel_init 'xavier'"):
        CLASSES[variant](6, 5, 4, rel_init="xavier")


@pytest.mark.parametrize("variant", [None, *VARIANTS])
def test_the_earlier_single_class_call_builds_the_variant_with_a_deprecation(variant):
    kw = {} if variant is None else {"variant": variant}
    new = CLASSES[variant or "mult"]
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match=f"build {new.__name__}"):
        cell = MultiplicativeTreeLSTM(X, H, R, rel_size=RS, **kw)
    assert type(cell) is new and cell.variant == (variant or "mult")
    torch.manual_seed(0)
    want = new(X, H, R, rel_size=RS)
    g = dgl.batch(_trees())
    x = torch.randn(g.num_nodes(), X)
    for a, b in zip(cell(g, x), want(g, x)):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown variant 'other'"):
        MultiplicativeTreeLSTM(X, H, R, variant="other")


def test_the_cells_are_exported_at_the_top_level():
    for cls in (MTreeLSTM, AddTreeLSTM, FullTreeLSTM, MultiplicativeTreeLSTM):
        assert getattr(gnn_treelstm, cls.__name__) is cls and cls.__name__ in gnn_treelstm.__all__
    table = gnn_treelstm.__doc__.split("\n")
    rows = {line.split()[0]: line.split()[1:] for line in table if "Tran & Cheng" in line}
    assert rows == {c.__name__: [n, *"Tran & Cheng 2018,".split(), *eq]
                    for c, n, eq in [(MTreeLSTM, "mtree", ["eqs", "3-4"]),
                                     (AddTreeLSTM, "mtree-add", ["Table", "6"]),
                                     (FullTreeLSTM, "mtree-full", ["eq", "2"])]}

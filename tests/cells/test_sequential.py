"""SequentialLSTM baselines (Tai et al. 2015 eq 1, Table 1) on chain graphs."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

import gnn_treelstm
from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
from gnn_treelstm.cells.nary import NaryTreeLSTM
from gnn_treelstm.cells.sequential import (
    KINDS,
    SequentialLSTM,
    hidden_size_for_budget,
    num_params,
)
from gnn_treelstm.trees.graph import make_tree
from tests.cells.common import assert_same_graph, grads, snapshot
from tests.handbuilt import chain, random_tree
from tests.reference import tai

X, H = 6, 5
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
NAMES = list(KINDS)


def chains(seed: int = 0, count: int = 20) -> list[dgl.DGLGraph]:
    rng = random.Random(seed)
    return [chain(rng.randint(1, 10), seed=seed * 100 + i) for i in range(count)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,concat", [(n, True) for n in NAMES] + [("lstm2", False),
                                                                   ("bilstm2", False)])
@pytest.mark.parametrize("output_gate", [True, False])
def test_matches_reference_states_and_gradients(dtype, name, concat, output_gate):
    torch.manual_seed(0)
    g = dgl.batch(chains())
    cell = gnn_treelstm.build_cell(name, X, H, concat_layers=concat,
                                   output_gate=output_gate).to(dtype)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    h, c = cell(g, x)
    assert h.shape == c.shape == (g.num_nodes(), cell.out_size)
    rh, rc = tai.sequential(cell, g, x)
    tol = TOL[dtype]
    torch.testing.assert_close(h, rh, atol=tol, rtol=tol)
    torch.testing.assert_close(c, rc, atol=tol, rtol=tol)
    wh, wc = torch.randn_like(h), torch.randn_like(c)
    g1 = grads(cell, (h * wh).sum() + (c * wc).sum())
    g2 = grads(cell, (rh * wh).sum() + (rc * wc).sum())
    assert set(g1) == set(g2) == {n for n, _ in cell.named_parameters()}
    for pname in g1:
        torch.testing.assert_close(g1[pname], g2[pname], atol=tol, rtol=tol, msg=pname)
    if not output_gate:  # h_t = tanh(c_t)
        torch.testing.assert_close(h, torch.tanh(c), atol=0, rtol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("output_gate", [True, False])
def test_batched_equals_one_by_one_graph_unchanged_all_grads(name, output_gate):
    torch.manual_seed(1)
    graphs = chains(seed=1)
    g = dgl.batch(graphs)
    snap = snapshot(g)
    cell = gnn_treelstm.build_cell(name, X, H, output_gate=output_gate)
    x = torch.randn(g.num_nodes(), X)
    h, c = cell(g, x)
    assert_same_graph(g, snap)
    with torch.no_grad():
        offset = 0
        for t in graphs:
            n = t.num_nodes()
            ht, ct = cell(t, x[offset:offset + n])
            torch.testing.assert_close(h[offset:offset + n], ht, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(c[offset:offset + n], ct, atol=1e-6, rtol=1e-6)
            offset += n
    (h.sum() + c.sum()).backward()
    for pname, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        assert not torch.equal(before[n], p), n


@pytest.mark.parametrize("name", NAMES)
def test_equals_torch_lstm(name):
    """lstm/lstm2 = torch.nn.LSTM; the backward direction = nn.LSTM on the reversed
    sentence with the same weights (Tai: shared), each direction stacking its own layers."""
    torch.manual_seed(2)
    layers, bidir = KINDS[name]
    n = 9
    g = chain(n)
    cell = gnn_treelstm.build_cell(name, X, H, concat_layers=False).double()
    ref = torch.nn.LSTM(X, H, num_layers=layers).double()
    with torch.no_grad():
        for li, P in enumerate(cell.paper_weights()):  # torch gate order: i, f, g(=u), o
            getattr(ref, f"weight_ih_l{li}").copy_(torch.cat([P[f"W_{k}"] for k in "ifuo"]))
            getattr(ref, f"weight_hh_l{li}").copy_(torch.cat([P[f"U_{k}"] for k in "ifuo"]))
            getattr(ref, f"bias_ih_l{li}").copy_(torch.cat([P[f"b_{k}"] for k in "ifuo"]))
            getattr(ref, f"bias_hh_l{li}").zero_()
        x = torch.randn(n, X, dtype=torch.float64)
        h, c = cell(g, x)
        fwd, (hn, cn) = ref(x.unsqueeze(1))
        torch.testing.assert_close(h[:, :H], fwd[:, 0], atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(c[-1, :H], cn[-1, 0], atol=1e-12, rtol=1e-12)
        # the default reads every layer: the last word's [h^1 ; ... ; h^L] = torch's h_n
        every = gnn_treelstm.build_cell(name, X, H).double()
        every.load_state_dict(cell.state_dict())
        torch.testing.assert_close(every(g, x)[0][-1, :H * layers], hn[:, 0].reshape(-1),
                                   atol=1e-12, rtol=1e-12)
        if bidir:
            bwd, (_, cb) = ref(x.flip(0).unsqueeze(1))
            torch.testing.assert_close(h[:, H:], bwd[:, 0].flip(0), atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(c[0, H:], cb[-1, 0], atol=1e-12, rtol=1e-12)
            sent = cell.sentence_vector(dgl.batch([g, g]), torch.cat([h, h]))
            want = torch.cat([fwd[-1, 0], bwd[-1, 0]])  # both directions' final states
            torch.testing.assert_close(sent, torch.stack([want, want]), atol=1e-12,
                                       rtol=1e-12)
        else:
            sent = cell.sentence_vector(g, h)
            torch.testing.assert_close(sent, hn[-1], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("output_gate", [True, False])
def test_lstm_equals_childsum_and_unary_nary_on_a_chain(output_gate):
    torch.manual_seed(3)
    g = dgl.batch(chains(seed=3, count=5))
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    lstm = SequentialLSTM(X, H, output_gate=output_gate).double()
    cs = ChildSumTreeLSTM(X, H, output_gate=output_gate).double()
    nary = NaryTreeLSTM(X, H, n_ary=1, output_gate=output_gate).double()
    P = lstm.paper_weights()[0]
    n_iou = 3 if output_gate else 2  # gate rows i, (o,) u, f in every cell
    with torch.no_grad():
        cs.W_x.weight.copy_(lstm.layers[0].W_x.weight)
        cs.W_x.bias.copy_(lstm.layers[0].W_x.bias)
        cs._U_in().copy_(lstm.layers[0].U.weight[: n_iou * H])
        cs.U_f.weight.copy_(P["U_f"])
        nary.W_x.load_state_dict(lstm.layers[0].W_x.state_dict())
        nary.U.weight.copy_(lstm.layers[0].U.weight)
        h, c = lstm(g, x)
        for other in (cs, nary):
            h2, c2 = other(g, x)
            torch.testing.assert_close(h, h2, atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(c, c2, atol=1e-12, rtol=1e-12)


def test_repr_registry_engine_and_out_size():
    for name, (layers, bidir) in KINDS.items():
        cell = gnn_treelstm.build_cell(name, 7, 3)
        assert isinstance(cell, SequentialLSTM)
        assert (cell.num_layers, cell.bidirectional) == (layers, bidir)
        r = repr(cell)
        assert "x_size=7" in r and "h_size=3" in r and f"num_layers={layers}" in r
        assert "output_gate=True" in r
        # Tai's classifiers read every layer's final state: [h^1 ; h^2] per direction
        assert cell.out_size == (2 if bidir else 1) * 3 * layers
        ungated = gnn_treelstm.build_cell(name, 7, 3, output_gate=False)
        assert "output_gate=False" in repr(ungated) and ungated.out_size == cell.out_size
    assert gnn_treelstm.build_cell("bilstm2", 7, 3, concat_layers=False).out_size == 6
    with pytest.raises(ValueError, match="num_layers"):
        gnn_treelstm.build_cell("lstm", 7, 3, num_layers=2)
    with pytest.raises(ValueError, match="unknown engine"):
        SequentialLSTM(7, 3, engine="levels")
    assert SequentialLSTM(7, 3, engine="level", output_gate=False).engine == "level"
    # shared forward/backward weights: bidirectional has the unidirectional parameters
    for uni, bi in (("lstm", "bilstm"), ("lstm2", "bilstm2")):
        a = sum(p.numel() for p in gnn_treelstm.build_cell(uni, 300, 150).parameters())
        b = sum(p.numel() for p in gnn_treelstm.build_cell(bi, 300, 150).parameters())
        assert a == b == num_params(uni, 300, 150)


def test_refuses_non_chains_and_bad_input():
    cell = gnn_treelstm.build_cell("bilstm", X, H)
    tree = random_tree(random.Random(0), 5, exact_children=True)
    with pytest.raises(ValueError, match="not a chain"):
        cell(tree, torch.randn(tree.num_nodes(), X))
    g = chain(4)
    with pytest.raises(ValueError, match="x_size"):
        cell(g, torch.randn(4, X + 1))
    with pytest.raises(ValueError, match="rows"):
        cell(g, torch.randn(3, X))
    with pytest.raises(ValueError, match="dtype"):
        cell(g, torch.randn(4, X, dtype=torch.float64))
    cyc = dgl.graph(([0, 1, 2], [1, 2, 0]), num_nodes=3)
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(3, X))
    # a chain built with make_tree in the other direction is still a chain
    back = make_tree([-1, 0, 1], [1, 2, 3])
    assert cell(back, torch.randn(3, X))[0].shape == (3, 2 * H)


# ------------------------------------------------------------ Tai Table 1 budgets
# (kind, d, |θ|): relatedness (x = 300, no output gate in the authors' code) and sentiment
TABLE1_RELATEDNESS = [("lstm", 150, 203_400), ("bilstm", 150, 203_400),
                      ("lstm2", 108, 203_472), ("bilstm2", 108, 203_472),
                      ("nary", 142, 205_190), ("childsum", 150, 203_400)]
TABLE1_SENTIMENT = [("lstm", 168, 315_840), ("bilstm", 168, 315_840),
                    ("lstm2", 120, 318_720), ("bilstm2", 120, 318_720),
                    ("nary", 150, 316_800), ("childsum", 168, 315_840)]


@pytest.mark.parametrize("task,rows,gated", [("relatedness", TABLE1_RELATEDNESS, False),
                                             ("sentiment", TABLE1_SENTIMENT, True)])
def test_tai_table1_counts_and_hidden_sizes(task, rows, gated):
    budget = rows[-1][2]  # the Dependency Tree-LSTM's count sets the budget
    for kind, d, count in rows:
        assert num_params(kind, 300, d, counting="tai", output_gate=gated) == count, kind
        assert hidden_size_for_budget(kind, 300, budget, counting="tai",
                                      output_gate=gated) == d, kind


@pytest.mark.parametrize("task,rows,gated", [("relatedness", TABLE1_RELATEDNESS, False),
                                             ("sentiment", TABLE1_SENTIMENT, True)])
def test_our_modules_at_tai_table1_sizes(task, rows, gated):
    """Our cells at Table 1's sizes, built as Tai did (relatedness: no output gate).

    Sequential and Child-Sum: our count is Tai's minus exactly one bias per gate and layer
    (the authors' Torch code gives both the W and the U layer of each gate a bias, we keep
    one). Constituency (binary N-ary): not a bias difference only. The recurrent matrices
    agree (Tai's composer: (G-1+N) gates x N children h x h = 8h² = our 2N h² + N² h²), but
    the authors' BinaryTreeLSTM reads words in a separate leaf module c = W_c x + b
    (+ o = σ(W_o x + b) if gated), while our cell applies eqs 9-12 at the leaves with
    W^(i), W^(u), W^(f) (+ W^(o)): 2hx more input weights, and Tai has 2Gh more biases
    (one on each of the 2(G+1) composer layers + the leaf biases, against our G).
    """
    x = 300
    G = 4 if gated else 3
    for kind, d, tai_count in rows:
        cell = gnn_treelstm.build_cell(kind, x, d, output_gate=gated)
        ours = sum(p.numel() for p in cell.parameters())
        assert ours == num_params(kind, x, d, counting="module", output_gate=gated), kind
        if kind == "nary":
            assert ours - tai_count == 2 * d * x - 2 * G * d, kind
            # same recurrent matrices as Tai's composer: (G - 1 + N) gates x N children
            assert cell.U.weight.numel() == (G - 1 + 2) * 2 * d * d, kind
        else:
            layers = KINDS[kind][0] if kind in KINDS else 1
            assert tai_count - ours == G * d * layers, kind  # one extra bias per gate/layer
            assert abs(tai_count - ours) / tai_count < 0.005, kind


def test_module_counting_matches_modules_and_budget_rule():
    for kind in ("lstm", "bilstm", "lstm2", "bilstm2", "childsum", "nary"):
        cell = gnn_treelstm.build_cell(kind, 30, 17)
        assert sum(p.numel() for p in cell.parameters()) == num_params(kind, 30, 17), kind
        ungated = gnn_treelstm.build_cell(kind, 30, 17, output_gate=False)
        count = sum(p.numel() for p in ungated.parameters())
        assert count == num_params(kind, 30, 17, output_gate=False), kind
        layers = KINDS[kind][0] if kind in KINDS else 1
        # by hand: 3 gates; each layer W (h in) + U (h h) + one bias; nary N = 2: U is
        # (2 + N) h x N h, i.e. 2N h² for i, u and N² h² forget matrices
        by_hand = (3 * 17 * (30 + 1) + 8 * 17 * 17 if kind == "nary" else
                   3 * 17 * (30 + 17 + 1) + (layers - 1) * 3 * 17 * (2 * 17 + 1))
        assert count == by_hand, kind
    budget = num_params("childsum", 300, 168)
    assert hidden_size_for_budget("lstm", 300, budget) == 168
    assert hidden_size_for_budget("lstm2", 300, budget) == 120
    d = hidden_size_for_budget("nary", 300, budget)
    assert num_params("nary", 300, d) >= budget > num_params("nary", 300, d - 1)
    with pytest.raises(ValueError, match="kind"):
        num_params("gru", 300, 10)
    with pytest.raises(ValueError, match="budget"):
        hidden_size_for_budget("lstm", 300, 0)


def test_untied_directions_equal_torch_bidirectional_lstm():
    """``tie_directions=False`` (Teng & Zhang's BiLSTM): the backward direction has weights
    of its own, i.e. ``torch.nn.LSTM(bidirectional=True)``, whose two directions are
    separate LSTMs."""
    torch.manual_seed(4)
    n = 7
    g = chain(n)
    cell = gnn_treelstm.build_cell("bilstm", X, H, tie_directions=False).double()
    ref = torch.nn.LSTM(X, H, bidirectional=True).double()
    with torch.no_grad():
        for suffix, direction in (("l0", "up"), ("l0_reverse", "down")):
            P = cell.paper_weights(direction)[0]
            getattr(ref, f"weight_ih_{suffix}").copy_(torch.cat([P[f"W_{k}"] for k in "ifuo"]))
            getattr(ref, f"weight_hh_{suffix}").copy_(torch.cat([P[f"U_{k}"] for k in "ifuo"]))
            getattr(ref, f"bias_ih_{suffix}").copy_(torch.cat([P[f"b_{k}"] for k in "ifuo"]))
            getattr(ref, f"bias_hh_{suffix}").zero_()
    x = torch.randn(n, X, dtype=torch.float64)
    want, _ = ref(x.unsqueeze(1))
    for engine in ("dgl", "level"):
        other = gnn_treelstm.build_cell("bilstm", X, H, tie_directions=False, engine=engine)
        other.double().load_state_dict(cell.state_dict())
        h, _ = other(g, x)
        torch.testing.assert_close(h, want[:, 0], atol=1e-12, rtol=1e-12)
    # the directions differ, so the tied cell with the forward weights is another model
    tied = gnn_treelstm.build_cell("bilstm", X, H).double()
    tied.layers.load_state_dict(cell.layers.state_dict())
    assert not torch.allclose(tied(g, x)[0][:, H:], want[:, 0, H:])


def test_untied_directions_parameters_gradients_and_refusals():
    for kind in ("bilstm", "bilstm2"):
        cell = gnn_treelstm.build_cell(kind, 30, 17, tie_directions=False)
        count = sum(p.numel() for p in cell.parameters())
        assert count == 2 * num_params(kind, 30, 17)
        assert count == num_params(kind, 30, 17, tie_directions=False)
        assert "tie_directions=False" in repr(cell)
        g = dgl.batch(chains(seed=5, count=4))
        h, c = cell(g, torch.randn(g.num_nodes(), 30))
        (h.sum() + c.sum()).backward()
        for name, p in cell.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert cell.out_size == gnn_treelstm.build_cell(kind, 30, 17).out_size
    with pytest.raises(ValueError, match="tie_directions=False.*bidirectional"):
        gnn_treelstm.build_cell("lstm", 30, 17, tie_directions=False)
    with pytest.raises(ValueError, match="not bidirectional"):
        num_params("lstm", 30, 17, tie_directions=False)
    with pytest.raises(ValueError, match="direction"):
        gnn_treelstm.build_cell("bilstm", 30, 17).direction_layers("sideways")

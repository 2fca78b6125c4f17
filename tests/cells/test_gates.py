"""The output-gate layout Child-Sum and N-ary share (gnn_treelstm/cells/gates.py)."""

from __future__ import annotations

import pytest
import torch

from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
from gnn_treelstm.cells.gates import OutputGateLayout, gate_order, split_non_forget
from gnn_treelstm.cells.nary import NaryTreeLSTM

X, H = 4, 3


def test_gate_order_and_the_split_of_the_non_forget_gates():
    assert gate_order(True) == "iouf" and gate_order(False) == "iuf"
    pre = torch.arange(2 * 3 * H, dtype=torch.float64).reshape(2, 3 * H)
    i, o, u = split_non_forget(pre, True)
    assert torch.equal(torch.cat([i, o, u], dim=-1), pre) and i.shape == (2, H)
    i, o, u = split_non_forget(pre[:, : 2 * H], False)
    assert o is None and torch.equal(torch.cat([i, u], dim=-1), pre[:, : 2 * H])


@pytest.mark.parametrize("output_gate", [True, False])
def test_child_sum_and_nary_lay_their_gates_out_alike(output_gate):
    childsum = ChildSumTreeLSTM(X, H, output_gate=output_gate)
    nary = NaryTreeLSTM(X, H, n_ary=2, tie_forget=True, output_gate=output_gate)
    layer = "U_iou" if output_gate else "U_iu"
    g = 3 if output_gate else 2
    for cell, in_size in ((childsum, H), (nary, 2 * H)):
        assert isinstance(cell, OutputGateLayout) and cell.gates == gate_order(output_gate)
        assert cell.W_x.weight.shape == ((g + 1) * H, X)
        assert cell.non_forget_name == layer and cell.non_forget_layer() is getattr(cell, layer)
        assert cell.non_forget_layer().weight.shape == (g * H, in_size)
        other = "U_iu" if output_gate else "U_iou"
        assert not hasattr(cell, other), other  # the other layout's name fails loudly
    assert [n for n, _ in childsum.named_parameters()] == ["W_x.weight", "W_x.bias",
                                                          f"{layer}.weight", "U_f.weight"]
    assert [n for n, _ in nary.named_parameters()] == ["U_f_diag", "W_x.weight", "W_x.bias",
                                                      f"{layer}.weight", "U_f_off.weight"]

"""``reset_parameters``: every registry cell initialises all its parameters again, and a cell
that does not define it gets ``TreeCell``'s, which resets each submodule."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gnn_treelstm.cells import TreeCell, build_cell, cells
from tests.cells.test_registry import CASES


@pytest.mark.parametrize("name", sorted(cells.names()))
def test_every_registry_cell_initialises_every_parameter_again(name):
    torch.manual_seed(0)
    cell = build_cell(name, 6, 5, **CASES[name][2][0])
    with torch.no_grad():   # every parameter away from any initialisation
        for p in cell.parameters():
            p.fill_(7.0)
    cell.reset_parameters()
    same = [n for n, p in cell.named_parameters() if torch.all(p == 7.0)]
    assert not same, f"{name}: reset_parameters left {same} as they were"


class _Plain(TreeCell):
    def __init__(self, x_size: int, h_size: int) -> None:
        super().__init__(x_size, h_size)
        self.W = nn.Linear(x_size, h_size)
        self.U = nn.Linear(h_size, h_size, bias=False)
        self.reset_parameters()


def test_tree_cell_resets_each_submodule():
    cell = _Plain(4, 3)
    with torch.no_grad():
        for p in cell.parameters():
            p.fill_(7.0)
    cell.reset_parameters()
    assert all(not torch.all(p == 7.0) for p in cell.parameters())

"""Helpers shared by the cell tests."""

from __future__ import annotations

import dgl
import torch


def snapshot(g: dgl.DGLGraph) -> tuple[dict, dict]:
    return ({k: v.clone() for k, v in g.ndata.items()},
            {k: v.clone() for k, v in g.edata.items()})


def assert_same_graph(g: dgl.DGLGraph, snap: tuple[dict, dict]) -> None:
    nd, ed = snap
    assert set(g.ndata.keys()) == set(nd)
    assert set(g.edata.keys()) == set(ed)
    for k, v in nd.items():
        assert torch.equal(g.ndata[k], v), k
    for k, v in ed.items():
        assert torch.equal(g.edata[k], v), k


def grads(cell, loss) -> dict[str, torch.Tensor]:
    cell.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in cell.named_parameters()}

"""The benchmark anchor: DGL's own binary Tree-LSTM example cell, as written there.

This mirrors ``examples/pytorch/tree_lstm/tree_lstm.py`` of the DGL repository (the SST
example): an N-ary (binary) Tree-LSTM (Tai et al. 2015, eqs 9-14) whose reduce function
is a Python mailbox UDF, run with one ``dgl.prop_nodes_topo`` call. DGL therefore buckets
every frontier by in-degree and calls the reduce once per bucket. It is used **only** by
:mod:`gnn_treelstm.commands.bench` as the reference point of the speed comparison; the
project's cells live in :mod:`gnn_treelstm.cells`.

As in the example: children are in mailbox (edge id) order; internal nodes drop the input
term (the example's reduce overwrites ``iou``; on SST they have no word anyway); the word
mask multiplies the input projection. Only difference: the graph is not mutated
(``local_scope``).
"""

from __future__ import annotations

import dgl
import torch
from torch import nn

__all__ = ["DGLExampleTreeLSTM", "DGLExampleChildSumTreeLSTM"]


class DGLExampleTreeLSTM(nn.Module):
    """Binary Tree-LSTM cell of DGL's example (Tai eqs 9-14; full forget ``U_f``).

    ``forward(graph, x, mask) -> (h, c)``: ``x`` (N, x_size), ``mask`` (N,) 1 where the
    node has a word.
    """

    def __init__(self, x_size: int, h_size: int) -> None:
        super().__init__()
        self.x_size, self.h_size = int(x_size), int(h_size)
        self.W_iou = nn.Linear(x_size, 3 * h_size, bias=False)
        self.U_iou = nn.Linear(2 * h_size, 3 * h_size, bias=False)
        self.b_iou = nn.Parameter(torch.zeros(1, 3 * h_size))
        self.U_f = nn.Linear(2 * h_size, 2 * h_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.W_iou.reset_parameters()
        self.U_iou.reset_parameters()
        self.U_f.reset_parameters()
        nn.init.zeros_(self.b_iou)

    def message_func(self, edges):
        return {"h": edges.src["h"], "c": edges.src["c"]}

    def reduce_func(self, nodes):
        # eqs 10, 11, 13 (children part): mailbox (n, 2, H) -> h_cat (n, 2H)
        h_cat = nodes.mailbox["h"].view(nodes.mailbox["h"].size(0), -1)
        f = torch.sigmoid(self.U_f(h_cat)).view(*nodes.mailbox["h"].size())
        c = torch.sum(f * nodes.mailbox["c"], 1)
        # as in the example, internal nodes take U_iou h_cat only (SST: they have no word)
        return {"iou": self.U_iou(h_cat), "c": c}

    def apply_node_func(self, nodes):
        # eqs 9, 12, 13, 14
        iou = nodes.data["iou"] + self.b_iou
        i, o, u = torch.chunk(iou, 3, 1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        c = i * u + nodes.data["c"]
        h = o * torch.tanh(c)
        return {"h": h, "c": c}

    def forward(
        self, graph: dgl.DGLGraph, x: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = graph.num_nodes()
        with graph.local_scope():
            graph.ndata["iou"] = self.W_iou(x) * mask.float().unsqueeze(-1)
            graph.ndata["h"] = x.new_zeros(n, self.h_size)
            graph.ndata["c"] = x.new_zeros(n, self.h_size)
            dgl.prop_nodes_topo(
                graph, self.message_func, self.reduce_func, apply_node_func=self.apply_node_func
            )
            return graph.ndata["h"], graph.ndata["c"]


class DGLExampleChildSumTreeLSTM(DGLExampleTreeLSTM):
    """Child-Sum cell of DGL's example (``ChildSumTreeLSTMCell``; Tai eqs 2-8 without the
    ``W^(f) x_j`` term): mailbox reduce summing the children, one forget gate per child."""

    def __init__(self, x_size: int, h_size: int) -> None:
        nn.Module.__init__(self)
        self.x_size, self.h_size = int(x_size), int(h_size)
        self.W_iou = nn.Linear(x_size, 3 * h_size, bias=False)
        self.U_iou = nn.Linear(h_size, 3 * h_size, bias=False)
        self.b_iou = nn.Parameter(torch.zeros(1, 3 * h_size))
        self.U_f = nn.Linear(h_size, h_size)
        self.reset_parameters()

    def reduce_func(self, nodes):
        # eq 2 (h~), eq 4 without W^(f) x_j, eq 7 (forget sum): mailbox (n, k, H)
        h_tild = torch.sum(nodes.mailbox["h"], 1)
        f = torch.sigmoid(self.U_f(nodes.mailbox["h"]))
        c = torch.sum(f * nodes.mailbox["c"], 1)
        return {"iou": self.U_iou(h_tild), "c": c}

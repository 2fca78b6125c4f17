"""The DGL engine: a cell's :class:`~.recurrence.Recurrence` under ``dgl.prop_nodes_topo``.

Message recurrences send one edge-UDF message per edge and reduce with DGL's built-in
``sum`` or ``mean`` (no mailbox, no degree bucketing; ``max`` reduces the mailbox with
``torch.amax``, whose gradient splits evenly between equal maxima, as the level
engine's); slotted ones place the source's state in the slot of its position with the
built-in ``u_mul_e`` (a one-hot of ``edata['pos']``) and sum the same way, so the reduce
never runs Python. The apply function is the recurrence's update. The packed state lives
in ``ndata``; the recurrence's functions see it unpacked into named views
(:class:`~.recurrence.Layout`) and read the inputs they name. ``direction="down"`` runs on
``dgl.reverse(graph)`` (edge fields copied), so the caller's graph is never touched.
"""

from __future__ import annotations

import warnings

import dgl
import dgl.function as fn
import torch
from torch.nn import functional as F

from gnn_treelstm.engine.recurrence import Inputs, Recurrence, lazy_parts
from gnn_treelstm.trees import graph as G

__all__ = ["propagate", "prop_nodes_topo"]

_NO_EDGES_WARNING = "The input graph for the user-defined edge function does not contain"


def prop_nodes_topo(graph: dgl.DGLGraph, message, reduce, apply) -> None:
    """``dgl.prop_nodes_topo`` leaves to root. The leaf frontier has no in-edges, so DGL
    calls an edge UDF on zero edges and warns each time; that warning is expected here and
    silenced (nothing else is)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_EDGES_WARNING)
        dgl.prop_nodes_topo(graph, message, reduce, apply_node_func=apply)


def propagate(graph: dgl.DGLGraph, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    """Run ``rec`` over ``graph``; ``inputs`` are per-node tensors in node order, in the
    order of ``rec.inputs``. Returns the packed states ``(N, rec.width)`` in node order
    (with a ``grad_fn`` through the update even for an empty graph)."""
    n = graph.num_nodes()
    like = inputs[0]
    if n == 0 or graph.num_edges() == 0:  # no propagation: every node is a leaf / root
        return rec.run_update(rec.input_parts(inputs), rec.sources(like, n))
    g = graph if rec.direction == "up" else dgl.reverse(graph, copy_ndata=False,
                                                          copy_edata=True)
    names = rec.inputs
    field = {k: f"_x_{k}" for k in names}
    with g.local_scope():
        for k, t in zip(names, inputs):
            g.ndata[field[k]] = t
        if rec.message is None:  # slotted: the source's state in the slot of its position
            g.ndata["_s"] = like.new_zeros(n, 1, rec.width)
            pos = g.edata[G.POS].long()
            g.edata["_slot"] = F.one_hot(pos, rec.slots).to(like.dtype).unsqueeze(-1)

            def apply(nodes):
                data = nodes.data
                x = lazy_parts(names, lambda k: data[field[k]])
                return {"_s": rec.run_update(x, data["_k"]).unsqueeze(1)}

            prop_nodes_topo(g, fn.u_mul_e("_s", "_slot", "_m"), fn.sum("_m", "_k"), apply)
            return g.ndata["_s"][:, 0]

        g.ndata["_s"] = like.new_zeros(n, rec.width)
        if rec.aggregate == "max":  # a mailbox reduce skips the leaf frontier: zeros there
            g.ndata["_k"] = like.new_zeros(n, rec.source_layout.width)
        uses_rel = rec.uses_rel

        def message(edges):
            rel = edges.data[G.REL].long() if uses_rel else None
            dst = edges.dst
            return {"_m": rec.run_message(edges.src["_s"],
                                          lazy_parts(names, lambda k: dst[field[k]]), rel)}

        def apply(nodes):
            data = nodes.data
            x = lazy_parts(names, lambda k: data[field[k]])
            return {"_s": rec.run_update(x, data["_k"])}

        prop_nodes_topo(g, message, _reduce(rec.aggregate), apply)
        return g.ndata["_s"]


def _max_reduce(nodes):
    return {"_k": torch.amax(nodes.mailbox["_m"], dim=1)}


def _reduce(aggregate: str):
    """DGL's reduce of the messages ``_m`` into ``_k`` for :attr:`Recurrence.aggregate`
    (nodes without messages get zeros from each)."""
    if aggregate == "sum":
        return fn.sum("_m", "_k")
    if aggregate == "mean":
        return fn.mean("_m", "_k")
    return _max_reduce

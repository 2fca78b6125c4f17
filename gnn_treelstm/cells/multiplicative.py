r"""Multiplicative Tree-LSTM (Tran & Cheng 2018, §3) and its two relation baselines (§6.5).

The cell is the Child-Sum Tree-LSTM of Tai et al. (2015, eqs 2-8; Tran & Cheng eq 1) in
which the plain sum of the children's hidden states is replaced by a relation-dependent
transition. For node ``j`` with children ``C(j)`` and the relation ``r(j,k)`` of the edge
``k -> j`` (``graph.edata["rel"]``), the three cells, each a class registered under its
name with its :attr:`~MultiplicativeTreeLSTM.variant`, are:

``mtree``, :class:`MTreeLSTM`, ``variant="mult"`` (mTreeLSTM, eqs 3-4; eq 3 factorizes eq 2's
matrix as ``W_hh^r = W_hm diag(W_mr e_r) W_mh``)::

    m_jk  = (W_mr e_jk) ⊙ (W_mh h_k)                   (eq 4)   e_jk = rel_emb[r(j,k)]
    h~_j  = Σ_{k∈C(j)} W_hm m_jk                        (eq 4)

``mtree-full``, :class:`FullTreeLSTM`, ``variant="full"`` (fullTreeLSTM of Table 6: one
dense matrix per relation)::

    h~_j  = Σ_{k∈C(j)} W_hh^{r(j,k)} h_k                (eq 2)

``mtree-add``, :class:`AddTreeLSTM`, ``variant="add"`` (addTreeLSTM of Table 6: the relation
is an extra node input). The node input is ``[x_j ; e_j]`` where ``e_j`` embeds the relation
of ``j``'s own edge to its head (the dependency label of word ``j``); the root, which has no
edge in our schema, gets an extra learned "root" embedding (index ``num_relations``), as the
authors' code embeds the dependency label ``root``. The children are summed as in Child-Sum::

    h~_j  = Σ_{k∈C(j)} h_k                              (Tai eq 2)
    W^(*) x_j  is replaced by  W^(*) x_j + W_r^(*) e_j  for * ∈ {i, o, u, f}

Gates, all three cells, as Child-Sum (Tran eq 1 = Tai eqs 3-8); "the gating units are computed
in the same way as in the TreeLSTM with Eq. (1)" (Tran §3), so ``i, o, u`` see ``h~_j`` while
each forget gate sees its own child's *untransformed* ``h_k`` (Tai eq 4; this is also what
the authors' released code does)::

    i_j  = σ(W^(i) x_j + U^(i) h~_j + b^(i))            (Tai eq 3)
    f_jk = σ(W^(f) x_j + U^(f) h_k  + b^(f))            (Tai eq 4)
    o_j  = σ(W^(o) x_j + U^(o) h~_j + b^(o))            (Tai eq 5)
    u_j  = tanh(W^(u) x_j + U^(u) h~_j + b^(u))         (Tai eq 6)
    c_j  = i_j ⊙ u_j + Σ_k f_jk ⊙ c_k                   (Tai eq 7)
    h_j  = o_j ⊙ tanh(c_j)                              (Tai eq 8)

Leaves have no children: ``h~_j = 0`` and the forget sum is 0.

Parameters (attribute names are the public mapping used by the tests and by the identity
with Child-Sum): ``W_x`` (Linear x_size -> 4h, with the biases; output rows in gate order
``i, o, u, f``), ``U_iou`` (h -> 3h, rows ``i, o, u``, no bias), ``U_f`` (h -> h, no bias)
(:class:`MultiplicativeTreeLSTM`, the base of the three);
``mtree``: ``rel_emb`` (num_relations x rel_size), ``W_mr`` (rel_size -> m_size),
``W_mh`` (h -> m_size), ``W_hm`` (m_size -> h), no biases; ``mtree-full``: ``W_hh``
(num_relations x h x h, ``W_hh[r] @ h_k``); ``mtree-add``: ``rel_emb`` ((num_relations + 1) x
rel_size, last row = root) and ``W_r`` (rel_size -> 4h, no bias, gate order ``i, o, u, f``).
The relation embeddings are part of the cell (the paper does not count them, Tran §6.5).

Propagation. Everything that depends only on the inputs (``W x + b``, and ``W_r e_j`` for
``mtree-add``) is computed for all nodes once (:meth:`MultiplicativeTreeLSTM.input_terms`,
:meth:`AddTreeLSTM.input_terms`). The gates, the forget term and the node update are
Child-Sum's own functions (:func:`~gnn_treelstm.cells.childsum.childsum_forget_term`,
:func:`~gnn_treelstm.cells.childsum.childsum_node_update`: Tran eq 1 *is* Tai eqs 3-8, so
they are written once, there); this file adds the relation transforms of eqs 2 and 4
(:func:`mult_transform`, :func:`full_transform`), each cell's
:meth:`~MultiplicativeTreeLSTM.transform_children`. The recurrence
(:meth:`MultiplicativeTreeLSTM.recurrence`) sends the summand of ``h~_j`` and
``f_jk ⊙ c_k`` per child edge; both engines run it. Fast level kernels (float32 CPU),
Child-Sum's C++ loop (each cell's :meth:`~MultiplicativeTreeLSTM.level_loops`): ``mtree-add``
with its own input terms (:func:`gnn_treelstm.kernels.fused.childsum_levels`), ``mtree`` and
``mtree-full`` with the transforms of eqs 4 and 2 inside the loop
(:func:`~gnn_treelstm.kernels.fused.mtree_levels`,
:func:`~gnn_treelstm.kernels.fused.mtree_full_levels`).
"""

from __future__ import annotations

import inspect
import math
import warnings
from types import MappingProxyType
from typing import Any, ClassVar

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.childsum import childsum_forget_term, childsum_node_update
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = [
    "MultiplicativeTreeLSTM",
    "MTreeLSTM",
    "AddTreeLSTM",
    "FullTreeLSTM",
    "VARIANTS",
    "init_relation_embeddings",
    "mult_transform",
    "full_transform",
]

#: :attr:`MultiplicativeTreeLSTM.variant` of MTreeLSTM, AddTreeLSTM and FullTreeLSTM
VARIANTS = ("mult", "add", "full")
#: relation-embedding initializations: ``uniform`` U(-0.05, 0.05) as Tran §6.1 writes;
#: ``normal`` N(0, 1), what the authors' released code gets (``nn.Embedding``'s default)
REL_INITS = ("uniform", "normal")


# ---------------------------------------------------------------- plain-tensor math
def mult_transform(
    h_child: torch.Tensor, e_rel: torch.Tensor, W_mr: torch.Tensor, W_mh: torch.Tensor,
    W_hm: torch.Tensor,
) -> torch.Tensor:
    """Tran eq 4, one row per edge: ``W_hm ((W_mr e_jk) ⊙ (W_mh h_k))``.

    ``h_child`` (E, h), ``e_rel`` (E, r) -> (E, h); weights as ``nn.Linear.weight``.
    """
    m = F.linear(e_rel, W_mr) * F.linear(h_child, W_mh)  # (E, m_size)  m_jk
    return F.linear(m, W_hm)  # (E, h)


def full_transform(h_child: torch.Tensor, rel: torch.Tensor, W_hh: torch.Tensor) -> torch.Tensor:
    """Tran eq 2, one row per edge: ``W_hh[r(j,k)] @ h_k``.

    ``h_child`` (E, h), ``rel`` (E,), ``W_hh`` (R, h, h) -> (E, h). Gathers one matrix per
    edge (memory E*h*h); plain torch so it runs on any device.
    """
    return torch.bmm(W_hh[rel], h_child.unsqueeze(-1)).squeeze(-1)  # (E,h,h)@(E,h,1) -> (E,h)


def init_relation_embeddings(weight: torch.Tensor, rel_init: str) -> None:
    """Relation embeddings ``U(-0.05, 0.05)`` (Tran §6.1) or, ``rel_init="normal"``,
    ``N(0, 1)`` (the authors' released code), in place."""
    if rel_init == "normal":
        nn.init.normal_(weight)
    else:
        nn.init.uniform_(weight, -0.05, 0.05)


# ---------------------------------------------------------------- modules
class MultiplicativeTreeLSTM(TreeCell):
    """What Tran & Cheng's (2018) three cells share: Child-Sum's gates (Tran eq 1 = Tai eqs
    3-8) over ``h~_j``, the sum of a per-child summand each subclass declares
    (:meth:`transform_children`). The cells are its subclasses, one per registry name:
    :class:`MTreeLSTM` (``mtree``, eqs 3-4), :class:`AddTreeLSTM` (``mtree-add``, the
    relation as an extra node input) and :class:`FullTreeLSTM` (``mtree-full``, eq 2);
    :attr:`variant` names each (``"mult"``, ``"add"``, ``"full"``).

    Args:
        x_size: node input size (word vector).
        h_size: hidden / memory size.
        num_relations: size of the relation vocabulary; ``edata["rel"]`` must be in
            ``[0, num_relations)``.
        rel_size: relation embedding size (Tran Table 5: 50, 75, 100, 200; paper default
            100). Unused by ``mtree-full``.
        variant: the class's own :attr:`variant` or ``None``; any other value is refused
            (checkpoints written when one class took every variant may name it).
        m_size: size of the multiplicative space ``m_jk`` (default ``h_size``, as the
            authors' code). ``mtree`` only.
        rel_init: ``"uniform"`` (U(-0.05, 0.05), Tran §6.1) or ``"normal"`` (N(0, 1), the
            authors' code) for the relation embeddings (``mtree``, ``mtree-add``).
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).
    """

    uses_relations = True
    runs_top_down = False
    tree_kinds = ("dependency", "amr", "constituency")
    #: the cell of Tran & Cheng's Table 6 this class is: ``"mult"``, ``"add"`` or ``"full"``
    variant: ClassVar[str]
    #: the recurrence's messages read each edge's relation (eqs 2, 4); ``add`` reads the
    #: relations as node inputs instead
    edge_relations: ClassVar[bool] = True

    def __init__(
        self,
        x_size: int,
        h_size: int,
        num_relations: int,
        *,
        rel_size: int = 100,
        variant: str | None = None,
        m_size: int | None = None,
        rel_init: str = "uniform",
        engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        self._check_variant(variant)
        if int(num_relations) <= 0:
            raise ValueError(f"num_relations must be positive, got {num_relations}")
        self._check_rel_init(rel_init)
        self.rel_init = rel_init
        if int(rel_size) <= 0:
            raise ValueError(f"rel_size must be positive, got {rel_size}")
        self.num_relations = int(num_relations)
        self.rel_size = int(rel_size)
        self.m_size = int(m_size) if m_size is not None else self.h_size
        if self.m_size <= 0:
            raise ValueError(f"m_size must be positive, got {m_size}")
        h = self.h_size
        self.W_x = nn.Linear(x_size, 4 * h)  # rows i, o, u, f; holds b^(i,o,u,f)
        self.U_iou = nn.Linear(h, 3 * h, bias=False)
        self.U_f = nn.Linear(h, h, bias=False)
        self.make_relation_parameters()
        self.reset_parameters()

    def __new__(cls, *args: Any, **kwargs: Any) -> MultiplicativeTreeLSTM:
        """``MultiplicativeTreeLSTM(..., variant=V)``, the one class of earlier releases,
        builds the class of variant ``V`` (default ``"mult"``) with a
        :class:`DeprecationWarning` naming it; the subclasses build themselves."""
        if cls is not MultiplicativeTreeLSTM:
            return super().__new__(cls)
        variant = kwargs.get("variant") or "mult"
        by_variant = {c.variant: c for c in (MTreeLSTM, AddTreeLSTM, FullTreeLSTM)}
        if variant not in by_variant:
            raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS} or build "
                             "MTreeLSTM, AddTreeLSTM or FullTreeLSTM")
        new = by_variant[variant]
        name = next(n for n in cells if cells.get(n) is new)
        warnings.warn(f"MultiplicativeTreeLSTM(..., variant={variant!r}) is deprecated: build "
                      f"{new.__name__}(...) (registry name {name!r}), which it returns now",
                      DeprecationWarning, stacklevel=2)
        return super().__new__(new)

    # the class's signature (the registry reads the options from it) is its constructor's
    __new__.__signature__ = inspect.signature(__init__)  # type: ignore[attr-defined]

    def _check_variant(self, variant: str | None) -> None:
        cls = type(self)
        if variant is not None and variant != cls.variant:
            raise ValueError(f"{cls.__name__} is the variant {cls.variant!r}, got "
                             f"variant={variant!r}; use the registry name of that variant "
                             f"(variants {VARIANTS}: mtree, mtree-add, mtree-full)")

    def _check_rel_init(self, rel_init: str) -> None:
        if rel_init not in REL_INITS:
            raise ValueError(f"unknown rel_init {rel_init!r}; choose one of {REL_INITS}")

    def make_relation_parameters(self) -> None:
        """Create the cell's relation parameters (after ``W_x, U_iou, U_f``)."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Linear layers: PyTorch's default uniform init; biases zero; then the relation
        parameters (:meth:`reset_relations`)."""
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                mod.reset_parameters()
        nn.init.zeros_(self.W_x.bias)
        self.reset_relations()

    def reset_relations(self) -> None:
        """Initialise the relation parameters that are not ``nn.Linear`` layers."""
        raise NotImplementedError

    # ------------------------------------------------------------ plain-tensor API
    def node_relations(self, prop: Propagator) -> torch.Tensor:
        """Relation id of each node's edge to its parent; the root gets ``num_relations``
        (``mtree-add``'s extra root embedding). (N,) int64."""
        return prop.parent_edge_data(G.REL, self.num_relations)

    def input_terms(self, x: torch.Tensor, node_rel: torch.Tensor | None = None) -> torch.Tensor:
        """All input-only terms for every node at once: ``W^(*) x_j + b^(*)``, gate order
        ``i, o, u, f``. (N, x) -> (N, 4h). ``node_rel``: :meth:`node_relations`, read by
        ``mtree-add`` only."""
        return self.W_x(x)  # (N, 4h)

    def graph_input_terms(self, prop: Propagator, x: torch.Tensor) -> torch.Tensor:
        """:meth:`input_terms` of the nodes of ``prop``'s graph."""
        return self.input_terms(x)

    def transform_children(self, h_child: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """The summand of ``h~_j`` per edge (E, h) from the children's ``h_k`` (E, h) and
        the edges' relation ids (E,)."""
        raise NotImplementedError

    # ------------------------------------------------------------ declaration
    def recurrence(self) -> Recurrence:
        """Child-Sum's recurrence with the summand of ``h~_j`` from
        :meth:`transform_children`: state ``h, c``; inputs ``iou`` and ``f`` (the input
        terms of the gates ``i, o, u`` and ``f``); message ``h`` (the summand) and ``fc``
        (``f_jk ⊙ c_k``)."""
        h = self.h_size
        U_f, U_iou = self.U_f.weight, self.U_iou.weight
        transform = self.transform_children

        def message(src, dst, rel):  # Tran eq 2/4 summand, Tai eq 4 and eq 7 summand
            return {"h": transform(src.h, rel),
                    "fc": childsum_forget_term(src.h, src.c, dst.f, U_f)}

        def update(x, m):  # Tai eqs 3, 5-8 (leaves: the summed messages are zeros)
            hj, cj = childsum_node_update(x.iou, m.h, m.fc, U_iou)
            return {"h": hj, "c": cj}

        return Recurrence(state={"h": h, "c": h}, inputs=("iou", "f"), message=message,
                          msg={"h": h, "fc": h}, update=update, uses_rel=self.edge_relations)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wx = self.graph_input_terms(prop, x)  # (N, 4h), gate order i, o, u, f
        k = 3 * self.h_size
        out = prop(self.recurrence(), iou=wx[:, :k], f=wx[:, k:])
        return out.h, out.c

    def level_kernel(self, prop: Propagator, x: torch.Tensor):
        """On the forward's path (:meth:`kernel_path`), the Triton kernels
        (:mod:`gnn_treelstm.kernels.fused_triton`; CUDA) or Child-Sum's C++ level loops
        (float32 CPU), on the input terms in node order (:meth:`level_loops`)."""
        path = self.kernel_path(prop, x)
        if path == "general":
            return None
        lv = prop.schedule_on(x.device).up
        return self.level_loops(self.graph_input_terms(prop, x), lv, path == "triton")

    def level_loops(self, wx: torch.Tensor, lv, triton: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, c)`` in node order from the input terms ``wx`` (N, 4h) in node order: the
        Triton kernels (``triton``) or the C++ loops."""
        raise NotImplementedError

    # ------------------------------------------------------------ validation
    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        name = type(self).__name__
        if isinstance(graph, dgl.DGLGraph) and graph.num_edges():
            if G.REL not in graph.edata:
                raise ValueError(G.missing_field(G.REL, "edge", name))
            rel = graph.edata[G.REL]
            if rel.dtype.is_floating_point or rel.dtype == torch.bool or rel.dim() != 1:
                raise ValueError(
                    f"{name}: edata['rel'] must be a 1-d integer tensor of relation ids, got "
                    f"dtype {rel.dtype} and shape {tuple(rel.shape)}"
                )
        super().check_input(graph, x, edge_fields=(G.REL,),
                            num_relations=self.num_relations, **tree_kw)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, num_relations={self.num_relations}, "
                f"variant={self.variant!r}")


@cells.register("mtree")
class MTreeLSTM(MultiplicativeTreeLSTM):
    """mTreeLSTM (Tran & Cheng 2018, eqs 3-4): the summand of ``h~_j`` is
    ``W_hm ((W_mr e_jk) ⊙ (W_mh h_k))`` (:func:`mult_transform`). Parameters beyond the
    gates: ``rel_emb`` (num_relations x rel_size), ``W_mr`` (rel_size -> m_size),
    ``W_mh`` (h -> m_size), ``W_hm`` (m_size -> h), no biases. Arguments: see
    :class:`MultiplicativeTreeLSTM`."""

    variant = "mult"
    # the authors' code (Tran & Cheng 2018 §6.1 as released): Adam on the summed batch
    # loss; under the paper's text L2 zeroes the relation path (docs/RESULTS.md)
    run_defaults = MappingProxyType({"optimizer": "adam", "loss_reduction": "sum"})

    def make_relation_parameters(self) -> None:
        self.rel_emb = nn.Embedding(self.num_relations, self.rel_size)
        self.W_mr = nn.Linear(self.rel_size, self.m_size, bias=False)
        self.W_mh = nn.Linear(self.h_size, self.m_size, bias=False)
        self.W_hm = nn.Linear(self.m_size, self.h_size, bias=False)

    def reset_relations(self) -> None:
        init_relation_embeddings(self.rel_emb.weight, self.rel_init)

    def embedding_parameters(self) -> list[nn.Parameter]:
        """The relation embeddings ("updated during training with a learning rate of 0.1",
        Tran §6.1; ``--rel-lr 0.1``)."""
        return [self.rel_emb.weight]

    def transform_children(self, h_child: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """Eq 4 per edge."""
        return mult_transform(h_child, self.rel_emb(rel), self.W_mr.weight,
                              self.W_mh.weight, self.W_hm.weight)

    def level_loops(self, wx: torch.Tensor, lv, triton: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq 4's transform inside the loop, Triton or C++: ``s_jk = W_mr e_jk`` per edge
        gathered here from the relation table ``W_mr e_r``, the products with ``W_mh``,
        ``W_hm`` inside (:func:`gnn_treelstm.kernels.fused_triton.mtree_levels`,
        :func:`gnn_treelstm.kernels.fused.mtree_levels`)."""
        s_rel = F.linear(self.rel_emb.weight, self.W_mr.weight)  # (R, m): W_mr e_r
        s = s_rel.index_select(0, lv.edge_rel.long())  # (E, m)
        loops = fused_triton.mtree_levels if triton else fused.mtree_levels
        return loops(wx, self.U_iou.weight, self.U_f.weight, s, self.W_mh.weight,
                     self.W_hm.weight, lv)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rel_size={self.rel_size}, m_size={self.m_size}"


@cells.register("mtree-add")
class AddTreeLSTM(MultiplicativeTreeLSTM):
    """addTreeLSTM (Tran & Cheng 2018, Table 6): the relation of a node's own edge to its
    head is an extra node input, ``W^(*) x_j`` becomes ``W^(*) x_j + W_r^(*) e_j``, and the
    children are summed as in Child-Sum (Tai eq 2). Parameters beyond the gates: ``rel_emb``
    ((num_relations + 1) x rel_size, the last row the root's) and ``W_r`` (rel_size -> 4h,
    no bias, gate order ``i, o, u, f``). Arguments: see :class:`MultiplicativeTreeLSTM`."""

    variant = "add"
    edge_relations = False

    def make_relation_parameters(self) -> None:
        # last row: the root's "relation" (it has no edge in the graph schema)
        self.rel_emb = nn.Embedding(self.num_relations + 1, self.rel_size)
        self.W_r = nn.Linear(self.rel_size, 4 * self.h_size, bias=False)

    def reset_relations(self) -> None:
        init_relation_embeddings(self.rel_emb.weight, self.rel_init)

    def embedding_parameters(self) -> list[nn.Parameter]:
        """The relation embeddings (``--rel-lr``, as :class:`MTreeLSTM`'s)."""
        return [self.rel_emb.weight]

    def input_terms(self, x: torch.Tensor, node_rel: torch.Tensor | None = None) -> torch.Tensor:
        """``W^(*) x_j + b^(*) + W_r^(*) e_j`` for every node, gate order ``i, o, u, f``;
        ``node_rel`` (:meth:`node_relations`) picks ``e_j``. (N, x) -> (N, 4h).

        ``W_r e_j`` is a row of the table ``W_r e_r`` over the R + 1 relations, computed
        once and gathered per node (a product of R + 1 rows instead of N)."""
        if node_rel is None:
            raise ValueError("AddTreeLSTM.input_terms needs node_rel (see node_relations)")
        wx = super().input_terms(x)  # (N, 4h)
        rel_terms = F.linear(self.rel_emb.weight, self.W_r.weight)  # (R + 1, 4h): W_r e_r
        # node_rel lives with the graph (the CPU with a CPU-only DGL build)
        return wx + rel_terms.index_select(0, node_rel.to(wx.device, non_blocking=True))

    def graph_input_terms(self, prop: Propagator, x: torch.Tensor) -> torch.Tensor:
        return self.input_terms(x, self.node_relations(prop))

    def transform_children(self, h_child: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """Tai eq 2's summand, ``h_k`` itself."""
        return h_child

    def level_loops(self, wx: torch.Tensor, lv, triton: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Child-Sum's loops on this cell's input terms (Triton or C++)."""
        loops = fused_triton.childsum_levels if triton else fused.childsum_levels
        return loops(wx, self.U_iou.weight, self.U_f.weight, lv)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rel_size={self.rel_size}"


@cells.register("mtree-full")
class FullTreeLSTM(MultiplicativeTreeLSTM):
    """fullTreeLSTM (Tran & Cheng 2018, eq 2 and Table 6): one dense matrix per relation,
    the summand of ``h~_j`` is ``W_hh^{r(j,k)} h_k`` (:func:`full_transform`). Parameters
    beyond the gates: ``W_hh`` (num_relations x h x h, ``W_hh[r] @ h_k``); no relation
    embeddings, so ``rel_size`` is unused and ``rel_init`` must stay ``"uniform"``.
    Arguments: see :class:`MultiplicativeTreeLSTM`."""

    variant = "full"

    def _check_rel_init(self, rel_init: str) -> None:
        super()._check_rel_init(rel_init)
        if rel_init != "uniform":
            raise ValueError("rel_init applies to relation embeddings; FullTreeLSTM "
                             "(mtree-full) has none")

    def make_relation_parameters(self) -> None:
        self.W_hh = nn.Parameter(torch.empty(self.num_relations, self.h_size, self.h_size))

    def reset_relations(self) -> None:
        """``W_hh[r]`` uniform ``±1/sqrt(h)``."""
        bound = 1.0 / math.sqrt(self.h_size)
        nn.init.uniform_(self.W_hh, -bound, bound)

    def transform_children(self, h_child: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """Eq 2 per edge."""
        return full_transform(h_child, rel, self.W_hh)

    def level_loops(self, wx: torch.Tensor, lv, triton: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Triton: ``V_r = U_iou W_hh[r]`` (R, 3h, h), one recurrent matrix per relation;
        C++: eq 2's ``W_hh[r]`` inside the loop."""
        U_iou, U_f = self.U_iou.weight, self.U_f.weight
        if triton:
            return fused_triton.relation_childsum_levels(wx, torch.matmul(U_iou, self.W_hh),
                                                         U_f, lv)
        return fused.mtree_full_levels(wx, U_iou, U_f, self.W_hh, lv)

r"""Sequential LSTM baselines of Tai, Socher & Manning (2015, §2, Table 1) on chain graphs.

The standard LSTM (Tai eq 1, the Zaremba & Sutskever variant)::

    i_t = σ(W^(i) x_t + U^(i) h_{t-1} + b^(i))
    f_t = σ(W^(f) x_t + U^(f) h_{t-1} + b^(f))
    o_t = σ(W^(o) x_t + U^(o) h_{t-1} + b^(o))
    u_t = tanh(W^(u) x_t + U^(u) h_{t-1} + b^(u))
    c_t = i_t ⊙ u_t + f_t ⊙ c_{t-1}
    h_t = o_t ⊙ tanh(c_t)                                       (eq 1)

with ``h_0 = c_0 = 0``, run by the same message-passing engine as the tree cells: a sentence
is a chain graph (word ``t`` -> word ``t+1``, the root is the last word; tree kind ``chain``),
so ``dgl.prop_nodes_topo`` visits the words left to right and the single in-edge of a node
carries the previous word's state ``h_{t-1}, c_{t-1}`` (summed over that one edge). The
first word has no in-edge and gets zeros, i.e. ``h_0 = c_0 = 0``. The backward direction
runs on ``dgl.reverse(graph)`` (a new graph; the caller's graph is never touched).

Variants (Tai §2.2 and Table 1), the subclasses :class:`LSTM`, :class:`BiLSTM`,
:class:`LSTM2`, :class:`BiLSTM2` registered as ``lstm``, ``bilstm``, ``lstm2``, ``bilstm2``
(their ``num_layers`` and ``bidirectional`` in :data:`KINDS`):

* **2-layer** (``num_layers=2``): layer ``ℓ+1`` reads layer ``ℓ``'s ``h_t`` as its input.
* **Bidirectional** (``bidirectional=True``): "two LSTMs run in parallel: one on the input
  sequence and the other on the reverse", the per-word output being ``[h→_t ; h←_t]``. As in
  Tai et al. (footnote 2: "the parameters of the forward and backward transition functions
  are shared", which "achieved superior performance to Bidirectional LSTMs with untied
  weights") the two directions use **the same weights** by default, so a bidirectional LSTM
  has exactly the parameters of the unidirectional one (Table 1 lists identical counts).
  ``tie_directions=False`` gives the backward direction weights of its own (every layer),
  as Teng & Zhang's BiLSTM baseline (§4.3, eq 13: "The two LSTMs can share the same model
  parameters or use different parameters. We choose the latter in our baseline
  experiments").
* **2-layer bidirectional**: as in the authors' code (``treelstm.LSTM`` with
  ``num_layers=2``, one copy per direction, weights shared), each direction is its own
  2-layer LSTM: layer 2 of the forward direction reads layer 1 of the forward direction
  only (not ``[h→ ; h←]`` as in ``torch.nn.LSTM``), which is why Table 1 gives the
  2-layer bidirectional model the 2-layer model's parameter count.

* **Without output gate** (``output_gate=False``): ``h_t = tanh(c_t)``, no ``o_t`` and no
  output-gate parameters. Tai et al.'s semantic-relatedness (SICK) models are built this way:
  the authors' Torch code (stanfordnlp/treelstm, ``relatedness/LSTMSim.lua`` builds
  ``treelstm.LSTM{gate_output = false}``), and Tai Table 1's relatedness parameter counts
  (``d = 150`` / ``108``) assume it (:func:`num_params` with ``output_gate=False``).

Output per node: every layer's ``h`` concatenated, ``[h^1 ; ... ; h^L]`` (the default,
``concat_layers=True``), because that is what the authors' classifiers read: in
stanfordnlp/treelstm both ``sentiment/LSTMSentiment.lua`` and ``relatedness/LSTMSim.lua``
``JoinTable`` the final states of all layers, and the head's input size is
``num_layers * mem_dim``. ``concat_layers=False`` gives the top layer's ``h`` only (what
``torch.nn.LSTM`` returns); on SICK-R it costs the 2-layer LSTM .038 Pearson (measured, see
docs/RESULTS.md). For bidirectional models the output is ``[forward ; backward]``, each
direction laid out as above; ``c`` has the same layout. :meth:`SequentialLSTM.
sentence_vector` gives Tai's sentence representation: the forward state at the last word
and, for bidirectional models, the backward state at the first word (both directions'
final states).

Parameters per layer ``ℓ``: ``layers[ℓ].W_x`` (Linear ``in -> 4h`` holding the biases, gate
rows ``i, o, u, f``) and ``layers[ℓ].U`` (Linear ``h -> 4h``, no bias); untied directions add
``backward_layers[ℓ]`` of the same shapes. Count per layer
``4h(in + h + 1)``; Tai counts ``4h(in + h + 2)`` (the Torch code gives both ``W`` and ``U``
a bias). Without output gate: ``W_x`` ``in -> 3h`` and ``U`` ``h -> 3h``, rows ``i, u, f``;
count per layer ``3h(in + h + 1)`` (Tai: ``3h(in + h + 2)``).
:func:`num_params` gives both countings and :func:`hidden_size_for_budget` picks the
hidden size for a parameter budget the way Table 1 did.
"""

from __future__ import annotations

import math
from typing import ClassVar

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.gates import gate_order
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.level import to_schedule_order
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = [
    "SequentialLSTM",
    "LSTM",
    "BiLSTM",
    "LSTM2",
    "BiLSTM2",
    "LSTMLayer",
    "lstm_node_update",
    "KINDS",
    "num_params",
    "hidden_size_for_budget",
]

#: Registry name -> (num_layers, bidirectional).
KINDS: dict[str, tuple[int, bool]] = {
    "lstm": (1, False),
    "bilstm": (1, True),
    "lstm2": (2, False),
    "bilstm2": (2, True),
}


# ---------------------------------------------------------------- plain-tensor math
def lstm_node_update(
    wx: torch.Tensor, h_prev: torch.Tensor, c_prev: torch.Tensor, U: torch.Tensor,
    output_gate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tai eq 1 for a set of time steps.

    ``wx`` = ``W x_t + b`` (n, 4h) in gate order ``i, o, u, f``; ``h_prev, c_prev`` (n, h)
    (zeros at the first word); ``U`` (4h, h). Returns ``(h_t, c_t)``, (n, h) each.
    With ``output_gate=False``: ``wx`` (n, 3h) and ``U`` (3h, h) in gate order ``i, u, f``,
    and ``h_t = tanh(c_t)``.
    """
    gates = wx + F.linear(h_prev, U)  # (n, 4h) or (n, 3h)
    if output_gate:
        i, o, u, f = torch.chunk(gates, 4, dim=-1)  # 4 x (n, h)
    else:
        i, u, f = torch.chunk(gates, 3, dim=-1)  # 3 x (n, h)
    c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f) * c_prev
    if not output_gate:
        return torch.tanh(c), c  # no o_t (Tai's relatedness models)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


class LSTMLayer(nn.Module):
    """One LSTM layer (eq 1): ``W_x`` (in -> 4h, biases), ``U`` (h -> 4h); rows i, o, u, f.
    ``output_gate=False``: ``W_x`` (in -> 3h), ``U`` (h -> 3h), rows i, u, f;
    ``h_t = tanh(c_t)``."""

    def __init__(self, in_size: int, h_size: int, output_gate: bool = True) -> None:
        super().__init__()
        self.in_size, self.h_size = int(in_size), int(h_size)
        self.output_gate = bool(output_gate)
        g = len(self.gates)
        self.W_x = nn.Linear(self.in_size, g * self.h_size)
        self.U = nn.Linear(self.h_size, g * self.h_size, bias=False)

    @property
    def gates(self) -> str:
        """Gate order of the rows of ``W_x`` and ``U``: ``"iouf"``, or ``"iuf"``."""
        return gate_order(self.output_gate)

    def paper_weights(self) -> dict[str, torch.Tensor]:
        """``W_g`` (h, in), ``U_g`` (h, h), ``b_g`` (h,) for ``g`` in ``i, f, o, u`` (no
        ``o`` without output gate)."""
        h = self.h_size
        out: dict[str, torch.Tensor] = {}
        for k, g in enumerate(self.gates):
            out[f"W_{g}"] = self.W_x.weight[k * h:(k + 1) * h]
            out[f"U_{g}"] = self.U.weight[k * h:(k + 1) * h]
            out[f"b_{g}"] = self.W_x.bias[k * h:(k + 1) * h]
        return out

    def recurrence(self, direction: str = "up") -> Recurrence:
        """Eq 1 along a chain: state ``h, c``, input ``wx`` (``W x_t + b``); the single
        source (previous word going ``up``, next word going ``down``) sends its state; the
        first step's sum is zeros = ``h_0, c_0``."""
        h, U, gated = self.h_size, self.U.weight, self.output_gate

        def message(src, dst, rel):  # the previous step's state, as it is
            return src

        def update(x, prev):  # eq 1
            ht, ct = lstm_node_update(x.wx, prev.h, prev.c, U, gated)
            return {"h": ht, "c": ct}

        return Recurrence(state={"h": h, "c": h}, inputs=("wx",), message=message,
                          update=update, direction=direction)

    def input_terms(self, inp: torch.Tensor) -> torch.Tensor:
        """``W x_t + b`` of every step at once, (N, in) -> (N, 4h) (or (N, 3h))."""
        return F.linear(inp, self.W_x.weight, self.W_x.bias)


# ---------------------------------------------------------------- module
class SequentialLSTM(TreeCell):
    """Tai et al. (2015) sequential baselines over chain graphs (see the module docstring).

    Args:
        x_size: word vector size.
        h_size: memory size ``d`` of every layer.
        num_layers: stacked layers (Tai: 1 or 2).
        bidirectional: also run the chain backwards (with the same weights unless
            ``tie_directions=False``).
        concat_layers: output every layer's ``h`` (``[h^1 ; ... ; h^L]``, Tai et al.'s
            classifiers; the default) or, ``False``, the top layer's only. No effect with
            one layer.
        output_gate: keep the output gate. ``False``: no output-gate parameters,
            ``h_t = tanh(c_t)``, as Tai et al.'s relatedness (SICK) models
            (stanfordnlp/treelstm ``gate_output = false``; Tai Table 1 relatedness counts).
        tie_directions: the backward direction uses the forward direction's weights (Tai
            et al., footnote 2; the default). ``False``: a second set of layers for the
            backward direction (Teng & Zhang's BiLSTM baseline, §4.3); bidirectional
            cells only.
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).
    """

    max_children = 1
    uses_relations = False
    tree_kinds = ("chain",)

    def __init__(
        self, x_size: int, h_size: int, *, num_layers: int = 1, bidirectional: bool = False,
        concat_layers: bool = True, output_gate: bool = True, tie_directions: bool = True,
        engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not tie_directions and not bidirectional:
            raise ValueError("tie_directions=False: a unidirectional LSTM has no backward "
                             "direction to untie; use a bidirectional cell (bilstm, bilstm2)")
        self.num_layers = int(num_layers)
        self.bidirectional = bool(bidirectional)
        self.runs_top_down = self.bidirectional  # the backward direction runs "down"
        self.concat_layers = bool(concat_layers)
        self.output_gate = bool(output_gate)
        self.tie_directions = bool(tie_directions)
        self.layers = self._stack()
        self.backward_layers = None if self.tie_directions else self._stack()
        self.reset_parameters()

    def _stack(self) -> nn.ModuleList:
        return nn.ModuleList(
            LSTMLayer(self.x_size if layer == 0 else self.h_size, self.h_size,
                      output_gate=self.output_gate)
            for layer in range(self.num_layers)
        )

    def direction_layers(self, direction: str) -> nn.ModuleList:
        """The layers that run ``direction``: ``"up"`` (forward, first word to last) or
        ``"down"`` (backward; the forward layers when the directions are tied)."""
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        if direction == "down" and self.backward_layers is not None:
            return self.backward_layers
        return self.layers

    @property
    def out_size(self) -> int:
        per_dir = self.h_size * (self.num_layers if self.concat_layers else 1)
        return per_dir * (2 if self.bidirectional else 1)

    def reset_parameters(self) -> None:
        """Every weight and bias uniform in ``±1/sqrt(h_size)`` (as ``torch.nn.LSTM``)."""
        bound = 1.0 / math.sqrt(self.h_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def paper_weights(self, direction: str = "up") -> list[dict[str, torch.Tensor]]:
        """Per layer, eq 1's matrices by name (see :meth:`LSTMLayer.paper_weights`) of the
        forward (``"up"``) or backward (``"down"``) direction."""
        return [layer.paper_weights() for layer in self.direction_layers(direction)]

    # ------------------------------------------------------------ forward
    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        name = type(self).__name__
        if isinstance(graph, dgl.DGLGraph) and graph.num_edges():
            G.check_direction(graph, who=name)  # self-loops, both ways: before "not a chain"
            deg = graph.in_degrees()
            if int(deg.max()) > 1:
                node = int(deg.argmax())
                raise ValueError(
                    f"{name}: node {node} has {int(deg.max())} children, so the graph is not a "
                    "chain; sequential LSTMs run on chain graphs (word i -> word i+1, tree kind "
                    "'chain'); use the chain trees, or a tree cell (childsum, nary) for trees"
                )
        super().check_input(graph, x, edge_fields=(), **tree_kw)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer of each direction (backward: the reversed chain, with
        :meth:`direction_layers`)."""
        hs, cs = [], []
        for direction in ("up", "down") if self.bidirectional else ("up",):
            dir_h, dir_c = [], []
            inp = x
            for layer in self.direction_layers(direction):
                out = prop(layer.recurrence(direction), wx=layer.input_terms(inp))
                dir_h.append(out.h)
                dir_c.append(out.c)
                inp = out.h  # layer l+1 reads layer l's h (same direction)
            if not self.concat_layers:
                dir_h, dir_c = dir_h[-1:], dir_c[-1:]
            hs += dir_h
            cs += dir_c
        return torch.cat(hs, dim=-1), torch.cat(cs, dim=-1)

    def level_kernel(self, prop: Propagator, x: torch.Tensor):
        """N-ary's level loops with N = 1 (with or without output gate) on the forward's
        path (:meth:`kernel_path`), the Triton kernels (CUDA) or the C++ loops (float32
        CPU): forward direction on the up levels, backward direction on the down levels (the
        reversed chain). The states a layer outputs come from its loop in node order
        (``NaryRows.perm``)."""
        path = self.kernel_path(prop, x)
        if path == "general":
            return None
        loops = fused_triton.nary_levels if path == "triton" else fused.nary_levels
        sched = prop.schedule_on(x.device)
        dirs = [("up", sched.up)]
        if self.bidirectional:
            dirs.append(("down", sched.require_down()))
        hs, cs = [], []
        for direction, lv in dirs:
            slots = fused.single_source_slots(lv)
            n0 = lv.node_offsets[1] if lv.num_levels > 1 else lv.num_nodes  # first words
            # every step has an input: rows 0..N-1 of the schedule, the first n0 leaves
            rows = fused.NaryRows(slots, lv, None, n0)
            layers = self.direction_layers(direction)
            inp = to_schedule_order(x, lv)
            for k, layer in enumerate(layers):
                # a layer whose states are output gives them in node order, gathered inside
                # the loop's function (their gradient a gather too, not autograd's scatter)
                out = self.concat_layers or k == len(layers) - 1
                h, c = loops(inp, layer.W_x.weight, layer.W_x.bias, layer.U.weight,
                             rows._replace(perm=(lv.rank, lv.order)) if out else rows)
                if out:
                    hs.append(h)
                    cs.append(c)
                if k < len(layers) - 1:  # layer l+1 reads layer l's h, in schedule order
                    inp = to_schedule_order(h, lv) if out else h
        if len(hs) == 1:  # one layer, one direction: the loop's own outputs
            return hs[0], cs[0]
        return torch.cat(hs, dim=-1), torch.cat(cs, dim=-1)

    def sentence_vector(self, graph: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """Tai's sentence representation, (batch, out_size): the forward output at the last
        word (the root) and, for bidirectional models, the backward output at the first word
        (the chain's only leaf), i.e. each direction's final state."""
        roots = G.batch_roots(graph)  # (B,) last words
        if not self.bidirectional:
            return h[roots]
        leaves, graph_of = G.batch_leaves(graph)  # first words
        if leaves.numel() != graph.batch_size:
            raise ValueError("sentence_vector: every graph must be a chain with one first word")
        first = leaves[torch.argsort(graph_of, stable=True)]
        half = h.shape[-1] // 2
        return torch.cat([h[roots, :half], h[first, half:]], dim=-1)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, num_layers={self.num_layers}, "
                f"bidirectional={self.bidirectional}, concat_layers={self.concat_layers}, "
                f"output_gate={self.output_gate}"
                + ("" if self.tie_directions else ", tie_directions=False"))


class _RegisteredKind(SequentialLSTM):
    """A registry kind of :class:`SequentialLSTM`: ``num_layers`` and ``bidirectional`` are
    the class's (:data:`KINDS`); given anyway (a checkpoint may name them), they must
    match."""

    kind: ClassVar[str]

    def __init__(
        self, x_size: int, h_size: int, *, num_layers: int | None = None,
        bidirectional: bool | None = None, concat_layers: bool = True,
        output_gate: bool = True, tie_directions: bool = True, engine: str = "dgl",
    ) -> None:
        layers, bidir = KINDS[self.kind]
        for key, got, want in (("num_layers", num_layers, layers),
                               ("bidirectional", bidirectional, bidir)):
            if got is not None and got != want:
                raise ValueError(f"cell {self.kind!r} has {key}={want}; use the registry name "
                                 f"of the variant you want ({', '.join(KINDS)})")
        super().__init__(x_size, h_size, num_layers=layers, bidirectional=bidir,
                         concat_layers=concat_layers, output_gate=output_gate,
                         tie_directions=tie_directions, engine=engine)


@cells.register("lstm")
class LSTM(_RegisteredKind):
    """Tai et al.'s (2015, Table 1) LSTM: one layer, forward."""

    kind = "lstm"


@cells.register("bilstm")
class BiLSTM(_RegisteredKind):
    """Tai et al.'s (2015, Table 1) bidirectional LSTM: one layer per direction."""

    kind = "bilstm"


@cells.register("lstm2")
class LSTM2(_RegisteredKind):
    """Tai et al.'s (2015, Table 1) 2-layer LSTM."""

    kind = "lstm2"


@cells.register("bilstm2")
class BiLSTM2(_RegisteredKind):
    """Tai et al.'s (2015, Table 1) 2-layer bidirectional LSTM: two layers per direction."""

    kind = "bilstm2"


# ---------------------------------------------------------------- parameter budgets
#: Kinds :func:`num_params` knows: the sequential baselines, Child-Sum and N-ary.
BUDGET_KINDS = (*KINDS, "childsum", "nary")


def num_params(
    kind: str, x_size: int, h_size: int, *, counting: str = "module", n_ary: int = 2,
    tie_forget: bool = False, output_gate: bool = True, tie_directions: bool = True,
) -> int:
    """Parameter count of a cell ("composition function" parameters: no embeddings, no
    classifier), in one of two countings.

    ``counting="module"``: this package's modules (equals ``sum(p.numel())`` of the cell;
    one bias per gate). ``childsum`` / ``lstm`` / ``bilstm``: ``4h(x + h + 1)``; 2 layers add
    ``4h(2h + 1)``; ``nary``: ``4h(x + 1) + 3N h² + N² h²`` (tied: ``(N + 1) h²`` forget
    matrices). ``output_gate=False`` (cells built with ``output_gate=False``): ``G = 3``
    gates instead of 4, i.e. ``3h(x + h + 1)``, 2 layers add ``3h(2h + 1)``; ``nary``:
    ``3h(x + 1) + 2N h² +`` the forget matrices.

    ``counting="tai"``: the authors' Torch code, which reproduces every number of Tai Table 1:
    every gate has a ``W`` and a ``U`` layer, each with a bias, so an LSTM / Child-Sum layer
    is ``G h(in + h + 2)`` with ``G = 4`` gates (``3`` with ``output_gate=False``: the
    relatedness models have no output gate, ``h = tanh(c)``); the binary (N-ary)
    constituency cell has a composer of ``(G - 1 + N)`` gates, each ``N`` biased ``h x h``
    layers, and a separate leaf module ``c = W_c x + b`` (and ``o = σ(W_o x + b)`` if gated),
    i.e. no input or forget gate at the leaves.

    ``tie_directions=False`` (bidirectional kinds): the backward direction's own layers
    double the count.
    """
    if kind not in BUDGET_KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {BUDGET_KINDS}")
    if counting not in ("module", "tai"):
        raise ValueError(f"counting must be 'module' or 'tai', got {counting!r}")
    x, h, n = int(x_size), int(h_size), int(n_ary)
    layers, bidirectional = KINDS.get(kind, (1, False))
    if not tie_directions and not bidirectional:
        raise ValueError(f"tie_directions=False: {kind!r} is not bidirectional")
    directions = 1 if tie_directions else 2
    gates = 4 if output_gate else 3
    if counting == "module":
        if kind == "nary":
            forget = (n + 1) * h * h if tie_forget else n * n * h * h
            return gates * h * (x + 1) + (gates - 1) * n * h * h + forget
        return directions * (gates * h * (x + h + 1) + (layers - 1) * gates * h * (2 * h + 1))
    if tie_forget:
        raise ValueError("the authors' code has no tied forget gates; use counting='module'")
    if kind == "nary":
        composer = (gates - 1 + n) * n * h * (h + 1)
        leaf = (2 if output_gate else 1) * h * (x + 1)
        return composer + leaf
    return directions * (gates * h * (x + h + 2) + (layers - 1) * gates * h * (2 * h + 2))


def hidden_size_for_budget(
    kind: str, x_size: int, budget: int, *, counting: str = "module", **kw,
) -> int:
    """The hidden size whose :func:`num_params` matches ``budget``: the smallest ``h`` with
    ``num_params(kind, x_size, h) >= budget``.

    That is the rule behind Tai Table 1: with ``counting="tai"`` and the Dependency
    Tree-LSTM's budget it gives 168 (LSTM, bidirectional), 120 (2-layer, 2-layer
    bidirectional) and 150 (constituency) on sentiment, and with ``output_gate=False``
    150 / 108 / 142 on relatedness (nearest-count would pick 119 for SST's 2-layer model).
    ``kw`` goes to :func:`num_params` (``n_ary``, ``tie_forget``, ``output_gate``,
    ``tie_directions``).
    """
    if int(budget) <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    lo, hi = 1, 1
    while num_params(kind, x_size, hi, counting=counting, **kw) < budget:
        hi *= 2
    while lo < hi:  # counts grow strictly with h: binary search the first h >= budget
        mid = (lo + hi) // 2
        if num_params(kind, x_size, mid, counting=counting, **kw) >= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo

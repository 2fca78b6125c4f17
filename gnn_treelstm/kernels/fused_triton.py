"""Triton level kernels behind ``torch.autograd.Function``: the level engine's device path.

The design of the C++ loops (:mod:`.fused`) carried to the GPU: per level **one** matrix
product (the children's states times the recurrent matrix) and **one** Triton kernel (the
gates, the cell and the writes of :mod:`.triton_levels`), forward bottom-up and a
hand-written backward top-down (one kernel and one product per level); the weight
gradients are one product over all nodes or edges after the loop. Each kernel is a torch
custom op (``torch.ops.gnn_treelstm_triton.*``, declared with ``torch.library.Library``), so a
launch is one dispatched operation, visible to a ``TorchDispatchMode`` counter.

Every node has one parent, which removes the gathers and scatters of the general driver:
a node writes its ``h`` into its parent's operand row (N-ary: the slot of its position;
Child-Sum: the row of its parent edge), so a level's product reads one contiguous slice,
and the backward pulls each node's gradient from its parent's row (no atomics).

* :func:`nary_levels`: N-ary (Tai eqs 9-14), also the sequential LSTM (N = 1 on chains);
  the arguments of :func:`.fused.nary_levels`. Its kernels compute the level's product
  themselves (``tl.dot``: the forward's ``U [h_j1; ...; h_jK]`` of the level's rows, the
  backward's share of each row's parent's ``δgates U``): one launch a level each way.
* :func:`childsum_levels`: Child-Sum (Tai eqs 2-8), also mTreeLSTM ``add``; the arguments
  of :func:`.fused.childsum_levels`; its kernels compute the edges' products themselves,
  one launch a level each way. :func:`mtree_levels`: the same loop for mTreeLSTM
  ``mult`` (Tran & Cheng eq 4 per edge, three products a level);
  :func:`relation_childsum_levels`: the same loop with one recurrent matrix per relation,
  for ``full`` (eq 2 composed with ``U^(i,o,u)`` in the cell's file).
* :func:`lex_levels`: Teng & Zhang's lex cell (eqs 9-12, 5, 1, and the ConTree baseline)
  with its head lexicons in one level loop; one matrix (:func:`lex_matrix`) holds the
  recurrent, input and head-gate weights.
* :func:`head_levels`: head lexicons (Teng eqs 9-10) alone, bottom-up;
  :func:`topdown_levels`: Teng's top-down cell (eqs 14-15) over the down levels, each node
  writing its state into its children's operand rows (one matrix,
  :func:`topdown_matrix`). The bidirectional cell runs :func:`lex_levels`, which also
  yields the head lexicons, then :func:`topdown_levels`.

These functions run Triton only: which path a forward takes (these kernels, the C++ loops
of :mod:`.fused` and :mod:`.fused_teng`, or the general level driver) is decided once per
forward by :mod:`.backend` (``prop.path``), from ``GNN_TREELSTM_BACKEND`` (:mod:`.settings`),
and every cell's ``level_kernel`` calls this module's function or the C++ loops' by it
(:meth:`gnn_treelstm.cells.base.TreeCell.kernel_path`). :func:`selected` is the Triton
part of that decision: ``auto`` runs Triton for CUDA tensors when triton imports,
``triton`` also for CPU tensors in triton's interpreter (``TRITON_INTERPRET=1`` set before
Python starts; slow, for tests), float32 and float64; ``loops`` and ``general`` never.
``tests/cells/test_registry.py`` holds these kernels equal to the cells' declarations.

The per-batch integers of a launch (a level's first row and size, the row and edge
counts) are not specialized by Triton (``do_not_specialize`` in :mod:`.triton_levels`): a
kernel compiles once per dtype and model size, not per batch shape
(``tests/kernels/test_specialization.py``).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import torch

from gnn_treelstm.kernels import fused, fused_teng, gemm, native
from gnn_treelstm.kernels.settings import requested
from gnn_treelstm.trees.schedule import Levels

if importlib.util.find_spec("triton") is not None:
    from gnn_treelstm.kernels import triton_levels as tk
else:  # triton is an optional dependency
    tk = None

__all__ = ["CHOICES", "choice", "set_choice", "installed", "interpreted", "selected",
           "nary_levels", "childsum_levels", "relation_childsum_levels", "mtree_levels",
           "LexWeights", "lex_levels", "lex_matrix", "lex_matrix_grads", "LEX_MODES",
           "head_levels", "topdown_levels", "topdown_matrix", "OPS"]

CHOICES = ("auto", "triton", "native")
DTYPES = (torch.float32, torch.float64)
#: the custom ops of this module, as ``torch.ops`` names
OPS = ("gnn_treelstm_triton::nary_forward", "gnn_treelstm_triton::nary_backward",
       "gnn_treelstm_triton::childsum_forward", "gnn_treelstm_triton::childsum_backward",
       "gnn_treelstm_triton::lex_forward", "gnn_treelstm_triton::lex_backward",
       "gnn_treelstm_triton::head_forward", "gnn_treelstm_triton::head_backward",
       "gnn_treelstm_triton::topdown_forward", "gnn_treelstm_triton::topdown_backward")
_state: dict[str, str | None] = {"choice": None}


def choice() -> str:
    """The requested kernels: ``set_choice`` if called, else ``$GNN_TREELSTM_KERNELS``."""
    if _state["choice"] is None:
        _state["choice"] = requested("kernels")
    return _state["choice"]  # type: ignore[return-value]


def set_choice(value: str | None) -> None:
    """Choose in-process (``None``: back to ``$GNN_TREELSTM_KERNELS``)."""
    if value is not None and value not in CHOICES:
        raise ValueError(f"unknown level-kernel choice {value!r}; use one of {CHOICES}")
    _state["choice"] = value


def installed() -> bool:
    """Whether triton imports."""
    return tk is not None


def interpreted() -> bool:
    """Whether the kernels were built for triton's interpreter (``TRITON_INTERPRET=1`` when
    this module was imported), which runs them on CPU tensors."""
    return tk is not None and type(tk.nary_forward).__name__ == "InterpretedFunction"


def selected(t: torch.Tensor) -> bool:
    """Whether the Triton kernels run for tensors like ``t`` (see the module docstring).

    Raises:
        RuntimeError: ``GNN_TREELSTM_KERNELS=triton`` without triton, or for CPU tensors
            outside triton's interpreter.
    """
    if native.choice() == "off" or t.dtype not in DTYPES:
        return False
    want = choice()
    if want == "native":
        return False
    if want == "auto":
        return t.is_cuda and installed()
    if not installed():
        raise RuntimeError("GNN_TREELSTM_KERNELS=triton but triton is not installed; "
                           "pip install triton, or unset GNN_TREELSTM_KERNELS")
    if t.device.type == "cpu" and not interpreted():
        raise RuntimeError("GNN_TREELSTM_KERNELS=triton runs CPU tensors only in triton's "
                           "interpreter: set TRITON_INTERPRET=1 before starting Python")
    return t.device.type in ("cpu", "cuda")


def _require(t: torch.Tensor, who: str, cpu: str) -> None:
    """A ``ValueError`` naming ``t``'s device and dtype where the Triton kernels do not run
    for it (:func:`selected`), naming ``cpu``, the C++ loops' function: the level-loop
    functions of this module run Triton only (the cells call them on the Triton path,
    :meth:`gnn_treelstm.cells.base.TreeCell.kernel_path`)."""
    if not selected(t):
        raise ValueError(
            f"fused_triton.{who}: the Triton kernels do not run for {t.dtype} tensors on "
            f"{t.device} here (CUDA tensors with triton installed, or CPU tensors under "
            "TRITON_INTERPRET=1 with GNN_TREELSTM_BACKEND=triton; float32 or float64); on the "
            f"CPU the C++ loops are gnn_treelstm.kernels.{cpu}")


# ============================================================== launches as custom ops
def gpu_blocks(t: torch.Tensor) -> bool:
    """Whether the launches for tensors like ``t`` take the GPU's block sizes (fixed rows
    per program; CUDA tensors) rather than the interpreter's (a level's rows in one
    program, which the interpreter runs fastest). The specialization test computes the
    GPU's launches on the CPU by replacing this function."""
    return t.is_cuda


def _dot_blocks(n: int, hs: int, kk: int, t: torch.Tensor, gpu_columns: int = 64
                ) -> tuple[int, int, int, tuple[int, int]]:
    """Rows, state columns and product columns (``CK`` of the ``kk`` summed over) per
    program of the kernels that compute their level's product (``tl.dot``: at least 16 of
    each; the N-ary and Child-Sum kernels), and the grid, for ``n`` rows of ``hs``
    columns; on a GPU at most ``gpu_columns`` state columns a program."""
    return _dot_block_sizes(n, hs, kk, gpu_blocks(t), gpu_columns)


@functools.lru_cache(maxsize=4096)
def _dot_block_sizes(n: int, hs: int, kk: int, gpu: bool, gpu_columns: int
                     ) -> tuple[int, int, int, tuple[int, int]]:
    """:func:`_dot_blocks`, computed once per size. On a GPU 16 rows, up to
    ``gpu_columns`` columns and 16 product columns at a time (fewer registers than 32,
    ``scripts/registers.py``); under the interpreter a level's rows and the whole product
    in one step (fewest loop steps run fastest)."""
    bn = max(16, min(triton_next_pow2(hs), gpu_columns if gpu else 1024))
    bm = 16 if gpu else max(16, min(triton_next_pow2(n), 256))
    ck = 16 if gpu else max(16, min(triton_next_pow2(kk), 1024))
    return bm, bn, ck, (-(-n // bm), -(-hs // bn))


#: state columns a GPU program of the Child-Sum kernels takes: with the edges' products
#: inside, 64 columns spilled registers in the forward at h 150 (``scripts/registers.py``)
CHILDSUM_GPU_COLUMNS = 32


#: the library of the Triton launches (``torch.ops.gnn_treelstm_triton``)
_LIB = torch.library.Library("gnn_treelstm_triton", "DEF")
_SCHEMA_TYPES = {"torch.Tensor": "Tensor", "int": "int"}


def _schema(name: str, fn, mutates: tuple[str, ...]) -> str:
    """The operator schema of launch function ``fn``: its parameters in order (tensors and
    integers, from the annotations), each mutated tensor in an alias set of its own
    (``Tensor(a!) act``), no result."""
    params = []
    for i, (arg, p) in enumerate(inspect.signature(fn).parameters.items()):
        kind = _SCHEMA_TYPES[str(p.annotation)]
        if arg in mutates:
            kind = f"Tensor({chr(ord('a') + i)}!)"
        params.append(f"{kind} {arg}")
    return f"{name}({', '.join(params)}) -> ()"


def launch_op(name: str, mutates: str):
    """Declare launch function ``fn`` as the operator ``gnn_treelstm_triton::name`` with
    ``torch.library.Library`` ``define``/``impl`` and an explicit schema (the mutated
    arguments ``mutates``, comma-separated): a call costs a few µs of dispatch where a
    ``torch.library.custom_op`` rebuilds its argument defaults on every call (tens of µs).
    The implementation runs for CPU (triton's interpreter) and CUDA tensors; the meta
    (fake-tensor) kernel does nothing, as the launches only write into their buffers; the
    autograd key falls through: the ``torch.autograd.Function`` that calls the launches
    owns the gradient."""

    def declare(fn):
        _FNS[name] = fn
        _LIB.define(_schema(name, fn, tuple(mutates.split(","))))
        for key in ("CPU", "CUDA"):
            _LIB.impl(name, fn, key)
        _LIB.impl(name, _no_launch, "Meta")
        _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
        return fn

    return declare


#: the launch functions by operator name: each operator's CPU and CUDA implementation
_FNS: dict = {}


def _no_launch(*args) -> None:
    """The launches' meta kernel: nothing to compute, they only write into buffers."""


def triton_next_pow2(v: int) -> int:
    """The smallest power of two >= ``v`` (at least 1)."""
    return 1 << max(0, int(v) - 1).bit_length()


class _Spans(NamedTuple):
    """Each level's first row and row count, first edge and edge count, as host ints."""

    starts: list[int]
    sizes: list[int]
    edge_starts: list[int]
    edge_sizes: list[int]


#: the spans of the schedules seen last (by identity: a batch's schedule is built once)
_SPANS: dict[int, tuple[Levels, _Spans]] = {}


def _spans(lv: Levels) -> _Spans:
    """The :class:`_Spans` of ``lv``, computed once per schedule, not per level or per
    loop (the forward and the backward of a step share them)."""
    hit = _SPANS.get(id(lv))
    if hit is not None and hit[0] is lv:
        return hit[1]
    no, eo = lv.node_offsets, lv.edge_offsets
    spans = _Spans(no[:-1], [b - a for a, b in zip(no, no[1:])], eo[:-1],
                   [b - a for a, b in zip(eo, eo[1:])])
    if len(_SPANS) >= 8:
        _SPANS.pop(next(iter(_SPANS)))
    _SPANS[id(lv)] = (lv, spans)
    return spans


def _by_level(sizes: list[int], *ts: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """Each of ``ts`` as views of its levels' rows (``sizes``: :class:`_Spans`'), by
    ``split_with_sizes`` (``Tensor.split``'s Python costs a fifth more)."""
    return [t.split_with_sizes(sizes) for t in ts]


class _Ops(dict):
    """The launch operators by name, each looked up once (``torch.ops`` resolves a name
    through two Python attribute lookups per call)."""

    def __missing__(self, name: str):
        op = getattr(torch.ops.gnn_treelstm_triton, name).default
        self[name] = op
        return op


_OPS = _Ops()

#: the tensor types whose launches may skip the dispatcher (no subclass's own dispatch)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _launches(t: torch.Tensor) -> dict:
    """The launches to call for a step on tensors like ``t``, by operator name: in plain
    eager mode each operator's implementation itself (:data:`_FNS`, the function the
    dispatcher would call for CPU or CUDA tensors: the same launch, without a dispatch's
    µs), else the operators (:data:`_OPS`): under ``torch.compile``, a
    ``TorchDispatchMode`` (fake tensors, the operation counter, the sync check) or a tensor
    subclass, which see one operator per launch. Decided once per forward or backward. A
    mode is looked for on the dispatcher's own stack (infra modes such as fake tensors'
    included): torch 2.4's Python-side flag stays set once a mode entered twice is left."""
    if (type(t) in _PLAIN and torch._C._len_torch_dispatch_stack() == 0
            and not torch.compiler.is_compiling()):
        return _FNS
    return _OPS


# The N-ary and Child-Sum launches pass their constexprs by position, named in a comment:
# every keyword is packed into a dict again at each layer of a launch (a step's host work,
# docs/speed.md).
@launch_op("nary_forward", "act,c,tc,h,hk")
def _nary_forward(gin: torch.Tensor, U: torch.Tensor, slots: torch.Tensor, par: torch.Tensor,
                  pos: torch.Tensor, act: torch.Tensor, c: torch.Tensor, tc: torch.Tensor,
                  h: torch.Tensor, hk: torch.Tensor, a: int, n: int, kend: int,
                  g: int) -> None:
    k, hs = slots.shape[1], c.shape[1]
    bm, bn, ck, grid = _dot_blocks(n, hs, k * hs, c)
    tk.nary_forward[grid](gin, U, slots, par, pos, act, c, tc, h, hk, a, n, slots.shape[0],
                          hs, kend, g, k, bm, bn, ck)  # G, K, BM, BN, CK


@launch_op("nary_backward", "dct,dg")
def _nary_backward(dh: torch.Tensor, dc: torch.Tensor, act: torch.Tensor, c: torch.Tensor,
                   tc: torch.Tensor, slots: torch.Tensor, par: torch.Tensor, pos: torch.Tensor,
                   U: torch.Tensor, dct: torch.Tensor, dg: torch.Tensor, a: int, n: int,
                   g: int) -> None:
    k, hs = slots.shape[1], c.shape[1]
    bm, bn, ck, grid = _dot_blocks(n, hs, (g + k) * hs, c)
    tk.nary_backward[grid](dh, dc, act, c, tc, slots, par, pos, U, dct, dg, a, n,
                           slots.shape[0], hs, g, k, bm, bn, ck)  # G, K, BM, BN, CK


@launch_op("childsum_forward", "act,c,tc,h,he,fe")
def _childsum_forward(wx: torch.Tensor, p: torch.Tensor, u: torch.Tensor, rel: torch.Tensor,
                      ea: int, estart: torch.Tensor, esrc: torch.Tensor, pe: torch.Tensor,
                      act: torch.Tensor, c: torch.Tensor, tc: torch.Tensor, h: torch.Tensor,
                      he: torch.Tensor, fe: torch.Tensor, a: int, n: int, g: int, r: int,
                      fuse: int) -> None:
    hs = c.shape[1]
    bm, bn, ck, grid = _dot_blocks(n, hs, hs, c, CHILDSUM_GPU_COLUMNS)
    tk.childsum_forward[grid](wx, p, u, rel, ea, estart, esrc, pe, act, c, tc, h, he, fe, a,
                              n, pe.shape[0], esrc.shape[0], hs, g, r, fuse, bm, bn,
                              ck)  # G, R, FUSE, BM, BN, CK


@launch_op("childsum_backward", "dp,dct,dg,dwf,d")
def _childsum_backward(dh: torch.Tensor, dc: torch.Tensor, act: torch.Tensor, c: torch.Tensor,
                       tc: torch.Tensor, fe: torch.Tensor, rel: torch.Tensor,
                       estart: torch.Tensor, esrc: torch.Tensor, par: torch.Tensor,
                       pe: torch.Tensor, dp: torch.Tensor, u: torch.Tensor, dct: torch.Tensor,
                       dg: torch.Tensor, dwf: torch.Tensor, d: torch.Tensor, a: int, n: int,
                       g: int, r: int, fuse: int) -> None:
    hs = c.shape[1]
    bm, bn, ck, grid = _dot_blocks(n, hs, (r * g + 1) * hs, c, CHILDSUM_GPU_COLUMNS)
    tk.childsum_backward[grid](dh, dc, act, c, tc, fe, rel, estart, esrc, par, pe, dp, u, dct,
                               dg, dwf, d, a, n, pe.shape[0], esrc.shape[0], hs, g, r, fuse,
                               bm, bn, ck)  # G, R, FUSE, BM, BN, CK


def _grads_in_schedule_order(dh_out: torch.Tensor, dc_out: torch.Tensor,
                             order: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The output gradients (N, h) in schedule order: as given, or gathered by ``order``
    from node order (a permutation's backward is a gather; :func:`.fused.rows_in_order`)."""
    return fused.rows_in_order(dh_out, order), fused.rows_in_order(dc_out, order)


# ============================================================== N-ary (Tai eqs 9-14)
def _parents(lv: Levels, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) the row that reads each row's state (its parent up, its child down; N: none) and
    the slot it takes there (the edge's position; 0 when there is one slot). Once per
    batch: the up schedule's own (:attr:`Levels.next_row`, :attr:`Levels.next_pos`,
    built with it), else from its edges, no host synchronisation."""
    if lv.next_row is not None and n == lv.num_nodes and k > 1:
        return lv.next_row, lv.next_pos
    dev = lv.edge_src.device
    par = torch.full((n,), n, dtype=torch.int64, device=dev)
    par.index_put_((lv.edge_src,), lv.edge_dst)
    if k == 1:
        return par, torch.zeros(n, dtype=torch.int64, device=dev)
    pos = torch.zeros(n, dtype=torch.int64, device=dev)
    return par, pos.index_put_((lv.edge_src,), lv.edge_pos)


def _edge_starts(lv: Levels, n: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N + 1,) each row's first edge in (edges by computed row) and (N,) its edge to the
    row that reads it (E: none): the up schedule's own (:attr:`Levels.edge_start`,
    :attr:`Levels.next_edge`, built with it), else from its edges."""
    if lv.edge_start is not None and n == lv.num_nodes:
        return lv.edge_start, lv.next_edge
    dev = lv.edge_dst.device
    estart = torch.searchsorted(lv.edge_dst, torch.arange(n + 1, device=dev))
    pe = torch.full((n,), e, dtype=torch.int64, device=dev)
    return estart, pe.index_put_((lv.edge_src,), torch.arange(e, device=dev))


class _BinaryRows(NamedTuple):
    """The rows of a binary forest's up levels: ``slots`` (N, 2) children rows by position
    (padding N), ``par``, ``pos`` (N,) each row's parent row (N: a root) and its slot
    there, and ``lv``."""

    slots: torch.Tensor
    par: torch.Tensor
    pos: torch.Tensor
    lv: Levels


def _binary_rows(lv: Levels) -> _BinaryRows:
    """The :class:`_BinaryRows` of ``lv`` (the lex and head-lexicon loops'), once per
    batch."""
    par, pos = _parents(lv, lv.num_nodes, 2)
    return _BinaryRows(fused_teng.binary_slots(lv), par, pos, lv)


class _NaryLevels(torch.autograd.Function):
    """N-ary recurrence (Tai eqs 9-14) over all levels with the Triton kernels; the
    arguments and results of :class:`gnn_treelstm.kernels.fused._NaryLevels`."""

    @staticmethod
    def forward(ctx, xw, W, b, U, rows: fused.NaryRows):
        rows = rows._replace(slots=rows.slots.contiguous())
        slots, lv, perm = rows.slots, rows.lv, rows.perm
        n, k = slots.shape
        hs = U.shape[1] // k
        g = U.shape[0] // hs - k  # 3 (i, o, u) or 2 (i, u)
        with gemm.products("torch"):  # as on CUDA
            gin = fused.nary_input_gates(xw, W, b, hs, rows)  # (N, C) W x + b
        h, c, tc = (xw.new_empty(n, hs) for _ in range(3))  # tc: tanh(c_j)
        act = torch.empty_like(gin)  # activated gates
        hk = xw.new_zeros(n, k * hs)  # [h_j1; ...; h_jK] per row, written by the children
        par, pos = _parents(lv, n, k)
        U = U.contiguous()  # saved so: the backward's launches read it too
        spans = _spans(lv)
        launch = _launches(xw)["nary_forward"]
        for lvl in range(lv.num_levels):
            # one launch a level, the level's product U [h_j1; ...; h_jK] inside; level 0
            # has no children: its pre-activations are the input terms
            launch(gin, U, slots, par, pos, act, c, tc, h, hk, spans.starts[lvl],
                   spans.sizes[lvl], k * hs if lvl else 0, g)
        ctx.rows, ctx.g = rows, g
        ctx.save_for_backward(xw, W, U, par, pos, h, c, tc, act, hk)
        if perm is None:
            return h, c
        rank = perm[0]
        return h.index_select(0, rank), c.index_select(0, rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        xw, W, U, par, pos, h, c, tc, act, hk = ctx.saved_tensors
        rows: fused.NaryRows = ctx.rows
        slots, lv = rows.slots, rows.lv
        dh, dc = _grads_in_schedule_order(dh_out, dc_out,
                                          None if rows.perm is None else rows.perm[1])
        dg = torch.empty_like(act)  # pre-activation gradients (N, C)
        dct = torch.empty_like(tc)  # δc_j
        spans = _spans(lv)
        launch, g = _launches(dh)["nary_backward"], ctx.g
        for lvl in range(lv.num_levels - 1, -1, -1):
            # one launch a level: a row's dh takes its parent's δgates U inside
            launch(dh, dc, act, c, tc, slots, par, pos, U, dct, dg, spans.starts[lvl],
                   spans.sizes[lvl], g)
        with gemm.products("torch"):  # as on CUDA
            return fused.nary_param_grads(ctx, dg, xw, W, h, hk, loops=False)


def nary_levels(xw: torch.Tensor, W: torch.Tensor, b: torch.Tensor, U: torch.Tensor,
                rows: fused.NaryRows) -> tuple[torch.Tensor, torch.Tensor]:
    """N-ary ``(h, c)`` with the Triton kernels (arguments and results as
    :func:`gnn_treelstm.kernels.fused.nary_levels`, the C++ loops'; the cell chooses
    between them by its forward's path; ``ValueError`` where Triton does not run for
    ``xw``)."""
    _require(xw, "nary_levels", "fused.nary_levels")
    return _NaryLevels.apply(xw, W, b, U, rows)


# ============================================================== Child-Sum (Tai eqs 2-8)
class _UpState(NamedTuple):
    """What the Child-Sum forward loop (:func:`_childsum_up`) leaves for its backward:
    each edge's relation (or any (E,) tensor where R = 1), each row's first edge in and
    edge out, the activated gates, ``c``, ``tanh c``, ``h_k`` and ``f_jk`` per edge."""

    rel: torch.Tensor
    estart: torch.Tensor
    pe: torch.Tensor
    act: torch.Tensor
    c: torch.Tensor
    tc: torch.Tensor
    he: torch.Tensor
    fe: torch.Tensor


def _childsum_up(wx: torch.Tensor, lv: Levels, hs: int, g: int, r: int,
                 level_product: Callable | torch.Tensor) -> tuple[torch.Tensor, _UpState]:
    """Child-Sum's forward loop (Tai eqs 2-8) over the up levels, one launch a level: the
    children's ``[V_0; ...; V_{R-1}; U^(f)] h_k`` per edge either computed by the kernel,
    ``level_product`` the matrix ``[U^(i,o,u); U^(f)]`` ((G+1) h, h; R = 1), or given per
    level by ``level_product(lvl, he_l)`` ((E_l, (R G + 1) h), the ``p`` of
    :func:`.triton_levels.childsum_forward`) before the launch. ``wx`` (N, (G+1) h)
    contiguous, schedule order. Returns ``h`` and the state the backward reads."""
    n, e = wx.shape[0], lv.edge_src.shape[0]
    rel = lv.edge_rel if r > 1 else lv.edge_src  # read only when R > 1
    h, c, tc = (wx.new_empty(n, hs) for _ in range(3))  # tc: tanh(c_j)
    act = wx.new_empty(n, g * hs)  # i, (o,) u activated
    he = wx.new_empty(e, hs)  # h_k per edge, written by the child k
    fe = wx.new_empty(e, hs)  # f_jk per edge
    estart, pe = _edge_starts(lv, n, e)  # each row's first edge in, and edge out
    spans = _spans(lv)
    launch, src = _launches(wx)["childsum_forward"], lv.edge_src
    fuse = isinstance(level_product, torch.Tensor)  # the product inside the kernel
    u = level_product.contiguous() if fuse else wx  # unread without fuse
    hes = None if fuse else _by_level(spans.edge_sizes, he)[0]  # each level's edges
    for lvl in range(lv.num_levels):
        # p unread where the kernel computes it or the level has no edges
        p = wx if fuse or not spans.edge_sizes[lvl] else level_product(lvl, hes[lvl])
        launch(wx, p, u, rel, spans.edge_starts[lvl], estart, src, pe, act, c, tc, h, he, fe,
               spans.starts[lvl], spans.sizes[lvl], g, r, int(fuse))
    return h, _UpState(rel, estart, pe, act, c, tc, he, fe)


def _childsum_down(dh_out: torch.Tensor, dc_out: torch.Tensor, up: _UpState, lv: Levels,
                   g: int, r: int, width: int, level_grad: Callable | torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of :func:`_childsum_up`, top-down, from the output gradients in node
    order (gathered into schedule order here): one launch a level, the gradient into the
    children's ``h_k`` from the level's rows of ``d`` (E_l, ``width``) either computed by
    the kernel, ``level_grad`` the matrix ``[V_0; ...; V_{R-1}; U^(f)]`` (``width``, h),
    or by ``level_grad(lvl, d_l, dp_l)`` after the launch, which writes it into ``dp_l``
    (E_l, h). Returns ``dg`` (δi, (δo,) δu per row), ``dwf`` (Σ_k δf_jk per row) and ``d``
    (per edge ``[δi, (δo,) δu`` in the block of the edge's relation, ``δf_jk]``)."""
    rel, estart, pe, act, c, tc, he, fe = up
    n, hs = tc.shape
    e = he.shape[0]
    dh, dc = _grads_in_schedule_order(dh_out, dc_out, lv.order)
    # each row's parent row (N: a root): the up schedule's, built once per batch
    par = lv.next_row if lv.next_row is not None and n == lv.num_nodes else _parents(
        lv, n, 1)[0]
    dct = torch.empty_like(tc)
    dg = torch.empty_like(act)
    dwf = torch.empty_like(tc)  # Σ_k δf_jk: the gradient of W^(f) x_j + b^(f)
    d = he.new_empty(e, width) if r == 1 else he.new_zeros(e, width)
    spans = _spans(lv)
    launch, src = _launches(dh)["childsum_backward"], lv.edge_src
    fuse = isinstance(level_grad, torch.Tensor)  # the product inside the kernel
    u = level_grad.contiguous() if fuse else fe  # unread without fuse
    dp = he.new_empty(1 if fuse else e, hs)  # δ per edge into the child's h (unread: fuse)
    if not fuse:
        ds, dps = _by_level(spans.edge_sizes, d, dp)  # each level's edges
    for lvl in range(lv.num_levels - 1, -1, -1):
        launch(dh, dc, act, c, tc, fe, rel, estart, src, par, pe, dp, u, dct, dg, dwf, d,
               spans.starts[lvl], spans.sizes[lvl], g, r, int(fuse))
        if not fuse and spans.edge_sizes[lvl]:
            level_grad(lvl, ds[lvl], dps[lvl])
    return dg, dwf, d


class _ChildSumLevels(torch.autograd.Function):
    """Child-Sum recurrence (Tai eqs 2-8) over all levels with the Triton kernels, the
    children's contribution to ``U^(i,o,u) h~_j`` through one matrix per relation.

    Inputs: ``wx`` (N, (G+1) h) ``W x + b`` in node order, gate columns ``i, (o,) u, f``;
    ``V`` (R, G h, h): edge ``k -> j`` of relation ``r`` adds ``V_r h_k`` to the
    pre-activations of ``i, (o,) u`` (Child-Sum: ``R = 1``, ``V_0 = U^(i,o,u)``); ``U_f``
    (h, h); ``lv`` (up levels; ``lv.edge_rel`` picks ``V_r`` when R > 1). Outputs ``h, c``
    (N, h) in node order (the loops run in schedule order, the rows gathered into it and
    back inside: :func:`gnn_treelstm.kernels.fused.in_schedule_order`)."""

    @staticmethod
    def forward(ctx, wx, V, U_f, lv: Levels):
        hs = U_f.shape[0]
        r, gh = V.shape[0], V.shape[1]
        # ((R G + 1) h, h): one product per edge for every relation's gates and f, inside
        # the kernel for one relation (the edge's block of a product per relation, R > 1)
        u_all = torch.cat([V.reshape(r * gh, hs), U_f])
        u_t = u_all.t()
        h, up = _childsum_up(fused.in_schedule_order(wx, lv), lv, hs, gh // hs, r,
                             u_all if r == 1 else lambda lvl, he_l: torch.mm(he_l, u_t))
        ctx.lv, ctx.g, ctx.r = lv, gh // hs, r
        ctx.save_for_backward(u_all, *up)
        return fused.in_node_order(h, lv), fused.in_node_order(up.c, lv)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        u_all, *saved = ctx.saved_tensors
        up, lv = _UpState(*saved), ctx.lv
        g, r, hs = ctx.g, ctx.r, u_all.shape[1]
        # inside the kernel for one relation; for R > 1 a row's d is zero but in its
        # relation's block, and one product of the level's edges skips no work
        dg, dwf, d = _childsum_down(
            dh_out, dc_out, up, lv, g, r, u_all.shape[0],
            u_all if r == 1 else lambda lvl, d_l, dp_l: torch.mm(d_l, u_all, out=dp_l))
        # [dV; dU_f] = Σ_edges d_e ⊗ h_k: one product over all edges
        du = torch.mm(d.t(), up.he) if up.he.shape[0] else torch.zeros_like(u_all)
        gr = g * hs * r
        return (fused.in_node_order(torch.cat([dg, dwf], 1), lv), du[:gr].view(r, g * hs, hs),
                du[gr:], None)


def childsum_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor,
                    lv: Levels) -> tuple[torch.Tensor, torch.Tensor]:
    """Child-Sum ``(h, c)`` in node order with the Triton kernels (arguments and results
    as :func:`gnn_treelstm.kernels.fused.childsum_levels`, the C++ loops'; the cell chooses
    between them by its forward's path; ``ValueError`` where Triton does not run for
    ``wx``)."""
    _require(wx, "childsum_levels", "fused.childsum_levels")
    return _ChildSumLevels.apply(wx, U_iou.unsqueeze(0), U_f, lv)


def relation_childsum_levels(wx: torch.Tensor, V: torch.Tensor, U_f: torch.Tensor,
                             lv: Levels) -> tuple[torch.Tensor, torch.Tensor]:
    """Child-Sum's loop with one matrix ``V_r`` (G h, h) per relation in place of
    ``U^(i,o,u)`` (``V`` (R, G h, h), relations from ``lv.edge_rel``): fullTreeLSTM
    (``V_r = U^(i,o,u) W_hh[r]``), ``(h, c)`` in node order (``ValueError`` where
    Triton does not run for ``wx``)."""
    _require(wx, "relation_childsum_levels", "fused.mtree_full_levels")
    return _ChildSumLevels.apply(wx, V, U_f, lv)


class _MTreeLevels(torch.autograd.Function):
    """mTreeLSTM (Tran eqs 3-4) over all levels with Child-Sum's Triton kernels (one
    relation block, R = 1): per level the edges' product in the multiplicative space,
    ``q = [W_mh; U^(f)] h_k`` ((E_l, m + h)), its first ``m`` columns scaled by each edge's
    ``s_jk = W_mr e_jk`` (``z_jk``), then ``p = [A z_jk; U^(f) h_k]`` with ``A = U^(i,o,u)
    W_hm`` (G h, m), one product by the block-diagonal ``diag(A, I)``: three operations a
    level, each edge's own relation only (a product per relation and edge, as a matrix
    ``V_r`` per relation would need, is R times the work and memory).

    Inputs: ``wx`` (N, (G+1) h) as :class:`_ChildSumLevels`; ``A`` (G h, m); ``U_f`` (h, h);
    ``W_mh`` (m, h); ``s`` (E, m) each edge's ``W_mr e_jk`` in the up schedule's edge
    order; ``lv``. Outputs ``h, c`` (N, h) in node order, as :class:`_ChildSumLevels`'."""

    @staticmethod
    def forward(ctx, wx, A, U_f, W_mh, s, lv: Levels):
        hs, ms = U_f.shape[0], W_mh.shape[0]
        wq_t = torch.cat([W_mh, U_f]).t()  # (h, m + h)
        # ((G+1) h, m + h): diag(A, I), so that [z; U^(f) h_k] -> [A z; U^(f) h_k]
        blocks = torch.block_diag(A, torch.eye(hs, dtype=A.dtype, device=A.device))
        blocks_t = blocks.t()
        q = s.new_empty(s.shape[0], ms + hs)  # per edge [z_jk; U^(f) h_k]
        spans = _spans(lv)
        qs, zs, ss = _by_level(spans.edge_sizes, q, q[:, :ms], s)

        def level_product(lvl: int, he_l: torch.Tensor) -> torch.Tensor:
            torch.mm(he_l, wq_t, out=qs[lvl])
            zs[lvl].mul_(ss[lvl])  # z_jk = s_jk ⊙ W_mh h_k (eq 4)
            return torch.mm(qs[lvl], blocks_t)  # [A z_jk; U^(f) h_k]

        h, up = _childsum_up(fused.in_schedule_order(wx, lv), lv, hs, A.shape[0] // hs, 1,
                             level_product)
        ctx.lv = lv
        ctx.save_for_backward(A, W_mh, U_f, s, blocks, q, *up)
        return fused.in_node_order(h, lv), fused.in_node_order(up.c, lv)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        A, W_mh, U_f, s, blocks, q, *saved = ctx.saved_tensors
        up = _UpState(*saved)
        lv: Levels = ctx.lv
        gh, ms = A.shape
        wq = torch.cat([W_mh, U_f])  # (m + h, h)
        y = s.new_empty(s.shape[0], wq.shape[0])  # per edge [s ⊙ A^T δiou; δf]
        spans = _spans(lv)
        ys, yms, ss = _by_level(spans.edge_sizes, y, y[:, :ms], s)

        def level_grad(lvl: int, d_l: torch.Tensor, dp_l: torch.Tensor) -> None:
            torch.mm(d_l, blocks, out=ys[lvl])  # [A^T δiou; δf]
            yms[lvl].mul_(ss[lvl])
            torch.mm(ys[lvl], wq, out=dp_l)  # W_mh^T (s ⊙ A^T δiou) + U_f^T δf

        dg, dwf, d = _childsum_down(dh_out, dc_out, up, lv, gh // U_f.shape[0], 1,
                                    blocks.shape[0], level_grad)
        he, d_iou = up.he, d[:, :gh]
        dwq = torch.mm(y.t(), he)  # [dW_mh; dU_f]: one product over all edges
        dA = torch.mm(d_iou.t(), q[:, :ms])
        ds = torch.mm(d_iou, A).mul_(torch.mm(he, W_mh.t()))  # (A^T δiou) ⊙ W_mh h_k
        return fused.in_node_order(torch.cat([dg, dwf], 1), lv), dA, dwq[ms:], dwq[:ms], ds, None


def mtree_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor, s: torch.Tensor,
                 W_mh: torch.Tensor, W_hm: torch.Tensor,
                 lv: Levels) -> tuple[torch.Tensor, torch.Tensor]:
    """mTreeLSTM ``(h, c)`` in node order with the Triton kernels (arguments and results
    as :func:`gnn_treelstm.kernels.fused.mtree_levels`, the C++ loops': ``s`` (E, m) each
    edge's ``W_mr e_jk``; see :class:`_MTreeLevels`; ``ValueError`` where Triton does not
    run for ``wx``)."""
    _require(wx, "mtree_levels", "fused.mtree_levels")
    return _MTreeLevels.apply(wx, U_iou @ W_hm, U_f, W_mh, s, lv)


# ============================================================== Teng & Zhang lex (eqs 9-12, 5, 1)
#: head mode -> the lex kernels' MODE (4: every row's x_t given, no head lexicon loop)
LEX_MODES = {"gate": 0, "left": 1, "right": 2, "average": 3, "given": 4}


#: columns of ``x`` a GPU program takes at a time in the head-lexicon parts (eqs 9-10, which
#: are column by column): whole rows of x 300 (512 padded) kept the lex and head kernels'
#: tiles in 255 registers a thread and spilled (``scripts/registers.py``)
GPU_X_COLUMNS = 64


def _x_columns(xs: int, gpu: bool) -> int:
    """``BX``: the head-lexicon columns a program takes at a time (all under the
    interpreter, which runs fewest loop steps fastest)."""
    bx = max(16, triton_next_pow2(xs))
    return min(bx, GPU_X_COLUMNS) if gpu else bx


#: warps of a GPU program of the Teng & Zhang and head kernels, by kernel: a program holds
#: whole rows (h 150: 256 columns), and more warps spread its tiles over more threads, so
#: that no thread spills at h 150, x 300 (sm_90, ``scripts/registers.py``); one pipeline
#: stage (their loops' loads are gathers). The N-ary and Child-Sum kernels take Triton's
#: defaults (4 warps, 3 stages), which do not spill.
GPU_WARPS = {"lex_forward": 8, "lex_backward": 16, "topdown_forward": 8,
             "topdown_backward": 8, "head_forward": 8, "head_backward": 8}


def _gpu_options(kernel: str, gpu: bool) -> dict[str, int]:
    """The launch options of ``kernel`` on a GPU (:data:`GPU_WARPS`); none otherwise."""
    return {"num_warps": GPU_WARPS[kernel], "num_stages": 1} if gpu else {}


class _Blocks(NamedTuple):
    """A launch's block sizes: ``BM`` (the grid's rows a program), the kernel's block-size
    constexprs in its signature's order (passed by position: a keyword is packed into a
    dict again at each layer of a launch) and a GPU's launch options (keywords)."""

    bm: int
    sizes: tuple[int, ...]
    options: Mapping[str, int]


def _row_blocks(n: int, hs: int, xs: int | None, t: torch.Tensor, kernel: str) -> _Blocks:
    """Block sizes of the Teng & Zhang kernels: whole rows per program (the in-kernel
    peephole product needs all of ``c_t``), at least 16 rows and columns (``tl.dot``'s
    minimum); ``CK`` columns of the peephole matrix at a time (16 on a GPU and in float64:
    a 32-row tile of the matrix held 256 registers a thread at h 150; 32 under the
    interpreter, fewer steps); ``BX`` columns of the head lexicons at a time
    (:func:`_x_columns`; none for ``xs=None``, the top-down kernels); a GPU's launch
    options (:func:`_gpu_options`). ``sizes``: ``(BM, BH, BX, CK)``, or ``(BM, BH, CK)``
    without ``xs``."""
    return _row_block_sizes(n, hs, xs, gpu_blocks(t), t.dtype == torch.float64, kernel)


@functools.lru_cache(maxsize=4096)
def _row_block_sizes(n: int, hs: int, xs: int | None, gpu: bool, f64: bool, kernel: str
                     ) -> _Blocks:
    """:func:`_row_blocks`, computed once per size (a launch's Python is its host cost);
    read-only, as it is shared."""
    bh = max(16, triton_next_pow2(hs))
    bm = 16 if gpu else max(16, min(triton_next_pow2(n), 256))
    ck = 32 if bh >= 32 and not f64 and not gpu else 16
    sizes = (bm, bh, ck) if xs is None else (bm, bh, _x_columns(xs, gpu), ck)
    return _Blocks(bm, sizes, MappingProxyType(_gpu_options(kernel, gpu)))


@launch_op("lex_forward", "op,act,c,tc,h,z")
def _lex_forward(p: torch.Tensor, b: torch.Tensor, bz: torch.Tensor, wco: torch.Tensor,
                 slots: torch.Tensor, par: torch.Tensor, pos: torch.Tensor, op: torch.Tensor,
                 act: torch.Tensor, c: torch.Tensor, tc: torch.Tensor, h: torch.Tensor,
                 z: torch.Tensor, a: int, n: int, mode: int) -> None:
    hs, xs = c.shape[1], op.shape[1] - 4 * c.shape[1]
    blk = _row_blocks(n, hs, xs, c, "lex_forward")
    tk.lex_forward[(-(-n // blk.bm),)](p, b, bz, wco, slots, par, pos, op, act, c, tc, h, z,
                                      a, n, par.shape[0], hs, xs, mode, *blk.sizes,
                                      **blk.options)  # MODE, BM, BH, BX, CK


@launch_op("lex_backward", "dp,dct,dxt,dz")
def _lex_backward(dh: torch.Tensor, dc: torch.Tensor, act: torch.Tensor, tc: torch.Tensor,
                  op: torch.Tensor, z: torch.Tensor, wco: torch.Tensor, slots: torch.Tensor,
                  par: torch.Tensor, pos: torch.Tensor, dop: torch.Tensor, dp: torch.Tensor,
                  dct: torch.Tensor, dxt: torch.Tensor, dz: torch.Tensor, dxo: torch.Tensor,
                  a: int, n: int, mode: int) -> None:
    hs, xs = tc.shape[1], op.shape[1] - 4 * tc.shape[1]
    blk = _row_blocks(n, hs, xs, tc, "lex_backward")
    tk.lex_backward[(-(-n // blk.bm),)](dh, dc, act, tc, op, z, wco, slots, par, pos, dop,
                                       dp, dct, dxt, dz, dxo, a, n, par.shape[0], hs, xs,
                                       mode, dxo.numel() > 0, *blk.sizes,
                                       **blk.options)  # MODE, XO, BM, BH, BX, CK


def lex_matrix(W_x: torch.Tensor, U_h: torch.Tensor, U_c: torch.Tensor,
               W_z: torch.Tensor | None, lexicalized: bool) -> torch.Tensor:
    """The lex cell's one matrix ``M`` (5h [+ 2x], 4h + x): a row of ``[h^L, h^R, c^L, c^R,
    x_t] M^T`` holds, in gate order i, f^L, f^R, g, o, ``U_h [h^L; h^R] + U_c [c^L; c^R]
    + W_x* x_t`` (the terms of :func:`~gnn_treelstm.cells.lexicalized.lex_node_update` and
    :func:`~gnn_treelstm.cells.lexicalized.lex_input_terms` before the biases: ``W_xf`` in
    both forget gates, no ``x`` term in them for the baseline), and with a head gate
    ``W_zx^L x_t``, ``W_zx^R x_t`` (the node's share of its parent's eq 10)."""
    hs = U_h.shape[1] // 2
    blocks = list(torch.split(W_x, hs))
    zero = W_x.new_zeros(hs, W_x.shape[1])
    wx5 = ([blocks[0], blocks[1], blocks[1], blocks[2], blocks[3]] if lexicalized
           else [blocks[0], zero, zero, blocks[1], blocks[2]])
    top = torch.cat([U_h, torch.cat([U_c, U_h.new_zeros(2 * hs, 2 * hs)]), torch.cat(wx5)], 1)
    if W_z is None:
        return top
    xs = W_z.shape[0]
    zx = torch.cat([W_z[:, :xs], W_z[:, xs:]])  # (2x, x): [W_zx^L; W_zx^R]
    return torch.cat([top, torch.cat([zx.new_zeros(2 * xs, 4 * hs), zx], 1)])


def lex_matrix_grads(dM: torch.Tensor, hs: int, lexicalized: bool, gate: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The gradients of :func:`lex_matrix`'s ``W_x``, ``U_h``, ``U_c`` and ``W_z`` (``None``
    without a head gate) from the gradient ``dM`` of its matrix: each block read back from
    where :func:`lex_matrix` put it (``W_xf`` sums its two forget gates' blocks): the
    backward of :class:`_LexMatrix` (``tests/kernels/test_fused_triton.py`` holds this
    equal to autograd's gradient through :func:`lex_matrix`)."""
    top = dM[:5 * hs]
    dU_h, dU_c = top[:, :2 * hs], top[:3 * hs, 2 * hs:4 * hs]
    dwx = top[:, 4 * hs:]  # (5h, x): gates i, f^L, f^R, g, o
    if lexicalized:
        dW_x = torch.cat([dwx[:hs], dwx[hs:2 * hs] + dwx[2 * hs:3 * hs], dwx[3 * hs:]])
    else:  # no x term in the forget gates
        dW_x = torch.cat([dwx[:hs], dwx[3 * hs:]])
    if not gate:
        return dW_x, dU_h, dU_c, None
    dzx = dM[5 * hs:, 4 * hs:]  # (2x, x): [W_zx^L; W_zx^R]
    xs = dzx.shape[1]
    return dW_x, dU_h, dU_c, torch.cat([dzx[:xs], dzx[xs:]], 1)


class LexWeights(NamedTuple):
    """The lex cell's parameters as :func:`lex_levels` reads them: ``W_x`` (its input
    weights, one block of h rows per gate with an ``x`` term), ``b`` (5h,), ``U_h``
    (5h, 2h), ``U_c`` (3h, 2h), ``W_co`` (h, h); the head gate's ``W_z`` (x, 2x) and
    ``b_z`` (x,), or ``None`` without one."""

    W_x: torch.Tensor
    b: torch.Tensor
    U_h: torch.Tensor
    U_c: torch.Tensor
    W_co: torch.Tensor
    W_z: torch.Tensor | None = None
    b_z: torch.Tensor | None = None


def _operand_buffers(x: torch.Tensor, hs: int, pw: int, gates: int) -> tuple[torch.Tensor, ...]:
    """The buffers of a Teng & Zhang level loop for the rows' inputs ``x`` (N, x'): ``op``
    (N, 4h + x') the rows' operands ``[h by slot, c by slot, x]`` (zeros, ``x`` in its
    block), ``p`` (N, pw) their product with ``M``, ``act`` (N, gates h) the activated
    gates, and ``h``, ``c``, ``tanh c`` (N, h)."""
    n = x.shape[0]
    op = x.new_zeros(n, 4 * hs + x.shape[1])
    op[:, 4 * hs:] = x
    return (op, x.new_empty(n, pw), x.new_empty(n, gates * hs),
            *(x.new_empty(n, hs) for _ in range(3)))


class _LexLoop(NamedTuple):
    """What a lex level loop runs over and how: ``rows`` (:class:`_BinaryRows`), ``mode``
    (:data:`LEX_MODES`), ``heads``: also output the head lexicons."""

    rows: _BinaryRows
    mode: int
    heads: bool


class _LexMatrix(torch.autograd.Function):
    """:func:`lex_matrix` as one autograd node: the forward builds ``M`` (a dozen
    concatenations and zero blocks, not recorded), the backward reads the weights'
    gradients out of ``dM`` (:func:`lex_matrix_grads`). ``W_z`` an empty tensor without a
    head gate."""

    @staticmethod
    def forward(ctx, W_x, U_h, U_c, W_z, lexicalized: bool):
        ctx.lexicalized, ctx.gate, ctx.hs = lexicalized, W_z.numel() > 0, U_h.shape[1] // 2
        return lex_matrix(W_x, U_h, U_c, W_z if ctx.gate else None, lexicalized)

    @staticmethod
    def backward(ctx, dM):
        return (*lex_matrix_grads(dM, ctx.hs, ctx.lexicalized, ctx.gate), None)


class _LexLevels(torch.autograd.Function):
    """Teng & Zhang's lex cell over the up levels with the Triton kernels: per level one
    product ``op M^T`` (children's states, the node's head lexicon) and one kernel
    (gates, cell, peephole, the parent's head lexicon), backward one kernel and one
    product ``dp M``; the weight gradients one product each after the loop.

    Inputs: ``x0`` (N, x) in up-schedule order (``MODE`` < 4: the leaves' words, other rows
    ignored; 4: every row's ``x_t``); ``M`` (:func:`lex_matrix`, by :class:`_LexMatrix`);
    ``b`` (5h,); ``b_z`` (x,) or an empty tensor; ``W_co`` (h, h); ``loop``
    (:class:`_LexLoop`). Outputs
    ``h, c`` (N, h) in node order, and every node's head lexicon (N, x) in up-schedule
    order (an empty tensor unless ``loop.heads``)."""

    @staticmethod
    def forward(ctx, x0, M, b, b_z, W_co, loop: _LexLoop):
        rows, mode = loop.rows, loop.mode
        n, xs = x0.shape
        hs = W_co.shape[0]
        lv = rows.lv
        op, p, act, h, c, tc = _operand_buffers(x0, hs, M.shape[0], 5)
        z = x0.new_zeros(n + 1, xs) if mode == 0 else x0.new_empty(0)
        Mt, W_co, b = M.t(), W_co.contiguous(), b.contiguous()
        spans = _spans(lv)
        ops, ps = _by_level(spans.sizes, op, p)  # each level's rows
        launch = _launches(x0)["lex_forward"]
        for lvl in range(lv.num_levels):
            torch.mm(ops[lvl], Mt, out=ps[lvl])
            launch(p, b, b_z, W_co, rows.slots, rows.par, rows.pos, op, act, c, tc, h, z,
                   spans.starts[lvl], spans.sizes[lvl], mode)
        ctx.rows, ctx.mode = rows, mode
        ctx.save_for_backward(M, W_co, op, act, c, tc, z)
        ctx.set_materialize_grads(False)
        xo = op[:, 4 * hs:].clone() if loop.heads else op.new_empty(0)
        return h.index_select(0, lv.rank), c.index_select(0, lv.rank), xo

    @staticmethod
    def backward(ctx, dh_out, dc_out, dheads):
        M, W_co, op, act, c, tc, z = ctx.saved_tensors
        rows: _BinaryRows = ctx.rows
        lv, mode = rows.lv, ctx.mode
        n, hs = tc.shape
        dh, dc = _grads_in_schedule_order(
            torch.zeros_like(tc) if dh_out is None else dh_out,
            torch.zeros_like(tc) if dc_out is None else dc_out, lv.order)
        dp = op.new_empty(n, M.shape[0])
        dop = torch.empty_like(op)
        dct = torch.empty_like(tc)
        xs = op.shape[1] - 4 * hs
        dxt = op.new_zeros(n + 1, xs) if mode < 4 else op.new_empty(0)
        dz = op.new_zeros(n + 1, xs) if mode == 0 else op.new_empty(0)
        dxo = dheads.contiguous() if dheads is not None and mode < 4 else op.new_empty(0)
        spans = _spans(lv)
        dps, dops = _by_level(spans.sizes, dp, dop)  # each level's rows
        launch = _launches(dh)["lex_backward"]
        for lvl in range(lv.num_levels - 1, -1, -1):
            launch(dh, dc, act, tc, op, z, W_co, rows.slots, rows.par, rows.pos, dop, dp, dct,
                   dxt, dz, dxo, spans.starts[lvl], spans.sizes[lvl], mode)
            torch.mm(dps[lvl], M, out=dops[lvl])
        dx0 = dop[:, 4 * hs:]
        if dheads is not None:
            dx0 = dx0 + dheads
        if mode < 4:  # a leaf's x also reaches its parent's head lexicon (eq 9)
            coef = _head_coef(z, rows.par, rows.pos, mode, op.dtype)
            dx0 = dx0 + coef * dxt.index_select(0, rows.par)
            dx0[lv.node_offsets[1]:].zero_()  # internal rows of x0 are not read
        dM = torch.mm(dp.t(), op)  # one product over all nodes
        dW_co = torch.mm(dp[:, 4 * hs:5 * hs].t(), c)
        db_z = dz[:n].sum(0) if mode == 0 else None
        return dx0, dM, dp[:, :5 * hs].sum(0), db_z, dW_co, None


def lex_levels(x0: torch.Tensor, w: LexWeights, lexicalized: bool, mode: str, lv: Levels,
               heads: bool = False) -> tuple[torch.Tensor, ...]:
    """Teng & Zhang's lex cell (eqs 9-12, 5, 1; the ConTree baseline with
    ``lexicalized=False``) bottom-up with the Triton kernels: ``(h, c)`` in node order from
    ``x0`` (N, x) in ``lv``'s (up) schedule order: the leaves' words for a head ``mode``
    (:data:`LEX_MODES`), or with ``mode="given"`` every node's ``x_t``; with ``heads``
    also every node's head lexicon (N, x) in the up schedule's order. ``ValueError`` where
    Triton does not run for ``x0`` (:func:`selected`)."""
    _require(x0, "lex_levels", "fused_teng.lex_levels")
    gate = mode == "gate"
    none = x0.new_empty(0)
    M = _LexMatrix.apply(w.W_x, w.U_h, w.U_c, w.W_z if gate else none, lexicalized)
    loop = _LexLoop(_binary_rows(lv), LEX_MODES[mode], heads)
    out = _LexLevels.apply(x0, M, w.b, w.b_z if gate else none, w.W_co, loop)
    return out if heads else out[:2]


# ============================================================== head lexicons (eqs 9-10)
def _x_blocks(n: int, xs: int, t: torch.Tensor, kernel: str) -> _Blocks:
    """Block sizes of the head kernels: ``BM`` rows per program, ``BX`` columns of ``x`` at
    a time (:func:`_x_columns`); a GPU's launch options (:func:`_gpu_options`). ``sizes``:
    ``(BM, BX)``."""
    return _x_block_sizes(n, xs, gpu_blocks(t), kernel)


@functools.lru_cache(maxsize=4096)
def _x_block_sizes(n: int, xs: int, gpu: bool, kernel: str) -> _Blocks:
    """:func:`_x_blocks`, computed once per size; read-only, as it is shared."""
    bm = 16 if gpu else max(1, min(triton_next_pow2(n), 256))
    return _Blocks(bm, (bm, _x_columns(xs, gpu)), MappingProxyType(_gpu_options(kernel, gpu)))


@launch_op("head_forward", "x,z")
def _head_forward(pz: torch.Tensor, bz: torch.Tensor, slots: torch.Tensor, par: torch.Tensor,
                  x: torch.Tensor, z: torch.Tensor, a: int, n: int, mode: int) -> None:
    blk = _x_blocks(n, x.shape[1], x, "head_forward")
    tk.head_forward[(-(-n // blk.bm),)](pz, bz, slots, par, x, z, a, n, par.shape[0],
                                       x.shape[1], mode, *blk.sizes,
                                       **blk.options)  # MODE, BM, BX


@launch_op("head_backward", "dxt,dpz,dz")
def _head_backward(dx: torch.Tensor, dpx: torch.Tensor, x: torch.Tensor, z: torch.Tensor,
                   slots: torch.Tensor, par: torch.Tensor, pos: torch.Tensor,
                   dxt: torch.Tensor, dpz: torch.Tensor, dz: torch.Tensor, a: int, n: int,
                   mode: int) -> None:
    blk = _x_blocks(n, x.shape[1], x, "head_backward")
    tk.head_backward[(-(-n // blk.bm),)](dx, dpx, x, z, slots, par, pos, dxt, dpz, dz, a, n,
                                        par.shape[0], x.shape[1], mode, *blk.sizes,
                                        **blk.options)  # MODE, BM, BX


class _HeadLevels(torch.autograd.Function):
    """Head lexicons (eqs 9-10) over the up levels with the Triton kernels: per level one
    product ``x [W_zx^L; W_zx^R]^T`` (gate mode only) and one kernel, backward one kernel
    and one product; the gate's weight gradient one product after the loop.

    Inputs: ``x0`` (N, x) up-schedule order, the leaves' words (other rows ignored);
    ``Wz2`` (2x, x) ``[W_zx^L; W_zx^R]`` and ``b_z`` (gate) or empty tensors; ``rows``
    (:class:`_BinaryRows`); ``mode`` (:data:`LEX_MODES`, 0-3). Output: every node's head
    lexicon (N, x) in up-schedule order."""

    @staticmethod
    def forward(ctx, x0, Wz2, b_z, rows: _BinaryRows, mode: int):
        n, xs = x0.shape
        lv = rows.lv
        x = x0.contiguous().clone()
        gate = mode == 0
        pz = x.new_empty(n, 2 * xs) if gate else x.new_empty(0)
        z = x.new_zeros(n + 1, xs) if gate else x.new_empty(0)
        spans = _spans(lv)
        (rows_x,) = _by_level(spans.sizes, x)
        rows_pz = _by_level(spans.sizes, pz)[0] if gate else None
        launch, wz_t = _launches(x0)["head_forward"], Wz2.t()
        for lvl in range(lv.num_levels - 1):  # the top level holds roots only
            if gate:
                torch.mm(rows_x[lvl], wz_t, out=rows_pz[lvl])
            launch(pz, b_z, rows.slots, rows.par, x, z, spans.starts[lvl], spans.sizes[lvl],
                   mode)
        ctx.rows, ctx.mode = rows, mode
        ctx.save_for_backward(Wz2, x, z)
        return x

    @staticmethod
    def backward(ctx, dx_out):
        Wz2, x, z = ctx.saved_tensors
        rows: _BinaryRows = ctx.rows
        lv, par, mode = rows.lv, rows.par, ctx.mode
        n, xs = x.shape
        gate = mode == 0
        dx = dx_out.contiguous()
        dxt = x.new_zeros(n + 1, xs)  # total gradient of each internal node's head
        dpz = x.new_empty(n, 2 * xs) if gate else x.new_empty(0)
        dpx = x.new_zeros(n, xs) if gate else x.new_empty(0)
        dz = x.new_zeros(n + 1, xs) if gate else x.new_empty(0)
        spans = _spans(lv)
        dpzs, dpxs = _by_level(spans.sizes, dpz, dpx) if gate else (None, None)
        launch = _launches(dx)["head_backward"]
        for lvl in range(lv.num_levels - 2, -1, -1):
            launch(dx, dpx, x, z, rows.slots, par, rows.pos, dxt, dpz, dz, spans.starts[lvl],
                   spans.sizes[lvl], mode)
            if gate:
                torch.mm(dpzs[lvl], Wz2, out=dpxs[lvl])
        n0 = lv.node_offsets[1] if lv.num_levels > 1 else n
        dx0 = dx + dxt.index_select(0, par) * _head_coef(z, par, rows.pos, mode, x.dtype)
        if gate:
            dx0 = dx0 + dpx
        dx0[n0:].zero_()  # internal rows of x0 are not read
        if not gate:
            return dx0, None, None, None, None
        nt = lv.node_offsets[-2]  # the rows below the top level
        dW = torch.mm(dpz[:nt].t(), x[:nt]) if nt else torch.zeros_like(Wz2)
        return dx0, dW, dz[:n].sum(0), None, None


def _head_coef(z: torch.Tensor, par: torch.Tensor, pos: torch.Tensor, mode: int,
               dtype: torch.dtype) -> torch.Tensor | float:
    """``∂x_par / ∂x_j`` per row (eq 9): ``z_par`` (left) or ``1 - z_par`` (right) for the
    gate, 1 / 0 by side for left and right heads, 1/2 for the average."""
    if mode == 0:
        zp = z.index_select(0, par)
        return torch.where(pos.unsqueeze(1) == 0, zp, 1.0 - zp)
    if mode == 3:
        return 0.5
    return (pos == mode - 1).to(dtype).unsqueeze(1)


def head_levels(x0: torch.Tensor, lv: Levels, mode: str, W_z: torch.Tensor | None = None,
                b_z: torch.Tensor | None = None) -> torch.Tensor:
    """Head lexicons (eqs 9-10, Table 3 modes) of every node, (N, x) in ``lv``'s (up)
    schedule order, from ``x0`` (N, x) in that order (the leaves' words), with the Triton
    kernels. ``ValueError`` where Triton does not run for ``x0`` (:func:`selected`)."""
    _require(x0, "head_levels", "fused_teng.head_levels")
    gate = mode == "gate"
    xs = x0.shape[1]
    Wz2 = torch.cat([W_z[:, :xs], W_z[:, xs:]]) if gate else x0.new_empty(0)
    return _HeadLevels.apply(x0, Wz2, b_z if gate else x0.new_empty(0), _binary_rows(lv),
                             LEX_MODES[mode])


# ============================================================== Teng & Zhang top-down (eqs 14-15)
@launch_op("topdown_forward", "op,act,c,tc,h")
def _topdown_forward(p: torch.Tensor, b: torch.Tensor, side: torch.Tensor, wco: torch.Tensor,
                     kids: torch.Tensor, op: torch.Tensor, act: torch.Tensor, c: torch.Tensor,
                     tc: torch.Tensor, h: torch.Tensor, a: int, n: int) -> None:
    hs = c.shape[1]
    blk = _row_blocks(n, hs, None, c, "topdown_forward")
    tk.topdown_forward[(-(-n // blk.bm),)](p, b, side, wco, kids, op, act, c, tc, h, a, n,
                                          side.shape[0], hs, op.shape[1] - 4 * hs,
                                          b.shape[0] // (4 * hs), *blk.sizes,
                                          **blk.options)  # S, BM, BH, CK


@launch_op("topdown_backward", "dp,dct")
def _topdown_backward(dh: torch.Tensor, dc: torch.Tensor, act: torch.Tensor, tc: torch.Tensor,
                      op: torch.Tensor, side: torch.Tensor, wco: torch.Tensor,
                      kids: torch.Tensor, dop: torch.Tensor, dp: torch.Tensor,
                      dct: torch.Tensor, a: int, n: int) -> None:
    hs = tc.shape[1]
    blk = _row_blocks(n, hs, None, tc, "topdown_backward")
    tk.topdown_backward[(-(-n // blk.bm),)](dh, dc, act, tc, op, side, wco, kids, dop, dp,
                                           dct, a, n, side.shape[0], hs,
                                           op.shape[1] - 4 * hs, *blk.sizes,
                                           **blk.options)  # BM, BH, CK


class _TopDownLevels(torch.autograd.Function):
    """Teng & Zhang's top-down cell (eqs 14-15) over the down levels with the Triton
    kernels: per level one product ``op M^T`` (the parent's ``h, c`` in the slot of the
    node's side, the node's input ``x_t``) and one kernel (gates, cell, the side's
    peephole), backward one kernel and one product ``dp M``; the weight gradients one
    product each after the loop.

    Inputs: ``x_in`` (N, S x) down-schedule order (``S = 2``: ``x_t`` in the block of the
    node's side, zeros in the other); ``M`` (4h, 4h + S x) ``[U_h | U_c (rows i, f) | W_x]``;
    ``b`` (S 4h,); ``W_co`` (2, h, h); ``side`` (N,); ``kids`` (N, 2) children rows by side
    (N: none); ``lv`` (down levels). Outputs ``h, c`` (N, h) in node order."""

    @staticmethod
    def forward(ctx, x_in, M, b, W_co, side, kids, lv: Levels):
        hs = W_co.shape[1]
        # op: [h_{t-1} by side, c_{t-1} by side, x_t]
        op, p, act, h, c, tc = _operand_buffers(x_in, hs, 4 * hs, 4)
        Mt, W_co, b = M.t(), W_co.contiguous(), b.contiguous()
        spans = _spans(lv)
        ops, ps = _by_level(spans.sizes, op, p)  # each level's rows
        launch = _launches(x_in)["topdown_forward"]
        for lvl in range(lv.num_levels):
            torch.mm(ops[lvl], Mt, out=ps[lvl])
            launch(p, b, side, W_co, kids, op, act, c, tc, h, spans.starts[lvl],
                   spans.sizes[lvl])
        ctx.lv, ctx.s = lv, b.shape[0] // (4 * hs)
        ctx.save_for_backward(M, W_co, side, kids, op, act, c, tc)
        return h.index_select(0, lv.rank), c.index_select(0, lv.rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        M, W_co, side, kids, op, act, c, tc = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, hs = tc.shape
        dh, dc = _grads_in_schedule_order(dh_out, dc_out, lv.order)
        dp = torch.empty_like(act)
        dop = torch.empty_like(op)
        dct = torch.empty_like(tc)
        spans = _spans(lv)
        dps, dops = _by_level(spans.sizes, dp, dop)  # each level's rows
        launch = _launches(dh)["topdown_backward"]
        for lvl in range(lv.num_levels - 1, -1, -1):
            launch(dh, dc, act, tc, op, side, W_co, kids, dop, dp, dct, spans.starts[lvl],
                   spans.sizes[lvl])
            torch.mm(dps[lvl], M, out=dops[lvl])
        right = side.unsqueeze(1).to(dp.dtype)
        onehot = torch.cat([1.0 - right, right], 1)  # (N, 2) the node's side
        dM = torch.mm(dp.t(), op)  # one product over all nodes
        d_o = dp[:, 3 * hs:]
        dW_co = torch.mm(torch.cat([d_o * onehot[:, :1], d_o * onehot[:, 1:]], 1).t(),
                                  c).view(2, hs, hs)  # W_co^N over the nodes of side N
        db = dp.sum(0) if ctx.s == 1 else torch.mm(onehot.t(), dp).reshape(-1)
        return dop[:, 4 * hs:], dM, db, dW_co, None, None, None


def topdown_matrix(W_x: torch.Tensor, U_h: torch.Tensor, U_c: torch.Tensor) -> torch.Tensor:
    """The top-down cell's one matrix ``M`` (4h, 4h + S x): a row of ``[h_{t-1} by side,
    c_{t-1} by side, x_t by side] M^T`` holds, in gate order i, f, g, o, the terms of
    :func:`~gnn_treelstm.cells.topdown.topdown_node_update` and
    :func:`~gnn_treelstm.cells.topdown.topdown_input_terms` before the biases."""
    hs = U_h.shape[1] // 2
    return torch.cat([U_h, torch.cat([U_c, U_h.new_zeros(2 * hs, 2 * hs)]),
                      torch.cat(list(W_x), 1)], 1)


def topdown_levels(heads: torch.Tensor, W_x: torch.Tensor, b: torch.Tensor, U_h: torch.Tensor,
                   U_c: torch.Tensor, W_co: torch.Tensor, side: torch.Tensor, lv: Levels
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Teng & Zhang's top-down cell (eqs 14-15) with the Triton kernels: ``(h, c)`` in node
    order from the head lexicons ``heads`` (N, x) in ``lv``'s (down) schedule order and
    ``side`` (N,) (:func:`gnn_treelstm.kernels.fused_teng.down_sides`). ``ValueError``
    where Triton does not run for ``heads`` (:func:`selected`)."""
    _require(heads, "topdown_levels", "fused_teng.topdown_levels")
    n = lv.num_nodes
    parent = lv.slots[:, 0]
    kids = torch.full((n + 1, 2), n, dtype=torch.int64, device=side.device)
    kids.index_put_((parent, side), torch.arange(n, device=side.device))  # roots: row n
    if W_x.shape[0] == 1:
        x_in = heads
    else:  # untied: x_t in the block of the node's side
        right = side.unsqueeze(1).to(heads.dtype)
        x_in = torch.cat([heads * (1.0 - right), heads * right], 1)
    return _TopDownLevels.apply(x_in, topdown_matrix(W_x, U_h, U_c), b.reshape(-1), W_co, side,
                                kids[:n].contiguous(), lv)

"""The level engine's Triton path (:mod:`gnn_treelstm.kernels.fused_triton`) on the CPU,
under triton's interpreter: its choice (``GNN_TREELSTM_KERNELS``), and the operations one
forward + backward step dispatches per level (the count that decides a GPU step's launch
overhead). Equality with the cells' declarations is tests/cells/test_registry.py's."""

from __future__ import annotations

import inspect

import dgl
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gnn_treelstm.cells import build_cell
from gnn_treelstm.kernels import fused_triton, native
from gnn_treelstm.kernels.count import OpCounter, count_step
from gnn_treelstm.trees.graph import NO_WORD, make_tree
from gnn_treelstm.trees.schedule import LevelSchedule

X, H = 6, 8
#: the most operations one training step may dispatch per level on the Triton path
PER_LEVEL = 8


def _caterpillar(leaves: int) -> dgl.DGLGraph:
    """A left-branching binary tree: ``leaves - 1`` levels above the leaves."""
    n = 2 * leaves - 1
    parents, pos = [-1] * n, [0] * n
    for i in range(leaves - 1):
        node = leaves + i
        left = 0 if i == 0 else node - 1
        parents[left], pos[left] = node, 0
        parents[i + 1], pos[i + 1] = node, 1
    words = [w % 40 for w in range(leaves)] + [NO_WORD] * (leaves - 1)
    return make_tree(parents, words, positions=pos, rels=[p % 3 for p in pos])


def _deep_batch() -> dgl.DGLGraph:
    """25 trees, 3 to 32 leaves: 31 levels."""
    return dgl.batch([_caterpillar(3 + (7 * i) % 30) for i in range(25)])


def _chains() -> dgl.DGLGraph:
    """25 word chains (word i -> word i + 1), 3 to 32 words: 31 levels."""
    return dgl.batch([make_tree([i + 1 for i in range(n - 1)] + [-1], [w % 40 for w in range(n)])
                      for n in (3 + (7 * i) % 30 for i in range(25))])


def _step_ops(name: str, kernels: str, native_choice: str | None = None,
              graph: dgl.DGLGraph | None = None) -> tuple[OpCounter, int]:
    g = _deep_batch() if graph is None else graph
    sched = LevelSchedule.from_graph(g)
    torch.manual_seed(0)
    kw = {"num_relations": 3} if name.startswith("mtree") else {}  # _caterpillar's 3
    cell = build_cell(name, X, H, engine="level", **kw)
    x = torch.randn(g.num_nodes(), X, requires_grad=True)
    count = count_step(cell, g, x, sched, kernels=kernels, native_choice=native_choice)
    return count, sched.up.num_levels


needs_interpreter = pytest.mark.skipif(
    not fused_triton.interpreted(),
    reason="the Triton kernels run on CPU tensors only under TRITON_INTERPRET=1 (and triton)")


@needs_interpreter
@pytest.mark.parametrize("name", ["nary", "childsum", "lex"])
def test_a_step_dispatches_at_most_8_operations_per_level(name):
    count, levels = _step_ops(name, "triton")
    assert levels >= 30
    assert count.ops[f"gnn_treelstm_triton::{name}_forward"] == levels
    assert count.ops[f"gnn_treelstm_triton::{name}_backward"] == levels
    assert count.total <= PER_LEVEL * levels, (count.total / levels, count.ops)


@needs_interpreter
@pytest.mark.parametrize("name,loops", [("topdown", 2), ("bitree", 2)])
def test_a_step_of_several_loops_dispatches_at_most_8_operations_per_level_of_each(name,
                                                                                   loops):
    """The top-down cell runs two level loops a step (its head lexicons bottom-up, then its
    cell top-down), the bidirectional cell two (the lex cell with the head lexicons, the
    top-down cell): at most 8 operations per level of each."""
    count, levels = _step_ops(name, "triton")
    assert levels >= 30
    if name == "bitree":
        for op in ("lex_forward", "lex_backward"):
            assert count.ops[f"gnn_treelstm_triton::{op}"] == levels
    for op in ("topdown_forward", "topdown_backward"):
        assert count.ops[f"gnn_treelstm_triton::{op}"] == levels
    if name == "topdown":
        for op in ("head_forward", "head_backward"):  # the top level holds roots only
            assert count.ops[f"gnn_treelstm_triton::{op}"] == levels - 1
    assert count.total <= PER_LEVEL * loops * levels, (count.total / levels, count.ops)


@needs_interpreter
@pytest.mark.parametrize("name,op", [("nary", "nary"), ("lstm", "nary"),
                                     ("childsum", "childsum"), ("mtree-add", "childsum")])
def test_the_kernels_compute_their_levels_product_inside(name, op):
    """One launch a level each way and no matrix product per level: the N-ary kernels (the
    sequential LSTMs' too) and Child-Sum's (mTreeLSTM ``add``'s too) take the level's
    product inside (``tl.dot``), so a step's products are the input terms' and the weight
    gradients', as many for 31 levels as for one."""
    count, levels = _step_ops(name, "triton", graph=_chains() if name == "lstm" else None)
    assert levels >= 30
    assert count.ops[f"gnn_treelstm_triton::{op}_forward"] == levels
    assert count.ops[f"gnn_treelstm_triton::{op}_backward"] == levels
    products = {k: v for k, v in count.ops.items() if k in ("aten::mm", "aten::addmm")}
    assert sum(products.values()) <= 8, products


def test_the_general_driver_dispatches_more_than_8_per_level():
    """The count has teeth: the general level driver (the path CUDA ran before the Triton
    kernels) dispatches several times the budget."""
    count, levels = _step_ops("nary", "native", native_choice="off")
    assert count.total > 3 * PER_LEVEL * levels, count.total / levels


def test_the_choice_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_BACKEND", raising=False)  # the former name is tested
    monkeypatch.setenv("GNN_TREELSTM_KERNELS", "cuda-please")
    fused_triton.set_choice(None)
    with pytest.raises(ValueError, match="GNN_TREELSTM_KERNELS='cuda-please'.*auto, triton"):
        fused_triton.choice()
    monkeypatch.setenv("GNN_TREELSTM_KERNELS", "Native")
    assert fused_triton.choice() == "native"
    assert not fused_triton.selected(torch.zeros(1))
    fused_triton.set_choice(None)
    with pytest.raises(ValueError, match="unknown level-kernel choice 'gpu'"):
        fused_triton.set_choice("gpu")


def test_auto_runs_triton_on_cuda_only():
    fused_triton.set_choice("auto")
    try:
        assert not fused_triton.selected(torch.zeros(1))
        assert not fused_triton.selected(torch.zeros(1, dtype=torch.float64))
    finally:
        fused_triton.set_choice(None)


def test_native_off_switches_the_triton_kernels_off_too():
    native.set_choice("off")
    fused_triton.set_choice("triton")
    try:
        assert not fused_triton.selected(torch.zeros(1))
    finally:
        native.set_choice(None)
        fused_triton.set_choice(None)


def test_triton_on_the_cpu_without_the_interpreter_says_how(monkeypatch):
    if fused_triton.interpreted():
        pytest.skip("this process runs triton's interpreter")
    fused_triton.set_choice("triton")
    try:
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1|pip install triton"):
            fused_triton.selected(torch.zeros(1))
    finally:
        fused_triton.set_choice(None)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not fused_triton.installed(),
                    reason="needs CUDA and triton")
@pytest.mark.parametrize("moved", [False, True], ids=["pinned", "on-cuda"])
@pytest.mark.parametrize("name", ["nary", "childsum", "lstm"])
def test_a_cuda_step_does_not_synchronise(name, moved):
    """One forward + backward step on CUDA: no host-device synchronisation inside
    (``set_sync_debug_mode("error")``). The schedule is given in pinned CPU memory, checked
    against the graph there, and moved once per forward (``Propagator.schedule_on``,
    non-blocking copies); or given on CUDA already (as a training step's batch brings it),
    checked against the CPU graph with its CPU copy."""
    g = _deep_batch() if name != "lstm" else dgl.batch(
        [make_tree(list(range(1, n)) + [-1], list(range(n))) for n in (3, 9, 17)])
    sched = LevelSchedule.from_graph(g).pin_memory()
    if moved:
        sched = sched.to("cuda")
    torch.manual_seed(0)
    cell = build_cell(name, X, H, engine="level").cuda()
    x = torch.randn(g.num_nodes(), X, device="cuda", requires_grad=True)
    cell(g, x, schedule=sched)  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        h, c = cell(g, x, schedule=sched)
        (h.sum() + c.sum()).backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def test_launches_skip_the_dispatcher_only_in_plain_eager_mode():
    # the implementations are the operators' own (CPU and CUDA): the same launch either way
    x = torch.zeros(2, 2)
    assert fused_triton._launches(x) is fused_triton._FNS
    assert all(getattr(torch.ops.gnn_treelstm_triton, name).default is op
               for name, op in ((n, fused_triton._OPS[n]) for n in fused_triton._FNS))
    with OpCounter():  # a dispatch mode (the counter, fake tensors, the sync check)
        assert fused_triton._launches(x) is fused_triton._OPS
    assert fused_triton._launches(torch.nn.Parameter(x)) is fused_triton._FNS
    subclass = torch.Tensor._make_subclass(type("Sub", (torch.Tensor,), {}), x)
    assert fused_triton._launches(subclass) is fused_triton._OPS
    with FakeTensorMode():  # an infra mode, on the dispatcher's stack too
        assert fused_triton._launches(x) is fused_triton._OPS


def test_launches_skip_the_dispatcher_after_a_mode_entered_twice_is_left():
    # torch 2.4 leaves its Python-side "in a dispatch mode" flag set after this; the
    # dispatcher's own stack is empty again
    counter = OpCounter()
    with counter, counter:
        pass
    assert fused_triton._launches(torch.zeros(2, 2)) is fused_triton._FNS


def _triton_step(cell, g: dgl.DGLGraph, x: torch.Tensor, sched: LevelSchedule
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward + backward of ``cell`` on the Triton path; its ``(h, c)``."""
    fused_triton.set_choice("triton")
    try:
        h, c = cell(g, x, schedule=sched)
        (h.sum() + c.sum()).backward()
    finally:
        fused_triton.set_choice(None)
    return h, c


@needs_interpreter
@pytest.mark.parametrize("name", ["nary", "childsum", "lex"])
def test_direct_launches_give_the_operators_states_and_gradients(name, monkeypatch):
    g = dgl.batch([_caterpillar(3), _caterpillar(6)])
    sched = LevelSchedule.from_graph(g)
    runs = []
    for launches in (fused_triton._launches, lambda t: fused_triton._OPS):
        monkeypatch.setattr(fused_triton, "_launches", launches)
        torch.manual_seed(0)
        cell = build_cell(name, X, H, engine="level")
        x = torch.randn(g.num_nodes(), X, requires_grad=True)
        h, c = _triton_step(cell, g, x, sched)
        runs.append([h, c, x.grad, *(p.grad for p in cell.parameters())])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", ["nary", "childsum", "lex", "topdown", "bitree"])
def test_the_gpus_blocks_give_the_interpreters_states_and_gradients(name, dtype, monkeypatch):
    """The GPU's block sizes and launch options (16 rows a program, the head lexicons 64
    columns of x at a time, the peephole matrices 16 rows at a time) compute what the
    interpreter's whole-level programs compute: at x 80 and h 20 each of those loops takes
    two steps, and the lower levels of 20 trees span two programs. float32: the peephole
    product in 16-row steps on the GPU, 32 under the interpreter."""
    g = dgl.batch([_caterpillar(3 + i % 5) for i in range(20)] + [_caterpillar(20)])
    sched = LevelSchedule.from_graph(g)
    runs = []
    for gpu in (False, True):
        monkeypatch.setattr(fused_triton, "gpu_blocks", lambda t, gpu=gpu: gpu)
        torch.manual_seed(0)
        cell = build_cell(name, 80, 20, engine="level").to(dtype)
        x = torch.randn(g.num_nodes(), 80, dtype=dtype, requires_grad=True)
        h, c = _triton_step(cell, g, x, sched)
        runs.append([h, c, x.grad, *(p.grad for p in cell.parameters() if p.grad is not None)])
    assert len(runs[0]) == len(runs[1])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_the_triton_functions_refuse_tensors_they_do_not_run_for():
    """The level-loop functions of fused_triton run Triton only (the cell chooses the path):
    elsewhere a ValueError names the tensors and the C++ loops' function."""
    fused_triton.set_choice("native")
    try:
        x = torch.zeros(3, 4)
        for fn, cpu in ((fused_triton.nary_levels, "fused.nary_levels"),
                        (fused_triton.childsum_levels, "fused.childsum_levels"),
                        (fused_triton.topdown_levels, "fused_teng.topdown_levels")):
            with pytest.raises(ValueError, match=rf"torch.float32 tensors on cpu.*{cpu}"):
                fn(x, *([None] * (len(inspect.signature(fn).parameters) - 1)))
    finally:
        fused_triton.set_choice(None)

"""The native (C++) level loops (:mod:`gnn_treelstm.kernels.fused`) at sizes and shapes the
registry-wide test does not reach, their build and choice, and the native matmul."""

from __future__ import annotations

import ctypes
import logging
import shutil
import time

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.kernels import fused_triton, gemm, native
from gnn_treelstm.trees.graph import make_tree
from tests.engine.compare import assert_same_run
from tests.handbuilt import chain, random_batch, random_dependency_batch

needs_compiler = pytest.mark.skipif(shutil.which(native._compiler()) is None,
                                    reason="needs a C++ compiler")


@pytest.fixture(autouse=True)
def cpp_loops_not_triton():
    """These tests are the C++ loops', also where ``GNN_TREELSTM_KERNELS=triton``."""
    fused_triton.set_choice("native")
    yield
    fused_triton.set_choice(None)


@pytest.fixture
def restore_choices():
    yield
    native.set_choice(None)
    gemm.set_backend(None)


def _states_and_grads(cell, graph, x, choice):
    native.set_choice(choice)
    torch.manual_seed(1)
    wh = torch.randn(graph.num_nodes(), cell.out_size)
    wc = torch.randn(graph.num_nodes(), cell.out_size)
    x = x.detach().clone().requires_grad_(True)
    cell.zero_grad(set_to_none=True)
    cell.engine = "level"
    h, c = cell(graph, x)
    ((h * wh).sum() + (c * wc).sum()).backward()
    grads = {n: p.grad.clone() for n, p in cell.named_parameters() if p.grad is not None}
    grads["x"] = x.grad.clone()
    return h.detach(), c.detach(), grads


def assert_native_equals_python(cell, graph, x, tol=1e-5):
    want = _states_and_grads(cell, graph, x, "off")
    assert_same_run(_states_and_grads(cell, graph, x, "on"), want, tol=tol)


@needs_compiler
@pytest.mark.parametrize("backend", ["onednn", "torch"])  # packed oneDNN / torch.addmm products
@pytest.mark.parametrize("n_ary,tie,words", [(2, False, "leaves"), (3, False, "all"),
                                             (3, True, "leaves"), (2, True, "all")])
def test_nary_native_equals_python(restore_choices, backend, n_ary, tie, words):
    gemm.set_backend(backend)
    torch.manual_seed(0)
    g = dgl.batch(random_batch(3, 30, max_children=n_ary, words=words))
    cell = build_cell("nary", 7, 5, n_ary=n_ary, tie_forget=tie)
    assert_native_equals_python(cell, g, torch.randn(g.num_nodes(), 7))


@needs_compiler
def test_native_at_sst_sizes_large_levels_and_missing_children(restore_choices):
    # h 150, levels of hundreds of nodes (the padded row buckets), a missing left child
    torch.manual_seed(0)
    trees = random_batch(5, 120, max_children=2, words="leaves")
    trees.append(make_tree([1, -1], [3, -1], positions=[1, 0]))  # only a child at position 1
    g = dgl.batch(trees)
    cell = build_cell("nary", 30, 150, n_ary=2)
    assert_native_equals_python(cell, g, torch.randn(g.num_nodes(), 30), tol=2e-5)


@needs_compiler
@pytest.mark.parametrize("name", ["lstm", "bilstm2"])
def test_sequential_native_equals_python(restore_choices, name):
    torch.manual_seed(0)
    g = dgl.batch([chain(n, seed=n) for n in (1, 2, 17, 40)])
    cell = build_cell(name, 7, 5)
    assert_native_equals_python(cell, g, torch.randn(g.num_nodes(), 7))


@needs_compiler
@pytest.mark.parametrize("name", ["childsum", "mtree-add"])
def test_childsum_native_equals_python(restore_choices, name):
    # dependency trees (any number of children), constituency trees, chains; h 150 too
    torch.manual_seed(0)
    kw = {"num_relations": 4} if name == "mtree-add" else {}
    for g, hs in ((random_dependency_batch(3, 40, num_relations=4), 5),
                  (dgl.batch(random_batch(4, 40, max_children=3, words="all")), 5),
                  (dgl.batch([chain(n, seed=n) for n in (1, 2, 17)]), 5),
                  (random_dependency_batch(5, 60, num_relations=4), 150)):
        cell = build_cell(name, 7, hs, **kw)
        assert_native_equals_python(cell, g, torch.randn(g.num_nodes(), 7), tol=2e-5)


@needs_compiler
def test_build_is_cached_and_named_by_content(tmp_path, monkeypatch):
    """The build's mechanics on a one-function source (the library's own sources take two
    minutes to compile: the other tests build them once, into the tests' cache)."""
    cache, src = tmp_path / "cache", tmp_path / "tiny.cpp"
    cache.mkdir()
    src.write_text('extern "C" int gnn_treelstm_tiny() { return 1; }\n')
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(cache))
    monkeypatch.setattr(native, "SOURCES", (src,))
    monkeypatch.setattr(native, "HEADERS", ())
    path = native.build()
    assert path.parent == cache and path.exists()
    stamp = path.stat().st_mtime_ns
    assert native.build() == path and path.stat().st_mtime_ns == stamp  # not rebuilt
    assert list(cache.iterdir()) == [path]  # no temporary files left behind
    src.write_text('extern "C" int gnn_treelstm_tiny() { return 2; }\n')
    new = native.build()  # another source, another library beside the first
    assert new != path and sorted(cache.iterdir()) == sorted([path, new])


@needs_compiler
def test_sources_compile_apart_and_link_into_one_library(tmp_path, monkeypatch):
    """Each source its own object file (compiled side by side), all linked into the one
    library; a source that does not compile fails the build with the compiler's message."""
    srcs = [tmp_path / f"part{k}.cpp" for k in (1, 2)]
    for k, src in enumerate(srcs, 1):
        src.write_text(f'extern "C" int gnn_treelstm_part{k}() {{ return {k}; }}\n')
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "SOURCES", tuple(srcs))
    monkeypatch.setattr(native, "HEADERS", ())
    calls, real = [], native._run_compiler
    monkeypatch.setattr(native, "_run_compiler", lambda cmd, what: calls.append(
        (what, "-c" in cmd)) or real(cmd, what))
    lib = ctypes.CDLL(str(native.build()))
    assert (lib.gnn_treelstm_part1(), lib.gnn_treelstm_part2()) == (1, 2)
    assert sorted(calls[:2]) == [("part1.cpp", True), ("part2.cpp", True)]
    assert calls[2:] == [("linking", False)]
    srcs[1].write_text("int broken( {\n")
    with pytest.raises(RuntimeError, match=r"failed \(part2.cpp, exit"):
        native.build()


def test_failed_build_names_the_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(RuntimeError, match="no-such-compiler-xyz"):
        native.build()


def test_unusable_library_falls_back_with_a_warning_or_raises_when_required(
        restore_choices, monkeypatch, caplog):
    def broken_build(force=False):
        raise RuntimeError("compiling the native level loops failed (exit 1): boom")

    monkeypatch.setattr(native, "_ops_loaded", lambda: False)
    monkeypatch.setattr(native, "build", broken_build)
    monkeypatch.setitem(native._state, "loaded", None)
    native.set_choice("auto")
    with caplog.at_level(logging.WARNING, logger="gnn_treelstm.kernels.native"):
        assert native.available() is False
    assert "boom" in caplog.text
    monkeypatch.setitem(native._state, "loaded", None)
    native.set_choice("on")
    with pytest.raises(RuntimeError, match="GNN_TREELSTM_NATIVE=on.*boom"):
        native.available()
    monkeypatch.setitem(native._state, "loaded", None)


def test_choices_and_dtypes(restore_choices, monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_BACKEND", raising=False)  # the former name is tested
    with pytest.raises(ValueError, match="auto, on, off"):
        monkeypatch.setenv("GNN_TREELSTM_NATIVE", "fast")
        native.set_choice(None)
        native.choice()
    with pytest.raises(ValueError, match="unknown native-kernel choice"):
        native.set_choice("yes")
    native.set_choice("off")
    assert native.available() is False
    native.set_choice("auto")
    assert native.available(torch.zeros(1, dtype=torch.float64)) is False  # float32 only


@needs_compiler
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (6, 300, 64), (13, 33, 130), (475, 450, 300),
                                   (0, 4, 3), (3, 0, 5)])
def test_matmul_row_major_transposed_and_strided_operands(m, k, n):
    assert native.available()
    mm = torch.ops.gnn_treelstm.matmul
    g = torch.Generator().manual_seed(m + k + n)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    want = a.double() @ b.double()
    tol = dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(mm(a, b).double(), want, **tol)
    torch.testing.assert_close(mm(a.t().contiguous().t(), b.t().contiguous().t()).double(),
                               want, **tol)  # transposed views, read in place / copied
    wide = torch.randn(m, 2 * k + 1, generator=g)[:, 1: 2 * k + 1: 2]  # neither layout
    torch.testing.assert_close(mm(wide, b).double(), wide.double() @ b.double(), **tol)


def _min_thread_us(f, a, b, rounds: int = 30) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        f(a, b)
        best = min(best, time.thread_time_ns() - t0)
    return best / 1e3


@needs_compiler
def test_matmul_keeps_pace_with_torch_mm():
    """The register-blocked kernel fits the vector registers the build targets (AVX-512,
    AVX2 or SSE): a level-sized product and a weight-gradient product (a transposed view
    read in place), one thread, take at most 2.5x ``torch.mm``'s time (AVX-512-sized blocks
    on an AVX2 CPU took 29x and 20x, their accumulators spilled)."""
    assert native.available()
    mm = torch.ops.gnn_treelstm.matmul
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        for a, b in [(torch.randn(60, 300, generator=g), torch.randn(300, 768, generator=g)),
                     (torch.randn(941, 32, generator=g).t(), torch.randn(941, 64, generator=g))]:
            for _ in range(3):
                mm(a, b), torch.mm(a, b)
            ours = _min_thread_us(mm, a, b)
            theirs = _min_thread_us(torch.mm, a, b)
            assert ours <= 2.5 * theirs, (tuple(a.shape), ours, theirs)
    finally:
        torch.set_num_threads(threads)


@needs_compiler
@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump")
def test_elementwise_math_is_inlined_into_the_loops():
    """``exp_f`` / ``sigmoid_f`` are inlined everywhere (``always_inline``): once the output-gate
    switch grew N-ary's node lambda, GCC stopped inlining them there and the gate loops ran
    as scalar calls through the PLT (nary_forward 4.3 ms a batch of 25 SST trees instead of
    3.1). A call to either in the built library means a loop lost its vectorisation."""
    import subprocess

    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(native.build())],
                          capture_output=True, text=True, check=True).stdout
    calls = [ln for ln in text.splitlines()
             if "call" in ln and ("exp_f" in ln or "sigmoid_f" in ln)]
    assert not calls, calls[:3]


def test_matmul_rejects_bad_input():
    if not native.available():
        pytest.skip("native kernels unavailable")
    with pytest.raises(RuntimeError, match="shapes"):
        torch.ops.gnn_treelstm.matmul(torch.zeros(2, 3), torch.zeros(4, 2))
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.gnn_treelstm.matmul(torch.zeros(2, 3, dtype=torch.float64),
                                      torch.zeros(3, 2, dtype=torch.float64))


@needs_compiler
@pytest.mark.parametrize("name", ["nary", "childsum", "mtree"])
def test_native_results_do_not_depend_on_the_thread_count(restore_choices, name):
    """The level loops split each level's products over the threads: levels of hundreds of
    rows here, missing children (N-ary) and many children per node."""
    torch.manual_seed(0)
    if name == "nary":
        g = dgl.batch(random_batch(7, 60, max_children=2, words="leaves"))
        cell = build_cell("nary", 20, 150, n_ary=2)
    else:
        g = random_dependency_batch(7, 60)
        cell = build_cell(name, 20, 150, **({"num_relations": 5} if name == "mtree" else {}))
    assert int(torch.bincount(g.in_degrees()).shape[0]) > 2  # some node has 2+ children
    x = torch.randn(g.num_nodes(), 20)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _states_and_grads(cell, g, x, "on")
        torch.set_num_threads(2)
        two = _states_and_grads(cell, g, x, "on")
    finally:
        torch.set_num_threads(threads)
    # the native loops' h, c are bit-identical; mtree's relation table W_mr e_r is a torch
    # product before the loops, whose split over the threads may change its last bit
    exact = 0 if name != "mtree" else 1e-6
    torch.testing.assert_close(one[:2], two[:2], rtol=0, atol=exact)
    assert_same_run(one, two, tol=1e-6)  # input products are oneDNN's: splits may differ


# mtree and output_gate=False kernels
def _kernel_runs(cell, graph, x):
    """The cell's fast kernel applies (so the comparison is native against Python)."""
    from gnn_treelstm.engine.propagator import Propagator

    native.set_choice("on")
    return cell.level_kernel(Propagator("level", graph), x) is not None


@needs_compiler
@pytest.mark.parametrize("name,kw", [
    ("mtree", {"num_relations": 40, "rel_size": 100, "rel_init": "normal"}),
    ("mtree", {"num_relations": 40, "rel_size": 50, "m_size": 70}),
    ("mtree-full", {"num_relations": 40}),
    ("childsum", {"output_gate": False}),
])
def test_mtree_and_ungated_childsum_native_at_sick_sizes(restore_choices, name, kw):
    # h 150, x 300, 60 trees: a leaf level of hundreds of nodes, 40 relations; chains too
    torch.manual_seed(0)
    for g in (random_dependency_batch(3, 60, num_relations=40),
              dgl.batch([chain(n, seed=n) for n in (1, 2, 30)])):
        cell = build_cell(name, 300, 150, **kw)
        x = torch.randn(g.num_nodes(), 300)
        assert _kernel_runs(cell, g, x)
        assert_native_equals_python(cell, g, x, tol=5e-5)


@needs_compiler
@pytest.mark.parametrize("name,kw", [("nary", {}), ("nary", {"tie_forget": True}),
                                     ("nary", {"n_ary": 3}), ("bilstm2", {}), ("lstm", {})])
def test_ungated_nary_and_sequential_native_at_sst_sizes(restore_choices, name, kw):
    torch.manual_seed(0)
    if name == "nary":  # levels of hundreds of nodes and a missing left child
        trees = random_batch(5, 120, max_children=kw.get("n_ary", 2), words="leaves")
        trees.append(make_tree([1, -1], [3, -1], positions=[1, 0]))
        g = dgl.batch(trees)
    else:
        g = dgl.batch([chain(n, seed=n) for n in (1, 2, 17, 40)])
    cell = build_cell(name, 300, 150, output_gate=False, **kw)
    x = torch.randn(g.num_nodes(), 300)
    assert _kernel_runs(cell, g, x)
    assert_native_equals_python(cell, g, x, tol=5e-5)


# Teng & Zhang kernels ---------------------------------------------------------------------
# (csrc/teng_levels.cpp via engine/fused_teng.py: head lexicon, lex cell, top-down cell)
def _teng_kernel_runs(cell, graph, x, **kw):
    from gnn_treelstm.engine.propagator import Propagator

    native.set_choice("on")
    return cell.level_kernel(Propagator("level", graph), x, **kw) is not None


def _teng_trees(seed, count):
    """Binary constituency trees with unary nodes, a missing left child, a one-node tree."""
    trees = random_batch(seed, count, max_children=2, words="leaves")
    trees.append(make_tree([1, -1], [3, -1], positions=[1, 0]))  # only a right child
    trees.append(make_tree([-1], [4]))  # a lone leaf: root and leaf at once
    return dgl.batch(trees)


@needs_compiler
@pytest.mark.parametrize("name,kw", [
    ("lex", {}), ("lex", {"head": "average"}), ("lex", {"lexicalized": False}),
    ("topdown", {"tie_input": False}), ("topdown", {"head": "left"}), ("bitree", {}),
])
def test_teng_native_at_sst_sizes(restore_choices, name, kw):
    # h 150, x 300, 120 trees: levels of hundreds of nodes, unary nodes, missing children
    torch.manual_seed(0)
    g = _teng_trees(5, 120)
    cell = build_cell(name, 300, 150, **kw)
    x = torch.randn(g.num_nodes(), 300)
    assert _teng_kernel_runs(cell, g, x)
    assert_native_equals_python(cell, g, x, tol=5e-5)


@needs_compiler
@pytest.mark.parametrize("name", ["lex", "topdown"])
def test_teng_native_with_given_heads(restore_choices, name):
    # heads= (the bidirectional cell's sharing path): gradients reach the given heads
    torch.manual_seed(0)
    g = _teng_trees(1, 15)
    cell = build_cell(name, 7, 5, engine="level")
    x = torch.randn(g.num_nodes(), 7)
    out = {}
    for choice in ("off", "on"):
        native.set_choice(choice)
        heads = torch.randn(g.num_nodes(), 7, generator=torch.Generator().manual_seed(3))
        heads.requires_grad_(True)
        cell.zero_grad(set_to_none=True)
        h, c = cell(g, x, heads=heads)
        (h.sum() + 2 * c.sum()).backward()
        out[choice] = (h.detach(), c.detach(),
                       {"heads": heads.grad, **{n: p.grad for n, p in cell.named_parameters()
                                                if p.grad is not None}})
    assert _teng_kernel_runs(cell, g, x, heads=torch.zeros(g.num_nodes(), 7))
    assert_same_run(out["on"], out["off"], tol=1e-5)


# ------------------------------------------------------------------ fake kernels
@needs_compiler
def test_every_op_has_a_fake_kernel():
    """torch.compile traces the level kernels: every op runs on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert native.available()
    names = native.op_names()
    assert {"nary_forward", "childsum_forward", "mtree_forward", "teng_lex_forward",
            "matmul"} <= set(names)
    with FakeTensorMode():
        out = torch.ops.gnn_treelstm.matmul(torch.empty(3, 4), torch.empty(4, 5))
        assert out.shape == (3, 5)
    assert "level_schedule" in native.HOST_OPS
    for name in set(names) - native.HOST_OPS:
        op = getattr(torch.ops.gnn_treelstm, name).default
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta") or \
            torch._library.simple_registry.singleton.find(op.name()).fake_impl.kernel \
            is not None, name

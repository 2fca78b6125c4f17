"""One test over the whole cell registry: for every registry name and every option that
changes the math, the per-node reference (written from the paper's equations), the DGL
engine, the general level driver, the level engine's C++ kernel (where the cell names
one: ``cell.has_kernel``) and its Triton kernel (:data:`TRITON`, under triton's interpreter,
``TRITON_INTERPRET=1``) give the same node states and the same gradient of every parameter
and of ``x``, in float32 and float64.

A kernel that drifts from its cell's declaration fails here
(:func:`test_a_mutated_kernel_fails` shows the comparison catches a one-ulp-scale change).
The comparison is :func:`tests.cells.common.assert_engines_agree`, which
``tests/cells/test_write_a_cell.py`` also runs for the cell of docs/write-a-cell.md.
"""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.kernels import fused, fused_triton
from gnn_treelstm.kernels.count import OpCounter
from gnn_treelstm.kernels.host import use_path
from gnn_treelstm.trees.graph import NO_WORD, REL, WORD
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.cells.common import (
    TOL,
    H,
    X,
    assert_engines_agree,
    engine_runs,
    run_and_grads,
)
from tests.engine.compare import assert_same_run
from tests.handbuilt import chain, random_batch, random_dependency_batch
from tests.reference import tai, teng
from tests.reference.tran import tran_forward

R = 4


# ---------------------------------------------------------------- per-node references
def _tran(cell, g, x):
    src, dst = (t.tolist() for t in g.edges())
    parents, rels = [-1] * g.num_nodes(), [0] * g.num_nodes()
    for s, d, r in zip(src, dst, g.edata[REL].tolist()):
        parents[s], rels[s] = d, r
    return tran_forward(cell, parents, rels, x)


def _teng(ref):
    def run(cell, g, x):
        hs, cs, off = [], [], 0
        for gi in dgl.unbatch(g):
            n = gi.num_nodes()
            hd, cd = ref(cell, teng.tree_from_graph(gi), x[off:off + n])[:2]
            hs.append(teng.stack(hd, n))
            cs.append(teng.stack(cd, n))
            off += n
        return torch.cat(hs), torch.cat(cs)

    return run


def _mean(cell, g, x):
    """Subtree sums and means of the word vectors, node by node."""
    n = g.num_nodes()
    src, dst = (t.tolist() for t in g.edges())
    kids: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src, dst):
        kids[d].append(s)
    has = (g.ndata[WORD] != NO_WORD).tolist()
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def sums(j):
        if j not in memo:
            s = x[j] * float(has[j])
            cnt = torch.tensor(float(has[j]), dtype=x.dtype)
            for k in kids[j]:
                sk, ck = sums(k)
                s, cnt = s + sk, cnt + ck
            memo[j] = (s, cnt)
        return memo[j]

    out = [sums(j) for j in range(n)]
    s = torch.stack([a for a, _ in out])
    cnt = torch.stack([b for _, b in out]).unsqueeze(-1)
    return s / cnt.clamp(min=1.0), s


def _constituency():
    return dgl.batch(random_batch(3, 12, max_children=2, exact_children=True, words="leaves"))


def _nary3():
    return dgl.batch(random_batch(4, 12, max_children=3, words="leaves"))


def _chains():
    return dgl.batch([chain(n, seed=n) for n in (1, 2, 5, 9)])


def _dependency():
    return random_dependency_batch(5, 12, num_relations=R)


#: registry name -> (trees, reference, option sets that change the math)
CASES = {
    "childsum": (_dependency, tai.childsum, [{}, {"output_gate": False}]),
    "nary": (_constituency, tai.nary,
             [{}, {"output_gate": False}, {"tie_forget": True}]),
    "lstm": (_chains, tai.sequential, [{}, {"output_gate": False}]),
    "bilstm": (_chains, tai.sequential, [{}, {"output_gate": False},
                                         {"tie_directions": False}]),
    "lstm2": (_chains, tai.sequential, [{}, {"concat_layers": False}]),
    "bilstm2": (_chains, tai.sequential, [{}, {"output_gate": False},
                                          {"tie_directions": False}]),
    "mtree": (_dependency, _tran, [{"num_relations": R, "rel_size": 3},
                                   {"num_relations": R, "rel_size": 3, "m_size": 7}]),
    "mtree-add": (_dependency, _tran, [{"num_relations": R, "rel_size": 3}]),
    "mtree-full": (_dependency, _tran, [{"num_relations": R}]),
    "lex": (_constituency, _teng(teng.lex_reference),
            [{}, {"head": "left"}, {"head": "average"}, {"lexicalized": False}]),
    "topdown": (_constituency, _teng(teng.topdown_reference), [{}, {"tie_input": False}]),
    "bitree": (_constituency, _teng(teng.bitree_reference), [{}, {"head": "right"}]),
    "mean": (_dependency, _mean, [{}]),
}
EXTRA = {"nary": [({"n_ary": 3}, _nary3), ({"n_ary": 3, "tie_forget": True}, _nary3)]}


def test_every_registry_name_has_a_case():
    assert set(CASES) == set(cells.names())


def _params():
    out = []
    for name, (trees, ref, options) in CASES.items():
        for kw in options:
            out.append(pytest.param(name, kw, trees, ref, id=f"{name}{kw or ''}"))
        for kw, trees2 in EXTRA.get(name, []):
            out.append(pytest.param(name, kw, trees2, ref, id=f"{name}{kw}"))
    return out


@pytest.mark.parametrize("name,kw,trees,ref", _params())
def test_sentence_size_is_the_width_sentence_vector_returns(name, kw, trees, ref):
    """A cell's ``sentence_size`` (what the model sizes its head by, without running the
    cell) is the width of the rows its ``sentence_vector`` returns, for every option set;
    a cell without ``sentence_vector`` has ``out_size``."""
    cell = build_cell(name, X, H, **kw).eval()
    if not callable(getattr(cell, "sentence_vector", None)):
        assert cell.sentence_size == cell.out_size
        return
    g = trees()
    torch.manual_seed(0)
    with torch.no_grad():
        h, _ = cell(g, torch.randn(g.num_nodes(), X))
        s = cell.sentence_vector(g, h)
    assert s.shape == (g.batch_size, cell.sentence_size)


@pytest.mark.parametrize("name,kw,trees,ref", _params())
def test_runs_top_down_is_whether_the_cell_reads_the_top_down_levels(name, kw, trees, ref):
    """A cell's ``runs_top_down`` (whether the data loader builds its batches' top-down
    levels) is what it does, for every option set: a cell that says False runs on a
    schedule without them (and so do its C++ loops and general driver), one that says
    True asks for them."""
    g = trees()
    up_only = LevelSchedule.from_graph(g, top_down=False)
    torch.manual_seed(0)
    x = torch.randn(g.num_nodes(), X)
    for path in ("native", "general"):
        cell = build_cell(name, X, H, engine="level", **kw)
        with use_path(path):
            if cell.runs_top_down:
                with pytest.raises(ValueError, match="runs top-down"):
                    cell(g, x, schedule=up_only)
            else:
                h, _ = cell(g, x, schedule=up_only)
                want, _ = cell(g, x, schedule=LevelSchedule.from_graph(g))
                assert torch.equal(h, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw,trees,ref", _params())
def test_reference_dgl_level_and_fast_kernel_agree(name, kw, trees, ref, dtype):
    assert_engines_agree(name, kw, trees, ref, dtype)


#: the registry names whose level kernel has a Triton path
#: (:mod:`gnn_treelstm.kernels.fused_triton`) and the custom ops it runs
TRITON = {"nary": "nary", "lstm": "nary", "bilstm": "nary", "lstm2": "nary", "bilstm2": "nary",
          "childsum": "childsum", "mtree-add": "childsum", "mtree": "childsum",
          "mtree-full": "childsum", "lex": "lex", "topdown": "topdown",
          "bitree": "topdown"}


def _triton_params():
    return [p for p in _params() if p.values[0] in TRITON]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw,trees,ref", _triton_params())
def test_reference_and_triton_kernel_agree(name, kw, trees, ref, dtype):
    """The Triton kernels on CPU tensors (triton's interpreter): the reference's states and
    gradients, their forward and backward ops dispatched."""
    pytest.importorskip("triton")
    if not fused_triton.interpreted():
        pytest.skip("the Triton kernels run on CPU tensors only under TRITON_INTERPRET=1")
    g = trees()
    torch.manual_seed(2)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    torch.manual_seed(0)
    cell = build_cell(name, X, H, engine="level", **kw).to(dtype)
    torch.manual_seed(1)
    wh = torch.randn(g.num_nodes(), cell.out_size, dtype=dtype)
    wc = torch.randn(g.num_nodes(), cell.out_size, dtype=dtype)
    want = run_and_grads(cell, lambda gg, xx: ref(cell, gg, xx), g, x, wh, wc)
    fused_triton.set_choice("triton")
    try:
        with OpCounter() as count:
            got = run_and_grads(cell, cell, g, x, wh, wc)
    finally:
        fused_triton.set_choice(None)
    op = TRITON[name]
    assert count.ops[f"gnn_treelstm_triton::{op}_forward"] > 0, count.ops
    assert count.ops[f"gnn_treelstm_triton::{op}_backward"] > 0, count.ops
    assert_same_run(got, want, tol=TOL[dtype])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,kw,trees,ref", _params())
def test_cuda_equals_cpu(name, kw, trees, ref):
    """The level engine on CUDA (the Triton kernels where a cell has them and triton is
    installed), the graph left on the CPU (as the training loop runs it with a CPU-only DGL
    build): the CPU's node states and gradients."""
    g = trees()
    torch.manual_seed(2)
    x = torch.randn(g.num_nodes(), X)
    cell, wh, wc, out = engine_runs(name, kw, g, x, torch.float32)
    gpu = build_cell(name, X, H, engine="level", **kw)
    gpu.load_state_dict(cell.state_dict())
    gpu.cuda()
    h, c, grads = run_and_grads(gpu, gpu, g, x.cuda(), wh.cuda(), wc.cuda())
    assert h.is_cuda and c.is_cuda
    got = (h.cpu(), c.cpu(), {n: v.cpu() for n, v in grads.items()})
    assert_same_run(got, out["level"], tol=TOL[torch.float32])


def test_a_mutated_kernel_fails(monkeypatch):
    """The comparison has teeth: Child-Sum's fast kernel with its c off by 1e-4 fails."""
    if not fused.available(torch.zeros(1)):
        pytest.skip("the native level loops are not available here")
    real = fused.childsum_levels

    def mutated(*args):
        h, c = real(*args)
        return h, c + 1e-4

    monkeypatch.setattr(fused, "childsum_levels", mutated)
    with pytest.raises(AssertionError):
        assert_engines_agree("childsum", {}, _dependency, tai.childsum, torch.float32)


def test_a_named_kernel_that_does_not_run_fails(monkeypatch):
    """A cell that names a fast kernel (``has_kernel``) must run it where kernels apply."""
    if not fused.available(torch.zeros(1)):
        pytest.skip("the native level loops are not available here")
    from gnn_treelstm.cells.childsum import ChildSumTreeLSTM

    monkeypatch.setattr(ChildSumTreeLSTM, "level_kernel", lambda self, prop, x: None)
    with pytest.raises(AssertionError, match="no fast kernel applies"):
        assert_engines_agree("childsum", {}, _dependency, tai.childsum, torch.float32)


def test_has_kernel_is_whether_the_cell_overrides_level_kernel():
    class Plain(TreeCell):
        pass

    class Fast(Plain):
        def level_kernel(self, prop, x, **kwargs):
            return None

    assert not Plain(2, 2).has_kernel and Fast(2, 2).has_kernel
    without = {name for name, (_, _, options) in CASES.items()
               if not build_cell(name, X, H, **options[0]).has_kernel}
    assert without == {"mean"}  # no parameters, nothing to fuse


def test_gate_equations_live_in_cell_files_and_csrc_only():
    """A grep-able fact: no module outside ``cells/`` and the C++ and Triton loops applies a
    gate nonlinearity to cell state (the DGL-example anchor, a benchmark copy of DGL's own
    example, and the task heads are not cells)."""
    import re
    from pathlib import Path

    import gnn_treelstm

    root = Path(gnn_treelstm.__file__).parent
    call = re.compile(r"\b(torch\.|F\.)?(sigmoid|tanh)(_)?\(")
    allowed = {"commands/dgl_example.py", "tasks/inference.py", "tasks/relatedness.py",
               "kernels/triton_levels.py"}  # the Triton kernels, as the C++ loops in csrc/
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("cells/") or rel in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r"``[^`]*``", "", line.split("#", 1)[0])
            if call.search(code):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "gate math outside the cell files:\n" + "\n".join(offenders)

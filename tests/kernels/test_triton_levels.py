"""The Triton level kernels compile for a CUDA GPU (sm_90, to PTX; no GPU needed), in
float32 and float64, for each variant the level engine launches: a kernel that only the
interpreter has run could still fail to compile on its first GPU contact."""

from __future__ import annotations

import inspect

import pytest

triton = pytest.importorskip("triton")

from gnn_treelstm.kernels import fused_triton  # noqa: E402

if fused_triton.interpreted():
    pytest.skip("this process runs triton's interpreter (TRITON_INTERPRET=1), which does not "
                "compile", allow_module_level=True)

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from gnn_treelstm.kernels import triton_levels as tk  # noqa: E402

#: pointer arguments that hold int64 indices (the rest hold states of the dtype)
INDEX_POINTERS = ("slots_ptr", "par_ptr", "pos_ptr", "estart_ptr", "esrc_ptr", "edst_ptr",
                  "pe_ptr", "rel_ptr", "side_ptr", "kids_ptr")


def _signature(fn, consts: dict, dtype: str) -> dict:
    out = {}
    for name in inspect.signature(fn.fn).parameters:
        if name in consts:
            out[name] = "constexpr"
        elif name.endswith("_ptr"):
            out[name] = "*i64" if name in INDEX_POINTERS else f"*{dtype}"
        else:
            out[name] = "i32"
    return out


#: the most shared memory one block may use on an sm_90 GPU (227 KiB)
SM90_SHARED = 227 * 1024

CASES = [
    # the level's product inside, 16 columns at a time (fused_triton._dot_blocks)
    (tk.nary_forward, {"G": 3, "K": 2, "CK": 16}),
    (tk.nary_backward, {"G": 3, "K": 2, "CK": 16}),
    (tk.nary_forward, {"G": 2, "K": 1, "CK": 16}),
    (tk.nary_backward, {"G": 2, "K": 1, "CK": 16}),
    # the edges' products inside (FUSE) or given, 32 columns a program
    # (fused_triton.CHILDSUM_GPU_COLUMNS)
    (tk.childsum_forward, {"G": 3, "R": 1, "FUSE": 1, "BN": 32, "CK": 16}),
    (tk.childsum_backward, {"G": 3, "R": 1, "FUSE": 1, "BN": 32, "CK": 16}),
    (tk.childsum_forward, {"G": 2, "R": 4, "FUSE": 0, "BN": 32, "CK": 16}),
    (tk.childsum_backward, {"G": 2, "R": 4, "FUSE": 0, "BN": 32, "CK": 16}),
    (tk.childsum_backward, {"G": 3, "R": 1, "FUSE": 0, "BN": 32, "CK": 16}),
    # whole rows of h = 150 (the papers' size), x = 300 in 64-column steps (the GPU's
    # blocks, fused_triton._row_blocks), gate and given head lexicons
    (tk.lex_forward, {"MODE": 0, "BH": 256, "BX": 64, "CK": 16}),
    (tk.lex_backward, {"MODE": 0, "XO": 1, "BH": 256, "BX": 64, "CK": 16}),
    (tk.lex_forward, {"MODE": 4, "BH": 256, "BX": 64, "CK": 16}),
    (tk.lex_backward, {"MODE": 4, "XO": 0, "BH": 256, "BX": 64, "CK": 16}),
    (tk.head_forward, {"MODE": 0, "BX": 64}), (tk.head_backward, {"MODE": 0, "BX": 64}),
    (tk.head_forward, {"MODE": 3, "BX": 64}), (tk.head_backward, {"MODE": 3, "BX": 64}),
    (tk.topdown_forward, {"S": 2, "BH": 256, "CK": 16}),
    (tk.topdown_backward, {"BH": 256, "CK": 16}),
]


def _source(fn, consts: dict, dtype: str) -> ASTSource:
    signature = _signature(fn, consts, dtype)
    if "constexprs" in inspect.signature(ASTSource).parameters:
        return ASTSource(fn=fn, signature=signature, constexprs=consts)
    # triton 3.0 (torch 2.4's): the constants apart, the signature without them
    return ASTSource(fn=fn, signature={k: v for k, v in signature.items() if v != "constexpr"},
                     constants=consts)


def _cases():
    """Each kernel in each dtype; the kernels with a product inside (``CK`` columns of the
    peephole matrix at a time: ``tl.dot``) need a triton whose ``tl.dot`` takes float64."""
    for fn, consts in CASES:
        name = f"{fn.fn.__name__}-{'-'.join(f'{k}{v}' for k, v in consts.items())}"
        for dtype in ("fp32", "fp64"):
            marks = [pytest.mark.needs("triton-fp64-dot")] if (
                dtype == "fp64" and "CK" in consts) else []
            yield pytest.param(fn, consts, dtype, id=f"{dtype}-{name}", marks=marks)


@pytest.mark.parametrize("fn,consts,dtype", list(_cases()))
def test_the_kernel_compiles_for_a_cuda_gpu(fn, consts, dtype):
    params = inspect.signature(fn.fn).parameters
    consts = {k: v for k, v in {"BM": 16, "BN": 64, **consts}.items() if k in params}
    name = fn.fn.__name__  # the GPU's launch options (warps, stages), as fused_triton's
    options = fused_triton._gpu_options(name, True) if name in fused_triton.GPU_WARPS else {}
    kernel = triton.compile(_source(fn, consts, dtype), target=GPUTarget("cuda", 90, 32),
                            options=options)
    assert ".entry " + fn.fn.__name__ in kernel.asm["ptx"]
    assert kernel.metadata.shared <= SM90_SHARED, kernel.metadata.shared

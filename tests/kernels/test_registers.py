"""``scripts/registers.py``: the Triton level kernels compiled for sm_90 on this CPU machine
(``triton.compile`` and the ``ptxas`` Triton ships), their registers and spills read from
``ptxas -v``. CI runs the script for every cell with ``--fail-on-spill``; here one cell."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.scripts import load_script

triton = pytest.importorskip("triton")


def _ptxas() -> str | None:
    """The ptxas the script would run, or None where this triton lacks what the script uses
    (its CUDA backend and ptxas; the binder and argument packing of triton 3.9's
    ``JITFunction``, which the script drives as a launch does)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: F401

        if not hasattr(JITFunction, "_pack_args"):
            return None
        return get_ptxas(90).path
    except Exception:  # no CUDA backend in this triton build, no ptxas, an older triton
        return None


PTXAS = _ptxas()
pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="the kernels are compiled here, not interpreted"),
    pytest.mark.skipif(PTXAS is None or not shutil.which(PTXAS),
                       reason="this triton lacks its CUDA backend, its ptxas or the launch "
                       "internals the script drives (triton 3.9's)"),
]


def test_the_nary_kernels_compile_for_sm90_without_spilling(tmp_path: Path, capsys):
    out = tmp_path / "registers.json"
    rc = load_script("registers").main(["--cells", "nary", "--json", str(out),
                                        "--fail-on-spill"])
    rows = json.loads(out.read_text())["rows"]
    assert rc == 0, capsys.readouterr().out
    assert {r["kernel"] for r in rows} == {"nary_forward", "nary_backward"}
    assert all(0 < r["registers"] <= 255 and r["spill_stores"] == 0 for r in rows), rows
    assert "| nary_forward | nary |" in capsys.readouterr().out


def test_the_ptxas_log_is_read_or_refused():
    report = load_script("registers")._ptxas_report
    log = ("ptxas info    : Function properties for k\n    8 bytes stack frame, 4 bytes spill "
           "stores, 12 bytes spill loads\nptxas info    : Used 255 registers, used 1 barriers")
    assert report(log) == {"registers": 255, "spill_stores": 4, "spill_loads": 12}
    with pytest.raises(RuntimeError, match="registers"):
        report("ptxas fatal   : Unsupported .version")

"""The DGL import workaround: needed here, harmless where DGL works natively."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gnn_treelstm
from gnn_treelstm import _dgl_compat

COMPAT = Path(_dgl_compat.__file__)


def _run(code: str, pythonpath: Path | None = None) -> str:
    env = None
    if pythonpath is not None:
        import os

        env = dict(os.environ, PYTHONPATH=str(pythonpath))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_gnn_treelstm_then_dgl_works():
    out = _run("""
        import gnn_treelstm, dgl, torch
        g = dgl.graph(([0, 1], [2, 2]))
        print(dgl.__version__, g.num_edges())
    """)
    assert out.endswith(" 2")


def test_graphbolt_standin_matches_library_presence():
    lib = _dgl_compat.graphbolt_library_path()
    assert lib is not None
    if lib.exists():
        pytest.skip("this DGL ships graphbolt for the running torch")
    assert "graphbolt" in _dgl_compat.PATCHES
    import dgl

    assert isinstance(sys.modules["dgl.graphbolt"], _dgl_compat.GraphboltUnavailable)
    with pytest.raises(_dgl_compat.GraphboltUnavailableError,
                       match="graphbolt.*unavailable.*torch"):
        dgl.graphbolt.ItemSampler  # noqa: B018
    assert not hasattr(dgl.graphbolt, "torch")  # probes (pickle.whichmodule) see no name


def test_standin_is_a_quiet_module_for_dunder_lookups():
    stub = _dgl_compat.GraphboltUnavailable("reason")
    assert not hasattr(stub, "__wrapped__")
    assert stub.__name__ == "dgl.graphbolt"


def _fake_site(tmp_path: Path, *, native: bool) -> Path:
    """A fake site dir: a dgl package (with or without a graphbolt library for this torch),
    torchdata.datapipes, and setuptools.extern.packaging when ``native``."""
    import torch

    ver = torch.__version__.split("+")[0]
    (tmp_path / "dgl" / "graphbolt").mkdir(parents=True)
    (tmp_path / "dgl" / "__init__.py").write_text("")
    if native:
        (tmp_path / "dgl" / "graphbolt" / f"libgraphbolt_pytorch_{ver}.so").write_text("")
        (tmp_path / "torchdata" / "datapipes").mkdir(parents=True)
        (tmp_path / "torchdata" / "__init__.py").write_text("")
        (tmp_path / "torchdata" / "datapipes" / "__init__.py").write_text("")
        (tmp_path / "setuptools" / "extern" / "packaging").mkdir(parents=True)
        for d in ("setuptools", "setuptools/extern", "setuptools/extern/packaging"):
            (tmp_path / d / "__init__.py").write_text("")
    return tmp_path


LOAD = f"""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("compat_under_test", {str(COMPAT)!r})
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    print(sorted(mod.PATCHES), type(sys.modules.get("dgl.graphbolt")).__name__)
"""


def test_noop_when_dgl_works_natively(tmp_path):
    out = _run(LOAD, _fake_site(tmp_path, native=True))
    assert out == "[] NoneType"


def test_patches_when_library_missing(tmp_path):
    out = _run(LOAD, _fake_site(tmp_path, native=False))
    assert out == "['graphbolt', 'setuptools.extern.packaging'] GraphboltUnavailable"


def test_setuptools_alias_points_to_packaging():
    if "setuptools.extern.packaging" not in _dgl_compat.PATCHES:
        pytest.skip("setuptools still vendors packaging here")
    import packaging

    assert sys.modules["setuptools.extern.packaging"] is packaging
    from setuptools.extern.packaging import version  # the import dgl.utils falls back to

    assert version.Version("1.2") > version.Version("1.1")


def test_apply_is_idempotent():
    before = list(_dgl_compat.PATCHES)
    assert _dgl_compat.apply() == before
    assert gnn_treelstm.__version__

"""The DGL import workaround: needed here, harmless where DGL works natively, and in place
whichever of ``dgl`` and ``gnn_treelstm`` a program imports first."""

import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gnn_treelstm
from gnn_treelstm import _dgl_compat, _dgl_hook

COMPAT = Path(_dgl_compat.__file__)
HOOK = Path(_dgl_hook.__file__)
REINSTALL = "the start-up hook is not installed here: reinstall (make install, or pip install -e .)"


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

    _dgl_compat.attach()  # what importing gnn_treelstm.trees.graph does after import dgl
    assert isinstance(sys.modules["dgl.graphbolt"], _dgl_compat.GraphboltUnavailable)
    with pytest.raises(_dgl_compat.GraphboltUnavailableError,
                       match="graphbolt.*unavailable.*torch"):
        dgl.graphbolt.ItemSampler  # noqa: B018
    assert not hasattr(dgl.graphbolt, "torch")  # probes (pickle.whichmodule) see no name


def test_graphbolt_as_an_attribute_of_a_freshly_imported_dgl_says_why():
    """``import gnn_treelstm; import dgl``, then ``dgl.graphbolt.X`` with nothing of the
    package's graph code imported: the stand-in's reason, not a bare AttributeError."""
    lib = _dgl_compat.graphbolt_library_path()
    if lib is not None and lib.exists():
        pytest.skip("this DGL ships graphbolt for the running torch")
    out = _run("""
        import sys
        import gnn_treelstm, dgl
        assert "gnn_treelstm.trees.graph" not in sys.modules
        try:
            dgl.graphbolt.ItemSampler
        except AttributeError as exc:
            print(type(exc).__name__, exc)
        print(any(type(f).__name__ == "_AttachAfterDglImport" for f in sys.meta_path))
    """)
    assert out.startswith("GraphboltUnavailableError dgl.graphbolt.ItemSampler is unavailable")
    assert out.endswith("False")  # the one-shot finder left sys.meta_path


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


# ---- import dgl first: the start-up hook (gnn_treelstm/_dgl_hook.py) -----------------------

#: prints the hooks in sys.meta_path and the modules of note already loaded
STATE = ("([type(f).__name__ for f in sys.meta_path if getattr(f, 'is_gnn_treelstm_dgl_hook', 0)],"
         " sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'dgl', 'gnn_treelstm')))")


def test_startup_file_is_installed_and_loads_nothing_heavy():
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    files = [Path(d) / _dgl_hook.PTH_FILE for d in dirs if (Path(d) / _dgl_hook.PTH_FILE).exists()]
    assert files, f"{REINSTALL}: no {_dgl_hook.PTH_FILE} in {dirs}"
    lines = [ln for ln in files[0].read_text(encoding="utf-8").splitlines()
             if ln and not ln.startswith("#")]
    assert lines == [_dgl_hook.PTH_LINE], REINSTALL
    out = _run(f"import sys; print({STATE})")
    assert out == "(['DglImportHook'], [])", out  # one hook; no torch, dgl or gnn_treelstm yet


def test_import_dgl_first_then_train_a_cell():
    out = _run(f"""
        import sys
        print({STATE}[0])
        import dgl
        print({STATE}[0], type(sys.modules["dgl.graphbolt"]).__name__)
        import torch
        import gnn_treelstm

        tree = gnn_treelstm.make_tree(parents=[2, 2, -1], words=[0, 1, -1])
        cell = gnn_treelstm.build_cell("childsum", 4, 6)
        h, c = cell(dgl.batch([tree, tree]), torch.randn(6, 4))
        h.sum().backward()
        print(tuple(h.shape), all(p.grad is not None for p in cell.parameters()))
    """)
    lib = _dgl_compat.graphbolt_library_path()
    graphbolt = "module" if lib is not None and lib.exists() else "GraphboltUnavailable"
    assert out.splitlines() == ["['DglImportHook']", f"[] {graphbolt}", "(6, 6) True"], out


def test_import_gnn_treelstm_first_removes_the_hook():
    out = _run(f"import sys; import gnn_treelstm; print({STATE}[0])")
    assert out == "[]"


#: load the hook from its file (as the start-up line does), install it, import dgl
HOOK_FIRST = f"""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("hook_under_test", {str(HOOK)!r})
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    hook.install()
    assert len(hook.installed()) == 1, sys.meta_path
    import dgl
    compat = sys.modules["gnn_treelstm._dgl_compat"]
    print(sorted(compat.PATCHES), type(sys.modules.get("dgl.graphbolt")).__name__,
          len(hook.installed()))
"""


def test_hook_leaves_a_natively_working_dgl_alone(tmp_path):
    out = _run(HOOK_FIRST, _fake_site(tmp_path, native=True))
    assert out == "[] NoneType 0"


def test_hook_patches_dgl_imported_first_where_it_is_broken(tmp_path):
    out = _run(HOOK_FIRST, _fake_site(tmp_path, native=False))
    assert out == "['graphbolt', 'setuptools.extern.packaging'] GraphboltUnavailable 0"


def test_hook_removes_itself_and_hands_on_the_real_spec():
    hook = _dgl_hook.DglImportHook()
    sys.meta_path.insert(0, hook)
    try:
        assert hook.find_spec("numpy") is None
        assert hook in sys.meta_path  # other imports pass it by
        spec = hook.find_spec("dgl")
        assert hook not in sys.meta_path
        assert spec is not None and spec.name == "dgl" and spec.origin.endswith("__init__.py")
        assert not _dgl_hook.installed()
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)


def test_install_is_idempotent_and_skips_an_imported_dgl():
    import dgl  # noqa: F401

    _dgl_hook.install()  # dgl is loaded: nothing left to fix before it
    assert not _dgl_hook.installed()
    hooks = [_dgl_hook.DglImportHook(), _dgl_hook.DglImportHook()]
    sys.meta_path[:0] = hooks
    _dgl_hook.uninstall()
    _dgl_hook.uninstall()
    assert not _dgl_hook.installed() and not any(h in sys.meta_path for h in hooks)


# ---- attribute access and a fresh home directory ---------------------------------------------


def _fresh_home_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a first run: an empty home directory, no backend chosen for DGL."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DGLBACKEND", "DGLDEFAULTDIR")}
    (tmp_path / "home").mkdir()
    env.update(HOME=str(tmp_path / "home"), GNN_TREELSTM_CACHE=str(tmp_path / "cache"))
    return env


def test_import_dgl_then_graphbolt_attribute_says_why():
    """``import dgl; dgl.graphbolt.X`` alone, the start-up hook's path: the stand-in's
    reason, not ``module 'dgl' has no attribute 'graphbolt'``; dgl is loaded once, by its
    own loader."""
    lib = _dgl_compat.graphbolt_library_path()
    if lib is not None and lib.exists():
        pytest.skip("this DGL ships graphbolt for the running torch")
    out = _run("""
        import sys
        import dgl
        try:
            dgl.graphbolt.ItemSet
        except AttributeError as exc:
            print(type(exc).__name__, exc)
        print(type(dgl.__loader__).__name__ != "_AttachLoader",
              any(type(f).__name__ == "_AttachAfterDglImport" for f in sys.meta_path))
    """)
    assert out.startswith("GraphboltUnavailableError dgl.graphbolt.ItemSet is unavailable"), out
    assert out.endswith("True False"), out


def test_a_look_up_of_dgl_before_its_import_keeps_the_attribute():
    """``importlib.util.find_spec("dgl")`` (the compat check makes one too) before
    ``import dgl`` does not use up the finder that attaches the stand-in."""
    lib = _dgl_compat.graphbolt_library_path()
    if lib is not None and lib.exists():
        pytest.skip("this DGL ships graphbolt for the running torch")
    out = _run("""
        import importlib.util
        import gnn_treelstm
        importlib.util.find_spec("dgl")
        import dgl
        print(type(dgl.graphbolt).__name__)
    """)
    assert out == "GraphboltUnavailable", out


BACKEND_MESSAGE = ("backend not selected", "Setting the default backend")


def test_readme_example_on_a_fresh_home_prints_no_backend_message(tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    proc = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                          env=_fresh_home_env(tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    assert not any(m in said for m in BACKEND_MESSAGE), said
    assert not (tmp_path / "home" / ".dgl").exists()  # nothing written into the home either


def test_cli_on_a_fresh_home_prints_no_backend_message(tmp_path):
    """``gnn-treelstm build`` (it loads DGL to save graphs) on a first run: no DGL message."""
    from gnn_treelstm.training.data import SAMPLE_SRC

    env = _fresh_home_env(tmp_path)
    cli = [sys.executable, "-m", "gnn_treelstm"]
    said = ""
    for args in (["fetch", "--from", str(SAMPLE_SRC), "--dest", "raw", "--datasets", "sst",
                  "--quiet"], ["build", "--dataset", "sst", "--src", "raw", "--out", "built"]):
        proc = subprocess.run([*cli, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stderr
        said += proc.stdout + proc.stderr
    assert _run("import gnn_treelstm.datasets.build, sys; print('dgl' in sys.modules)") == "True"
    assert not any(m in said for m in BACKEND_MESSAGE), said
    assert not (tmp_path / "home" / ".dgl").exists()


def test_a_chosen_backend_is_kept(tmp_path):
    env = _fresh_home_env(tmp_path)
    (tmp_path / "home" / ".dgl").mkdir()
    (tmp_path / "home" / ".dgl" / "config.json").write_text('{"backend": "pytorch"}')
    code = ("import os, gnn_treelstm; from gnn_treelstm import _dgl_compat; "
            "print(os.environ.get('DGLBACKEND'), 'DGLBACKEND' in _dgl_compat.PATCHES)")
    for extra, expected in (({}, "None False"), ({"DGLBACKEND": "mxnet"}, "mxnet False")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**env, **extra}, timeout=120)
        assert proc.stdout.strip() == expected, proc.stderr

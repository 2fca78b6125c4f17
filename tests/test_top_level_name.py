"""A ``data_prep.py`` of the user's in the working directory changes nothing: no module of
the package imports the checkout's top-level ``data_prep`` (the readers, parsers and build
are :mod:`gnn_treelstm.datasets`, word vectors :mod:`gnn_treelstm.trees.vectors`), the wheel
does not install it, and ``python -m gnn_treelstm`` does not look for modules in the working
directory when the package is installed elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gnn_treelstm.kernels import native
from tests.test_imports import import_graph
from tests.test_readme import PYTHON_BLOCKS

REPO = Path(__file__).resolve().parent.parent
STRAY = "raise ImportError('the user data_prep.py was imported')\n"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    return env


def _stray_dir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "data_prep.py").write_text(STRAY)
    return work


def test_the_readme_example_runs_beside_a_stray_data_prep(tmp_path):
    work = _stray_dir(tmp_path)
    script = work / "example.py"
    script.write_text(PYTHON_BLOCKS[0] + "\nimport sys\n"
                      "assert 'data_prep' not in sys.modules, sorted(sys.modules)\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_stray_file_would_break_an_import_of_data_prep(tmp_path):
    """What the test above guards against: in that directory ``import data_prep`` is the
    user's file."""
    work = _stray_dir(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import data_prep"], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "the user data_prep.py was imported" in proc.stderr


def test_python_m_demo_runs_beside_a_stray_data_prep(tmp_path):
    work = _stray_dir(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    if native.available():  # the C++ loops built once for the tests (two minutes), not again
        lib = native.build()
        shutil.copy2(lib, cache / lib.name)
    env = _env() | {"GNN_TREELSTM_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "gnn_treelstm", "demo", "--epochs", "1",
                           "--hidden", "8"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[4/4] test" in proc.stdout
    assert (work / "runs" / "demo" / "best.pt").is_file()


def test_no_module_of_the_package_imports_data_prep():
    graph = import_graph()
    users = {m: sorted(d for d in deps if d.split(".")[0] == "data_prep")
             for m, deps in graph.items() if m.startswith("gnn_treelstm")}
    assert not {m: d for m, d in users.items() if d}, users
    assert graph["data_prep.build"] == {"gnn_treelstm", "gnn_treelstm.commands",
                                        "gnn_treelstm.commands.build"}  # the check sees


def test_the_wheel_installs_only_gnn_treelstm():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport pytest depends on there
        import tomli as tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["gnn_treelstm*"]


def test_the_checkout_entry_points_run_the_commands():
    for command in ("build", "fetch"):
        proc = subprocess.run([sys.executable, "-m", f"data_prep.{command}", "--help"],
                              cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith(f"usage: gnn-treelstm {command}"), proc.stdout[:200]

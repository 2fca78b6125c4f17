"""pyproject.toml and environment.yml install the same package set."""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_norm(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    pip_lines = []
    in_pip = False
    for line in (REPO / "environment.yml").read_text().splitlines():
        if line.strip() == "- pip:":
            in_pip = True
            continue
        if in_pip:
            m = re.match(r"\s+- (.+)$", line)
            if not m:
                break
            pip_lines.append(m.group(1).split(" #")[0].strip())
    got = {_norm(x) for x in pip_lines if x != "-e ."}
    assert got == wanted, f"pyproject only: {wanted - got}; environment.yml only: {got - wanted}"
    assert "-e ." in pip_lines


def test_torch_is_pinned():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]
    assert "dgl==2.1.0" in project["dependencies"]

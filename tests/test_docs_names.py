"""The pages name what exists: every ``gnn_treelstm.x.y`` a page writes imports, every
public name of the package is on some page, and the install page's import order agrees
with the README's (either order, except where the start-up file does not run)."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import gnn_treelstm

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
DOTTED = re.compile(r"`(gnn_treelstm(?:\.\w+)+)")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
                if isinstance(obj, types.ModuleType):
                    return False  # a module reached as an attribute: its path does not import
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_name_on_a_page_imports():
    bad = [(p.name, m.group(1)) for p in PAGES for m in DOTTED.finditer(p.read_text())
           if not _resolves(m.group(1))]
    assert not bad, f"names on the pages that do not import: {bad}"


def test_the_check_catches_a_wrong_module_path():
    assert not _resolves("gnn_treelstm.drawing.to_networkx")
    assert _resolves("gnn_treelstm.trees.drawing.to_networkx")


def test_every_public_name_is_on_a_page():
    text = "\n".join(p.read_text() for p in PAGES)
    missing = [n for n in gnn_treelstm._LAZY if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert not missing, f"public names no page mentions: {missing}"


def test_install_page_tells_the_import_order_of_the_readme():
    page = (REPO / "docs" / "install.md").read_text()
    assert "So import `gnn_treelstm` first" not in page
    assert "may come in either order" in page
    first = [s for s in re.split(r"(?<=\.)\s", page) if "must" in s and "before `dgl`" in s]
    assert first and "-S" in first[0] and "--target" in first[0], first


def test_the_readme_says_how_to_reach_the_commands_after_make_install():
    readme = (REPO / "README.md").read_text()
    first_command = readme.index("gnn-treelstm demo")
    activate = readme.find("source .venv/bin/activate")
    assert 0 <= activate < first_command, "activate .venv before the first gnn-treelstm command"
    assert "make demo" in readme[:first_command]

"""The package's layout: every module imports, no import cycle anywhere, folders by job, and
library code never imports a command line.

The import graph is read from each file's ``ast`` and holds **every** ``import`` / ``from``
statement of a module: at module level, under ``if TYPE_CHECKING:``, and inside functions
(an import inside a function that closes a circle is still a circle, only a later one).
``from package import name`` counts ``package.name`` when that is a module, and importing a
module counts the packages it sits in (Python runs their ``__init__`` first), except the
importer's own packages, which Python has already started loading.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import data_prep
import gnn_treelstm

PACKAGE = Path(gnn_treelstm.__file__).resolve().parent
PACKAGES = {"gnn_treelstm": PACKAGE, "data_prep": Path(data_prep.__file__).resolve().parent}

#: at most this many modules at the top level of gnn_treelstm/ (folders hold the rest)
MAX_TOP_LEVEL = 10

#: the command-line package; ``__main__`` modules and the checkout's ``data_prep`` entry
#: points are command lines too
COMMANDS = "gnn_treelstm.commands"


def _modules(package) -> list[str]:
    names = [package.__name__]
    names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(names)


def _source(module: str) -> tuple[Path, bool]:
    """The file of ``module`` and whether it is a package."""
    top, *rest = module.split(".")
    rel = Path(*rest) if rest else Path()
    init = PACKAGES[top] / rel / "__init__.py"
    return (init, True) if init.exists() else (PACKAGES[top] / rel.with_suffix(".py"), False)


def _imports(module: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``module``, wherever it stands."""
    path, _ = _source(module)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _targets(module: str, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The ``known`` modules an import statement in ``module`` loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            _, is_pkg = _source(module)
            parts = module.split(".")
            anchor = parts if is_pkg else parts[:-1]
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a submodule loads its packages too
            prefix = ".".join(parts[:i])
            if prefix in known:
                out.add(prefix)
    own_packages = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    return out - own_packages - {module}


def _known() -> set[str]:
    return set(_modules(gnn_treelstm)) | set(_modules(data_prep))


def import_graph() -> dict[str, set[str]]:
    """``{module: the gnn_treelstm / data_prep modules any of its imports loads}``."""
    known = _known()
    return {m: set().union(set(), *(_targets(m, n, known) for n in _imports(m)))
            for m in sorted(known)}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cycle_path(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """One cycle through ``component``'s first module, as ``[a, b, ..., a]``."""
    start = min(component)
    path, seen = [start], {start}

    def walk(v: str) -> bool:
        for w in sorted(graph[v] & component):
            if w == start:
                path.append(w)
                return True
            if w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return path


def is_command(module: str) -> bool:
    return (module == COMMANDS or module.startswith(COMMANDS + ".")
            or module.endswith(".__main__") or module.split(".")[0] == "data_prep")


@pytest.mark.parametrize("module", _modules(gnn_treelstm) + _modules(data_prep))
def test_every_module_imports(module):
    importlib.import_module(module)


def test_the_graph_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The checks below must be able to fail: imports inside functions, under
    ``TYPE_CHECKING`` and relative ones are all edges."""
    pkg = tmp_path / "toypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from toypkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from . import c\n")
    (pkg / "c.py").write_text("from .a import f\n")
    monkeypatch.setitem(PACKAGES, "toypkg", pkg)
    known = {"toypkg", "toypkg.a", "toypkg.b", "toypkg.c"}
    graph = {m: set().union(set(), *(_targets(m, n, known) for n in _imports(m)))
             for m in sorted(known)}
    assert graph["toypkg.a"] == {"toypkg.b"}
    assert graph["toypkg.b"] == {"toypkg.c"}
    assert graph["toypkg.c"] == {"toypkg.a"}
    assert cycles(graph) == [frozenset({"toypkg.a", "toypkg.b", "toypkg.c"})]
    assert cycle_path(graph, cycles(graph)[0]) == ["toypkg.a", "toypkg.b", "toypkg.c",
                                                    "toypkg.a"]
    real = import_graph()
    assert "gnn_treelstm.training.config" in real["gnn_treelstm.training.trainer"]
    assert "gnn_treelstm.commands.heap" in real["gnn_treelstm.commands.train"]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" -> ".join(cycle_path(graph, c))
                                                    for c in found)


def test_library_code_never_imports_a_command_module():
    graph = import_graph()
    bad = {m: sorted(filter(is_command, deps)) for m, deps in graph.items()
           if not is_command(m) and any(map(is_command, deps))}
    assert not bad, f"library modules importing command modules: {bad}"
    assert any(map(is_command, graph["gnn_treelstm.analyze.__main__"]))  # the check sees


def test_the_top_level_is_small_and_every_folder_says_its_job():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules at the top level: {top}"
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 5, f"{init}: no docstring naming the package's job"


def test_process_wide_settings_stay_in_the_command_lines():
    graph = import_graph()
    for setting in ("heap", "denormals"):
        users = {m for m, deps in graph.items() if f"{COMMANDS}.{setting}" in deps}
        assert users and all(map(is_command, users)), (setting, users)
    calls = [p for p in PACKAGE.rglob("*.py") if "set_flush_denormal(" in p.read_text()
             and p.parent.name != "commands"]
    assert not calls, f"library modules setting the CPU's denormal mode: {calls}"


def floors(design: str | None = None) -> dict[str, int]:
    """``{top-level module or folder of gnn_treelstm: its floor}`` from the ```` ```floors ````
    block of ``docs/design.md`` (bottom first); ``base`` names the top-level modules."""
    text = design if design is not None else (
        PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("```floors\n", 1)[1].split("```", 1)[0]
    out: dict[str, int] = {"": 0}
    for i, line in enumerate(filter(None, map(str.strip, block.splitlines()))):
        names = line.split(":", 1)[1].split() if line.startswith("base:") else [line]
        out.update({name: i for name in names})
    return out


def floor_of(module: str, levels: dict[str, int]) -> int:
    parts = module.split(".")
    if parts[0] != "gnn_treelstm":
        raise KeyError(module)
    return levels[parts[1] if len(parts) > 1 else ""]


def upward_imports(graph: dict[str, set[str]], levels: dict[str, int]) -> list[str]:
    """``importer -> imported`` for every import from a lower floor to a higher one, command
    lines (``__main__``, ``data_prep``) aside."""
    out = []
    for module, deps in sorted(graph.items()):
        if module.endswith(".__main__") or not module.startswith("gnn_treelstm"):
            continue
        for dep in sorted(deps):
            if dep.startswith("gnn_treelstm") and floor_of(dep, levels) > floor_of(module,
                                                                                  levels):
                out.append(f"{module} -> {dep}")
    return out


def test_every_folder_and_top_level_module_has_a_floor():
    levels = floors()
    names = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    names |= {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert names - set(levels) == set(), "give these a floor in docs/design.md"
    assert set(levels) - names - {""} == set(), "floors naming nothing in the package"


def test_no_import_runs_up_the_floors():
    found = upward_imports(import_graph(), floors())
    assert not found, "imports from a lower floor to a higher one:\n" + "\n".join(found)


def test_the_floor_check_sees_an_upward_import():
    levels = floors("```floors\nbase: files\ntrees\nengine\n```")
    assert levels == {"": 0, "files": 0, "trees": 1, "engine": 2}
    graph = {"gnn_treelstm.trees.data": {"gnn_treelstm.engine.level", "gnn_treelstm.files"},
             "gnn_treelstm.engine.level": {"gnn_treelstm.trees.graph"},
             "gnn_treelstm.engine.__main__": {"gnn_treelstm.commands"}}
    assert upward_imports(graph, levels) == [
        "gnn_treelstm.trees.data -> gnn_treelstm.engine.level"]

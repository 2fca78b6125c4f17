"""Fingerprints of the modules of a model's math (``config.json``'s ``code``)."""

import pytest

from gnn_treelstm.cells import cells
from gnn_treelstm.registry import UnknownNameError
from gnn_treelstm.tasks import tasks
from gnn_treelstm.training import provenance as P

CODE = '''"""A module."""
def f(x):
    """Double it."""
    return 2 * x  # twice
'''


def test_a_fingerprint_ignores_docstrings_comments_and_layout_not_code():
    same = '"""Another docstring."""\n\n\ndef f(x):\n    return 2*x\n'
    assert P.fingerprint(CODE) == P.fingerprint(same)
    assert P.fingerprint(CODE) != P.fingerprint(CODE.replace("2 * x", "3 * x"))
    assert P.fingerprint(CODE) != P.fingerprint(CODE.replace("return 2 * x", "return 2 + x"))
    # a function that is only a docstring equals one that is only `pass`, not an empty module
    assert P.fingerprint('def g():\n    """Doc."""\n') == P.fingerprint("def g():\n    pass\n")
    assert P.fingerprint("def g():\n    pass\n") != P.fingerprint("")


def _short(modules):
    return {m.removeprefix("gnn_treelstm.") for m in modules}


def test_the_modules_of_a_model_are_its_cells_and_tasks_modules_and_the_model():
    assert _short(P.model_modules("bitree", "sst-5")) == {
        "cells.bidirectional", "cells.lexicalized", "cells.topdown", "cells.base",
        "tasks.classification", "tasks.base", "models.treelstm", "kernels.dropout"}
    assert _short(P.model_modules("mtree", "sick-e")) == {
        "cells.multiplicative", "cells.childsum", "cells.gates", "cells.base",
        "tasks.inference", "tasks.base", "models.treelstm", "kernels.dropout"}
    assert _short(P.model_modules("childsum", "sick-r")) == {
        "cells.childsum", "cells.gates", "cells.base", "tasks.relatedness", "tasks.base",
        "models.treelstm", "kernels.dropout"}


@pytest.mark.parametrize("cell", cells.names())
def test_every_cell_fingerprints_its_own_module_and_no_package_init(cell):
    for task in tasks.names():
        sources = P.model_sources(cell, task)
        assert cells.get(cell).__module__ in sources
        assert tasks.get(task).__module__ in sources
        assert "gnn_treelstm.cells" not in sources and "gnn_treelstm.tasks" not in sources
        assert all(len(v) == 12 and int(v, 16) >= 0 for v in sources.values())


def test_unknown_names_fail_with_the_choices():
    with pytest.raises(UnknownNameError, match="choose one of: .*childsum"):
        P.model_modules("nope", "sst-5")
    with pytest.raises(UnknownNameError, match="choose one of: .*sick-e"):
        P.model_modules("childsum", "nope")


def test_source_changes_names_changed_added_and_removed_modules():
    now = P.model_sources("bitree", "sst-5")
    assert P.source_changes(now, now) == []
    had = {**now, "gnn_treelstm.cells.topdown": "0" * 12, "gnn_treelstm.cells.gone": "1" * 12}
    del had["gnn_treelstm.models.treelstm"]
    assert P.source_changes(had, now) == ["gnn_treelstm.cells.gone", "gnn_treelstm.cells.topdown",
                                          "gnn_treelstm.models.treelstm"]


def test_code_record_has_the_version_and_the_sources():
    from gnn_treelstm import __version__

    rec = P.code_record("lex", "trec")
    assert rec == {"version": __version__, "python": P.PYTHON,
                   "modules": P.model_sources("lex", "trec")}
    # never raises: an unknown name is recorded as an error (the run goes on)
    bad = P.code_record("nope", "trec")
    assert "modules" not in bad and "choose one of" in bad["error"]
    assert P.code_changes(bad, "lex", "trec") == []


def test_code_changes_compare_within_one_python_only():
    rec = P.code_record("childsum", "sick-r")
    assert P.code_changes(rec, "childsum", "sick-r") == []
    edited = {**rec, "modules": {**rec["modules"], "gnn_treelstm.cells.childsum": "0" * 12}}
    assert P.code_changes(edited, "childsum", "sick-r") == ["gnn_treelstm.cells.childsum"]
    other = {**edited, "python": "2.7"}
    assert P.code_changes(other, "childsum", "sick-r") == [
        f"(recorded under Python 2.7, not comparable with {P.PYTHON})"]
    assert P.code_changes(None, "childsum", "sick-r") == []


def test_the_code_is_the_files_as_first_read_not_as_edited_later(monkeypatch):
    """A long process (the runner) records the code it imported: a file edited after the
    first fingerprint does not change what later seeds record."""
    first = P.model_sources("nary", "sst-5")
    monkeypatch.setattr(P.inspect, "getsource", lambda module: "x = 'edited'\n")
    assert P.model_sources("nary", "sst-5") == first
    assert P.model_sources("topdown", "sst-2")["gnn_treelstm.cells.topdown"] != \
        P.fingerprint("x = 'edited'\n")


def test_a_module_that_does_not_parse_is_recorded_as_no_source(monkeypatch):
    monkeypatch.setattr(P, "_SNAPSHOT", {"gnn_treelstm.models.treelstm": "abc"})  # already snapshot
    monkeypatch.setattr(P.inspect, "getsource", lambda module: "def broken(:\n")
    assert P.model_sources("mean", "sick-r")["gnn_treelstm.cells.mean"] == P.NO_SOURCE


def test_a_cell_registered_from_a_module_without_source_is_recorded_not_an_error(monkeypatch):
    import sys
    import types

    mod = types.ModuleType("notebook_cells")       # no file: inspect cannot read it
    factory = cells.get("childsum")

    def my_cell(*args, **kwargs):
        return factory(*args, **kwargs)

    my_cell.__module__ = mod.__name__
    mod.my_cell = my_cell
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(cells._items, "my-cell", my_cell)
    sources = P.model_sources("my-cell", "sst-5")
    assert sources["notebook_cells"] == P.NO_SOURCE
    recorded = {**sources, "notebook_cells": P.NO_SOURCE}   # as a run's config.json has it
    assert P.code_changes({"python": P.PYTHON, "modules": recorded}, "my-cell", "sst-5") == []

import pytest

from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.registry import Registry, UnknownNameError


def test_unknown_name_lists_choices():
    r: Registry[int] = Registry("thing")
    r.add("b", 2)
    r.add("a", 1)
    assert r.get("a") == 1 and r.names() == ["a", "b"] and "a" in r and len(r) == 2
    with pytest.raises(UnknownNameError, match="unknown thing 'zz'; choose one of: a, b"):
        r.get("zz")
    with pytest.raises(ValueError, match="registered twice"):
        r.add("a", 3)


def test_cell_registry_fails_loudly():
    with pytest.raises(KeyError, match="unknown cell 'nope'; choose one of"):
        build_cell("nope", 3, 4)
    assert isinstance(cells.names(), list)


def test_cell_options_come_from_the_constructor():
    from gnn_treelstm.cells import cell_options

    assert set(cell_options("nary")) == {"n_ary", "tie_forget", "output_gate"}
    assert {"rel_size", "m_size", "rel_init"} <= set(cell_options("mtree"))
    assert "num_layers" in cell_options("lstm2")
    assert not {"x_size", "h_size", "engine"} & set(cell_options("childsum"))


def test_every_registry_entry_is_a_cell_class_holding_its_defaults():
    """The registry reads a cell's options (its constructor) and its run defaults (the class
    attribute ``run_defaults``) from the class registered under its name."""
    from gnn_treelstm.cells import TreeCell, cell_module, run_defaults

    for name in cells.names():
        cls = cells.get(name)
        assert isinstance(cls, type) and issubclass(cls, TreeCell), name
        assert run_defaults(name) is cls.run_defaults, name
        assert cell_module(name) == cls.__module__, name
    assert run_defaults("mtree") == {"optimizer": "adam", "loss_reduction": "sum"}
    assert run_defaults("mtree-add") == run_defaults("childsum") == {}
    assert run_defaults("lex")["teng_head"] is True


@pytest.mark.parametrize("options, match", [
    ({"foo": 1}, "has no option 'foo'; its options: n_ary, output_gate, tie_forget"),
    ({"output_gate": "False"}, r"output_gate='False' \(str\) must be bool"),  # not truthy
    ({"n_ary": 1.5}, r"n_ary=1.5 \(float\) must be int"),  # not truncated to 1
    ({"n_ary": True}, "must be int"),
])
def test_build_cell_refuses_unknown_options_and_wrong_types(options, match):
    with pytest.raises(ValueError, match=match):
        build_cell("nary", 4, 3, **options)


def test_options_that_allow_none_and_the_engine_pass():
    assert build_cell("topdown", 4, 3, head=None, engine="level").engine == "level"
    assert build_cell("mtree", 4, 3, num_relations=2, m_size=None).m_size == 3


def test_run_config_refuses_bad_cell_args_before_loading_anything():
    from gnn_treelstm.training.config import RunConfig

    for kwargs, match in [({"engine": "level"}, "set it with --engine"),
                          ({"x_size": 3}, "set it with --emb-dim"),
                          ({"bogus": 1}, "has no option 'bogus'")]:
        with pytest.raises(ValueError, match=match):
            RunConfig(model="childsum", data="/nonexistent", cell_kwargs=kwargs).check()


def test_cell_sizes_must_be_integers():
    with pytest.raises(ValueError, match=r"x_size must be an integer, got 8.5 \(float\)"):
        build_cell("childsum", 8.5, 6)


def test_the_cells_package_imports_every_module_that_registers_a_cell():
    """``gnn_treelstm/cells/__init__.py`` lists its cell modules by hand (docs/design.md):
    a module of the package that registers a cell and is missing there fails here."""
    import ast
    import re
    from pathlib import Path

    import gnn_treelstm.cells as package

    folder = Path(package.__file__).parent
    init = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in init.body if isinstance(node, ast.ImportFrom)
                and node.module == "gnn_treelstm.cells" for alias in node.names}
    registers = re.compile(r"^\s*@?cells\.(register|add)\(", re.M)
    cell_modules = {path.stem for path in folder.glob("*.py")
                    if path.stem != "registry" and registers.search(path.read_text("utf-8"))}
    assert cell_modules and cell_modules <= imported, sorted(cell_modules - imported)

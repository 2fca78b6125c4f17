"""A recurrence's named parts (engine/recurrence.py) and the engines by name
(engine/propagator.py): packing into views, the errors a wrong declaration or a wrong
return gets, and the engine registry."""

from __future__ import annotations

import pytest
import torch

from gnn_treelstm import make_tree
from gnn_treelstm.engine.propagator import ENGINES, Propagator
from gnn_treelstm.engine.recurrence import Layout, Parts, Recurrence, lazy_parts


def test_unpack_gives_views_and_pack_puts_them_back():
    layout = Layout({"h": 2, "c": 3}, "test")
    t = torch.arange(10.0).view(2, 5)
    p = layout.unpack(t)
    assert list(p) == ["h", "c"] and len(p) == 2 and "c" in p and "x" not in p
    assert p.h.data_ptr() == t.data_ptr() and p["c"].data_ptr() == t[:, 2:].data_ptr()
    assert layout.pack(p) is t  # unpacked parts returned unchanged: no copy
    again = layout.pack({"c": p.c + 0, "h": p.h + 0})  # any order, concatenated as declared
    assert torch.equal(again, t)
    slotted = torch.arange(30.0).view(2, 3, 5)  # (n, K, width): parts along the last dim
    assert layout.unpack(slotted).c.shape == (2, 3, 3)
    one = Layout({"s": 4}, "test")
    assert one.pack({"s": t[:, :4]}) is not None and one.unpack(t[:, :4]).s.shape == (2, 4)


def test_a_wrong_return_names_what_is_declared():
    layout = Layout({"h": 2, "c": 3}, "Recurrence update")
    h, c = torch.zeros(4, 2), torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"returned the parts \['h'\]; .* declares \['h', 'c'\]"):
        layout.pack({"h": h})
    with pytest.raises(ValueError, match=r"returned the parts \['c', 'h', 'x'\]"):
        layout.pack({"h": h, "c": c, "x": c})
    with pytest.raises(ValueError, match=r"part 'c' of shape \(4, 2\); .* width 3"):
        layout.pack({"h": h, "c": h})
    with pytest.raises(TypeError, match="by name"):
        layout.pack(torch.cat([h, c], -1))
    # parts unpacked from another layout are packed by name, not passed through
    other = Layout({"h": 2, "c": 3}, "Recurrence message")
    assert torch.equal(other.pack(layout.unpack(torch.ones(4, 5))), torch.ones(4, 5))


def test_parts_read_by_attribute_and_item_with_errors_that_list_the_parts():
    p = Parts(h=torch.zeros(1), c=torch.ones(1))
    assert p.c is p["c"]
    with pytest.raises(AttributeError, match="no part 'x' here; the parts are: h, c"):
        _ = p.x
    with pytest.raises(KeyError, match="the parts are: h, c"):
        _ = p["x"]
    assert "h=(1,)" in repr(p)


def test_lazy_parts_fetch_once_and_only_what_is_read():
    calls = []
    p = lazy_parts(("a", "b"), lambda k: calls.append(k) or torch.tensor([len(calls)]))
    assert list(p) == ["a", "b"] and "b" in p
    assert p.a.item() == 1 and p["a"].item() == 1
    assert calls == ["a"]
    with pytest.raises(AttributeError, match="the parts are: a, b"):
        _ = p.z


def _ident(src, dst, rel):
    return src


def _upd(x, m):
    return {"h": x.x + m.h}


@pytest.mark.parametrize("kw,match", [
    ({"state": {"h": 2}, "inputs": ("x",), "update": _upd}, "either a message .* or slots"),
    ({"state": {"h": 2}, "inputs": ("x",), "update": _upd, "message": _ident, "slots": 2},
     "not both"),
    ({"state": {"h": 2}, "inputs": ("x",), "update": _upd, "slots": 2, "msg": {"h": 2}},
     "there is no message"),
    ({"state": {}, "inputs": ("x",), "update": _upd, "message": _ident}, "non-empty mapping"),
    ({"state": {"h": 0}, "inputs": ("x",), "update": _upd, "message": _ident},
     "width of part 'h' must be a positive int"),
    ({"state": {"_h": 2}, "inputs": ("x",), "update": _upd, "message": _ident},
     "part name '_h'"),
    ({"state": {"h": 2}, "inputs": ("x", "x"), "update": _upd, "message": _ident},
     "distinct"),
    ({"state": {"h": 2}, "inputs": ("x-1",), "update": _upd, "message": _ident},
     "part name 'x-1'"),
    ({"state": {"h": 2}, "inputs": ("x",), "update": _upd, "message": _ident,
      "direction": "sideways"}, "direction"),
])
def test_a_wrong_declaration_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Recurrence(**kw)


def test_a_message_defaults_to_the_state_parts_and_sources_have_their_shape():
    rec = Recurrence(state={"h": 2, "c": 3}, inputs="x", message=_ident, update=_upd)
    assert rec.inputs == ("x",) and rec.width == 5
    assert rec.source_layout == rec.state_layout
    assert rec.sources(torch.zeros(1), 4).shape == (4, 5)
    slotted = Recurrence(state={"h": 2, "c": 3}, inputs=("x",), slots=3, update=_upd)
    assert slotted.sources(torch.zeros(1), 4).shape == (4, 3, 5)


def test_engines_by_name_and_inputs_by_name():
    assert tuple(ENGINES) == ("dgl", "level")
    assert not ENGINES["dgl"].kernels and ENGINES["level"].kernels
    graph = make_tree([1, 2, -1], [1, 2, 3])
    with pytest.raises(ValueError, match="unknown engine 'levels'; choose one of dgl, level"):
        Propagator("levels", graph)
    rec = Recurrence(state={"h": 2}, inputs=("x",), message=_ident, update=_upd)
    x = torch.ones(3, 2)
    outs = [Propagator(name, graph)(rec, x=x).h for name in ENGINES]
    torch.testing.assert_close(outs[0], torch.tensor([[1.0, 1], [2, 2], [3, 3]]))
    torch.testing.assert_close(outs[1], outs[0])
    prop = Propagator("dgl", graph)
    with pytest.raises(ValueError, match=r"inputs are \['x'\]; missing \['x'\], not declared "
                                         r"\['y'\]"):
        prop(rec, y=x)
    with pytest.raises(ValueError, match="input 'x' must be a tensor"):
        prop(rec, x=[1.0, 2.0, 3.0])
    two = Recurrence(state={"h": 2}, inputs=("x", "y"), message=_ident, update=_upd)
    with pytest.raises(ValueError, match="input 'y' has 2 rows, input 'x' has 3"):
        prop(two, x=x, y=x[:2])

import json

import pytest

from gnn_treelstm.trees.vocab import Relations, Vocab


def test_vocab_basics(tmp_path):
    v = Vocab(["The", "the", "cat", "The"])
    assert v.itos == ["<unk>", "The", "the", "cat"]
    assert v.unk == 0 and v["dog"] == 0 and v["the"] == 2
    assert v.lookup(["cat", "dog"]) == [3, 0]
    assert v.token(3) == "cat" and len(v) == 4 and "cat" in v
    v.save(tmp_path / "v.json")
    assert json.loads((tmp_path / "v.json").read_text()) == v.itos
    assert Vocab.load(tmp_path / "v.json") == v
    with pytest.raises(ValueError, match="out of range"):
        v.token(9)


def test_vocab_load_errors(tmp_path):
    p = tmp_path / "v.json"
    p.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="list of strings"):
        Vocab.load(p)
    p.write_text('["<unk>", "a", "a"]')
    with pytest.raises(ValueError, match="duplicate"):
        Vocab.load(p)


def test_relations(tmp_path):
    r = Relations(["left", "right"])
    assert r.id("right") == 1 and r.id("nsubj") == 2 and len(r) == 3
    with pytest.raises(ValueError, match="unknown relation 'x'"):
        r.id("x", add=False)
    r.save(tmp_path / "r.json")
    assert Relations.load(tmp_path / "r.json") == r

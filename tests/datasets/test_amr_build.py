"""``gnn-treelstm build --dataset amr``: AMR banks as built data sets."""

import json

import pytest
import torch

from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.datasets import build as B
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.graph import validate_tree

# "The boy who wants to go did not sing and dance." (hand-worked below)
BANK = """# ::id h.1
# ::snt The boy who wants to go did not sing and dance .
(a / and
   :op1 (s / sing-01 :polarity -
           :ARG0 (b / boy
                    :ARG0-of (w / want-01
                                :ARG1 (g / go-02 :ARG0 b))))
   :op2 (d / dance-01 :ARG0 b))

# ::id h.2
# ::snt Boys dance .
(d / dance-01 :ARG0 (b / boy))
"""


def _graph_nodes(out, split="train", i=0):
    """Per node: (word, parent, relation name, sibling position) of graph ``i``."""
    g = D.load_split(out, split, "amr").graphs[i]
    vocab, rels = D.load_vocab(out), D.load_relations(out, "amr").names
    parent, rel, pos = {}, {}, {}
    src, dst = g.edges()
    for s, d, r, p in zip(src.tolist(), dst.tolist(), g.edata["rel"].tolist(),
                          g.edata["pos"].tolist()):
        parent[s], rel[s], pos[s] = d, rels[r], p
    validate_tree(g, num_relations=len(rels))
    return [(vocab.token(int(w)), parent.get(i, -1), rel.get(i, ""), pos.get(i, 0))
            for i, w in enumerate(g.ndata["word"].tolist())]


def test_hand_worked_amr_node_by_node(tmp_path):
    (tmp_path / "bank-training.txt").write_text(BANK, encoding="utf-8")
    out = tmp_path / "built"
    meta = B.build("amr", tmp_path / "bank-training.txt", out,
                   amr_options={"merge_ops": True})
    assert meta["dataset"] == "amr" and meta["trees"] == ["amr"] and not meta["pair"]
    assert meta["splits"] == {"train": 2} and meta["targets"] == []
    # pre-order of the PENMAN text; b is referred to twice more (ARG0 of go, ARG0 of dance):
    # each later reference is a leaf copy (Takase et al. 2016); :ARG0-of is kept as its
    # own relation; :polarity's "-" is a leaf; :op1/:op2 merged to :opN
    assert _graph_nodes(out) == [
        ("and", -1, "", 0),            # 0 top
        ("sing", 0, ":opN", 0),        # 1
        ("-", 1, ":polarity", 0),      # 2 constant
        ("boy", 1, ":ARG0", 1),        # 3
        ("want", 3, ":ARG0-of", 0),    # 4 inverse role: the boy is want's ARG0
        ("go", 4, ":ARG1", 0),         # 5
        ("boy", 5, ":ARG0", 0),        # 6 copy of b (re-entrancy)
        ("dance", 0, ":opN", 1),       # 7
        ("boy", 7, ":ARG0", 0),        # 8 copy of b
    ]
    g = D.load_split(out, "train", "amr").graphs[0]
    assert g.ndata["leaf"].bool().tolist() == [False, False, True, False, False, False,
                                                True, False, True]
    assert int(g.ndata["root"].bool().nonzero()) == 0
    st = meta["amr"]["train"]
    assert (st["graphs"], st["nodes"], st["edges"], st["reentrancies"], st["copies"],
            st["constants"], st["cycles"]) == (2, 11, 9, 2, 2, 1, [])
    assert meta["amr_options"]["merge_ops"] is True
    text = D.load_text(out, "train")
    assert text[0]["id"] == "h.1" and text[0]["tokens"][:2] == ["The", "boy"]


def test_amr_options_change_the_tree(tmp_path):
    (tmp_path / "train.amr").write_text(BANK, encoding="utf-8")
    out = tmp_path / "b"
    B.build("amr", tmp_path / "train.amr", out,
            amr_options={"reentrancy": "drop", "normalize_inverse": True,
                         "strip_senses": False})
    nodes = _graph_nodes(out)
    assert [w for w, *_ in nodes] == ["and", "sing-01", "-", "boy", "want-01", "go-02",
                                      "dance-01"]
    assert nodes[4][2] == ":ARG0" and nodes[1][2] == ":op1" and nodes[6][2] == ":op2"
    # a rebuild with other options is not mistaken for the finished one
    B.build("amr", tmp_path / "train.amr", out)
    assert [w for w, *_ in _graph_nodes(out)][:2] == ["and", "sing"]


def test_splits_from_names_and_split_equals_file(tmp_path):
    for k, name in enumerate(("x-training.txt", "x-dev.txt", "x-test.txt", "x-all.txt")):
        (tmp_path / name).write_text(BANK.replace("::id h.", f"::id h{k}."), encoding="utf-8")
    meta = B.build("amr", tmp_path, tmp_path / "o1")
    assert meta["splits"] == {"train": 2, "dev": 2, "test": 2}  # x-all.txt skipped
    meta = B.build("amr", [f"dev={tmp_path / 'x-all.txt'}", tmp_path / "x-training.txt"],
                   tmp_path / "o2")
    assert list(meta["splits"]) == ["train", "dev"]
    with pytest.raises(ValueError, match=r"cannot tell which split x-all.txt is"):
        B.build("amr", tmp_path / "x-all.txt", tmp_path / "o3")
    assert not (tmp_path / "o3").exists()


@pytest.mark.parametrize("text, args, message", [
    ("# ::id e.1\n(a / b :ARG0 (c / d)\n", [], r"train.txt:2 \(graph e.1\): the graph is not "
     r"closed"),
    ("# ::id e.1\n(a / b)\n\n# ::id e.2\n()\n", [], r"train.txt:5 \(graph e.2\): empty graph"),
    ("# ::id e.1\n(h / hat :purpose (s / salute-01 :instrument h))\n",
     ["--amr-cycles", "error"], r"train.txt:2 \(graph e.1\): the graph has a cycle through "
     r"re-entrancies \(h -> s -> h\)"),
    ("# ::id e.1\n# ::snt Hi\n(h / hi~e.3)\n", [], r"\(graph e.1\): alignment ~e.3 of 'hi' "
     r"points past the end of the sentence \(1 tokens"),
    ("# ::id e.1\n(a / b)\n\n# ::id e.1\n(c / d)\n", [], r"graph id 'e.1' is also used at"),
    ("# ::id e.1\n# ::snt caf\udcff\n(a / b)\n", [],  # the byte 0xff
     r"train.txt:2: not utf-8 text \(byte 0xff at column 12\); convert the file to utf-8"),
    ("# ::id e.1\n(x0 / t" + "".join(f"\n :ARG0 (x{i} / t" for i in range(1, 10_000))
     + ")" * 10_000 + "\n", [], r"train.txt:202 \(graph e.1\): the graph is nested more than "
     r"200 levels deep at column 8; graphs are read up to 200 levels \(AMR banks nest a few "
     r"tens\): split or flatten it"),
])
def test_bad_amr_exits_2_naming_file_line_and_graph(tmp_path, capsys, text, args, message):
    (tmp_path / "train.txt").write_bytes(text.encode("utf-8", "surrogateescape"))
    rc = build_main(["--dataset", "amr", "--src", str(tmp_path / "train.txt"), "--out",
                 str(tmp_path / "o"), "-q", *args])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "o").exists()


def test_little_prince_v16_builds(shared_data, tmp_path):
    out = tmp_path / "lp"
    rc = build_main(["--dataset", "amr", "--src", str(shared_data / "amr" / "little_prince"),
                 "--out", str(out), "-q"])
    assert rc == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["splits"] == {"train": 1274, "dev": 145, "test": 143}
    st = meta["amr"]
    # counts measured with this builder (default options), see the README
    assert [st[s]["nodes"] for s in ("train", "dev", "test")] == [9878, 1347, 1430]
    assert [st[s]["reentrancies"] for s in ("train", "dev", "test")] == [1024, 121, 134]
    assert st["train"]["cycles"] == ["lpp_1943.611", "lpp_1943.1209"]
    assert meta["num_relations"]["amr"] == 73
    sp = D.load_split(out, "test", "amr")
    assert len(sp) == 143 and sp.targets == {}
    assert all(g.num_edges() == g.num_nodes() - 1 for g in sp.graphs)
    assert int(torch.cat([g.ndata["word"] for g in sp.graphs]).min()) > 0  # no <unk>

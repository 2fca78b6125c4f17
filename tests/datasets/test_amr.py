import pytest
import torch

from gnn_treelstm.datasets import amr as A
from gnn_treelstm.trees.graph import validate_tree

CORPUS = """# AMR release (header line, not metadata)

# ::id t.1 ::date 2020
# ::snt I saw a boa swallowing an animal .
(s / see-01
   :ARG0 (i / i)
   :ARG1 (b / boa
            :ARG0-of (w / swallow-01
                        :ARG1 (a / animal)))
   :polarity -
   :time (a2 / age-01
            :ARG1 i
            :ARG2 (t / temporal-quantity :quant 6)))

# ::id t.2
# ::snt The Little Prince .
(p / prince :wiki - :mod (l / little) :name (n / name :op1 "Little" :op2 "Prince"))
"""


@pytest.fixture
def entries(tmp_path):
    path = tmp_path / "tiny.amr"
    path.write_text(CORPUS, encoding="utf-8")
    return A.read_amr(path)


def test_read_amr_metadata(entries):
    assert [e.id for e in entries] == ["t.1", "t.2"]
    assert entries[0].sentence == "I saw a boa swallowing an animal ."
    assert entries[0].graph_penman.startswith("(s / see-01")
    assert "::" not in entries[0].graph_penman
    assert entries[1].metadata["snt"] == "The Little Prince ."


def test_tree_copy_reentrancy(entries):
    t = A.amr_tree(entries[0])
    # pre-order: see, i, boa, swallow, animal, -, age, i(copy), temporal-quantity, 6
    assert t.labels == ["see", "i", "boa", "swallow", "animal", "-", "age", "i",
                        "temporal-quantity", "6"]
    assert t.parents == [-1, 0, 0, 2, 3, 0, 0, 6, 6, 8]
    assert t.roles == ["", ":ARG0", ":ARG1", ":ARG0-of", ":ARG1", ":polarity", ":time",
                       ":ARG1", ":ARG2", ":quant"]
    assert t.is_copy == [False] * 7 + [True, False, False]
    assert t.is_constant[5] and t.is_constant[9] and not t.is_constant[0]


def test_tree_drop_reentrancy_and_options(entries):
    t = A.amr_tree(entries[0], reentrancy="drop", normalize_inverse=True, strip_senses=False)
    assert "i" in t.labels and t.labels.count("i") == 1
    assert len(t.labels) == 9
    assert t.labels[0] == "see-01"
    assert t.roles[3] == ":ARG0"  # :ARG0-of normalised
    with pytest.raises(ValueError, match="reentrancy"):
        A.amr_tree(entries[0], reentrancy="merge")


def test_wiki_dropped_and_quotes_removed(entries):
    t = A.amr_tree(entries[1])
    assert t.labels == ["prince", "little", "name", "Little", "Prince"]
    assert ":wiki" not in t.roles
    t2 = A.amr_tree(entries[1], drop_roles=())
    assert ":wiki" in t2.roles


def test_amr_to_tree_graph(entries):
    concepts, rels = A.build_amr_vocabs(entries)
    assert concepts[0] == "<unk>" and rels[0] == "<unk>"
    assert concepts[1] == "i"  # most frequent (twice, with the copy)
    assert ":ARG0-of" in rels and ":wiki" not in rels
    g = A.amr_to_tree(entries[0], concepts, rels)
    validate_tree(g, num_relations=len(rels))
    assert g.num_nodes() == 10 and g.num_edges() == 9
    assert bool(g.ndata["root"][0]) and int(g.ndata["root"].sum()) == 1
    src, dst = g.edges()
    # edges child -> parent with the role as relation
    e = {(int(s), int(d)): int(r) for s, d, r in zip(src, dst, g.edata["rel"])}
    assert e[(3, 2)] == rels.index(":ARG0-of")
    assert e[(7, 6)] == rels.index(":ARG1")
    words = [concepts[int(w)] for w in g.ndata["word"]]
    assert words[:3] == ["see", "i", "boa"]
    # children of the root in branch order
    kids = sorted((int(p), int(s)) for s, d, p in zip(src, dst, g.edata["pos"]) if int(d) == 0)
    assert [s for _, s in kids] == [1, 2, 5, 6]
    leaves = torch.nonzero(g.ndata["leaf"]).flatten().tolist()
    assert leaves == [1, 4, 5, 7, 9]


def test_unknown_concepts_and_relations(entries):
    g = A.amr_to_tree(entries[1], {"<unk>": 0, "prince": 1, "little": 2},
                      {"<unk>": 0, ":mod": 1})
    assert g.ndata["word"].tolist() == [1, 2, 0, 2, 1]  # "Prince" -> prince (lowercase)
    assert g.edata["rel"].tolist().count(0) == 3
    with pytest.raises(ValueError, match=r"t.2: relation ':name' is not in"):
        A.amr_to_tree(entries[1], ["<unk>"], [":mod"])


def test_bad_penman(tmp_path):
    p = tmp_path / "bad.amr"
    p.write_text("# ::id x.1\n(a / b)\n\n# ::id x.2\n(a / b :c (d / e)\n", encoding="utf-8")
    with pytest.raises(A.AmrError, match=r"bad.amr:5 \(graph x.2\): the graph is not closed"):
        A.read_amr(p)


@pytest.mark.parametrize("text, message", [
    # a stray ')' would make penman drop the rest of the file without a word
    ("# ::id x.1\n(a / b :c (d / e)))\n\n# ::id x.2\n(f / g)\n",
     r"bad.amr:2 \(graph x.1\): '\)' after the end of the graph \(an extra '\)'\?\)"),
    ("# ::id x.1\n(a / b) (c / d)\n", r"bad.amr:2 \(graph x.1\): '\(c / d\)' after the end"),
    ("# ::id x.1\n(a / b\n  :c d))\n", r"bad.amr:3 \(graph x.1\): '\)' after the end"),
    ("# ::id x.1\n(a / b)\n\n# ::id x.2\n# ::snt no graph\n", r"metadata at the end .* no graph"),
    ("# ::id x.1\na / b\n", r"bad.amr:2: expected a PENMAN graph"),
    ("# ::id x.1\n(a / b :ARG0 (c d))\n", r"bad.amr:2 \(graph x.1\): not valid PENMAN: "
     r"Expected: ROLE at line 2, column 17"),
])
def test_malformed_files(tmp_path, text, message):
    p = tmp_path / "bad.amr"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(A.AmrError, match=message):
        A.read_amr(p)


@pytest.mark.parametrize("graph, message", [
    ("()", r"g.1\): empty graph"),
    ("(a)", r"node 'a' has no concept"),
    ("(a / b :ARG0 (a / c))", r"variable 'a' is defined twice"),
    ("(a / b :ARG0 ())", r"g.1\): an empty node"),
    ("(a / b :ARG0 (c / d :ARG1))", r"role :ARG1 of node 'c' has no value"),
    ("(a / b :mod (c / d) :ARG0 a)", r"node 'a' \(b\) is its own :ARG0 argument"),
])
def test_bad_graphs(graph, message):
    (e,) = A.parse_amr(f"# ::id g.1\n{graph}\n", "x.amr")
    with pytest.raises(A.AmrError, match=message):
        A.amr_tree(e)


def test_cycle_split_or_error():
    # h -:purpose-> s -:instrument-> h: a cycle through the re-entrancy of h (as in
    # Little Prince lpp_1943.611)
    (e,) = A.parse_amr("# ::id c.1\n(h / hat :purpose (s / salute-01 :instrument h))", "c.amr")
    t = A.amr_tree(e)
    assert t.cycle == ["h", "s", "h"]
    assert t.labels == ["hat", "salute", "hat"] and t.parents == [-1, 0, 1] and t.is_copy[2]
    with pytest.raises(A.AmrError, match=r"c.amr:2 \(graph c.1\): the graph has a cycle "
                       r"through re-entrancies \(h -> s -> h\)"):
        A.amr_tree(e, cycles="error")
    # an inverse role is read in its normal direction: no cycle here
    (e2,) = A.parse_amr("(b / boy :ARG0-of (w / want-01 :ARG1 (g / go-02 :ARG0 b)))")
    assert A.find_cycle(e2.penman_tree()) is None


def test_alignments_and_merged_ops():
    snt = "He did not sing and dance ."
    text = (f"# ::id al.1\n# ::snt {snt}\n"
            "(a / and~e.4\n   :op1 (s / sing-01~e.3 :ARG0 (h / he~e.0) :polarity -~e.2)\n"
            "   :op2 (d / dance-01 :ARG0~e.0 h~e.0))")
    (e,) = A.parse_amr(text)
    t = A.amr_tree(e, merge_ops=True)
    assert t.labels == ["and", "sing", "he", "-", "dance", "he"]
    assert t.roles == ["", ":opN", ":ARG0", ":polarity", ":opN", ":ARG0"]
    assert t.align == [4, 3, 0, 2, None, 0]
    assert t.reentrancies == 1 and t.is_copy == [False] * 5 + [True]
    assert A.node_words(t, e.tokens()) == ["and", "sing", "He", "not", "dance", "He"]
    assert A.node_words(t) == t.labels
    with pytest.raises(A.AmrError, match=r"alignment ~e.4 of 'and' points past the end"):
        A.node_words(t, ["He", "did"], where="al.1")


def test_little_prince_v3(shared_data):
    entries = A.read_amr(shared_data / "amr" / "little_prince" / "amr-bank-struct-v3.0.txt")
    assert len(entries) == 1562
    assert entries[0].id == "lpp_1943.1" and entries[-1].id == "lpp_1943.1562"
    concepts, rels = A.build_amr_vocabs(entries)
    n_nodes = 0
    for e in entries[:300]:
        g = A.amr_to_tree(e, concepts, rels)
        assert int(g.out_degrees().max()) <= 1 and g.num_edges() == g.num_nodes() - 1
        assert int(g.ndata["word"].min()) > 0  # every concept is in the corpus vocabulary
        n_nodes += g.num_nodes()
    assert n_nodes > 300

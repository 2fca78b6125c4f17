"""Sentence graphs from parsed raw text: word lookups, the relation map and every tree kind,
on hand-written parses (no spaCy needed)."""

from __future__ import annotations

import logging

import pytest

from gnn_treelstm.datasets.dependency import DepParse
from gnn_treelstm.datasets.text import RelationMap, sentence_count, text_graphs, word_ids
from gnn_treelstm.trees.graph import validate_tree
from gnn_treelstm.trees.vocab import Vocab

# "no dogs bark ." : bark is the root
PARSE = DepParse(["No", "dogs", "bark", "."], [1, 2, -1, 2], ["det", "nsubj", "ROOT", "punct"])
VOCAB = Vocab(["no", "dogs", "bark"])


def _edges(g) -> list[tuple[int, int]]:
    return sorted(zip(*(x.tolist() for x in g.edges())))


def test_words_are_looked_up_as_written_then_lowercased():
    vocab = Vocab(["The", "cat"])
    assert word_ids(["The", "CAT", "dog"], vocab) == [vocab.stoi["The"], vocab.stoi["cat"],
                                                      vocab.unk]


def test_sentence_count_needs_an_end_mark_followed_by_a_word():
    assert sentence_count(["a", "film", "."]) == 1
    assert sentence_count(["a", "film", ".", "a", "dud", "!"]) == 2
    assert sentence_count(["3", ".", "5"]) == 1  # a number is not a new sentence


def test_dependency_trees_carry_the_mapped_relations():
    rels = RelationMap(["dep", "nsubj", "neg"], stanford=True)
    (g,) = text_graphs([PARSE], "dependency", VOCAB, rels)
    validate_tree(g)
    assert _edges(g) == [(0, 1), (1, 2), (3, 2)]
    names = dict(zip(g.edges()[0].tolist(), (rels.relations[r] for r in g.edata["rel"])))
    # det on "no" is Stanford's neg; punct is unknown to the model: dep, and counted
    assert names == {0: "neg", 1: "nsubj", 3: "dep"}
    assert rels.unmapped == {"punct": 1}
    assert g.ndata["word"].tolist() == [VOCAB.stoi["no"], VOCAB.stoi["dogs"],
                                        VOCAB.stoi["bark"], VOCAB.unk]


def test_constituency_and_chain_trees_of_the_same_parse():
    rels = RelationMap([], stanford=False)
    (c,) = text_graphs([PARSE], "constituency", VOCAB, rels)
    validate_tree(c, max_children=2)
    assert c.num_nodes() == 2 * len(PARSE.tokens) - 1  # binary: n leaves, n - 1 phrases
    (ch,) = text_graphs([PARSE], "chain", VOCAB, rels)
    assert _edges(ch) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="'amr' graphs from raw text"):
        text_graphs([PARSE], "amr", VOCAB, rels)


def test_a_map_without_relations_keeps_spacy_labels():
    rels = RelationMap([], stanford=True)
    assert rels.name("compound") == "compound" and not rels.unmapped


def test_fallbacks_are_reported_once_per_new_label(caplog):
    logger = logging.getLogger("tests.text")
    caplog.set_level(logging.WARNING, logger=logger.name)
    rels = RelationMap(["nsubj", "dobj"], stanford=False)
    assert rels.fallback == "nsubj"  # no 'dep': relation 0
    assert rels.name("punct") == "nsubj"
    assert rels.report(logger) and not rels.report(logger)
    rels.name("punct")
    assert not rels.report(logger)  # the same label again: counted, not reported
    rels.name("meta")
    assert rels.report(logger)
    assert [r.name for r in caplog.records] == ["tests.text", "tests.text"]
    assert caplog.records[-1].getMessage() == (
        "spaCy labels unseen in training, mapped to 'nsubj' (relation 0: the model has no "
        "'dep'): punct \u00d72, meta \u00d71")

"""``gnn_treelstm.models.provenance``: where a model's training trees came from."""

import pytest

from gnn_treelstm.models.provenance import STANFORD_SICK, tree_source


@pytest.mark.parametrize("dataset, tree, source", [
    ("sick", "dependency", STANFORD_SICK),
    ("sick", "constituency", STANFORD_SICK),
    ("sick", "dependency-spacy", "spaCy parses"),
    ("sst", "constituency", "SST's treebank (gold binary constituency trees)"),
    ("sst", "dependency", "spaCy parses"),
    ("sst", "chain", "word order (no parser)"),
    (None, "amr", "AMR graphs of the data set"),
    (None, None, "the data set's trees"),
])
def test_tree_source_of_each_data_set_and_tree_kind(dataset, tree, source):
    assert tree_source(dataset, tree) == source

"""``gnn_treelstm.models.inputs``: texts, tuples and inputs as a predictor reads them."""

import pytest

from gnn_treelstm.models.inputs import Input, read_inputs


def test_texts_tuples_and_inputs_become_numbered_inputs():
    assert read_inputs("a fine film", pair=False) == [Input(1, "a fine film")]
    assert read_inputs(["  a  ", Input(7, "b")], pair=False) == [Input(1, "a"), Input(7, "b")]
    assert read_inputs([("A", "B"), "C ||| D", "E\tF"], pair=True) == [
        Input(1, "A", "B"), Input(2, "C", "D"), Input(3, "E", "F")]


@pytest.mark.parametrize("texts, pair, error, message", [
    ([("A", "B")], False, ValueError, "input 1: a tuple ('A', 'B') is a sentence pair; this "
                                      "model reads one sentence"),
    ([("A", "B", "C")], True, ValueError, "input 1: a tuple"),
    (["ok", "   "], False, ValueError, "input 2: empty text"),
    (["A ||| B"], False, ValueError, "input 1:1: the line holds a pair separator"),
    (["no pair"], True, ValueError, "input 1:1: this model reads sentence pairs"),
    ([3], False, TypeError, "input 1: expected a string, a (A, B) tuple or an Input, got int"),
])
def test_a_bad_input_names_its_number_and_the_fix(texts, pair, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_inputs(texts, pair=pair)

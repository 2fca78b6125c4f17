import random

import pytest

from gnn_treelstm.datasets.binarize import binarize_dependency, binary_graph
from gnn_treelstm.trees.graph import NO_WORD, validate_tree


def test_documented_example():
    # the cat sat down: the->cat, cat->sat, down->sat
    t = binarize_dependency([1, 2, -1, 2])
    assert t.parents == [4, 4, 5, 5, 6, 6, -1]
    assert t.spans[4:] == [(0, 2), (2, 4), (0, 4)]


def test_right_dependents_first_nearest_first():
    # John saw Mary today: John<-saw, Mary<-saw, today<-saw
    t = binarize_dependency([1, -1, 1, 1])
    # saw+Mary, then +today, then John+...
    assert t.spans[4:] == [(1, 3), (1, 4), (0, 4)]


def test_graph_is_binary_with_words_on_leaves():
    g = binary_graph([1, 2, -1, 2], [10, 11, 12, 13])
    validate_tree(g, max_children=2)
    assert g.num_nodes() == 7
    assert g.ndata["word"].tolist() == [10, 11, 12, 13] + [NO_WORD] * 3
    assert g.ndata["leaf"].tolist() == [True] * 4 + [False] * 3
    assert g.ndata["label"].tolist() == [-1] * 7


def test_random_projective_trees_have_contiguous_spans():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 15)
        heads = _random_projective(rng, 0, n, -1)
        t = binarize_dependency(heads)
        assert len(t.parents) == 2 * n - 1
        assert t.spans[-1] == (0, n)
        kids: dict[int, list[int]] = {}
        for c, p in enumerate(t.parents):
            if p >= 0:
                kids.setdefault(p, []).append(c)
        for p, cs in kids.items():
            assert len(cs) == 2
            left, right = sorted(cs, key=lambda c: t.positions[c])
            assert t.spans[left][1] == t.spans[right][0]  # adjacent, left then right
            assert t.spans[p] == (t.spans[left][0], t.spans[right][1])


def _random_projective(rng, lo, hi, head):
    heads = [0] * (hi - lo)
    root = rng.randrange(lo, hi)
    heads[root - lo] = head

    def fill(a, b, h):
        if a >= b:
            return
        r = rng.randrange(a, b)
        heads[r - lo] = h
        fill(a, r, r)
        fill(r + 1, b, r)

    fill(lo, root, root)
    fill(root + 1, hi, root)
    return heads


def test_errors():
    with pytest.raises(ValueError, match="empty"):
        binarize_dependency([])
    with pytest.raises(ValueError, match="one root"):
        binarize_dependency([-1, -1])
    with pytest.raises(ValueError, match="cycle"):
        binarize_dependency([1, 0, -1])

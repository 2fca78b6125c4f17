"""Sentence graphs from raw text: spaCy parses made into a model's tree kind.

The same building blocks as the data sets' build (:mod:`~gnn_treelstm.datasets.dependency`,
:mod:`~gnn_treelstm.datasets.binarize`, :mod:`~gnn_treelstm.datasets.chain`), given a
trained model's vocabulary and relation names: :func:`text_graphs` makes dependency trees,
binarized constituency trees or chains of parsed sentences
(:class:`~gnn_treelstm.datasets.dependency.DepParse`, e.g. from
:func:`~gnn_treelstm.datasets.dependency.parse_texts`).

A model trained on SICK's Stanford parses knows Stanford basic dependency labels while
spaCy labels ClearNLP ones: its :class:`RelationMap` translates each spaCy label through
:data:`gnn_treelstm.datasets.labels.SPACY_TO_STANFORD` before looking it up. A label that
ends up outside the model's relations (no counterpart, a Stanford label SICK never uses, or
a label of another pipeline) becomes the relation ``dep`` (the model's relation 0 only when
it has no ``dep``) and is counted; :meth:`RelationMap.report` names the counts in one
warning per new set of labels.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gnn_treelstm.datasets import binarize, chain, dependency
from gnn_treelstm.datasets.labels import FALLBACK, stanford_label
from gnn_treelstm.trees.vocab import Relations

__all__ = ["RelationMap", "text_graphs", "word_ids", "sentence_count"]

log = logging.getLogger(__name__)

#: more than one sentence in a line: an end mark followed by more words
_SENTENCE_END = re.compile(r"[.!?]")


def word_ids(tokens: Sequence[str], vocab: Any) -> list[int]:
    """Teng §6's rule for lookups in ``vocab`` (a :class:`~gnn_treelstm.trees.vocab.Vocab`):
    the word, else its lowercase, else unk."""
    return [vocab.stoi.get(t, vocab.stoi.get(t.lower(), vocab.unk)) for t in tokens]


def sentence_count(tokens: Sequence[str]) -> int:
    """How many sentences the tokens look like (an end mark followed by a word)."""
    count = 1
    for i, t in enumerate(tokens[:-1]):
        if _SENTENCE_END.fullmatch(t) and any(c.isalpha() for c in tokens[i + 1]):
            count += 1
    return count


class RelationMap:
    """spaCy dependency labels -> names of a model's relations, counting the fallbacks.

    With ``stanford`` (the model was trained on Stanford parses) a label is translated by
    :func:`gnn_treelstm.datasets.labels.stanford_label` first. A label whose translation is
    not among ``relations`` (or that has none) becomes :attr:`fallback`: ``dep`` when the
    model knows it, else its relation 0, and is counted in :attr:`unmapped`. An empty
    ``relations`` (a model without a relation vocabulary) keeps the labels as they are.
    """

    def __init__(self, relations: Sequence[str], *, stanford: bool) -> None:
        self.relations = list(relations)
        self.stanford = stanford
        self._known = set(self.relations)
        self.fallback: str | None = FALLBACK if FALLBACK in self._known else (
            self.relations[0] if self.relations else None)
        #: spaCy label -> how many edges fell back to :attr:`fallback`
        self.unmapped: Counter[str] = Counter()
        self._reported: frozenset[str] = frozenset()

    def name(self, label: str, word: str | None = None) -> str:
        """The model's relation name for spaCy label ``label`` on ``word``."""
        if not self.relations:
            return label
        target = stanford_label(label, word) if self.stanford else label
        if target is None or target not in self._known:
            self.unmapped[label] += 1
            return self.fallback  # type: ignore[return-value]  # relations is not empty
        return target

    def summary(self) -> str:
        """One line naming the labels that fell back, with their counts ('' if none)."""
        if not self.unmapped:
            return ""
        parts = []
        for label, n in sorted(self.unmapped.items(), key=lambda kv: (-kv[1], kv[0])):
            target = stanford_label(label) if self.stanford else None
            seen = f" (Stanford {target})" if target and target != label else ""
            parts.append(f"{label} \u00d7{n}{seen}")
        what = ("spaCy labels with no counterpart in the model's relations" if self.stanford
                else "spaCy labels unseen in training")
        rel0 = "" if self.fallback == "dep" else " (relation 0: the model has no 'dep')"
        return f"{what}, mapped to {self.fallback!r}{rel0}: {', '.join(parts)}"

    def report(self, logger: logging.Logger | None = None) -> bool:
        """Log :meth:`summary` as a warning (to ``logger``, default this module's) when a
        label fell back that no earlier report named; returns whether it logged."""
        if not set(self.unmapped) - self._reported:
            return False
        self._reported = frozenset(self.unmapped)
        (logger or log).warning("%s", self.summary())
        return True


def text_graphs(parses: Sequence[dependency.DepParse], tree: str | None, vocab: Any,
                relations: RelationMap) -> list:
    """Graphs of tree kind ``tree`` (constituency, dependency, their ``-spacy`` twins, or
    chain) from spaCy parses, with word ids of ``vocab`` (:func:`word_ids`) and, for
    dependency trees, relation ids of ``relations.relations`` through the map (a map of no
    relations grows a relation vocabulary from the labels instead). Node ``i`` of every
    graph is token ``i``.

    Raises:
        ValueError: ``tree`` is a kind that is not built from a parse (e.g. AMR).
    """
    graphs = []
    rels = Relations(relations.relations)
    for p in parses:
        ids = word_ids(p.tokens, vocab)
        if tree in ("constituency", "constituency-spacy"):
            graphs.append(binarize.binary_graph(p.heads, ids))
        elif tree in ("dependency", "dependency-spacy"):
            deps = [d if h < 0 else relations.name(d, w)
                    for h, d, w in zip(p.heads, p.deps, p.tokens)]
            graphs.append(dependency.dependency_graph(p.heads, deps, ids, rels,
                                                      add_relations=not rels.names))
        elif tree == "chain":
            graphs.append(chain.chain_graph(ids))
        else:
            raise ValueError(f"predict cannot build {tree!r} graphs from raw text; the "
                             "checkpoint was trained on pre-built trees of that kind")
    return graphs

"""spaCy's English dependency labels -> Stanford basic dependencies, and how far two parses
of the same tokens agree.

The SICK trees that the Tree-LSTM papers train on (``--tree dependency``,
``sick/stanford_parsed/*.rels``) carry **Stanford basic dependencies**: de Marneffe &
Manning, *Stanford typed dependencies manual* (2008, revised for Stanford CoreNLP v3.7,
2016), https://nlp.stanford.edu/software/dependencies_manual.pdf. Raw text at prediction
time is parsed by spaCy, whose English pipelines label **ClearNLP** dependencies: Choi &
Palmer, *Guidelines for the Clear Style Constituent to Dependency Conversion* (University of
Colorado Boulder, 2012), with the label list at
https://github.com/clir/clearnlp-guidelines/blob/master/md/specifications/dependency_labels.md
(``en_core_web_sm``'s parser predicts exactly these 45; ``spacy.explain`` describes each).

Both schemes descend from the same Penn-Treebank conversion, so most labels keep their name.
:data:`SPACY_TO_STANFORD` is the whole mapping, one entry per ClearNLP label:

* same name, same meaning: ``nsubj``, ``dobj``, ``amod``, ``prep``, ``pobj``, ``acomp``...
* renamed: ``compound`` -> ``nn`` (noun compound modifier), ``nummod`` -> ``num``,
  ``relcl`` -> ``rcmod``, ``acl`` -> ``vmod`` (reduced non-finite verbal modifier: "a man
  *sitting* on a bench"), ``case`` -> ``possessive`` (the possessive 's, ClearNLP's only
  case marker), ``nmod`` -> ``nn`` (a nominal's modifier that is not a compound: Stanford
  has no separate label), ``intj`` -> ``discourse``, ``ROOT`` -> ``root``.
* same word, another label: ``attr`` -> ``nsubj`` (ClearNLP's ``attr`` is the noun after
  the copula; in the existential "there *is* a man" Stanford makes that noun the subject of
  ``is``, with ``there`` as ``expl``; in "he is a *teacher*" Stanford makes the noun the
  head, so no edge of the two trees matches there whatever the label), ``agent`` -> ``prep``
  (Stanford's ``agent`` exists only in the collapsed representation; basic dependencies
  attach passive *by* as ``prep`` with its noun as ``pobj``), ``oprd`` -> ``xcomp`` (object
  predicate: "painted the wall *red*" is Stanford's open clausal complement), ``dative`` ->
  ``iobj`` (the indirect object "gave *him* a book").
* word-specific (:data:`WORD_EXCEPTIONS`): the determiner *no* is ``det`` in ClearNLP and
  ``neg`` in the Stanford parses (every *no* of SICK's: "there is *no* man"); a ``dative``
  that is the preposition *to* / *for* ("gave a book *to* him") is Stanford's ``prep``.
* no counterpart (:data:`NO_COUNTERPART`): ``meta`` (meta modifier: a bullet, a code, an
  aside) has no Stanford label and becomes :data:`FALLBACK`, ``dep`` -- Stanford's own
  "dependent" label for a relation the converter cannot determine more precisely.

Stanford labels that no ClearNLP label becomes: ``cop`` (ClearNLP makes the copula the head,
Stanford the predicate), ``tmod`` (ClearNLP folds temporal nouns into ``npadvmod``),
``mwe``, ``number``, ``goeswith`` (and the collapsed-only ``agent``, ``prepc``, ``ref``,
``xsubj``).

A model knows only the relations of its training trees: SICK's Stanford parses use 37 of the
manual's labels (``rels_set.txt``), without e.g. ``quantmod``, ``predet``, ``preconj``,
``discourse``, ``csubjpass``, ``agent``. :func:`gnn_treelstm.datasets.text.text_graphs`
sends a mapped label the model never saw to :data:`FALLBACK` (``dep``) and says so in one
warning per run.

:func:`agreement` compares two parses of the same tokens edge by edge (child, head, label),
the labels of one side translated first; ``scripts/parser_agreement.py`` prints the shares
on SICK.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "FALLBACK",
    "SPACY_TO_STANFORD",
    "WORD_EXCEPTIONS",
    "NO_COUNTERPART",
    "STANFORD_LABELS",
    "CLEARNLP_LABELS",
    "CLEARNLP_ONLY",
    "stanford_label",
    "ParsedSentence",
    "Agreement",
    "agreement",
    "graph_parse",
    "built_parses",
]

#: Stanford's unspecified dependency: the label of a spaCy label without a counterpart
FALLBACK = "dep"

#: ClearNLP (spaCy English) label -> Stanford basic dependency label (see the module
#: docstring for each decision). Keys: the ClearNLP specification's label list.
SPACY_TO_STANFORD: dict[str, str] = {
    "ROOT": "root",
    "acl": "vmod",
    "acomp": "acomp",
    "advcl": "advcl",
    "advmod": "advmod",
    "agent": "prep",
    "amod": "amod",
    "appos": "appos",
    "attr": "nsubj",
    "aux": "aux",
    "auxpass": "auxpass",
    "case": "possessive",
    "cc": "cc",
    "ccomp": "ccomp",
    "compound": "nn",
    "conj": "conj",
    "csubj": "csubj",
    "csubjpass": "csubjpass",
    "dative": "iobj",
    "dep": "dep",
    "det": "det",
    "dobj": "dobj",
    "expl": "expl",
    "intj": "discourse",
    "mark": "mark",
    "meta": FALLBACK,  # no counterpart
    "neg": "neg",
    "nmod": "nn",
    "npadvmod": "npadvmod",
    "nsubj": "nsubj",
    "nsubjpass": "nsubjpass",
    "nummod": "num",
    "oprd": "xcomp",
    "parataxis": "parataxis",
    "pcomp": "pcomp",
    "pobj": "pobj",
    "poss": "poss",
    "preconj": "preconj",
    "predet": "predet",
    "prep": "prep",
    "prt": "prt",
    "punct": "punct",
    "quantmod": "quantmod",
    "relcl": "rcmod",
    "xcomp": "xcomp",
}

#: (ClearNLP label, lowercased word) -> Stanford label, overriding :data:`SPACY_TO_STANFORD`
WORD_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("det", "no"): "neg",
    ("dative", "to"): "prep",
    ("dative", "for"): "prep",
}

#: ClearNLP labels with no Stanford counterpart: mapped to :data:`FALLBACK`
NO_COUNTERPART: frozenset[str] = frozenset({"meta"})

#: the ClearNLP specification's labels (spaCy's English pipelines predict these)
CLEARNLP_LABELS: tuple[str, ...] = tuple(sorted(SPACY_TO_STANFORD))

#: every label of the Stanford typed dependencies manual (v3.7), basic and collapsed
STANFORD_LABELS: tuple[str, ...] = (
    "acomp", "advcl", "advmod", "agent", "amod", "appos", "aux", "auxpass", "cc", "ccomp",
    "conj", "cop", "csubj", "csubjpass", "dep", "det", "discourse", "dobj", "expl",
    "goeswith", "iobj", "mark", "mwe", "neg", "nn", "npadvmod", "nsubj", "nsubjpass", "num",
    "number", "parataxis", "pcomp", "pobj", "poss", "possessive", "preconj", "predet", "prep",
    "prepc", "prt", "punct", "quantmod", "rcmod", "ref", "root", "tmod", "vmod", "xcomp",
    "xsubj",
)

#: ClearNLP labels that are no Stanford label: a relation set holding one is spaCy's
CLEARNLP_ONLY: frozenset[str] = frozenset(CLEARNLP_LABELS) - frozenset(STANFORD_LABELS)


def stanford_label(label: str, word: str | None = None) -> str | None:
    """The Stanford basic label of spaCy label ``label`` on ``word`` (word-specific cases
    first); ``None`` when the label has no counterpart (:data:`NO_COUNTERPART`) or is not a
    ClearNLP label at all (another pipeline's scheme): the caller decides the fallback."""
    if word is not None:
        special = WORD_EXCEPTIONS.get((label, word.lower()))
        if special is not None:
            return special
    if label in NO_COUNTERPART:
        return None
    return SPACY_TO_STANFORD.get(label)


@dataclass(frozen=True)
class ParsedSentence:
    """One dependency parse: ``heads[i]`` is token i's head (-1: the root), ``labels[i]``
    its relation (the root's entry is not compared)."""

    tokens: tuple[str, ...]
    heads: tuple[int, ...]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.heads) == len(self.labels):
            raise ValueError(f"ParsedSentence: {len(self.tokens)} tokens, {len(self.heads)} "
                             f"heads, {len(self.labels)} labels; the three must agree")


@dataclass
class Agreement:
    """Edge agreement of a parse with a reference parse of the same sentences.

    An edge is a non-root token of the reference with its head. ``same_head``: edges whose
    child has the same head in the other parse; ``same_label``: those of them whose
    translated label equals the reference label.
    """

    sentences: int = 0        #: sentence pairs given
    compared: int = 0         #: of them with identical tokens (the others are skipped)
    edges: int = 0            #: reference edges of the compared sentences
    same_head: int = 0
    same_label: int = 0
    same_root: int = 0        #: compared sentences whose root token is the same
    #: (translated label, reference label) -> count, over the same-head edges
    confusion: Counter = field(default_factory=Counter)
    #: labels :func:`stanford_label` gave no counterpart for -> count
    unmapped: Counter = field(default_factory=Counter)

    @property
    def attachment(self) -> float:
        """Share of edges with the same head (unlabelled attachment)."""
        return self.same_head / self.edges if self.edges else float("nan")

    @property
    def label_agreement(self) -> float:
        """Share of same-head edges whose translated label agrees."""
        return self.same_label / self.same_head if self.same_head else float("nan")

    @property
    def labelled_attachment(self) -> float:
        """Share of edges with the same head and the same (translated) label."""
        return self.same_label / self.edges if self.edges else float("nan")

    def summary(self) -> dict[str, float | int]:
        return {"sentences": self.sentences, "compared": self.compared, "edges": self.edges,
                "same_head": self.same_head, "same_label": self.same_label,
                "attachment": round(self.attachment, 4),
                "label_agreement": round(self.label_agreement, 4),
                "labelled_attachment": round(self.labelled_attachment, 4),
                "root": round(self.same_root / self.compared, 4) if self.compared else None}


def agreement(
    reference: Iterable[ParsedSentence],
    other: Iterable[ParsedSentence],
    *,
    translate: Callable[[str, str], str | None] | None = stanford_label,
    known: Iterable[str] | None = None,
    fallback: str = FALLBACK,
) -> Agreement:
    """Compare ``other`` (e.g. spaCy's parses) with ``reference`` (e.g. Stanford's), sentence
    by sentence; only sentences with identical tokens are compared.

    ``translate(label, word)`` maps ``other``'s labels into the reference scheme;
    ``translate=None`` compares the labels as they are. A label it gives no counterpart for
    (``None``), or one outside ``known`` (e.g. a model's relation names), becomes
    ``fallback`` and is counted in :attr:`Agreement.unmapped` (over all of ``other``'s edges
    in the compared sentences) -- what a model with those relations would be given.

    Raises:
        ValueError: the two sequences differ in length.
    """
    ref, oth = list(reference), list(other)
    if len(ref) != len(oth):
        raise ValueError(f"agreement: {len(ref)} reference parses but {len(oth)} others; "
                         "give the parses of the same sentences in the same order")
    allowed = None if known is None else set(known)
    out = Agreement(sentences=len(ref))
    for r, o in zip(ref, oth):
        if tuple(r.tokens) != tuple(o.tokens):
            continue
        out.compared += 1
        out.same_root += r.heads.index(-1) == o.heads.index(-1)
        labels = list(o.labels)
        for i, (h, label) in enumerate(zip(o.heads, o.labels)):
            if h < 0:
                continue
            mapped = translate(label, o.tokens[i]) if translate is not None else label
            if mapped is None or (allowed is not None and mapped not in allowed):
                out.unmapped[label] += 1
                mapped = fallback
            labels[i] = mapped
        for i, (rh, rl) in enumerate(zip(r.heads, r.labels)):
            if rh < 0:
                continue
            out.edges += 1
            if o.heads[i] != rh:
                continue
            out.same_head += 1
            out.confusion[(labels[i], rl)] += 1
            out.same_label += labels[i] == rl
    return out


def graph_parse(graph, relation_names: Sequence[str], tokens: Sequence[str]
                ) -> ParsedSentence:
    """A :class:`ParsedSentence` from a built dependency graph (node i = token i, edge
    child -> head typed by ``edata["rel"]``, ids into ``relation_names``).

    Raises:
        ValueError: the graph's node count is not the number of tokens.
    """
    n = graph.num_nodes()
    if n != len(tokens):
        raise ValueError(f"graph_parse: the graph has {n} nodes for {len(tokens)} tokens; "
                         "give a dependency graph of these tokens")
    heads = [-1] * n
    labels = ["root"] * n
    src, dst = graph.edges()
    rels = graph.edata["rel"].tolist() if graph.num_edges() else []
    for s, d, r in zip(src.tolist(), dst.tolist(), rels):
        heads[s] = d
        labels[s] = relation_names[r]
    return ParsedSentence(tuple(tokens), tuple(heads), tuple(labels))


def built_parses(data_dir: str | os.PathLike, split: str, tree: str
                 ) -> list[ParsedSentence]:
    """Every sentence of one split of a built data directory as parsed in tree kind ``tree``
    (``dependency``, ``dependency-spacy``...), with the tokens of ``text/<split>.jsonl``; a
    pair data set gives sentence A then sentence B of each pair, pair by pair.

    Raises:
        ValueError: the tree kind or split was not built; FileNotFoundError: no data there.
    """
    from gnn_treelstm.trees import data as D

    sp = D.load_split(data_dir, split, tree)
    names = D.load_relations(data_dir, tree).names
    recs = D.load_text(data_dir, split)
    if len(recs) != len(sp):
        raise ValueError(f"{data_dir}: text/{split}.jsonl has {len(recs)} records for "
                         f"{len(sp)} {tree} trees; rebuild the data")
    out = []
    for k, rec in enumerate(recs):
        if sp.graphs_b is None:
            out.append(graph_parse(sp.graphs[k], names, rec["tokens"]))
        else:
            out.append(graph_parse(sp.graphs[k], names, rec["a"]))
            out.append(graph_parse(sp.graphs_b[k], names, rec["b"]))
    return out

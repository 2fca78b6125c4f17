"""What the data set readers hand to :mod:`gnn_treelstm.datasets.build`: examples, user sentences
with their own pre-parses, split discovery for file-based data sets, and the graph of each tree
kind of an example (:func:`sentence_graph`).

:class:`Example` is one example of a split (one sentence or a pair) with its targets and
the parse sources of the built-in data sets. The file-based data sets (``--dataset amr``,
``--dataset jsonl``) carry a :class:`Sentence` per side in ``Example.sources``: tokens and
whatever trees the user gave (a binarized PTB tree, CoNLL-U heads and labels, an AMR);
:func:`source_graph` turns it into the graph of each tree kind, the same way the built-in
data sets do (``constituency``: the given PTB tree binarized, else the head-outward
binarization of the dependency parse; ``dependency``: the given heads, else spaCy's;
``chain``; ``amr``: :mod:`gnn_treelstm.datasets.amr`'s tree).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dgl

from gnn_treelstm.datasets import binarize, chain, dependency, preparsed, ptb
from gnn_treelstm.datasets.amr import AmrTree
from gnn_treelstm.datasets.arrays import TreeRecord, record_graph
from gnn_treelstm.trees.vocab import Relations, Vocab

log = logging.getLogger(__name__)

__all__ = ["FILE_DATASETS", "Example", "Sentence", "split_files", "split_of", "source_record",
           "source_graph", "wants_parse", "sentence_record", "sentence_graph", "needs_spacy"]

#: data sets read from the files named in --src (not from a data mirror root)
FILE_DATASETS = ("amr", "jsonl")


@dataclass
class Sentence:
    """A sentence of a file-based data set and the trees it came with.

    ``heads`` are 0-based (-1 for the root); ``cparents`` is a binary tree over the tokens
    (leaves ``0..n-1`` first, internal nodes after, -1 for the root); ``amr`` with
    ``amr_words``, the word of each AMR node."""

    tokens: list[str]
    where: str  # "file:line" (and side), for messages
    cparents: list[int] | None = None
    heads: list[int] | None = None
    deprels: list[str] | None = None
    amr: AmrTree | None = None
    amr_words: list[str] | None = None
    amr_id: str = ""


@dataclass
class Example:
    """One example of a split: one or two token lists, targets, and parse sources."""

    sents: list[list[str]]
    targets: dict[str, float | int]
    text: dict
    ptb: ptb.PTBTree | None = None
    stanford: list[preparsed.PreParsed] = field(default_factory=list)
    sources: list[Sentence] = field(default_factory=list)

    def words(self) -> list[list[str]]:
        """Every word list that goes into the vocabulary: the sentences, AMR node words."""
        return self.sents + [s.amr_words for s in self.sources if s.amr_words is not None]


#: file-name keywords of each split (``amr-bank-struct-v1.6-training.txt`` -> train)
SPLIT_WORDS = {"train": ("train", "training"), "dev": ("dev", "valid", "validation", "trial"),
               "test": ("test",)}


def split_of(path: str | os.PathLike) -> str | None:
    """The split a file's name names (``train``/``dev``/``test``), None if none or more."""
    words = set(re.split(r"[^a-z]+", Path(path).name.lower()))
    found = [s for s, keys in SPLIT_WORDS.items() if words & set(keys)]
    return found[0] if len(found) == 1 else None


def split_files(sources: Sequence[str | os.PathLike], suffixes: Sequence[str]
                ) -> dict[str, list[Path]]:
    """``{split: files}`` from ``--src`` arguments: ``SPLIT=FILE``, a file whose name says
    its split, or a directory whose files with one of ``suffixes`` do (files there whose
    name names no split are skipped with a warning).

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a file whose split cannot be told, an empty split name, no file at all.
    """
    out: dict[str, list[Path]] = {}
    for src in sources:
        s = str(src)
        name, sep, rest = s.partition("=")
        if sep and name and "/" not in name and not Path(s).exists():
            split, path = name, Path(rest)
        else:
            split, path = None, Path(s)
        if not path.exists():
            raise FileNotFoundError(f"--src {s}: no such file or directory")
        if path.is_dir():
            if split is not None:
                raise ValueError(f"--src {s}: SPLIT=PATH needs a file, {path} is a directory")
            files = sorted(p for p in path.iterdir()
                           if p.is_file() and any(p.name.endswith(x) for x in suffixes))
            for p in files:
                sp = split_of(p)
                if sp is None:
                    log.warning("%s: its name names no split (train/dev/test); skipped", p)
                    continue
                out.setdefault(sp, []).append(p)
            continue
        split = split or split_of(path)
        if split is None:
            raise ValueError(f"--src {s}: cannot tell which split {path.name} is; name it "
                             "train/dev/test (e.g. train.jsonl) or pass SPLIT=PATH "
                             f"(train={s})")
        out.setdefault(split, []).append(path)
    if not out:
        raise ValueError(f"--src {' '.join(map(str, sources))}: no {'/'.join(suffixes)} files "
                         "named for a split (train/dev/test)")
    order = {s: i for i, s in enumerate(SPLIT_WORDS)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def wants_parse(sent: Sentence, trees: Sequence[str]) -> bool:
    """Whether spaCy must parse ``sent`` for one of ``trees`` (it has no heads of its own,
    and no PTB tree where only the constituency tree is asked for)."""
    if sent.heads is not None:
        return False
    return "dependency" in trees or ("constituency" in trees and sent.cparents is None)


def source_graph(tree: str, sent: Sentence, word_ids: Sequence[int], relations: Relations,
                 parse: dependency.DepParse | None, vocab: Any) -> dgl.DGLGraph:
    """The ``tree`` graph of a user sentence (:func:`source_record`)."""
    return record_graph(source_record(tree, sent, word_ids, relations, parse, vocab))


def source_record(tree: str, sent: Sentence, word_ids: Sequence[int], relations: Relations,
                  parse: dependency.DepParse | None, vocab: Any) -> TreeRecord:
    """The ``tree`` of a user sentence as parent pointers (see the module docstring).

    ``parse`` is spaCy's parse of ``sent.tokens`` (None if the sentence has its own heads);
    ``vocab`` maps AMR node words to ids.

    Raises:
        ValueError: ``amr`` for a sentence without an AMR, or an unknown tree kind.
    """
    if tree == "chain":
        return chain.chain_record(word_ids)
    if tree == "amr":
        if sent.amr is None or sent.amr_words is None:
            raise ValueError(f"{sent.where}: no AMR for this sentence; --trees amr needs an "
                             "'amr' (PENMAN) for every sentence")
        t = sent.amr
        rels = [0 if p < 0 else relations.id(r) for p, r in zip(t.parents, t.roles)]
        return TreeRecord(t.parents, vocab.lookup(sent.amr_words), rels=rels)
    if tree == "constituency" and sent.cparents is not None:
        return preparsed.cparents_record(sent.cparents, word_ids, where=sent.where)
    heads = sent.heads
    deps = sent.deprels
    if heads is None:
        if parse is None:  # an internal invariant: build parses what wants_parse names
            raise AssertionError(f"{sent.where}: no parse for a sentence without heads")
        heads, deps = parse.heads, parse.deps
    if tree == "dependency":
        assert deps is not None
        return dependency.dependency_record(heads, deps, word_ids, relations)
    if tree == "constituency":
        return binarize.binary_record(heads, word_ids)
    raise ValueError(f"unknown tree kind {tree!r}")


def sentence_graph(tree: str, ex: Example, side: int, ids: list[int], relations: Relations,
                   parse: dependency.DepParse | None, vocab: Vocab) -> dgl.DGLGraph:
    """The ``tree`` graph of sentence ``side`` of ``ex`` (:func:`sentence_record`)."""
    return record_graph(sentence_record(tree, ex, side, ids, relations, parse, vocab))


def sentence_record(tree: str, ex: Example, side: int, ids: list[int], relations: Relations,
                    parse: dependency.DepParse | None, vocab: Vocab) -> TreeRecord:
    """The ``tree`` of sentence ``side`` of ``ex`` as parent pointers (word ids ``ids``;
    ``parse``: spaCy's parse where the tree kind needs one)."""
    if ex.sources:
        return source_record(tree, ex.sources[side], ids, relations, parse, vocab)
    if tree == "constituency":
        if ex.ptb is not None:
            word_of = dict(zip(ex.ptb.tokens, ids))
            return ptb.tree_record(ex.ptb, word_of.__getitem__)
        if ex.stanford:
            return preparsed.preparsed_constituency_record(ex.stanford[side], ids)
        assert parse is not None
        return binarize.binary_record(parse.heads, ids)
    if tree == "constituency-spacy":
        assert parse is not None
        return binarize.binary_record(parse.heads, ids)
    if tree == "dependency" and ex.stanford:
        return preparsed.preparsed_dependency_record(ex.stanford[side], ids, relations)
    if tree in ("dependency", "dependency-spacy"):
        assert parse is not None
        labels = None
        if ex.ptb is not None:  # SST: phrase labels where a subtree is a gold constituent
            spans = dependency.subtree_spans(parse.heads)
            labels = dependency.labels_from_spans(spans, ex.ptb.span_labels(), parse.root,
                                                  ex.ptb.label)
        return dependency.dependency_record(parse.heads, parse.deps, ids, relations,
                                            labels=labels)
    if tree == "chain":
        labels = None
        if ex.ptb is not None:
            n = len(ids)
            labels = dependency.labels_from_spans(chain.chain_spans(n), ex.ptb.span_labels(),
                                                  n - 1, ex.ptb.label)
        return chain.chain_record(ids, labels=labels)
    raise ValueError(f"unknown tree kind {tree!r}")


def needs_spacy(dataset: str, tree: str, data: dict[str, list[Example]] | None = None
                ) -> bool:
    """Whether building ``tree`` for ``dataset`` (the examples ``data`` of a file-based
    one) needs spaCy's parses."""
    if tree in ("dependency-spacy", "constituency-spacy"):
        return True
    if tree in ("chain", "amr"):
        return False
    if dataset in FILE_DATASETS:
        return any(wants_parse(s, [tree]) for exs in (data or {}).values() for ex in exs
                   for s in ex.sources)
    if dataset == "sst":
        return tree == "dependency"
    if dataset == "sick":
        return False
    return True

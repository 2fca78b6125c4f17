"""Every labelled phrase of a treebank as its own sequence (``--supervision
phrase-sequences``).

Teng & Zhang (2017, §7, baselines) train their bidirectional LSTM on "every phrase span as a
training example": the treebank is converted into sequences, one per labelled phrase. A
sequential model run on a sentence's chain sees each phrase only as a prefix of the
sentence (``chain`` trees label the prefixes that are phrases); here each phrase becomes a
chain of its own words, labelled at its root (the last word), so a forward *and* a backward
LSTM read exactly the phrase.

:func:`phrase_sequences` builds such a split from the sentence chains and the constituency
trees of the same split (the spans and labels of the phrases): every labelled phrase, each
sentence's own chain flagged by ``targets["sentence"]``. From packed trees (as loaded) the
phrases are :class:`PhraseChains`: a phrase is its sentence, its span and its label (four
integers), and a batch's chains are built from the sentence chains' word arrays, no chain
copied (SST-5's training split: 318,582 phrases in 5 MB). Training reads every chain (SST-5:
the 318,582 labelled phrases of the training split, 1,312,313 words against 163,563 in the
sentences); evaluation reads root accuracy on the sentences' chains alone and phrase accuracy
on every chain, the paper's all-phrase accuracy.

A phrase that occurs many times (SST labels each distinct phrase once, so its copies
agree: in SST-5's training split ``.`` is a labelled leaf 8,024 times, ``the`` 6,037) stays
that many chains, so every phrase of the treebank weighs in the loss as a node of a tree
does. Merging the copies into one chain weighted by its count, with a batch's loss
``Σ w·NLL / Σ w``, is *not* the same objective for minibatch training: a batch that draws a
frequent phrase is that phrase's loss alone, and the frequent short phrases get one step an
epoch instead of thousands. Measured on SST-5 (BiLSTM, the first three epochs): dev phrase
accuracy 75.0, 76.0, 76.7 merged against 78.9, 80.0, 80.1 with every copy
(docs/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import dgl
import numpy as np
import torch

from gnn_treelstm.trees.data import Split
from gnn_treelstm.trees.graph import IGNORE, LABEL, NO_WORD, SPAN, WORD, make_tree
from gnn_treelstm.trees.packed import PackedTrees, TreeStore, ranges

__all__ = ["phrase_sequences", "phrase_chain", "PhraseChains"]


def phrase_chain(words: list[int], label: int, *,
                 shapes: dict[int, dgl.DGLGraph] | None = None) -> dgl.DGLGraph:
    """The chain of ``words`` (edges word i -> word i+1, the root the last word) with
    ``label`` on its root; spans are the prefixes, as :mod:`gnn_treelstm.datasets.chain` builds
    them.

    ``shapes``: chains built so far, by length; a chain of a length seen before is a clone
    of that one (its structure shared, ~5x faster than building it) with its own words and
    labels."""
    n = len(words)
    labels = torch.full((n,), IGNORE, dtype=torch.int64)
    labels[-1] = label
    shape = None if shapes is None else shapes.get(n)
    if shape is None:
        g = make_tree(list(range(1, n)) + [-1], words, labels=labels.tolist(),
                      spans=[(0, i + 1) for i in range(n)])
        if shapes is not None:
            shapes[n] = g
        return g
    g = shape.clone()
    g.ndata[WORD] = torch.tensor(words, dtype=torch.int64)
    g.ndata[LABEL] = labels
    return g


def phrase_sequences(chains: Split, constituency: Split) -> Split:
    """One chain per labelled phrase of ``constituency`` (see the module), with
    ``targets["label"]`` and ``targets["sentence"]`` (the sentences' own chains).

    Args:
        chains: the sentence chains of the split (their ``word`` ids are the sentence).
        constituency: the constituency trees of the same split, example for example (their
            nodes' ``span`` and ``label``).

    Raises:
        ValueError: the two splits are not the same examples (counts, or a span beyond its
            sentence, or a labelled node without a span).
    """
    if len(chains) != len(constituency) or chains.pair:
        raise ValueError(f"phrase_sequences: {len(chains)} chains against "
                         f"{len(constituency)} constituency trees of split {chains.name!r}; "
                         "both must be the same single-sentence examples")
    if isinstance(chains.graphs, PackedTrees) and isinstance(constituency.graphs, PackedTrees):
        out = PhraseChains.of(chains.graphs, constituency.graphs, chains.name)
        targets = {"label": torch.from_numpy(out.label.astype(np.int64)),
                   "sentence": torch.from_numpy(out.sentence_flags())}
        return Split(out, None, targets, chains.name, chains.tree,
                     {**chains.meta, "phrase_sequences": {"sentences": len(chains)}})
    graphs, labels, sentence = [], [], []
    shapes: dict[int, dgl.DGLGraph] = {}
    for i, (ch, tree) in enumerate(zip(chains.graphs, constituency.graphs)):
        words = ch.ndata[WORD].tolist()
        n = len(words)
        leaf_words = [(a, w) for (a, b), w in zip(tree.ndata[SPAN].tolist(),
                                                   tree.ndata[WORD].tolist())
                      if b == a + 1 and w != NO_WORD]
        if any(not 0 <= a < n or words[a] != w for a, w in leaf_words):
            raise ValueError(
                f"phrase_sequences: example {i} of split {chains.name!r}: the constituency "
                "tree's words are not the chain's; the chain and constituency data are not "
                "the same sentences (rebuild the data set)")
        for (a, b), label in zip(tree.ndata[SPAN].tolist(), tree.ndata[LABEL].tolist()):
            if label == IGNORE:
                continue
            if not 0 <= a < b <= n:
                raise ValueError(
                    f"phrase_sequences: example {i} of split {chains.name!r}: a labelled "
                    f"constituent spans [{a}, {b}) of a {n}-word sentence; the chain and "
                    "constituency data are not the same sentences (rebuild the data set)")
            graphs.append(phrase_chain(words[a:b], label, shapes=shapes))
            labels.append(label)
            sentence.append(a == 0 and b == n)
    targets = {"label": torch.tensor(labels, dtype=torch.int64),
               "sentence": torch.tensor(sentence, dtype=torch.bool)}
    return Split(graphs, None, targets, chains.name, chains.tree,
                 {**chains.meta, "phrase_sequences": {"sentences": len(chains)}})


def _mismatch(i: int, name: str, what: str) -> ValueError:
    return ValueError(f"phrase_sequences: example {i} of split {name!r}: {what}; the chain "
                      "and constituency data are not the same sentences (rebuild the data set)")


class PhraseChains(TreeStore):
    """Phrase chains held as (sentence, start, end, label) over the packed sentence chains:
    ``chains[i]`` and :meth:`batch` build exactly the graphs :func:`phrase_chain` builds.

    Args:
        chains: the sentence chains (packed).
        tree: per phrase the position of its sentence in ``chains``.
        start: where the phrase's span ``[start, end)`` in its sentence begins.
        end: where that span ends (exclusive).
        label: the phrase's label (its chain's root label).
    """

    def __init__(self, chains: PackedTrees, tree: np.ndarray, start: np.ndarray,
                 end: np.ndarray, label: np.ndarray) -> None:
        self.chains, self.tree, self.start, self.end, self.label = \
            chains, tree, start, end, label
        self.dtypes = {"n.word": "int64", "n.leaf": "bool", "n.label": "int64",
                       "n.span": "int64", "n.root": "bool", "e.rel": "int64",
                       "e.pos": "int64"}

    @classmethod
    def of(cls, chains: PackedTrees, constituency: PackedTrees, name: str = "") -> PhraseChains:
        """Every labelled node of ``constituency`` as a phrase of the same sentence's chain
        (in tree order, then node order, as :func:`phrase_sequences` lists them)."""
        n_words = chains.sizes()[0]
        nn = constituency.sizes()[0]
        tree = np.repeat(np.arange(len(nn)), nn)
        span = constituency.field_values("n." + SPAN).reshape(-1, 2)
        label = constituency.field_values("n." + LABEL)
        word = constituency.field_values("n." + WORD)
        a, b = span[:, 0], span[:, 1]
        n = n_words[tree]
        leaf = (b == a + 1) & (word != NO_WORD)
        chain_words = chains.field_values("n." + WORD)
        starts = np.concatenate([[0], np.cumsum(n_words)[:-1]])
        ok = leaf & (a >= 0) & (a < n)
        bad = leaf & ~ok
        bad[ok] = chain_words[starts[tree[ok]] + a[ok]] != word[ok]
        if bad.any():
            raise _mismatch(int(tree[np.argmax(bad)]), name,
                            "the constituency tree's words are not the chain's")
        keep = label != IGNORE
        out_of = keep & ~((a >= 0) & (a < b) & (b <= n))
        if out_of.any():
            k = int(np.argmax(out_of))
            raise _mismatch(int(tree[k]), name, f"a labelled constituent spans [{a[k]}, "
                            f"{b[k]}) of a {n[k]}-word sentence")
        return cls(chains, tree[keep].astype(np.int32), a[keep].astype(np.int32),
                   b[keep].astype(np.int32), label[keep].astype(np.int16))

    def sentence_flags(self) -> np.ndarray:
        """Which phrases are their whole sentence."""
        return (self.start == 0) & (self.end == self.chains.sizes()[0][self.tree])

    def __len__(self) -> int:
        return len(self.tree)

    def take(self, index: Sequence[int] | np.ndarray | torch.Tensor) -> PhraseChains:
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        return PhraseChains(self.chains, self.tree[idx], self.start[idx], self.end[idx],
                            self.label[idx])

    def remap(self, field: str, table: torch.Tensor) -> PhraseChains:
        if field != "n." + WORD:
            raise KeyError(f"remap: phrase chains map only their words, not {field!r}")
        return PhraseChains(self.chains.remap(field, table), self.tree, self.start, self.end,
                            self.label)

    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        n = (self.end - self.start).astype(np.int64)
        return n, n - 1

    def field_values(self, field: str) -> np.ndarray:
        if field in ("e.rel", "e.pos"):
            return np.zeros(int(self.sizes()[1].sum()), dtype=np.int64)
        raise KeyError(f"field_values: phrase chains give only their edge fields, "
                       f"not {field!r}")

    def max_children(self) -> tuple[int, int]:
        n = self.end - self.start
        if not (n > 1).any():
            return 0, -1
        return 1, int(np.argmax(n > 1))

    def batch(self, positions: Sequence[int] | np.ndarray | torch.Tensor) -> dgl.DGLGraph:
        """The batched chains of the phrases at ``positions`` (``dgl.batch`` of their
        :func:`phrase_chain` graphs)."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        n = (self.end[pos] - self.start[pos]).astype(np.int64)
        chain_ids = self.chains.stored_ids()[self.tree[pos]]
        first = np.asarray(self.chains.arrays["node_offsets"])[chain_ids] + self.start[pos]
        word = self.chains.gather_values("n." + WORD, ranges(first, n))
        base = np.cumsum(n) - n
        total = int(n.sum())
        local = np.arange(total, dtype=np.int64) - np.repeat(base, n)
        src = ranges(base, n - 1)
        g = dgl.graph((torch.from_numpy(src), torch.from_numpy(src + 1)), num_nodes=total)
        label = np.full(total, IGNORE, dtype=np.int64)
        label[base + n - 1] = self.label[pos]
        g.ndata[WORD] = word.to(torch.int64)
        g.ndata["leaf"] = torch.from_numpy(local == 0)
        g.ndata[LABEL] = torch.from_numpy(label)
        g.ndata[SPAN] = torch.from_numpy(np.stack([np.zeros(total, np.int64), local + 1], 1))
        g.ndata["root"] = torch.from_numpy(local == np.repeat(n - 1, n))
        g.edata["rel"] = torch.zeros(len(src), dtype=torch.int64)
        g.edata["pos"] = torch.zeros(len(src), dtype=torch.int64)
        g.set_batch_num_nodes(torch.from_numpy(n))
        g.set_batch_num_edges(torch.from_numpy(n - 1))
        return g

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.tree, self.start, self.end, self.label)))

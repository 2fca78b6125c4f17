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
sentence's own chain flagged by ``targets["sentence"]``. Training reads every chain (SST-5:
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

import dgl
import torch

from gnn_treelstm.trees.data import Split
from gnn_treelstm.trees.graph import IGNORE, LABEL, NO_WORD, SPAN, WORD, make_tree

__all__ = ["phrase_sequences", "phrase_chain"]


def phrase_chain(words: list[int], label: int, *,
                 shapes: dict[int, dgl.DGLGraph] | None = None) -> dgl.DGLGraph:
    """The chain of ``words`` (edges word i -> word i+1, the root the last word) with
    ``label`` on its root; spans are the prefixes, as :mod:`data_prep.chain` builds them.

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

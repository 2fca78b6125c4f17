"""Every labelled phrase of a treebank as its own sequence (``--supervision
phrase-sequences``).

Teng & Zhang (2017, §7, baselines) train their bidirectional LSTM on "every phrase span as a
training example": the treebank is converted into sequences, one per labelled phrase. A
sequential model run on a sentence's chain sees each phrase only as a prefix of the
sentence (``chain`` trees label the prefixes that are phrases); here each phrase becomes a
chain of its own words, labelled at its root (the last word), so a forward *and* a backward
LSTM read exactly the phrase.

:func:`phrase_sequences` builds such a split from the sentence chains and the constituency
trees of the same split (the spans and labels of the phrases):

* **training** (``merge=True``): a phrase that occurs several times with the same label
  (SST labels each distinct phrase once, so its copies agree) is one chain with
  ``targets["weight"]`` = its count; the weighted loss (``Σ w·NLL / Σ w`` over a batch) is
  the loss of the copies, had they been in the same batch, and an epoch's summed objective
  is unchanged. 318,582 labelled phrases of the
  SST training split become 159,274 chains (1,136,024 words against 163,563 in the
  sentences).
* **evaluation** (``merge=False``): every labelled phrase, each sentence's own chain
  flagged by ``targets["sentence"]``: root accuracy is read on those alone, phrase
  accuracy on every chain, the paper's all-phrase accuracy.
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


def phrase_sequences(chains: Split, constituency: Split, *, merge: bool) -> Split:
    """One chain per labelled phrase of ``constituency`` (see the module).

    Args:
        chains: the sentence chains of the split (their ``word`` ids are the sentence).
        constituency: the constituency trees of the same split, example for example (their
            nodes' ``span`` and ``label``).
        merge: one chain per distinct (phrase, label) with ``targets["weight"]`` its count
            (training), or one per phrase with ``targets["sentence"]`` marking the
            sentences (evaluation).

    Raises:
        ValueError: the two splits are not the same examples (counts, or a span beyond its
            sentence, or a labelled node without a span).
    """
    if len(chains) != len(constituency) or chains.pair:
        raise ValueError(f"phrase_sequences: {len(chains)} chains against "
                         f"{len(constituency)} constituency trees of split {chains.name!r}; "
                         "both must be the same single-sentence examples")
    found: dict[tuple[tuple[int, ...], int], list[int]] = {}  # -> [count, index]
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
            key = (tuple(words[a:b]), label)
            if merge and key in found:
                found[key][0] += 1
                continue
            if merge:
                found[key] = [1, len(graphs)]
            graphs.append(phrase_chain(words[a:b], label, shapes=shapes))
            labels.append(label)
            sentence.append(a == 0 and b == n)
    targets = {"label": torch.tensor(labels, dtype=torch.int64)}
    if merge:
        weight = torch.ones(len(graphs), dtype=torch.float32)
        for count, index in found.values():
            weight[index] = float(count)
        targets["weight"] = weight
    else:
        targets["sentence"] = torch.tensor(sentence, dtype=torch.bool)
    return Split(graphs, None, targets, chains.name, chains.tree,
                 {**chains.meta, "phrase_sequences": {"sentences": len(chains),
                                                      "merged": merge}})

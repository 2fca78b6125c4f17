"""Where a model's training trees came from: the data set's treebank, a parser's output
or the word order (:func:`tree_source`), as a saved model records it (:func:`trees_from`),
and whether its dependency relations are Stanford's (:func:`stanford_relations`), which
decides how spaCy's labels are translated at prediction
(:class:`~gnn_treelstm.datasets.text.RelationMap`).
"""

from __future__ import annotations

from gnn_treelstm.models.checkpoint import Checkpoint

__all__ = ["STANFORD_SICK", "tree_source", "trees_from", "stanford_relations"]

#: :func:`tree_source` of SICK's ``dependency`` / ``constituency`` trees
STANFORD_SICK = "the Stanford parses shipped with SICK"


def trees_from(ck: Checkpoint) -> str:
    """Where a checkpoint's training trees came from: as recorded by ``save_pretrained``,
    else from its data set and tree kind (:func:`tree_source`)."""
    dataset = ck.meta.get("dataset") or getattr(ck.model.task, "dataset", None)
    return ck.meta.get("trees_from") or tree_source(dataset, ck.tree)


def stanford_relations(ck: Checkpoint) -> bool:
    """Whether the checkpoint's dependency relations are Stanford's: trained on SICK's
    Stanford parses, and no relation is a label only ClearNLP (spaCy) has."""
    from gnn_treelstm.datasets.labels import CLEARNLP_ONLY

    return (ck.tree == "dependency" and trees_from(ck) == STANFORD_SICK
            and not CLEARNLP_ONLY & set(ck.relations))


def tree_source(dataset: str | None, tree: str | None) -> str:
    """Where a data set's trees of kind ``tree`` came from when the model was trained."""
    from gnn_treelstm.datasets.example import needs_spacy

    if tree == "chain":
        return "word order (no parser)"
    if tree == "amr":
        return "AMR graphs of the data set"
    if dataset == "sick" and tree in ("dependency", "constituency"):
        return STANFORD_SICK
    if dataset == "sst" and tree == "constituency":
        return "SST's treebank (gold binary constituency trees)"
    if dataset and tree and needs_spacy(dataset, tree):
        return "spaCy parses"
    return f"the {dataset or 'data set'}'s {tree or ''} trees".replace("  ", " ")

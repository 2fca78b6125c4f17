"""Label raw sentences with a trained model: texts in, one record per input out.

    from gnn_treelstm import Predictor

    predictor = Predictor.from_pretrained("runs/sst")      # a run, a checkpoint or a saved model
    predictor.predict(["a gorgeous, witty film", "a dull one"])   # -> list of records
    predictor.save_pretrained("models/sst")                # one self-contained directory
    predictor.draw("a gorgeous, witty film", "tree.png")   # the tree it predicted on

Sentences are parsed with spaCy into the model's tree kind, through the same functions as
``gnn_treelstm.datasets.build``: dependency trees, binarized for constituency models, chains for the
sequential LSTMs. :meth:`Predictor.predict` returns the records ``gnn-treelstm predict --json
[--nodes]`` prints (the command and ``gnn-treelstm serve`` run this same path; see
:mod:`gnn_treelstm.commands.predict` for the fields).

Parses become graphs through :func:`gnn_treelstm.datasets.text.text_graphs`. A model trained
on SICK's Stanford parses (``--tree dependency``) knows Stanford basic dependency labels while
spaCy labels ClearNLP ones: each predictor's
:class:`~gnn_treelstm.datasets.text.RelationMap` (:attr:`Predictor.relation_map`) translates
each spaCy label through :data:`gnn_treelstm.datasets.labels.SPACY_TO_STANFORD` before
looking it up. A label that ends up outside the model's relations (no counterpart, a Stanford
label SICK never uses, or a label of another pipeline) becomes the relation ``dep`` (the
model's relation 0 only when it has no ``dep``), is counted, and is named in one warning per
run (``predict``: once, with the run's counts; ``serve``: again only when a request brings a
label not reported before). :attr:`Predictor.unmapped_relations` holds the running counts.
Each task says how its outputs become a record's fields
(:meth:`gnn_treelstm.tasks.base.Task.record`).

The texts are read by :mod:`gnn_treelstm.models.inputs`, where the training trees came from
is :mod:`gnn_treelstm.models.provenance`'s, and :meth:`Predictor.draw` draws through
:mod:`gnn_treelstm.models.picture`; this module predicts.

A saved model (:meth:`Predictor.save_pretrained`) is a directory holding ``model.pt`` (the
weights, model configuration, vocabulary, relation names, label names and the training run's
configuration, loaded with ``weights_only=True``) and ``config.json`` (the same facts for a
reader: task, tree kind, where its trees came from and the parser used at prediction). It
loads without the training data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import torch

from gnn_treelstm.datasets.text import RelationMap, sentence_count, text_graphs
from gnn_treelstm.files import write_json
from gnn_treelstm.models.checkpoint import (
    PRETRAINED_FILE,
    Checkpoint,
    load_model,
    save_checkpoint,
)
from gnn_treelstm.models.inputs import Input, read_inputs
from gnn_treelstm.models.picture import draw_prediction
from gnn_treelstm.models.provenance import stanford_relations, trees_from
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.data import Example, collate

__all__ = ["Predictor", "node_records"]

log = logging.getLogger(__name__)

def node_records(graph: Any, tokens: Sequence[str], labels: Sequence[dict]) -> list[dict]:
    """``predict --nodes`` and ``serve``'s trees: every node of ``graph`` with its parent
    (None at the root), span, words and the task's ``labels`` of it."""
    src, dst = graph.edges()
    parent = [None] * graph.num_nodes()
    for s, d in zip(src.tolist(), dst.tolist()):
        parent[s] = d
    return [{"id": i, "parent": parent[i], "span": [lo, hi],
             "words": " ".join(tokens[lo:hi]) if 0 <= lo < hi else "", **labels[i]}
            for i, (lo, hi) in enumerate(graph.ndata[G.SPAN].tolist())]


class Predictor:
    """A trained model ready for raw text: a loaded checkpoint plus its spaCy pipeline.

    Args:
        checkpoint: a loaded checkpoint (:func:`gnn_treelstm.models.checkpoint.load_model`).
        nlp: a spaCy pipeline with a dependency parser; default: ``spacy_model``, else the
            first installed English pipeline, loaded on the first prediction.
        spacy_model: the name of the pipeline to load when ``nlp`` is not given.
    """

    def __init__(self, checkpoint: Checkpoint, *, nlp: Any = None,
                 spacy_model: str | None = None) -> None:
        self.checkpoint = checkpoint
        self._nlp = nlp
        self.spacy_model = spacy_model
        self._relations = RelationMap(checkpoint.relations,
                                      stanford=stanford_relations(checkpoint))

    # ------------------------------------------------------------------ loading, saving
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, device: str | torch.device = "cpu",
                        engine: str | None = None, nlp: Any = None,
                        spacy_model: str | None = None) -> Predictor:
        """Load a training run's directory (its ``best.pt``), a checkpoint file, or a
        directory written by :meth:`save_pretrained` (its ``model.pt``).

        ``engine`` overrides the propagation engine the model was trained with.
        """
        return cls(load_model(path, device=device, engine=engine), nlp=nlp,
                   spacy_model=spacy_model)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write the model as one self-contained directory (``model.pt`` and
        ``config.json``); returns the directory. Loads back with :meth:`from_pretrained`
        after the training data are gone."""
        out = Path(directory)
        if out.exists() and not out.is_dir():
            raise ValueError(f"save_pretrained: {out} is a file; give a directory")
        ck = self.checkpoint
        meta = {**ck.meta, "tree": self.tree, "trees_from": self.trees_from}
        save_checkpoint(out / PRETRAINED_FILE, ck.model, vocab=ck.vocab,
                        relations=ck.relations, label_names=ck.label_names,
                        run_config=ck.run_config, meta=meta)
        write_json(out / "config.json", {
            "task": self.task.name, "pair": bool(self.task.pair), "tree": self.tree,
            "trees_from": self.trees_from, "parser_at_prediction": "spaCy",
            "label_names": ck.label_names, "relations": ck.relations,
            "vocab_size": len(ck.vocab), "model_config": ck.model.config.to_dict(),
            "run_config": ck.run_config, "dev": ck.meta.get("dev"),
            "epoch": ck.meta.get("epoch")})
        log.info("saved the model to %s", out)
        return out

    # ------------------------------------------------------------------ what it is
    @property
    def model(self) -> torch.nn.Module:
        """The :class:`~gnn_treelstm.models.treelstm.TreeLSTMModel` (in eval mode)."""
        return self.checkpoint.model

    @property
    def task(self):  # noqa: ANN201 - a tasks.Task
        """The model's task (``pair`` tells whether it reads sentence pairs)."""
        return self.checkpoint.model.task

    @property
    def label_names(self) -> list[str] | None:
        """Class names (``None`` for relatedness scores)."""
        return self.checkpoint.label_names

    @property
    def tree(self) -> str | None:
        """The tree kind the model reads (``dependency``, ``constituency``, ``chain``...)."""
        return self.checkpoint.tree

    @property
    def trees_from(self) -> str:
        """Where the training trees came from (predictions always parse with spaCy)."""
        return trees_from(self.checkpoint)

    @property
    def relation_map(self) -> RelationMap:
        """How spaCy's labels become the model's relations
        (:class:`~gnn_treelstm.datasets.text.RelationMap`): one per predictor, shared by all
        its predictions, so its counts and its warning are per run, not per call."""
        return self._relations

    @property
    def unmapped_relations(self) -> dict[str, int]:
        """spaCy label -> edges that fell back to ``dep`` in this predictor's predictions
        so far (the counts the warning names)."""
        return dict(self.relation_map.unmapped)

    @property
    def nlp(self) -> Any:
        """The spaCy pipeline (loaded on first use)."""
        if self._nlp is None:
            from gnn_treelstm.datasets.dependency import load_pipeline

            self._nlp = load_pipeline(self.spacy_model)
        return self._nlp

    def __repr__(self) -> str:
        cell = self.checkpoint.model.config.cell
        return (f"Predictor({cell} on {self.task.name}, {self.tree} trees from "
                f"{self.trees_from}, path={str(self.checkpoint.path)!r})")

    # ------------------------------------------------------------------ prediction
    def inputs(self, texts: str | Sequence[str | tuple[str, str] | Input]) -> list[Input]:
        """:class:`~gnn_treelstm.models.inputs.Input` objects from a text, a list of texts
        (pairs: ``"A ||| B"``, ``"A<TAB>B"`` or a tuple ``(A, B)``) or inputs
        (:func:`~gnn_treelstm.models.inputs.read_inputs`)."""
        return read_inputs(texts, pair=bool(self.task.pair))

    def graphs(self, parses: Sequence, *, report: bool = True) -> list:
        """Graphs of the model's tree kind from spaCy parses
        (:class:`gnn_treelstm.datasets.dependency.DepParse`), the words looked up in its
        vocabulary and the labels through :attr:`relation_map`; with ``report`` a warning
        names the labels that fell back, once per new set (:meth:`iter_predict` reports
        once at its end instead).

        Raises:
            ValueError: the model's trees are a kind not built from a parse (e.g. AMR).
        """
        ck = self.checkpoint
        graphs = text_graphs(parses, ck.tree, ck.vocab, self._relations)
        if report:
            self._relations.report(log)
        return graphs

    def iter_predict(self, texts: str | Sequence[str | tuple[str, str] | Input], *,
                     nodes: bool = False, batch_size: int = 64,
                     progress: Callable[[Iterable, int], Iterable] | None = None
                     ) -> Iterator[dict]:
        """One record per input, batch by batch (see :meth:`predict`); the labels that
        fell back to ``dep`` are reported once, at the end."""
        for rec, _ in self._predict(self.inputs(texts), nodes, batch_size, progress):
            yield rec

    def trees(self, text: str | tuple[str, str] | Input, *,
              nodes: bool = False) -> tuple[dict, list]:
        """The record of one input (:meth:`predict`'s; ``nodes``: with every node's label)
        and the graphs it was predicted from, one per side (sentence A; then B for a pair),
        in the model's tree kind; node ``i`` of a graph is token ``i`` of the record's
        ``tokens`` (``tokens_b``)."""
        with closing(self._predict(self.inputs([text]), nodes, 1, None)) as records:
            rec, sides = next(records)
        return rec, [graph for _, graph in sides]

    @torch.no_grad()
    def _predict(self, inputs: Sequence[Input], nodes: bool, batch_size: int,
                 progress: Callable[[Iterable, int], Iterable] | None
                 ) -> Iterator[tuple[dict, list[tuple[Any, Any]]]]:
        """Each input's record with the ``(parse, graph)`` of each side it was predicted
        from, batch by batch."""
        task = self.task
        self.model.eval()
        if nodes and (task.pair or not getattr(task, "node_labels", False)):
            raise ValueError(f"--nodes: the {task.name} task predicts one label per "
                             f"{'pair' if task.pair else 'sentence'}, not one per node; use "
                             "it with a phrase-level sentiment model (sst-5 / sst-2)")
        if batch_size <= 0:
            raise ValueError(f"--batch-size must be positive, got {batch_size}")
        starts = range(0, len(inputs), batch_size)
        try:
            for start in progress(starts, len(starts)) if progress else starts:
                yield from self._batch(inputs[start:start + batch_size], nodes)
        finally:  # also when the caller stops early (serve takes one record)
            self._relations.report(log)

    def _batch(self, chunk: Sequence[Input], nodes: bool
               ) -> Iterator[tuple[dict, list[tuple[Any, Any]]]]:
        from gnn_treelstm.datasets import dependency

        ck, task = self.checkpoint, self.task
        pa = dependency.parse_texts(self.nlp, [x.a for x in chunk])
        pb = dependency.parse_texts(self.nlp, [x.b for x in chunk]) if task.pair else None
        ga = self.graphs(pa, report=False)
        gb = self.graphs(pb, report=False) if pb is not None else None
        # the data loader's collate: pairs batched once, the level schedule built there
        batch = collate([Example(j, g, None if gb is None else gb[j], {})
                         for j, g in enumerate(ga)],
                        schedule=self.model.cell.engine == "level",
                        top_down=self.model.cell.runs_top_down)
        out = self.model(batch.graph, batch.graph_b, schedule=batch.schedule,
                         num_a=batch.num_a)
        offsets = [0, *batch.graph.batch_num_nodes()[:len(ga)].cumsum(0).tolist()]
        for j, x in enumerate(chunk):
            sides = [(pa[j], ga[j])] + ([(pb[j], gb[j])] if pb is not None else [])
            rec = self._text_fields(x, sides)
            try:
                rec.update(task.record(out, j, ck.label_names))
            except ValueError as exc:
                raise ValueError(f"{ck.path}: {exc}") from exc
            if nodes:
                labels = task.node_records(out, slice(offsets[j], offsets[j + 1]),
                                           ck.label_names)
                rec["nodes"] = node_records(ga[j], pa[j].tokens, labels)
            yield rec, sides

    def _text_fields(self, x: Input, sides: Sequence[tuple[Any, Any]]) -> dict:
        """A record's fields before the prediction: the input's line, text(s), tokens and
        the words unknown to the model (with a warning where every word is, or where a
        line looks like several sentences)."""
        (pa, _), *rest = sides
        rec: dict = {"line": x.line, "text": x.a, "tokens": pa.tokens}
        if rest:
            rec.update(text_b=x.b, tokens_b=rest[0][0].tokens)
        unk = self.checkpoint.vocab.unk
        # node i of every tree kind built from a parse is token i: its word id is there
        unknown = [t for p, g in sides
                   for t, w in zip(p.tokens, g.ndata[G.WORD][:len(p.tokens)].tolist())
                   if w == unk]
        rec["unknown_words"] = unknown
        if unknown and len(unknown) == sum(len(p.tokens) for p, _ in sides):
            log.warning("line %d: every word is unknown to the model's vocabulary; the "
                        "prediction rests on the unknown-word vector alone", x.line)
        for p, _ in sides:
            count = sentence_count(p.tokens)
            if count > 1:
                log.warning("line %d looks like %d sentences; it is predicted as one "
                            "tree (give one sentence per line)", x.line, count)
        return rec

    def draw(self, text: str | tuple[str, str] | Input, path: str | os.PathLike, *,
             side: int = 0, **kwargs: Any) -> Path:
        """Draw the tree the model predicted on for ``text`` (``side=1``: sentence B of a
        pair) to ``path`` (PNG, or SVG for a ``.svg`` name), with its words, relation names,
        the predicted label (or score) in the title and, where the model labels every node
        (phrase-level sentiment), every node coloured by its predicted label, the legend
        naming them; :func:`gnn_treelstm.trees.drawing.draw_tree`'s keyword arguments pass
        through."""
        nodes = not self.task.pair and bool(getattr(self.task, "node_labels", False))
        rec, graphs = self.trees(text, nodes=nodes)
        return draw_prediction(self.checkpoint, rec, graphs, path, side=side, **kwargs)

    def format_text(self, rec: dict) -> str:
        """The text form of a record: ``label<TAB>p<TAB>sentence`` (a score for
        relatedness, :meth:`gnn_treelstm.tasks.base.Task.verdict`; pairs: ``A ||| B``)."""
        shown = rec["text"] if not self.task.pair else f"{rec['text']} ||| {rec['text_b']}"
        return f"{self.task.verdict(rec)}\t{shown}"

    def predict(self, texts: str | Sequence[str | tuple[str, str] | Input], *,
                nodes: bool = False, batch_size: int = 64) -> list[dict]:
        """The records of ``gnn-treelstm predict --json`` (``nodes``: ``--nodes``), one per
        input: ``label`` and ``probabilities`` (classification) or ``score``
        (relatedness), ``tokens``, ``unknown_words`` and, with ``nodes``, every node's label."""
        return list(self.iter_predict(texts, nodes=nodes, batch_size=batch_size))

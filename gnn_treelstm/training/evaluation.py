"""Metrics of a model on a split, with the per-example arrays they come from, and of a
checkpoint on a split of its data set (:func:`evaluate_checkpoint`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import dgl
import numpy as np
import torch

from gnn_treelstm.models.checkpoint import Checkpoint, checkpoint_path, load_model
from gnn_treelstm.models.treelstm import TreeLSTMModel
from gnn_treelstm.tasks import gather_batches
from gnn_treelstm.training.batching import level_schedules, make_loader, to_device
from gnn_treelstm.training.data import DataError, as_phrase_sequences, resolve_data_dir
from gnn_treelstm.training.devices import pick_device
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.vocab import fingerprint

__all__ = ["evaluate", "evaluate_checkpoint", "data_dir_for", "load_eval_split",
           "check_vocabularies"]

log = logging.getLogger(__name__)


def _word_counts(g: dgl.DGLGraph) -> np.ndarray:
    has_word = (g.ndata[G.WORD] != G.NO_WORD).to(torch.float32).cpu()
    seg = torch.repeat_interleave(torch.arange(g.batch_size), g.batch_num_nodes().cpu())
    return torch.zeros(g.batch_size).index_add_(0, seg, has_word).numpy()


@torch.no_grad()
def evaluate(model: TreeLSTMModel, split: D.Split, *, batch_size: int = 256,
             device: torch.device | str = "cpu", graphs_on_device: bool = True,
             tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
             ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Metrics of ``model`` on ``split`` and the gathered per-example arrays.

    The arrays hold the task's ``gather`` output plus ``index`` (example id) and ``length``
    (words per sentence; the mean of both sentences for pairs, as Tai Fig 4), of the
    examples the task scores (``Task.examples_scored``: for phrase sequences, the sentences).
    """
    device = torch.device(device)
    task = model.task
    was_training = model.training
    model.eval()
    parts = []
    level = model.cell.engine == "level"
    try:
        for batch in make_loader(split, batch_size, shuffle=False,
                                 schedule=level_schedules(model.cell, level)):
            lengths = _word_counts(batch.graph)
            if batch.graph_b is not None:
                lengths = (lengths + _word_counts(batch.graph_b)) / 2
            elif batch.num_a is not None:  # A sentences, then B sentences
                lengths = (lengths[:batch.num_a] + lengths[batch.num_a:]) / 2
            batch = to_device(batch, device, graphs_on_device)
            out = model(batch.graph, batch.graph_b, schedule=batch.schedule,
                        num_a=batch.num_a)
            part = task.gather(out, batch)
            index = batch.index.cpu().numpy()
            keep = task.examples_scored(batch)
            if keep is not None:
                index, lengths = index[keep], lengths[keep]
            part["index"] = index
            part["length"] = lengths
            parts.append(part)
    finally:
        model.train(was_training)
    gathered = gather_batches(parts)
    toks = None
    if tokens is not None and len(tokens) >= len(split):
        toks = [tokens[int(i)] for i in gathered.get("index", [])]
    return task.metrics(gathered, toks), gathered


def data_dir_for(ck: Checkpoint, data: str | None) -> Path:
    """The built data directory to evaluate on (``--data``, else the checkpoint's)."""
    dataset = ck.model.task.dataset
    tree = ck.tree
    if data is not None:
        return resolve_data_dir(data, dataset, tree,
                                runs_dir=ck.run_config.get("runs_dir", "runs"))
    stored = ck.meta.get("data_dir")
    if stored and (Path(stored) / "meta.json").exists():
        return Path(stored)
    if ck.run_config.get("data") is None and stored and "_sample_data" in stored:
        return resolve_data_dir(None, dataset, tree,
                                runs_dir=ck.run_config.get("runs_dir", "runs"))
    raise DataError(
        f"the data directory recorded in the checkpoint ({stored}) is gone; pass --data DIR "
        f"or rebuild it with `gnn-treelstm build --dataset {dataset} --src "
        f"RAW_DATA_DIR --out {stored}`"
    )


def load_eval_split(ck: Checkpoint, data_dir: Path, split: str, *,
                    remap_vocab: bool = False) -> D.Split:
    tree = ck.tree
    meta = D.load_meta(data_dir)
    if split not in meta.get("splits", {}):
        raise DataError(f"{data_dir} has no split {split!r}; splits: "
                        f"{', '.join(meta.get('splits', {}))}")
    raw = check_vocabularies(ck, data_dir, D.load_split(data_dir, split, tree),
                             remap=remap_vocab)
    sp = ck.model.task.prepare_split(raw)
    limit = ck.run_config.get("max_eval")
    sp = sp.head(limit)
    if ck.model.task.supervision == "phrase-sequences":  # scored as it was trained
        sp = as_phrase_sequences(ck.model.task, data_dir, sp, limit)
    return sp


def _id_map(data_names: Sequence[str], model_ids: dict[str, int], default: int | None,
            what: str, data_file: Path) -> torch.Tensor:
    out = []
    for name in data_names:
        i = model_ids.get(name, default)
        if i is None:
            raise DataError(f"{data_file}: {what} {name!r} is unknown to the checkpoint; it "
                            "cannot be remapped")
        out.append(i)
    return torch.tensor(out, dtype=torch.long)


def check_vocabularies(ck: Checkpoint, data_dir: Path, sp: D.Split, *,
                       remap: bool = False) -> D.Split:
    """The split, its word (and relation) ids checked against the checkpoint's.

    Data built with another vocabulary would be scored with word ids that point at other
    words; that is an error naming both fingerprints, unless ``remap``: ids are then
    translated by the word's text (words the model never saw become ``<unk>``; an unknown
    relation stays an error)."""
    data_vocab = D.load_vocab(data_dir)
    tree = sp.tree
    word_map = rel_map = None
    if data_vocab.itos != ck.vocab.itos:
        if not remap:
            raise DataError(
                f"{data_dir / 'vocab.json'} ({len(data_vocab)} words, fingerprint "
                f"{fingerprint(data_vocab.itos)}) is not the vocabulary the checkpoint was "
                f"trained with ({len(ck.vocab)} words, fingerprint "
                f"{fingerprint(ck.vocab.itos)}): its word ids would point at other words. "
                "Evaluate on the data the model was trained on, or pass --remap-vocab to "
                "translate the ids by word")
        word_map = _id_map(data_vocab.itos, ck.vocab.stoi, ck.vocab.unk, "word",
                           data_dir / "vocab.json")
        unseen = int((word_map == ck.vocab.unk).sum()) - 1
        log.warning("--remap-vocab: %d of %d words of %s are unknown to the model",
                    unseen, len(data_vocab) - 1, data_dir)
    rel_file = data_dir / "relations" / f"{tree}.json"
    if ck.relations and rel_file.exists():
        data_rels = D.load_relations(data_dir, tree).names
        if data_rels != list(ck.relations):
            if not remap:
                raise DataError(
                    f"{rel_file} (fingerprint {fingerprint(data_rels)}) is not the relation "
                    f"set the checkpoint was trained with (fingerprint "
                    f"{fingerprint(ck.relations)}); pass --remap-vocab to translate by name")
            rel_map = _id_map(data_rels, {r: i for i, r in enumerate(ck.relations)}, None,
                              "relation", rel_file)
    if word_map is None and rel_map is None:
        return sp
    return D.remap_split(sp, word_map, rel_map)


def evaluate_checkpoint(path: str | Path, *, split: str = "test", data: str | None = None,
                        device: str = "cpu", engine: str | None = None,
                        batch_size: int = 256, remap_vocab: bool = False,
                        ) -> tuple[Checkpoint, dict, dict]:
    """Load a checkpoint, evaluate it on ``split``; ``(checkpoint, metrics, gathered)``."""
    ck = load_model(checkpoint_path(path), engine=engine)
    dev, on_device = pick_device(device, ck.model.config.engine)
    ck.model.to(dev)
    data_dir = data_dir_for(ck, data)
    sp = load_eval_split(ck, data_dir, split, remap_vocab=remap_vocab)
    tokens = None
    if getattr(ck.model.task, "subsets", False) and (data_dir / "text").exists():
        recs = D.load_text(data_dir, split)
        tokens = [(list(r["a"]), list(r["b"])) if "a" in r else (list(r["tokens"]), None)
                  for r in recs]
    metrics, gathered = evaluate(ck.model, sp, batch_size=batch_size, device=dev,
                                 graphs_on_device=on_device, tokens=tokens)
    return ck, metrics, gathered

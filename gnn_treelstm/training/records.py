"""What a run writes besides checkpoints: JSON-safe values, ``metrics.csv`` rows and the
mean (std) over seeds of ``results.json`` (see :mod:`gnn_treelstm.training.trainer` for the run
directory's layout)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gnn_treelstm import metrics as M
from gnn_treelstm.files import append_whole, atomic_write, jsonable, write_json
from gnn_treelstm.training.provenance import code_record

if TYPE_CHECKING:
    from gnn_treelstm.models.treelstm import ModelConfig
    from gnn_treelstm.tasks import Task
    from gnn_treelstm.training.config import RunConfig
    from gnn_treelstm.training.data import RunData

__all__ = ["flat", "append_csv", "append_metrics", "aggregate",
           "run_record", "write_results"]


def flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested keys joined by ``_``: ``{"dev": {"accuracy": 1}}`` -> ``{"dev_accuracy": 1}``."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def append_csv(path: Path, record: dict[str, Any]) -> None:
    """Append one epoch record to ``metrics.csv`` (nested keys joined by ``_``, e.g.
    ``dev_accuracy``), writing the header with the first row: the same numbers as
    ``metrics.jsonl``, for spreadsheets and plotting tools. The row is appended whole or
    not at all (:func:`~gnn_treelstm.files.append_whole`)."""
    row = flat(jsonable(record))
    new = not path.exists() or path.stat().st_size == 0  # (a cut-back first row)
    if not new:  # the columns of the first row: a later extra key is dropped, not shifted
        with open(path, encoding="utf-8", newline="") as rf:
            fields = next(csv.reader(rf))
    else:
        fields = list(row)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    if new:
        writer.writeheader()
    writer.writerow(row)
    append_whole(path, text.getvalue())


def append_metrics(metrics_file: Path, record: dict[str, Any]) -> None:
    """Append one epoch record to ``metrics.jsonl`` and its row to ``metrics.csv``, each
    whole or not at all (a full disk leaves no half line)."""
    append_whole(metrics_file, json.dumps(jsonable(record)) + "\n")
    append_csv(metrics_file.with_suffix(".csv"), record)


def aggregate(per_seed: list[dict], split: str) -> dict[str, dict]:
    """``{metric: {"mean", "std", "values"}}`` over seeds for one split."""
    keys: list[str] = []
    for r in per_seed:
        for k in r.get(split, {}):
            if k not in keys:
                keys.append(k)
    out = {}
    for k in keys:
        vals = [r[split].get(k) for r in per_seed if split in r]
        nums = [float(v) for v in vals if isinstance(v, int | float)]
        mean, std = M.mean_std(nums)
        out[k] = {"mean": mean, "std": std, "values": vals}
    return out


def run_record(run_id: str, cfg: RunConfig, task: Task, rd: RunData,
               model_config: ModelConfig, emb_info: dict, num_relations: int, *,
               data_given: str | None = None) -> dict:
    """What ``config.json`` records of a run: its configurations, data, vectors, optimizer,
    task, device and threads, and the fingerprints of the modules of its model's math
    (:func:`gnn_treelstm.training.provenance.code_record`). ``data_given``: ``--data`` as
    typed, recorded (``data.given``) beside the absolute paths when it differs from
    them."""
    data: dict[str, Any] = {"dir": str(rd.data_dir)}
    if data_given is not None and data_given != cfg.data:
        data["given"] = data_given
    return {"run_id": run_id, "run_config": cfg.to_dict(),
            "model_config": model_config.to_dict(),
            "code": code_record(model_config.cell, cfg.task),
            "data": {**data, "dataset": rd.meta.get("dataset"),
                     "tree": cfg.tree, "examples": {k: len(v) for k, v in rd.splits.items()},
                     "vocab_size": len(rd.vocab), "num_relations": num_relations,
                     "sample": rd.meta.get("sample"), "dev_split": rd.dev_split},
            "embeddings": emb_info,
            "optimizer": {"name": cfg.optimizer, "lr": cfg.lr, "emb_lr": cfg.emb_lr,
                          "l2": cfg.l2, "emb_l2": cfg.emb_l2, "rel_lr": cfg.rel_lr,
                          "loss_reduction": cfg.loss_reduction},
            "task": {"name": task.name, "supervision": task.supervision,
                     "selection_metric": task.selection_metric},
            "device": cfg.device, "engine": cfg.engine,
            "torch_threads": torch.get_num_threads(),
            "openmp_env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                      "OMP_NUM_THREADS") if k in os.environ}}


def write_results(out: Path, name: str, record: dict, task: Task, per_seed: list[dict],
                  seeds: list[int], *, test: bool) -> dict:
    """Select the seed with the best dev score (its checkpoint becomes ``out/best.pt`` when
    there are several), write ``out/results.json`` (per seed, mean and std over seeds, speed
    and memory) and return it. ``name``: the run's name; ``record``: its
    :func:`run_record`; ``test``: whether test metrics were computed."""
    cfg = record["run_config"]
    best_i = 0
    for i, r in enumerate(per_seed):
        if task.better(r["dev"].get(task.selection_metric, math.nan),
                       per_seed[best_i]["dev"].get(task.selection_metric, math.nan)):
            best_i = i
    if len(seeds) > 1:
        src = Path(per_seed[best_i]["checkpoint"])
        with open(src, "rb") as f:
            atomic_write(out / "best.pt", lambda dst: shutil.copyfileobj(f, dst))
    results = {
        "run_id": record["run_id"], "name": name, "task": cfg["task"],
        "model": cfg["model"], "tree": cfg["tree"],
        "selection_metric": task.selection_metric,
        "metric_names": list(task.metric_names),
        "seeds": [{k: v for k, v in r.items() if k != "epochs"} for r in per_seed],
        "best_seed": seeds[best_i], "checkpoint": str(out / "best.pt"),
        "dev": aggregate(per_seed, "dev"),
        "test": aggregate(per_seed, "test") if test else {},
        "seconds_per_epoch": float(np.median([r["seconds_per_epoch"] for r in per_seed])),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in per_seed),
        "process_peak_rss_mb": max(r["process_peak_rss_mb"] for r in per_seed),
        "data": record["data"],
    }
    write_json(out / "results.json", results)
    return results

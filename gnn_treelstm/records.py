"""What a run writes besides checkpoints: JSON-safe values, ``metrics.csv`` rows and the
mean (std) over seeds of ``results.json`` (see :mod:`gnn_treelstm.training` for the run
directory's layout)."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import metrics as M
from .files import atomic_write
from .provenance import code_record

if TYPE_CHECKING:
    from .model import ModelConfig
    from .runconfig import RunConfig
    from .rundata import RunData
    from .tasks import Task

__all__ = ["jsonable", "write_json", "flat", "append_csv", "append_metrics", "aggregate",
           "format_metrics", "run_record", "write_results"]


def jsonable(x: Any) -> Any:
    """``x`` with NaN/inf floats as ``None`` and numpy scalars as Python numbers (nested
    dicts, lists and tuples too), so that ``json.dumps`` writes standard JSON."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.generic):
        return jsonable(x.item())
    return x


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` (made :func:`jsonable`) to ``path`` atomically, indented."""
    atomic_write(path, json.dumps(jsonable(obj), indent=2) + "\n")


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
    ``metrics.jsonl``, for spreadsheets and plotting tools."""
    row = flat(jsonable(record))
    new = not path.exists()
    with open(path, "a", encoding="utf-8", newline="") as fh:
        if not new:  # the columns of the first row: a later extra key is dropped, not shifted
            with open(path, encoding="utf-8", newline="") as rf:
                fields = next(csv.reader(rf))
        else:
            fields = list(row)
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def append_metrics(metrics_file: Path, record: dict[str, Any]) -> None:
    """Append one epoch record to ``metrics.jsonl`` and its row to ``metrics.csv``."""
    with open(metrics_file, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(jsonable(record)) + "\n")
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


def format_metrics(metrics: dict) -> str:
    """``"accuracy 0.8123, count 50"``: metrics for a log line."""
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items())


def run_record(run_id: str, cfg: RunConfig, task: Task, rd: RunData,
               model_config: ModelConfig, emb_info: dict, num_relations: int) -> dict:
    """What ``config.json`` records of a run: its configurations, data, vectors, optimizer,
    task, device and threads, and the fingerprints of the modules of its model's math
    (:func:`gnn_treelstm.provenance.code_record`)."""
    return {"run_id": run_id, "run_config": cfg.to_dict(),
            "model_config": model_config.to_dict(),
            "code": code_record(model_config.cell, cfg.task),
            "data": {"dir": str(rd.data_dir), "dataset": rd.meta.get("dataset"),
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

"""The training loop as library code (``train.py`` is its command line).

Defaults follow the papers (Tai et al. 2015 §5.3; Tran & Cheng 2018 §6.1):

* AdaGrad, learning rate 0.05, word embeddings at learning rate 0.1 (a separate parameter
  group, as in DGL's Tree-LSTM example); or Adam, lr 0.001 (the default for Teng & Zhang's
  cells, Teng §6, and for inference, Tran §6.1). See :meth:`RunConfig.resolved`.
* Per-minibatch L2 regularization of strength λ = 1e-4 on every parameter except the
  word embeddings: the minibatch objective is ``mean loss + λ/2 ‖θ‖²``, i.e. ``λθ`` is
  added to the gradient at every optimizer step (``weight_decay`` of both optimizers is
  exactly this coupled L2 term), as in Tai's released code.
* Dropout 0.5 on the classifier input for sentiment and inference (none for relatedness),
  minibatches of 25, model selection on the dev set after every epoch, test metrics of the
  selected checkpoint; ``seeds`` runs with consecutive seeds, reported as mean (std).

A run writes ``<runs_dir>/<name>/``::

    config.json      the resolved RunConfig, ModelConfig and data description
    config.yaml      the resolved RunConfig alone, for ``gnn-treelstm train --config``
    metrics.csv      the same per-epoch numbers as metrics.jsonl, one row per epoch
    metrics.jsonl    one JSON object per epoch (seed, train loss, dev metrics, speed:
                     train_seconds = data loading + forward + backward + optimizer of
                     the training epoch, eval_seconds = the dev evaluation, apart;
                     memory: peak_rss_mb of the training epoch, eval_peak_rss_mb,
                     rss_mb at the epoch's end, cuda_* on CUDA)
    best.pt          the selected checkpoint (several seeds: seed-<s>/best.pt each, and
                     best.pt = the seed with the best dev score)
    results.json     dev/test metrics per seed, their mean and std, seconds per epoch

Nothing here prints; progress goes to ``logging`` and to the optional ``progress`` /
``on_epoch`` callbacks (``train.py`` plugs tqdm and a one-line summary into them). The
loop's parts live beside it in :mod:`gnn_treelstm.training` (config, data, devices, optim,
batching, evaluation, memory, records).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from gnn_treelstm.files import atomic_write
from gnn_treelstm.metrics import format_metrics
from gnn_treelstm.models.checkpoint import load_model, save_checkpoint
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.tasks import Task, build_task
from gnn_treelstm.training import distributed as DIST
from gnn_treelstm.training import resume as R
from gnn_treelstm.training import rundir
from gnn_treelstm.training.batching import make_loader, to_device
from gnn_treelstm.training.config import RunConfig, build_model_config, run_config_yaml
from gnn_treelstm.training.data import RunData, check_compatibility, load_embeddings, prepare_data
from gnn_treelstm.training.devices import resolve_device
from gnn_treelstm.training.evaluation import evaluate
from gnn_treelstm.training.faults import NonFiniteError, batch_ids, nonfinite, nonfinite_message
from gnn_treelstm.training.memory import memory_stats, reset_peak_memory
from gnn_treelstm.training.optim import batch_objective, build_optimizer
from gnn_treelstm.training.records import (
    append_metrics,
    jsonable,
    run_record,
    write_json,
    write_results,
)
from gnn_treelstm.training.zerowatch import ZeroWatch

log = logging.getLogger(__name__)

__all__ = ["run", "train_model", "NonFiniteError", "ProgressFn"]

ProgressFn = Callable[..., Iterable]


def train_model(
    cfg: RunConfig,
    rd: RunData,
    model_config: ModelConfig,
    *,
    seed: int,
    out_dir: Path,
    embeddings: torch.Tensor | None = None,
    progress: ProgressFn | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    metrics_file: Path | None = None,
    config_record: dict | None = None,
    resume: bool = False,
    release_heap: Callable[[], object] | None = None,
) -> dict:
    """Train one model with one seed; return the per-seed result (best epoch, metrics).

    The training state is saved to ``out_dir/state.pt`` after every epoch and every
    ``cfg.checkpoint_every`` batches (:mod:`gnn_treelstm.training.resume`); ``resume`` continues
    from it (a fresh start when there is none). ``release_heap``: run before every
    peak-memory window (:func:`~gnn_treelstm.training.memory.reset_peak_memory`)."""
    R.seed_everything(seed)
    device, graphs_on_device = resolve_device(cfg)
    model = TreeLSTMModel(model_config)
    if embeddings is not None:
        model.load_embeddings(embeddings)
    model.to(device)
    task = model.task
    optimizer = build_optimizer(model, cfg)
    zero_watch = ZeroWatch(model)
    train, dev = rd.splits["train"], rd.splits[rd.dev_split]
    dev_tokens = rd.tokens(rd.dev_split) if getattr(task, "subsets", False) else None
    world = DIST.world_size() if cfg.distributed else 1
    main = DIST.is_main()
    loader = make_loader(train, cfg.batch_size, shuffle=True, seed=seed,
                         schedule=cfg.engine == "level",
                         shard=(DIST.rank(), world) if cfg.distributed else None)
    net: torch.nn.Module = model
    if cfg.distributed:  # gradients averaged over the ranks in backward
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, find_unused_parameters=True)
    best_score: float | None = None
    best: dict = {}
    epochs_done = []
    ckpt_path = out_dir / "best.pt"
    sel = task.selection_metric
    reduction = cfg.resolved().loss_reduction
    process_peak = 0.0
    # gradients checked for NaN/inf each step: all but the word embedding (a fault upstream
    # of it shows in the cell's gradients too); ~0.2 ms a step
    checked = [p for n, p in model.named_parameters()
               if p.requires_grad and not n.startswith("embedding.")]
    state = R.load_state(out_dir) if resume else None
    start_epoch, done_steps, partial = 1, 0, None
    if state is not None:
        R.restore_training(state, model, optimizer, loader.generator)
        best_score, best, epochs_done = state["best_score"], state["best"], state["epochs"]
        process_peak, partial = state["process_peak"], state.get("partial")
        start_epoch, done_steps = state["epoch"], state["step"]
        R.truncate_metrics(metrics_file, seed, len(epochs_done))
        log.info("seed %d: resuming at epoch %d after %d batches (%s)", seed, start_epoch,
                 done_steps, out_dir / R.STATE_NAME)

    def snapshot(epoch: int, step: int, loader_state: torch.Tensor | None,
                 partial: dict | None) -> None:
        if cfg.distributed:
            return  # a distributed run does not resume (yet)
        R.save_state(out_dir, {
            "seed": seed, "epoch": epoch, "step": step, "loader": loader_state,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": R.capture_rng(), "best_score": best_score, "best": best,
            "epochs": epochs_done, "process_peak": process_peak, "partial": partial,
            "run_id": (config_record or {}).get("run_id")})

    for epoch in range(start_epoch, cfg.epochs + 1):
        model.train()
        process_peak = max(process_peak, memory_stats(device)["peak_rss_mb"])
        per_epoch_peak = reset_peak_memory(device, release_heap=release_heap)
        epoch_loader_state = loader.generator.get_state()  # replays this epoch's order
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
        n_ex, n_trees, skipped, skip_to = 0, 0, 0, 0
        if partial is not None and epoch == start_epoch:  # resumed inside this epoch
            loss_sum += partial["loss_sum"]
            n_ex, n_trees, skipped = partial["n_ex"], partial["n_trees"], partial["skipped"]
            t0 -= partial["seconds"]
            skip_to = done_steps
        it: Iterable = loader
        if progress is not None:
            it = progress(loader, total=len(loader),
                          desc=f"seed {seed} epoch {epoch}/{cfg.epochs}")
        for step, batch in enumerate(it, 1):
            if step <= skip_to:
                continue  # done before the run was stopped
            if step == skip_to + 1 and skip_to:
                R.restore_rng(state["rng"])  # as it was after batch ``skip_to``
            batch = to_device(batch, device, graphs_on_device)
            out = net(batch.graph, batch.graph_b, schedule=batch.schedule)
            loss = task.loss(out, batch)
            b = len(batch)
            optimizer.zero_grad(set_to_none=True)
            objective = batch_objective(loss, b, reduction)
            if world > 1:  # DDP averages over the ranks: make that the global batch's
                # objective (the mean over the global batch, or its sum)
                glob = loader.batch_sampler.last_global
                objective = objective * (world if reduction == "sum" else b * world / glob)
            objective.backward()
            fault = nonfinite(loss, checked)
            if world > 1 and DIST.all_sum([float(bool(fault))], device)[0] and not fault:
                fault = "another rank's loss or gradients are NaN or infinite"
            if fault:
                if not cfg.skip_nonfinite:
                    raise NonFiniteError(nonfinite_message(
                        fault, epoch, step, batch, best, ckpt_path))
                skipped += 1
                log.warning("seed %d epoch %d step %d: %s; batch skipped (examples %s)",
                            seed, epoch, step, fault, batch_ids(batch))
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            loss_sum += loss.detach() * b
            n_ex += b
            n_trees += b * (2 if batch.graph_b is not None else 1)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 \
                    and step < len(loader):
                snapshot(epoch, step, epoch_loader_state, {
                    "loss_sum": float(loss_sum), "n_ex": n_ex, "n_trees": n_trees,
                    "skipped": skipped, "seconds": time.perf_counter() - t0})
            if step % 5 == 0 or step == len(loader):
                mean_loss = float(loss_sum) / max(n_ex, 1)
                if hasattr(it, "set_postfix"):
                    el = time.perf_counter() - t0
                    it.set_postfix(loss=f"{mean_loss:.4f}",
                                   trees_s=f"{n_trees / max(el, 1e-9):.0f}")
        total_loss = float(loss_sum)  # waits for the device: the epoch's work is done
        if world > 1:  # the epoch over all ranks
            total_loss, n_ex, n_trees, skipped = DIST.all_sum(
                [total_loss, n_ex, n_trees, skipped], device)
            n_ex, n_trees, skipped = int(n_ex), int(n_trees), int(skipped)
        train_seconds = time.perf_counter() - t0
        memory = memory_stats(device)  # the training epoch's peak (per_epoch_peak)
        process_peak = max(process_peak, memory["peak_rss_mb"])
        reset_peak_memory(device, release_heap=release_heap)
        t_eval = time.perf_counter()
        dev_metrics, _ = evaluate(model, dev, batch_size=cfg.eval_batch_size, device=device,
                                  graphs_on_device=graphs_on_device, tokens=dev_tokens)
        eval_seconds = time.perf_counter() - t_eval
        eval_memory = memory_stats(device)
        process_peak = max(process_peak, eval_memory["peak_rss_mb"])
        score = dev_metrics.get(sel, math.nan)
        improved = task.better(score, best_score)
        if improved:
            best_score = score
            best = {"epoch": epoch, "dev": dev_metrics}
        if improved and main:
            save_checkpoint(
                ckpt_path, model, vocab=rd.vocab, relations=rd.relations,
                label_names=rd.label_names, run_config=cfg.to_dict(),
                meta={"epoch": epoch, "seed": seed, "dev": dev_metrics,
                      "data_dir": str(rd.data_dir), "dataset": rd.meta.get("dataset"),
                      "tree": cfg.tree, "dev_split": rd.dev_split,
                      **(config_record or {})},
            )
        record = {
            "run_id": (config_record or {}).get("run_id"),
            "seed": seed, "epoch": epoch, "train_loss": total_loss / max(n_ex, 1),
            "train_seconds": round(train_seconds, 3),
            "trees_per_second": round(n_trees / max(train_seconds, 1e-9), 1),
            "skipped_nonfinite": skipped,
            "examples": n_ex, "dev": dev_metrics, "best": improved,
            "eval_seconds": round(eval_seconds, 3), **memory,
            "peak_rss_scope": "epoch" if per_epoch_peak else "process",
            "eval_peak_rss_mb": eval_memory["peak_rss_mb"],
            "process_peak_rss_mb": process_peak,
        }
        record["zeroed_parameters"] = " ".join(zero_watch.warn(seed, epoch))  # newly
        epochs_done.append(record)
        if metrics_file is not None:
            append_metrics(metrics_file, record)
        log.info("seed %d epoch %d/%d: loss %.4f, dev %s %.4f%s, %.1fs (%.0f trees/s)",
                 seed, epoch, cfg.epochs, record["train_loss"], sel, score,
                 " (best)" if improved else "", train_seconds, record["trees_per_second"])
        snapshot(epoch + 1, 0, loader.generator.get_state(), None)  # the epoch is done
        if on_epoch is not None:
            on_epoch(record)
    if not best:
        raise RuntimeError(f"no epoch produced a finite dev {sel}; nothing to select")
    result = {"seed": seed, "best_epoch": best["epoch"], "dev": best["dev"],
              "checkpoint": str(ckpt_path),
              "seconds_per_epoch": float(np.median([r["train_seconds"] for r in epochs_done])),
              "peak_rss_mb": max(r["peak_rss_mb"] for r in epochs_done),
              "process_peak_rss_mb": process_peak,
              "zeroed_parameters": zero_watch.zeroed, "epochs": epochs_done}
    if cfg.test and "test" in rd.splits and main:
        ck = load_model(ckpt_path, device=device)
        test_tokens = rd.tokens("test") if getattr(task, "subsets", False) else None
        result["test"], _ = evaluate(ck.model, rd.splits["test"],
                                     batch_size=cfg.eval_batch_size, device=device,
                                     graphs_on_device=graphs_on_device, tokens=test_tokens)
        log.info("seed %d: best epoch %d, dev %s %.4f, test %s", seed, best["epoch"], sel,
                 best_score, format_metrics(result["test"]))
    return result


def run(cfg: RunConfig, *, progress: ProgressFn | None = None,
        on_epoch: Callable[[dict], None] | None = None, overwrite: bool = False,
        keep: Sequence[str] = (), resume: bool = False,
        release_heap: Callable[[], object] | None = None) -> dict:
    """Check, load, train ``cfg.seeds`` models, write the run directory; return results.

    The run directory is claimed first (:func:`gnn_treelstm.training.rundir.claim`): one writer at a
    time, and a directory that already holds a run is refused unless ``overwrite``;
    ``keep`` names files the caller put there for this run (the CLI's ``train.log``).
    ``resume``: continue the run in that directory where it stopped (its seeds' saved
    states, :mod:`gnn_treelstm.training.resume`); ``cfg`` must be the run's recorded configuration.
    ``release_heap``: called before each epoch's training and dev evaluation, before their
    peak memory is measured (the CLIs pass :func:`gnn_treelstm.commands.heap.release_free_heap`)."""
    cfg.check()
    mode_given = cfg.embeddings_mode is not None
    cfg = cfg.resolved()
    task = build_task(cfg.task, supervision=cfg.supervision)
    resolve_device(cfg)
    rd = prepare_data(cfg, task)
    num_relations = int(rd.meta.get("num_relations", {}).get(cfg.tree, len(rd.relations))
                        or 1)
    check_compatibility(cfg, rd, num_relations)
    embeddings, emb_info = load_embeddings(cfg, rd, explicit=mode_given)
    model_config = build_model_config(cfg, vocab_size=len(rd.vocab),
                                      num_relations=num_relations, embeddings=embeddings,
                                      emb_info=emb_info)
    TreeLSTMModel(model_config)  # fail on a bad architecture before writing anything
    name = cfg.name or f"{cfg.task}-{cfg.model}-{cfg.tree}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(cfg.runs_dir) / name
    if not cfg.distributed:
        with rundir.claim(out, overwrite=overwrite, keep=keep, resume=resume):
            return _train_run(cfg, task, rd, model_config, embeddings, emb_info,
                              num_relations, out, name, progress=progress,
                              on_epoch=on_epoch, resume=resume, release_heap=release_heap)
    # data parallel: rank 0 claims the directory and tells the others whether it could
    device, _ = resolve_device(cfg)
    if resume:
        raise ValueError("--resume of a --distributed run is not supported yet; run it "
                         "again with --overwrite")
    DIST.init(device)
    main = DIST.is_main()
    with DIST.claimed_by_main(lambda: rundir.claim(out, overwrite=overwrite, keep=keep), out,
                              device):
        return _train_run(cfg, task, rd, model_config, embeddings, emb_info, num_relations,
                          out, name, progress=progress if main else None,
                          on_epoch=on_epoch if main else None, main=main,
                          release_heap=release_heap)


def _train_run(cfg: RunConfig, task: Task, rd: RunData, model_config: ModelConfig,
               embeddings: torch.Tensor | None, emb_info: dict, num_relations: int,
               out: Path, name: str, *, progress: ProgressFn | None,
               on_epoch: Callable[[dict], None] | None, resume: bool = False,
               main: bool = True, release_heap: Callable[[], object] | None = None) -> dict:
    """The body of :func:`run`, inside the claimed run directory ``out``; ``main=False``
    (ranks > 0 of a distributed run): train, write nothing, return ``{"rank": r}``."""
    metrics_file = out / "metrics.jsonl" if main else None
    counts = {k: len(v) for k, v in rd.splits.items()}
    run_id = R.resumed_run_id(out, cfg) if resume else rundir.new_run_id()
    record = run_record(run_id, cfg, task, rd, model_config, emb_info, num_relations)
    if not resume and main:
        write_json(out / "config.json", record)
        atomic_write(out / "config.yaml", run_config_yaml(cfg))
    log.info("run %s: %s/%s/%s on %s (%s)", out, cfg.task, cfg.model, cfg.tree, rd.data_dir,
             ", ".join(f"{k} {v}" for k, v in counts.items()))
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    per_seed = []
    for s in seeds:
        seed_dir = out if len(seeds) == 1 else out / f"seed-{s}"
        if main:
            seed_dir.mkdir(parents=True, exist_ok=True)
        done = R.load_seed_result(seed_dir) if resume else None
        if done is not None:
            log.info("seed %d: finished before the run was stopped (%s)", s,
                     seed_dir / R.SEED_RESULT_NAME)
            per_seed.append(done)
            continue
        result = train_model(
            cfg, rd, model_config, seed=s, out_dir=seed_dir, embeddings=embeddings,
            progress=progress, on_epoch=on_epoch, metrics_file=metrics_file,
            config_record={"data_examples": counts, "run_id": run_id}, resume=resume,
            release_heap=release_heap)
        if main:
            R.save_seed_result(seed_dir, jsonable(result))
        per_seed.append(result)
    if not main:
        return {"rank": DIST.rank()}
    results = write_results(out, name, record, task, per_seed, seeds,
                            test=cfg.test and "test" in rd.splits)
    results["run_dir"] = str(out)
    return results

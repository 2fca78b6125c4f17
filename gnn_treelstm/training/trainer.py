"""The training loop: :class:`Trainer` (``gnn-treelstm train`` is its command line).

Defaults follow the papers (Tai et al. 2015 §5.3; Tran & Cheng 2018 §6.1):

* AdaGrad, learning rate 0.05, word embeddings at learning rate 0.1 (a separate parameter
  group, as in DGL's Tree-LSTM example); or Adam, lr 0.001 (the default for Teng & Zhang's
  cells, Teng §6, and for inference, Tran §6.1). See
  :meth:`~gnn_treelstm.training.config.RunConfig.resolved`.
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

Options beyond the papers, each off by default (the papers' loop is unchanged without
them): ``--clip-grad-norm`` (:func:`~gnn_treelstm.training.optim.clip_gradients` before each
optimizer step), ``--lr-schedule`` and its parameters (a scheduler stepped at each epoch's
end, :mod:`gnn_treelstm.training.schedule`), ``--patience`` (early stopping: a seed ends
after N epochs without a better dev score; its result says at which epoch) and
``--tensorboard`` (scalars per epoch, :mod:`gnn_treelstm.training.tensorboard_log`, attached
as hooks).

How it reads::

    trainer = Trainer(cfg, hooks=TrainHooks(on_epoch_end=print))  # resolves cfg, loads data
    results = trainer.fit()                # claims the run directory, then per seed:
    #   start_seed (model, optimizer, scheduler, loader; the saved TrainState on resume)
    #   per epoch: train_epoch -> evaluate_dev -> end_epoch (selection, best.pt,
    #              metrics.jsonl, schedule, early stopping, save_state)
    #   finish_seed (the selected checkpoint on the test split)

Nothing here prints; progress goes to ``logging`` and to the caller's :class:`TrainHooks`
(``gnn-treelstm train`` plugs a tqdm bar and a one-line summary per epoch into them). The
start-up stages (data, word vectors, native loops, model) are one INFO line each on the
:data:`STARTUP_LOG` logger, which the command line shows by default. The loop's parts live
beside it in :mod:`gnn_treelstm.training` (config, data, devices, optim, schedule,
batching, evaluation, memory, records, resume).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnn_treelstm.files import atomic_write
from gnn_treelstm.metrics import format_metrics
from gnn_treelstm.models.checkpoint import load_model, save_checkpoint
from gnn_treelstm.models.treelstm import TreeLSTMModel
from gnn_treelstm.tasks import build_task
from gnn_treelstm.training import distributed as DIST
from gnn_treelstm.training import rundir
from gnn_treelstm.training.batching import (
    Loader,
    level_schedules,
    loader_workers,
    make_loader,
    to_device,
)
from gnn_treelstm.training.config import RunConfig, build_model_config, run_config_yaml
from gnn_treelstm.training.data import check_compatibility, load_embeddings, prepare_data
from gnn_treelstm.training.devices import resolve_device
from gnn_treelstm.training.evaluation import evaluate
from gnn_treelstm.training.faults import (
    FiniteChecks,
    NonFiniteError,
    batch_ids,
    nonfinite_message,
    saved_files,
    writing,
)
from gnn_treelstm.training.memory import memory_stats, reset_peak_memory
from gnn_treelstm.training.optim import (
    batch_objective,
    build_optimizer,
    clip_gradients,
    release_grads,
)
from gnn_treelstm.training.records import (
    append_metrics,
    jsonable,
    run_record,
    write_json,
    write_results,
)
from gnn_treelstm.training.resume import (
    SEED_RESULT_NAME,
    STATE_NAME,
    TrainState,
    capture_rng,
    load_seed_result,
    restore_rng,
    restore_training,
    resumed_run_id,
    save_seed_result,
    seed_everything,
    truncate_metrics,
)
from gnn_treelstm.training.schedule import (
    Scheduler,
    build_scheduler,
    current_lr,
    step_scheduler,
)
from gnn_treelstm.training.tensorboard_log import TensorBoardLog
from gnn_treelstm.training.zerowatch import ZeroWatch
from gnn_treelstm.trees import manifest

log = logging.getLogger(__name__)
#: the logger of the start-up lines (data, word vectors, native loops, model), which
#: ``gnn-treelstm train`` shows on the console at its default log level
STARTUP_LOG = f"{__name__}.startup"
startup = logging.getLogger(STARTUP_LOG)

__all__ = ["Trainer", "TrainHooks", "EpochTraining", "ProgressFn", "STARTUP_LOG",
           "chain_hooks", "run"]

#: ``progress(batches, total=n, desc=text)``: the batches, wrapped (a tqdm bar)
ProgressFn = Callable[..., Iterable]


@dataclass
class TrainHooks:
    """What a caller plugs into training; each hook left ``None`` does nothing.

    Attributes:
        progress: wraps each epoch's batches, ``progress(batches, total=n, desc=text)``
            returning an iterable of them (the commands pass a tqdm bar; one with
            ``set_postfix`` shows the running loss and trees per second).
        on_epoch_end: called with each epoch's record (what ``metrics.jsonl`` gets).
        release_heap: called before each peak-memory window (every epoch's training and
            dev evaluation): the commands pass
            :func:`gnn_treelstm.commands.heap.release_free_heap`, so that free heap pages
            go back to the OS and do not count.
        on_seed_start: called as a seed's training starts, ``(seed, seed_dir, epoch)``
            with the first epoch it trains (> 1 when it resumes).
        on_seed_end: called with a seed's result when its training ends.
    """

    progress: ProgressFn | None = None
    on_epoch_end: Callable[[dict], None] | None = None
    release_heap: Callable[[], object] | None = None
    on_seed_start: Callable[[int, Path, int], None] | None = None
    on_seed_end: Callable[[dict], None] | None = None


def _calls(fns: Sequence[Callable[..., Any] | None]) -> Callable[..., None] | None:
    """One callable calling each of ``fns`` that is set, in order (None if none is)."""
    fns = [f for f in fns if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def call(*args: Any) -> None:
        for f in fns:
            f(*args)

    return call


def chain_hooks(*hooks: TrainHooks) -> TrainHooks:
    """The hooks of ``hooks`` together: each event calls every hook set for it, in order;
    ``progress`` is the first one set (it wraps the batches, so only one can)."""
    return TrainHooks(
        progress=next((h.progress for h in hooks if h.progress is not None), None),
        **{name: _calls([getattr(h, name) for h in hooks])
           for name in ("on_epoch_end", "release_heap", "on_seed_start", "on_seed_end")})


@dataclass
class EpochTraining:
    """The numbers of one epoch's training (over every rank of a distributed run).

    Attributes:
        loss: the mean training loss per example.
        examples: examples trained on (skipped batches left out).
        trees: trees trained on (two per example for pair tasks).
        skipped: batches skipped for a NaN/inf loss or gradient.
        seconds: data loading + forward + backward + optimizer.
        memory: :func:`~gnn_treelstm.training.memory.memory_stats` at the epoch's end.
        peak_scope: ``epoch`` if ``memory``'s peak is the epoch's, ``process`` if the
            peak could not be reset.
    """

    loss: float
    examples: int
    trees: int
    skipped: int
    seconds: float
    memory: dict[str, float]
    peak_scope: str


@dataclass(frozen=True)
class RunPlace:
    """Where a run trains, settled by :meth:`Trainer.fit` once it holds the run directory.

    Attributes:
        run_id: the run's id (:func:`~gnn_treelstm.training.rundir.new_run_id`; a resumed
            run keeps its recorded one).
        writes: whether this process writes the run's files (rank 0 of a distributed run,
            or the only process).
        world: how many processes train the run (1 unless distributed).
    """

    run_id: str
    writes: bool
    world: int


@dataclass
class SeedRun:
    """What training one seed holds, built by :meth:`Trainer.start_seed`.

    Attributes:
        seed_dir: the seed's files (``best.pt``, ``state.pt``).
        model: the model.
        net: the model, or its DDP wrapper in a distributed run (what a step runs).
        optimizer: its optimizer (:func:`~gnn_treelstm.training.optim.build_optimizer`).
        scheduler: its learning-rate scheduler, None for the papers' constant rates.
        loader: the training batches, shuffled by the seed's generator.
        zero_watch: the weights watched for collapsing to zero.
        trained: the weights the optimizer trains (clipped together).
        checked: the weights whose gradients are checked for NaN/inf each step (all
            trained ones but the word embedding: a fault upstream of it shows in the
            cell's gradients too; ~0.2 ms a step).
        state: the progress ``--resume`` saves and restores
            (:class:`~gnn_treelstm.training.resume.TrainState`).
    """

    seed_dir: Path
    model: TreeLSTMModel
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Scheduler | None
    loader: Loader
    zero_watch: ZeroWatch
    trained: list[torch.nn.Parameter]
    checked: list[torch.nn.Parameter]
    state: TrainState


@dataclass
class _EpochSums:
    """The running sums of an epoch's training (a resumed epoch starts from its saved
    ones, :attr:`TrainState.partial <gnn_treelstm.training.resume.TrainState.partial>`)."""

    loss_sum: torch.Tensor  # summed on the device: no sync per step
    examples: int = 0
    trees: int = 0
    skipped: int = 0

    @classmethod
    def start(cls, partial: dict | None, device: torch.device) -> _EpochSums:
        """Zero sums, or the saved ``partial`` ones of a seed resumed inside the epoch."""
        sums = cls(torch.zeros((), device=device))
        if partial is not None:
            sums.loss_sum += partial["loss_sum"]
            sums.examples, sums.trees = partial["n_ex"], partial["n_trees"]
            sums.skipped = partial["skipped"]
        return sums

    def add(self, loss: torch.Tensor, batch: Any) -> None:
        """Count a trained batch of mean loss ``loss``."""
        b = len(batch)
        self.loss_sum += loss * b
        self.examples += b
        self.trees += batch.num_trees

    def saved(self, seconds: float) -> dict:
        """The sums as a state saved inside the epoch records them, ``seconds`` in."""
        return {"loss_sum": float(self.loss_sum), "n_ex": self.examples,
                "n_trees": self.trees, "skipped": self.skipped, "seconds": seconds}


def _after(batches: Iterable, done: int, rng: Any) -> Iterator[tuple[int, Any]]:
    """``(step, batch)`` of ``batches`` after the first ``done``, the random generators set
    to ``rng`` (:func:`~gnn_treelstm.training.resume.restore_rng`) before the first of
    them."""
    for step, batch in enumerate(batches, 1):
        if step <= done:
            continue  # done before the run was stopped
        if step == done + 1 and done:
            restore_rng(rng)  # as it was after batch ``done``
        yield step, batch


class Trainer:
    """Trains the ``cfg.seeds`` models of one run and writes its run directory.

    The constructor checks ``cfg``, resolves it (:meth:`RunConfig.resolved`) and its device
    once, loads the data and word vectors, and builds the model configuration (a bad
    architecture fails here, before anything is written). :meth:`fit` then trains.

    :meth:`fit` settles the run's :class:`RunPlace` (``place``); per seed,
    :meth:`start_seed` builds the :class:`SeedRun` (``current``: the model, its optimizer,
    its loader and its :class:`~gnn_treelstm.training.resume.TrainState`, what ``--resume``
    saves and restores), which ``model``, ``optimizer``, ``scheduler`` and ``state`` read.
    """

    def __init__(self, cfg: RunConfig, *, hooks: TrainHooks | None = None) -> None:
        cfg.check()
        # paths recorded absolute: config.json, config.yaml and best.pt name the same
        # files from any working directory
        self.cfg = cfg.resolved().with_absolute_paths()
        self.data_given = cfg.data  # as typed, for the record
        self.hooks = hooks or TrainHooks()
        self.finite_checks = FiniteChecks()  # of the training steps (train_step)
        self.task = build_task(self.cfg.task, supervision=self.cfg.supervision)
        self.device, self.graphs_on_device = resolve_device(self.cfg)
        t0 = time.perf_counter()
        self.data = prepare_data(self.cfg, self.task)
        self.num_relations = int(self.data.meta.get("num_relations", {}).get(
            self.cfg.tree, len(self.data.relations)) or 1)
        check_compatibility(self.cfg, self.data, self.num_relations)
        startup.info("data: %s (%s trees): %s examples, %d words (%.1f s)",
                     self.data.data_dir, self.cfg.tree,
                     ", ".join(f"{k} {len(v)}" for k, v in self.data.splits.items()),
                     len(self.data.vocab), time.perf_counter() - t0)
        # pre-trained vectors unless --embeddings-mode random; the file read is recorded
        # (resolved path and digest) in the run's configuration
        t0 = time.perf_counter()
        self.embeddings, self.emb_info = load_embeddings(self.cfg, self.data)
        if self.embeddings is not None:
            self.cfg = dataclasses.replace(self.cfg, embeddings=self.emb_info["path"],
                                           embeddings_sha256=self.emb_info["sha256"])
        self._log_vectors(time.perf_counter() - t0)
        self.model_config = build_model_config(
            self.cfg, vocab_size=len(self.data.vocab), num_relations=self.num_relations,
            embeddings=self.embeddings, emb_info=self.emb_info)
        # the first seed's model, built now as start_seed would build it: a bad
        # architecture fails before anything is written, and no model is built twice
        self._first: tuple[int, TreeLSTMModel, dict] | None = self._prebuild(self.cfg.seed)
        model = self._first[1]
        self._load_native_loops(model)
        params = list(model.parameters())
        startup.info("model: %s cell, hidden %d, %s engine: %s parameters (%s trained)",
                     self.cfg.model, self.cfg.hidden, self.cfg.engine,
                     f"{sum(p.numel() for p in params):,}",
                     f"{sum(p.numel() for p in params if p.requires_grad):,}")
        self.name = self.cfg.run_name()
        self.out = Path(self.cfg.runs_dir) / self.name
        if self.cfg.tensorboard:  # the configuration attaches it, as hooks: first, as a
            tb = TensorBoardLog(self.out)  # record of the run beside metrics.jsonl
            self.hooks = chain_hooks(TrainHooks(
                on_seed_start=tb.seed_start, on_epoch_end=tb.epoch_end,
                on_seed_end=tb.seed_end), self.hooks)
        self.dev_tokens = self._tokens(self.data.dev_split)
        self._place: RunPlace | None = None  # fit settles it
        self._current: SeedRun | None = None  # start_seed builds it, per seed

    @property
    def place(self) -> RunPlace:
        """The run's :class:`RunPlace` (from :meth:`fit` on)."""
        if self._place is None:
            raise RuntimeError("the run has no place yet: fit() settles it")
        return self._place

    @property
    def current(self) -> SeedRun:
        """The :class:`SeedRun` of the seed being trained (the last one after :meth:`fit`)."""
        if self._current is None:
            raise RuntimeError("no seed is being trained: start_seed() builds one")
        return self._current

    @property
    def model(self) -> TreeLSTMModel:
        return self.current.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.current.optimizer

    @property
    def scheduler(self) -> Scheduler | None:
        return self.current.scheduler

    @property
    def state(self) -> TrainState:
        return self.current.state

    # ------------------------------------------------------------------ the run
    def fit(self, *, overwrite: bool = False, keep: Sequence[str] = (),
            resume: bool = False) -> dict:
        """Claim the run directory, train every seed, write the results; return them.

        The run directory is claimed first (:func:`gnn_treelstm.training.rundir.claim`):
        one writer at a time, and a directory that already holds a run is refused unless
        ``overwrite``; ``keep`` names files the caller put there for this run (the CLI's
        ``train.log``). ``resume``: continue the run in that directory where it stopped
        (its seeds' saved states, :mod:`gnn_treelstm.training.resume`); the configuration
        must be the run's recorded one. Ranks > 0 of a distributed run train, write nothing
        and return ``{"rank": r}``; rank 0 reads the files a resume starts from and hands
        them to the others (:mod:`gnn_treelstm.training.distributed`).

        Raises:
            gnn_treelstm.training.faults.WriteFailed: a file of the run could not be
                written (a full disk): the message names it, the free space and what the
                run directory still holds to resume from."""
        if not self.cfg.distributed:
            with rundir.claim(self.out, overwrite=overwrite, keep=keep, resume=resume), \
                    self._run_log(keep, resume, writes=True):
                return self._train_seeds(resume, writes=True, world=1)
        created = DIST.init(self.device)
        world, writes = DIST.world_size(), DIST.is_main()
        if not writes:  # rank 0 alone shows progress and epoch records
            self.hooks = TrainHooks(release_heap=self.hooks.release_heap)
        # data parallel: rank 0 claims the directory and tells the others whether it could
        claim = functools.partial(rundir.claim, self.out, overwrite=overwrite, keep=keep,
                                  resume=resume)
        try:
            with DIST.claimed_by_main(claim, self.out, self.device), \
                    self._run_log(keep, resume, writes=writes):
                return self._train_seeds(resume, writes=writes, world=world)
        finally:
            if created:  # the group this run joined; a caller's own stays
                if self._current is not None:  # DDP's reducer goes first, while the
                    self._current.net = self._current.model  # group is still there
                DIST.shutdown()

    @contextlib.contextmanager
    def _run_log(self, keep: Sequence[str], resume: bool, *, writes: bool):  # noqa: ANN202
        """``train.log`` in the run directory, for a run started from Python: a handler on
        the ``gnn_treelstm`` logger for the run's duration, taken off afterwards. It gets
        the records the logging configuration lets through (WARNING by default; INFO, the
        command line's, with ``logging.getLogger("gnn_treelstm").setLevel(logging.INFO)``).
        A caller that writes its own (``keep`` holds ``train.log``: the command line) and
        ranks > 0 write none."""
        if rundir.LOG_NAME in keep or not writes:
            yield
            return
        handler = logging.FileHandler(self.out / rundir.LOG_NAME, mode="a" if resume else "w",
                                      encoding="utf-8")
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
        library = logging.getLogger("gnn_treelstm")
        library.addHandler(handler)
        try:
            yield
        finally:
            library.removeHandler(handler)
            handler.close()

    def _train_seeds(self, resume: bool, *, writes: bool, world: int) -> dict:
        """The body of :meth:`fit`, inside the claimed run directory: ``writes`` and
        ``world`` as :class:`RunPlace` says."""
        cfg, out = self.cfg, self.out
        run_id = DIST.from_main(
            lambda: resumed_run_id(out, cfg) if resume else rundir.new_run_id(), self.device)
        self._place = RunPlace(run_id=run_id, writes=writes, world=world)
        record = run_record(run_id, cfg, self.task, self.data, self.model_config,
                            self.emb_info, self.num_relations, data_given=self.data_given)
        if not resume and writes:
            with self._writing(out / "config.json"):
                write_json(out / "config.json", record)
            with self._writing(out / "config.yaml"):
                atomic_write(out / "config.yaml", run_config_yaml(cfg, self.emb_info))
        counts = ", ".join(f"{k} {len(v)}" for k, v in self.data.splits.items())
        log.info("run %s: %s/%s/%s on %s (%s)", out, cfg.task, cfg.model, cfg.tree,
                 self.data.data_dir, counts)
        seeds = [cfg.seed + k for k in range(cfg.seeds)]
        per_seed = []
        for seed in seeds:
            seed_dir = out if len(seeds) == 1 else out / f"seed-{seed}"
            if writes:
                seed_dir.mkdir(parents=True, exist_ok=True)
            done = DIST.from_main(functools.partial(load_seed_result, seed_dir),
                                  self.device) if resume else None
            if done is not None:
                log.info("seed %d: finished before the run was stopped (%s)", seed,
                         seed_dir / SEED_RESULT_NAME)
                per_seed.append(done)
                continue
            result = self.train_seed(seed, seed_dir, resume=resume)
            if writes:
                with self._writing(seed_dir / SEED_RESULT_NAME):
                    save_seed_result(seed_dir, jsonable(result))
            per_seed.append(result)
        if not writes:
            return {"rank": DIST.rank()}
        with self._writing(out / "results.json"):
            results = write_results(out, self.name, record, self.task, per_seed, seeds,
                                    test=cfg.test and "test" in self.data.splits)
        results["run_dir"] = str(out)
        return results

    # ------------------------------------------------------------------ one seed
    def train_seed(self, seed: int, seed_dir: Path, *, resume: bool = False) -> dict:
        """Train one model with ``seed``, its files in ``seed_dir``; return its result
        (selected epoch, dev and test metrics, speed, memory, per-epoch records).

        The state is saved to ``seed_dir/state.pt`` after every epoch and every
        ``cfg.checkpoint_every`` batches; ``resume`` continues from it (a fresh start when
        there is none). With ``cfg.patience``, training ends early once that many epochs
        in a row brought no better dev score (:meth:`end_epoch`)."""
        self.start_seed(seed, seed_dir, resume=resume)
        try:
            for epoch in range(self.state.epoch, self.cfg.epochs + 1):
                if self.state.stopped_early is not None:
                    break  # a seed resumed after early stopping ended it
                training = self.train_epoch(epoch)
                if epoch < self.cfg.epochs:  # its first batches made during the evaluation
                    self.check_data()  # which they read as it was mapped
                    self.current.loader.start_next_epoch()
                dev, eval_seconds, eval_memory = self.evaluate_dev()
                self.end_epoch(epoch, training, dev, eval_seconds, eval_memory)
        finally:  # its loader processes, up between epochs, stopped with the seed
            self.current.loader.close()
        return self.finish_seed()

    def start_seed(self, seed: int, seed_dir: Path, *, resume: bool = False) -> None:
        """Seed the generators, build the :class:`SeedRun` of ``seed`` (:attr:`current`);
        on ``resume``, put its saved state (if any) back in place. Calls the
        ``on_seed_start`` hook."""
        seed_everything(seed)
        self._current = self._build_seed(seed, seed_dir)
        if resume:
            self._restore_seed(seed, seed_dir)
        if self.hooks.on_seed_start is not None:
            self.hooks.on_seed_start(seed, seed_dir, self.state.epoch)

    def _build_seed(self, seed: int, seed_dir: Path) -> SeedRun:
        """A fresh :class:`SeedRun`: the model (with the word vectors), its optimizer,
        scheduler and loader (shuffled by ``seed``; this rank's shard in a distributed
        run)."""
        cfg, world = self.cfg, self.place.world
        model = self._take_model(seed)
        if self.embeddings is not None:
            model.load_embeddings(self.embeddings)
        model.to(self.device)
        optimizer = build_optimizer(model, cfg)
        scheduler = build_scheduler(
            optimizer, cfg,
            lower_is_better=self.task.selection_metric in self.task.lower_is_better)
        zero_watch = ZeroWatch(model)
        loader = make_loader(self.data.splits["train"], cfg.batch_size, shuffle=True,
                             seed=seed, schedule=level_schedules(model.cell,
                                                                 cfg.engine == "level"),
                             shard=(DIST.rank(), world) if cfg.distributed else None,
                             workers=loader_workers(self.device, cfg.workers),
                             pin_memory=self.device.type == "cuda")
        net: torch.nn.Module = model
        if cfg.distributed:  # gradients averaged over the ranks in backward
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(model, find_unused_parameters=True)
        return SeedRun(
            seed_dir=seed_dir, model=model, net=net, optimizer=optimizer,
            scheduler=scheduler, loader=loader, zero_watch=zero_watch,
            trained=[p for p in model.parameters() if p.requires_grad],
            checked=[p for n, p in model.named_parameters()
                     if p.requires_grad and not n.startswith("embedding.")],
            state=TrainState(seed=seed, run_id=self.place.run_id))

    def _prebuild(self, seed: int) -> tuple[int, TreeLSTMModel, dict]:
        """``seed``'s model as :meth:`start_seed` builds it (the generators seeded first)
        and the generators' states after it; the caller's generators are left as they
        were."""
        outside = capture_rng()
        try:
            seed_everything(seed)
            model = TreeLSTMModel(self.model_config)
            return seed, model, capture_rng()
        finally:
            restore_rng(outside)

    def _take_model(self, seed: int) -> TreeLSTMModel:
        """A new model for ``seed`` (its generators just seeded): the constructor's, once,
        if it is ``seed``'s (the generators then put where building it left them), else
        built now."""
        first, self._first = self._first, None
        if first is not None and first[0] == seed:
            restore_rng(first[2])
            return first[1]
        return TreeLSTMModel(self.model_config)

    def _restore_seed(self, seed: int, seed_dir: Path) -> None:
        """Put the seed's saved state (``seed_dir/state.pt``), if any, in place: weights,
        optimizer, scheduler and shuffle generator; the progress in :attr:`state`, the
        records of the epochs after it dropped from ``metrics.jsonl``."""
        saved = _saved_state(seed_dir, self.device)
        if saved is not None:  # of this run and seed, not copied in from another
            saved.check_run(seed, self.place.run_id, seed_dir / STATE_NAME)
        with self._writing(self.out / "metrics.jsonl"):  # no record past the saved state
            truncate_metrics(self._metrics_file(), seed, 0 if saved is None else len(saved.epochs))
        if saved is None:
            return
        run = self.current
        saved = saved.for_rank(DIST.rank(), self.place.world)  # this rank's generators
        restore_training(saved, run.model, run.optimizer, run.loader.generator, run.scheduler)
        # the weights now live in the model, optimizer and scheduler; the generators'
        # states stay for the replay of a stopped epoch (_replay)
        run.state = dataclasses.replace(saved, model=None, optimizer=None, loader=None,
                                        scheduler=None)
        log.info("seed %d: resuming at epoch %d after %d batches (%s)", seed, saved.epoch,
                 saved.step, seed_dir / STATE_NAME)

    def train_epoch(self, epoch: int) -> EpochTraining:
        """One pass over the training batches (the rest of it when the seed resumed inside
        ``epoch``: :meth:`_replay`), with a state saved every ``cfg.checkpoint_every``
        batches."""
        cfg, state, loader = self.cfg, self.state, self.current.loader
        self.check_data()  # before a batch is read
        self.model.train()
        state.process_peak = max(state.process_peak,
                                 memory_stats(self.device)["peak_rss_mb"])
        per_epoch_peak = self._new_peak_window()
        epoch_loader_state = loader.epoch_state()  # replays this epoch's order
        t0 = time.perf_counter()
        sums = _EpochSums.start(state.partial, self.device)
        if state.partial is not None:  # resumed inside this epoch
            t0 -= state.partial["seconds"]
        batches: Iterable = loader
        if self.hooks.progress is not None:
            batches = self.hooks.progress(loader, total=len(loader),
                                          desc=f"seed {state.seed} epoch {epoch}/{cfg.epochs}")
        for step, batch in self._replay(batches):
            loss = self.train_step(batch, epoch, step)
            if loss is None:
                sums.skipped += 1
                continue
            sums.add(loss, batch)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 \
                    and step < len(loader):
                self.step_fault(wait=True)  # no weights written before they are checked
                state.step, state.partial = step, sums.saved(time.perf_counter() - t0)
                self.check_data()  # the batches so far read the data as it was mapped
                self.save_state(epoch_loader_state)
            if (step % 5 == 0 or step == len(loader)) and hasattr(batches, "set_postfix"):
                elapsed = time.perf_counter() - t0
                batches.set_postfix(loss=f"{float(sums.loss_sum) / max(sums.examples, 1):.4f}",
                                    trees_s=f"{sums.trees / max(elapsed, 1e-9):.0f}")
        self.step_fault(wait=True)  # every step of the epoch checked
        return self._epoch_training(sums, t0, per_epoch_peak)

    def _replay(self, batches: Iterable) -> Iterator[tuple[int, Any]]:
        """``(step, batch)`` of the epoch's ``batches`` still to train. A seed resumed
        inside the epoch drew the first ``state.step`` of them before it was stopped: they
        are drawn again (the same order, the same draws of the loader) and passed over, and
        the random generators are put back as they were after the last of them."""
        state = self.state
        if state.partial is None:
            return enumerate(batches, 1)
        return _after(batches, state.step, state.rng)

    def _epoch_training(self, sums: _EpochSums, t0: float,
                        per_epoch_peak: bool) -> EpochTraining:
        """The epoch's :class:`EpochTraining` from its sums (over every rank), started at
        ``t0``."""
        total_loss = float(sums.loss_sum)  # waits for the device: the epoch's work is done
        n_ex, n_trees, skipped = sums.examples, sums.trees, sums.skipped
        if self.place.world > 1:  # the epoch over all ranks
            total_loss, n_ex, n_trees, skipped = DIST.all_sum(
                [total_loss, n_ex, n_trees, skipped], self.device)
            n_ex, n_trees, skipped = int(n_ex), int(n_trees), int(skipped)
        seconds = time.perf_counter() - t0
        memory = memory_stats(self.device)  # the training epoch's peak (per_epoch_peak)
        self.state.process_peak = max(self.state.process_peak, memory["peak_rss_mb"])
        return EpochTraining(loss=total_loss / max(n_ex, 1), examples=n_ex, trees=n_trees,
                             skipped=skipped, seconds=seconds, memory=memory,
                             peak_scope="epoch" if per_epoch_peak else "process")

    def train_step(self, batch: Any, epoch: int, step: int) -> torch.Tensor | None:
        """One optimizer step on ``batch``; its mean loss (detached), or None when its loss
        or gradients are NaN/inf and ``cfg.skip_nonfinite`` skips it (else
        :class:`~gnn_treelstm.training.faults.NonFiniteError`, raised where the step's
        check arrives without waiting for the device: in the step on the CPU, a step or
        so later on a GPU, and always before weights are saved: :meth:`step_fault`). With
        ``cfg.clip_grad_norm``, the gradients of every trained weight are clipped to that
        joint norm before the step (:func:`~gnn_treelstm.training.optim.clip_gradients`)."""
        reduction = self.cfg.loss_reduction
        batch = to_device(batch, self.device, self.graphs_on_device)
        out = self.current.net(batch.graph, batch.graph_b, schedule=batch.schedule,
                               num_a=batch.num_a)
        loss = self.model.task.loss(out, batch)  # the model's task: its head's options
        b = len(batch)
        release_grads(self.optimizer)
        objective = batch_objective(loss, b, reduction)
        world = self.place.world
        if world > 1:  # DDP averages over the ranks: make that the global batch's
            # objective (the mean over the global batch, or its sum)
            glob = batch.global_size  # set by the sharded loader, ahead-drawn or not
            assert glob is not None, "a data parallel step's batch knows its global size"
            objective = objective * (world if reduction == "sum" else b * world / glob)
        objective.backward()
        self.finite_checks.add(loss, self.current.checked, (epoch, step, batch))
        # the answer before the optimizer's step where a skip or the other ranks need it
        fault = self.step_fault(wait=self.cfg.skip_nonfinite or world > 1)
        if world > 1 and DIST.all_sum([float(bool(fault))], self.device)[0] \
                and not fault:
            fault = "another rank's loss or gradients are NaN or infinite"
        if fault:
            if not self.cfg.skip_nonfinite:
                raise NonFiniteError(nonfinite_message(
                    fault, epoch, step, batch, self.state.best, self._best_path()))
            log.warning("seed %d epoch %d step %d: %s; batch skipped (examples %s)",
                        self.state.seed, epoch, step, fault, batch_ids(batch))
            release_grads(self.optimizer)
            return None
        if self.cfg.clip_grad_norm is not None:
            clip_gradients(self.current.trained, self.cfg.clip_grad_norm)
        self.optimizer.step()
        return loss.detach()

    def step_fault(self, *, wait: bool = False) -> str:
        """The fault of the training steps whose finiteness checks have arrived
        (:class:`~gnn_treelstm.training.faults.FiniteChecks`; with ``wait``, of every step
        so far): a :class:`~gnn_treelstm.training.faults.NonFiniteError` naming the step,
        or under ``cfg.skip_nonfinite`` (where every step waits for its own) the step's
        fault; "" if none."""
        for fault, (epoch, step, batch) in self.finite_checks.faults(wait=wait):
            if not self.cfg.skip_nonfinite:
                raise NonFiniteError(nonfinite_message(
                    fault, epoch, step, batch, self.state.best, self._best_path()))
            return fault
        return ""

    def evaluate_dev(self) -> tuple[dict[str, float], float, dict[str, float]]:
        """The dev metrics of the model now, the seconds they took and the memory of their
        window (:func:`~gnn_treelstm.training.memory.memory_stats`)."""
        self._new_peak_window()
        t0 = time.perf_counter()
        metrics, _ = evaluate(self.model, self.data.splits[self.data.dev_split],
                              batch_size=self.cfg.eval_batch_size, device=self.device,
                              graphs_on_device=self.graphs_on_device, tokens=self.dev_tokens)
        seconds = time.perf_counter() - t0
        memory = memory_stats(self.device)
        self.state.process_peak = max(self.state.process_peak, memory["peak_rss_mb"])
        return metrics, seconds, memory

    def end_epoch(self, epoch: int, training: EpochTraining, dev: dict[str, float],
                  eval_seconds: float, eval_memory: dict[str, float]) -> dict:
        """Model selection (``best.pt`` when the dev score improved), the epoch's record
        (``metrics.jsonl``, the ``on_epoch_end`` hook), the learning-rate schedule's step,
        early stopping (``cfg.patience`` epochs in a row without a better dev score before
        the last epoch set ``state.stopped_early``), the state saved; returns the
        record."""
        cfg, state, sel = self.cfg, self.state, self.task.selection_metric
        self.check_data()  # the epoch and its dev scores read the data as it was mapped
        score = dev.get(sel, math.nan)
        improved = self.task.better(score, state.best_score)
        state.bad_epochs = 0 if improved else state.bad_epochs + 1
        if improved:
            state.best_score = score
            state.best = {"epoch": epoch, "dev": dev}
            if self.place.writes:
                with self._writing(self._best_path()):
                    self.save_best(epoch, dev)
        record = {
            "run_id": self.place.run_id,
            "seed": state.seed, "epoch": epoch, "train_loss": training.loss,
            "train_seconds": round(training.seconds, 3),
            "trees_per_second": round(training.trees / max(training.seconds, 1e-9), 1),
            "skipped_nonfinite": training.skipped,
            "examples": training.examples, "dev": dev, "best": improved,
            "lr": current_lr(self.optimizer),
            "eval_seconds": round(eval_seconds, 3), **training.memory,
            "peak_rss_scope": training.peak_scope,
            "eval_peak_rss_mb": eval_memory["peak_rss_mb"],
            "process_peak_rss_mb": state.process_peak,
        }
        record["zeroed_parameters"] = " ".join(  # newly
            self.current.zero_watch.warn(state.seed, epoch))
        state.epochs.append(record)
        metrics_file = self._metrics_file()
        if metrics_file is not None:
            with self._writing(metrics_file):
                append_metrics(metrics_file, record)
        log.info("seed %d epoch %d/%d: loss %.4f, dev %s %.4f%s, %.1fs (%.0f trees/s)",
                 state.seed, epoch, self.cfg.epochs, record["train_loss"], sel, score,
                 " (best)" if improved else "", training.seconds, record["trees_per_second"])
        step_scheduler(self.scheduler, score)  # the next epoch's learning rates
        if cfg.patience is not None and state.bad_epochs >= cfg.patience \
                and epoch < cfg.epochs:
            state.stopped_early = epoch
            log.info("seed %d: stopping early after epoch %d: no better dev %s for %d "
                     "epochs (best: epoch %s)", state.seed, epoch, sel, state.bad_epochs,
                     state.best.get("epoch"))
        state.epoch, state.step, state.partial = epoch + 1, 0, None  # the epoch is done
        self.save_state(self.current.loader.epoch_state())  # the next epoch's
        if self.hooks.on_epoch_end is not None:
            self.hooks.on_epoch_end(record)
        return record

    def save_best(self, epoch: int, dev: dict[str, float]) -> None:
        """Write the model now as the seed's selected checkpoint (``best.pt``)."""
        rd = self.data
        save_checkpoint(
            self._best_path(), self.model, vocab=rd.vocab, relations=rd.relations,
            label_names=rd.label_names, run_config=self.cfg.to_dict(),
            meta={"epoch": epoch, "seed": self.state.seed, "dev": dev,
                  "data_dir": str(rd.data_dir), "dataset": rd.meta.get("dataset"),
                  "tree": self.cfg.tree, "dev_split": rd.dev_split,
                  "data_examples": {k: len(v) for k, v in rd.splits.items()},
                  "run_id": self.place.run_id, "vectors": self.emb_info},
        )

    def save_state(self, loader_state: torch.Tensor) -> None:
        """Save :attr:`state` with the weights, the optimizer's state, the random
        generators and ``loader_state`` (the shuffle generator as of the start of the epoch
        ``state.epoch``) to ``state.pt`` (:mod:`gnn_treelstm.training.resume`). In a
        distributed run every rank calls it at the same step: rank 0 gathers each rank's
        own generators and epoch sums into the one file it writes."""
        own = {"rng": capture_rng(), "partial": self.state.partial,
               "process_peak": self.state.process_peak}
        ranks = DIST.gather_to_main(own, self.device) if self.place.world > 1 else None
        if not self.place.writes:
            return
        scheduler = None if self.scheduler is None else self.scheduler.state_dict()
        state = dataclasses.replace(self.state, loader=loader_state,
                                    model=self.model.state_dict(),
                                    optimizer=self.optimizer.state_dict(), scheduler=scheduler,
                                    rng=own["rng"], world=self.place.world, ranks=ranks)
        with self._writing(self.current.seed_dir / STATE_NAME):
            state.save(self.current.seed_dir)

    def finish_seed(self) -> dict:
        """The seed's result; with ``cfg.test``, its selected checkpoint's test metrics.
        With ``cfg.patience``, ``stopped_early`` says whether early stopping ended the
        seed: ``{"epoch": e, "patience": n}`` (None: it trained every epoch). Calls the
        ``on_seed_end`` hook."""
        state, sel = self.state, self.task.selection_metric
        if not state.best:
            raise RuntimeError(f"no epoch produced a finite dev {sel}; nothing to select")
        result = {"seed": state.seed, "best_epoch": state.best["epoch"],
                  "dev": state.best["dev"], "checkpoint": str(self._best_path()),
                  "seconds_per_epoch": float(np.median([r["train_seconds"]
                                                        for r in state.epochs])),
                  "peak_rss_mb": max(r["peak_rss_mb"] for r in state.epochs),
                  "process_peak_rss_mb": state.process_peak,
                  "zeroed_parameters": self.current.zero_watch.zeroed, "epochs": state.epochs}
        if self.cfg.patience is not None:
            result["stopped_early"] = None if state.stopped_early is None else {
                "epoch": state.stopped_early, "patience": self.cfg.patience}
        if self.cfg.test and "test" in self.data.splits and self.place.writes:
            ck = load_model(self._best_path(), device=self.device)
            result["test"], _ = evaluate(ck.model, self.data.splits["test"],
                                         batch_size=self.cfg.eval_batch_size,
                                         device=self.device,
                                         graphs_on_device=self.graphs_on_device,
                                         tokens=self._tokens("test"))
            self.check_data()
            log.info("seed %d: best epoch %d, dev %s %.4f, test %s", state.seed,
                     state.best["epoch"], sel, state.best_score,
                     format_metrics(result["test"]))
        if self.hooks.on_seed_end is not None:
            self.hooks.on_seed_end(result)
        return result

    # ------------------------------------------------------------------ helpers
    def check_data(self) -> None:
        """Raise :class:`~gnn_treelstm.trees.manifest.DataChangedError` when a mapped
        file of the run's data changed on disk since it was mapped (cut short, rewritten,
        replaced: :func:`~gnn_treelstm.trees.manifest.changed`), naming it, what the run
        directory holds to go on from and the command that continues the run. Called
        before each epoch's first batch and before every save, so that no state is saved
        from data other than the run's."""
        arrays = [arr for sp in self.data.splits.values()
                  for store in (sp.graphs, sp.graphs_b) if store is not None
                  for arr in getattr(store, "arrays", {}).values()]
        files = manifest.changed(arrays)
        if files:
            seed_dir = self.out if self._current is None else self._current.seed_dir
            held = saved_files(seed_dir) if self.place.writes else "the run stopped"
            raise manifest.DataChangedError(
                f"{manifest.changed_message(files)}. {held[:1].upper()}{held[1:]}; continue "
                "the run with "
                f"`gnn-treelstm train --resume {self.out}` once the data is back")

    def _log_vectors(self, seconds: float) -> None:
        """The start-up line of the word vectors."""
        info = self.emb_info
        if self.embeddings is None:
            startup.info("word vectors: random (--embeddings-mode random)")
            return
        found = int(info.get("exact", 0)) + int(info.get("lower", 0))
        startup.info("word vectors: %s: %d of %d words found (%.1f%%), %d-d, %s (%.1f s)",
                     info["path"], found, len(self.data.vocab) - 1,
                     100.0 * float(info.get("coverage", 0.0)), self.embeddings.shape[1],
                     info["mode"], seconds)

    def _load_native_loops(self, model: TreeLSTMModel) -> None:
        """Load (building them the first time on this machine) the C++ level loops now,
        with a start-up line, when the run will use them: the level engine on the CPU with
        a cell that has a fast kernel (else the first batch would wait for them)."""
        if self.cfg.engine != "level" or self.device.type != "cpu" \
                or not model.cell.has_kernel:
            return
        from gnn_treelstm.kernels import native

        if native.choice() == "off":
            startup.info("native level loops: off (GNN_TREELSTM_NATIVE=off)")
            return
        t0 = time.perf_counter()
        ready = native.available(torch.zeros(1))
        startup.info("native level loops: %s (%.1f s)", "ready" if ready
                     else "unusable, the general level driver runs", time.perf_counter() - t0)

    def _new_peak_window(self) -> bool:
        """Release the free heap (hook), then reset the peak-memory marks; whether the RSS
        peak could be reset."""
        if self.hooks.release_heap is not None:
            self.hooks.release_heap()
        return reset_peak_memory(self.device)

    def _tokens(self, split: str) -> list | None:
        """The words of ``split``, for tasks that report subsets of it (SICK's negation,
        long premises)."""
        return self.data.tokens(split) if getattr(self.task, "subsets", False) else None

    def _writing(self, path: Path) -> contextlib.AbstractContextManager[None]:
        """The block writes ``path``: an OSError there (a full disk) ends the run with
        :class:`~gnn_treelstm.training.faults.WriteFailed` (:func:`writing`)."""
        seed_dir = self.out if self._current is None else self._current.seed_dir
        return writing(path, run_dir=self.out, seed_dir=seed_dir)

    def _best_path(self) -> Path:
        return self.current.seed_dir / "best.pt"

    def _metrics_file(self) -> Path | None:
        return self.out / "metrics.jsonl" if self.place.writes else None


def _saved_state(seed_dir: Path, device: torch.device) -> TrainState | None:
    """The saved state of a seed (:meth:`TrainState.load`), read by rank 0 of a distributed
    run and handed to every rank."""
    def read() -> dict | None:
        state = TrainState.load(seed_dir)
        return None if state is None else state.as_dict()

    body = DIST.from_main(read, device)
    return None if body is None else TrainState(**body)


def run(cfg: RunConfig, *, hooks: TrainHooks | None = None, overwrite: bool = False,
        keep: Sequence[str] = (), resume: bool = False) -> dict:
    """Train the run ``cfg`` describes and return its results:
    ``Trainer(cfg, hooks=hooks).fit(overwrite=overwrite, keep=keep, resume=resume)``."""
    return Trainer(cfg, hooks=hooks).fit(overwrite=overwrite, keep=keep, resume=resume)

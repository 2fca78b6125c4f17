"""The training state a killed run resumes from (``gnn-treelstm train --resume runs/NAME``).

Every seed of a run keeps ``state.pt`` in its directory, written atomically at the end of
every epoch and, with ``--checkpoint-every N``, every N batches, so a ``kill -9`` at any
moment leaves the last complete state. It holds everything the rest of the run depends on:

* the model's weights and the optimizer's state (AdaGrad's accumulators, Adam's moments),
  and the learning-rate scheduler's (:mod:`gnn_treelstm.training.schedule`);
* where the run is: the epoch, and the batches of it already done (the loader's shuffle
  generator is saved as of the epoch's start, so the epoch's batch order is replayed and
  the done batches skipped);
* the random number generators (torch's, Python's, numpy's), so dropout masks continue as
  if the run had never stopped;
* model selection so far: the best dev score and epoch, the per-epoch records, and early
  stopping's count of epochs without a better dev score (``--patience``);
* for a ``--distributed`` run, the number of processes and each rank's own random
  generators and sums of the epoch so far (the weights and the rest are the same on every
  rank); see :mod:`gnn_treelstm.training.distributed`.

:class:`TrainState` holds these; the trainer (:class:`gnn_treelstm.training.trainer.Trainer`)
keeps one per seed, saves it and restores it. A resumed run therefore ends with the same
metrics as an uninterrupted one on the same machine (``tests/training/test_resume.py``
SIGKILLs a real training process and checks it). A seed that finished writes ``seed.json``
(its result) and drops its ``state.pt``.

The file is read with ``torch.load(weights_only=True)``: it holds tensors and plain
containers only (the generator states are converted to lists and tensors). It carries the
digest of its model weights (:func:`gnn_treelstm.models.checkpoint.tensor_digest`), checked
when it is read: a damaged ``state.pt`` is refused, naming the file, instead of resuming
from other weights (a state written before digests is read unchecked).
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnn_treelstm.files import atomic_write
from gnn_treelstm.models.checkpoint import DIGEST_KEY, tensor_digest
from gnn_treelstm.training import rundir
from gnn_treelstm.training.config import RunConfig, config_changes
from gnn_treelstm.training.records import append_csv
from gnn_treelstm.training.schedule import Scheduler

__all__ = ["STATE_NAME", "SEED_RESULT_NAME", "STATE_FORMAT", "TrainState", "capture_rng",
           "restore_rng", "save_seed_result", "load_seed_result", "seed_everything",
           "restore_training", "resumed_run_id", "truncate_metrics"]

STATE_NAME = "state.pt"
SEED_RESULT_NAME = "seed.json"
STATE_FORMAT = 1


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators (a seed's run starts from these)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """torch's, Python's and numpy's generator states as tensors and lists."""
    py = random.getstate()
    np_name, np_keys, np_pos, np_gauss, np_cached = np.random.get_state()
    out = {"torch": torch.get_rng_state(),
           "python": [py[0], list(py[1]), py[2]],
           "numpy": [np_name, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos),
                     int(np_gauss), float(np_cached)]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: dict[str, Any]) -> None:
    """Undo :func:`capture_rng`."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainState:
    """Where the training of one seed is: exactly what ``state.pt`` holds.

    The progress fields (``epoch`` to ``stopped_early``) are the trainer's as it goes; the
    weights, optimizer and scheduler states, shuffle generator and random generators
    (``loader`` to ``scheduler``) are filled in when the state is saved (:meth:`save`) and
    put back in place on resume (:func:`restore_training`). A state saved before a field
    existed reads with the field's default.

    Attributes:
        seed: the seed being trained.
        epoch: the epoch running (or the next to run when ``step`` is 0).
        step: the batches of ``epoch`` done.
        best_score: the best dev score so far (None: none yet).
        best: the selected epoch so far, ``{"epoch": e, "dev": metrics}`` ({}: none yet).
        epochs: the records of the epochs done (what ``metrics.jsonl`` got).
        process_peak: the process's peak resident memory so far, in MiB.
        partial: the sums of ``epoch``'s ``step`` batches (``loss_sum``, ``n_ex``,
            ``n_trees``, ``skipped``, ``seconds``); None at an epoch's end.
        run_id: the run's id (``config.json``).
        bad_epochs: the epochs since the dev score last improved (early stopping,
            ``--patience``).
        stopped_early: the epoch after which early stopping ended the seed (None: it did
            not).
        loader: the loader's shuffle generator as of ``epoch``'s start.
        rng: torch's, Python's and numpy's generators (:func:`capture_rng`).
        model: the model's ``state_dict``.
        optimizer: the optimizer's ``state_dict``.
        scheduler: the learning-rate scheduler's ``state_dict`` (None: no scheduler).
        world: the number of processes of the run (1: not distributed).
        ranks: a distributed run's per-rank parts, in rank order: ``{"rng": ...,
            "partial": ..., "process_peak": ...}`` (rank 0's are also in ``rng``,
            ``partial`` and ``process_peak``); None for one process.
    """

    seed: int
    epoch: int = 1
    step: int = 0
    best_score: float | None = None
    best: dict[str, Any] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    process_peak: float = 0.0
    partial: dict[str, Any] | None = None
    run_id: str | None = None
    bad_epochs: int = 0
    stopped_early: int | None = None
    loader: torch.Tensor | None = None
    rng: dict[str, Any] | None = None
    model: dict[str, Any] | None = None
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    world: int = 1
    ranks: list[dict[str, Any]] | None = None

    def for_rank(self, rank: int, world: int) -> TrainState:
        """The state as rank ``rank`` of a run of ``world`` processes resumes it: that
        rank's generators and epoch sums in ``rng``, ``partial`` and ``process_peak``.

        Raises:
            ValueError: the state was saved by a run of another number of processes.
        """
        if world != self.world:
            raise ValueError(
                f"the saved training state is of a run of {self.world} process(es) and this "
                f"run has {world}; resume it with {self.world} process(es) in all, as it "
                "was started (torchrun --nproc-per-node ...)")
        if self.ranks is None:
            return self
        own = self.ranks[rank]
        return dataclasses.replace(self, rng=own["rng"], partial=own["partial"],
                                   process_peak=own["process_peak"], ranks=None)

    def check_run(self, seed: int, run_id: str, path: Path) -> None:
        """Refuse a state saved by another run or for another seed (a ``state.pt`` copied
        in from elsewhere): ``ValueError`` naming the file and both."""
        if self.run_id is not None and self.run_id != run_id:
            raise ValueError(f"{path}: the saved training state is of the run {self.run_id}, "
                             f"not of this run ({run_id}, config.json); resume each run from "
                             "its own state.pt, or remove it to restart this seed from its "
                             "beginning")
        if self.seed != seed:
            raise ValueError(f"{path}: the saved training state is of seed {self.seed}, not "
                             f"of seed {seed} that it stands for; remove it to restart this "
                             "seed from its beginning")

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (tensors and plain containers; ``TrainState(**d)`` undoes
        it)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def save(self, seed_dir: Path) -> Path:
        """Write ``seed_dir/state.pt`` atomically."""
        body = self.as_dict()
        if self.model is not None:
            body[DIGEST_KEY] = tensor_digest(self.model)
        return atomic_write(seed_dir / STATE_NAME,
                            lambda f: torch.save({"format": STATE_FORMAT, **body}, f))

    @classmethod
    def load(cls, seed_dir: Path) -> TrainState | None:
        """The saved state of a seed, or ``None`` if it has none.

        Raises:
            ValueError: the file is damaged or from another version.
        """
        path = seed_dir / STATE_NAME
        if not path.is_file():
            return None
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ValueError(f"{path}: cannot read the saved training state ({exc}); remove "
                             "it to restart this seed from its beginning") from exc
        if not isinstance(saved, dict) or saved.get("format") != STATE_FORMAT:
            raise ValueError(f"{path}: not a training state this version reads (format "
                             f"{saved.get('format') if isinstance(saved, dict) else None!r}); "
                             "remove it to restart this seed from its beginning")
        known = {f.name for f in dataclasses.fields(cls)}
        odd = sorted(set(saved) - known - {"format", DIGEST_KEY})
        if odd or "seed" not in saved:
            raise ValueError(f"{path}: not a training state this version reads (fields "
                             f"{odd or ['seed missing']}); remove it to restart this seed "
                             "from its beginning")
        _check_state_digest(saved, path)
        return cls(**{k: v for k, v in saved.items() if k not in ("format", DIGEST_KEY)})


def _check_state_digest(saved: dict[str, Any], path: Path) -> None:
    """Refuse a saved state whose model weights differ from the digest written with them
    (``ValueError`` naming the file); one without a digest passes."""
    stored = saved.get(DIGEST_KEY)
    if stored is None or not isinstance(saved.get("model"), dict):
        return
    if tensor_digest(saved["model"]) != stored:
        raise ValueError(f"{path}: the model weights do not match the digest written with "
                         "them: the file was damaged or changed after it was written; remove "
                         "it to restart this seed from its beginning")


def save_seed_result(seed_dir: Path, result: dict[str, Any]) -> None:
    """Mark a seed finished: its result in ``seed.json``; its ``state.pt`` is dropped."""
    atomic_write(seed_dir / SEED_RESULT_NAME, json.dumps(result, indent=2) + "\n")
    (seed_dir / STATE_NAME).unlink(missing_ok=True)


def load_seed_result(seed_dir: Path) -> dict[str, Any] | None:
    path = seed_dir / SEED_RESULT_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def restore_training(state: TrainState, model: torch.nn.Module,
                     optimizer: torch.optim.Optimizer, generator: torch.Generator,
                     scheduler: Scheduler | None = None) -> None:
    """Put the saved weights, optimizer state (with the learning rates it reached),
    scheduler state, loader shuffle generator (as of the epoch's start) and random number
    generators of ``state`` back in place.

    Raises:
        ValueError: the run has a scheduler and the state has none, or the reverse (the
            state is another configuration's).
    """
    if (scheduler is None) != (state.scheduler is None):
        raise ValueError("the saved training state and the run disagree on a learning-rate "
                         f"scheduler (state: {'one' if state.scheduler else 'none'}, run: "
                         f"{'none' if scheduler is None else type(scheduler).__name__}); "
                         "remove state.pt to restart this seed from its beginning")
    model.load_state_dict(state.model)
    optimizer.load_state_dict(state.optimizer)
    if scheduler is not None:
        scheduler.load_state_dict(state.scheduler)
    generator.set_state(state.loader)
    restore_rng(state.rng)


def resumed_run_id(out: Path, cfg: RunConfig) -> str:
    """The id of the run in ``out`` that ``cfg`` resumes; refuses another configuration."""
    path = out / "config.json"
    try:
        had = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise rundir.RunDirError(f"--resume {out}: no readable config.json ({exc}); it is "
                                 "not a run directory") from exc
    diff = config_changes(had.get("run_config", {}), cfg,
                          ignore=("name", "runs_dir", "checkpoint_every"))
    if diff:
        raise rundir.RunDirError(
            f"--resume {out}: the configuration differs from the run's "
            f"({', '.join(k for k, _, _ in diff)}); a run resumes with its recorded "
            "configuration")
    return had.get("run_id") or rundir.new_run_id()


def truncate_metrics(metrics_file: Path | None, seed: int, epochs: int) -> None:
    """Drop the records of ``seed`` past its first ``epochs`` (written after the saved
    state, before the run was stopped), and rewrite ``metrics.csv`` to match."""
    if metrics_file is None or not metrics_file.exists():
        return
    kept = [json.loads(line) for line in metrics_file.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    kept = [r for r in kept if r.get("seed") != seed or r.get("epoch", 0) <= epochs]
    atomic_write(metrics_file, "".join(json.dumps(r) + "\n" for r in kept))
    csv_file = metrics_file.with_suffix(".csv")
    csv_file.unlink(missing_ok=True)
    for r in kept:
        append_csv(csv_file, r)

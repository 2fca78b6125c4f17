"""The run configuration: :class:`RunConfig` (what ``gnn-treelstm train`` flags and
``--config`` files set), its paper defaults (:meth:`RunConfig.resolved`), its checks, how two
configurations differ (:func:`config_changes`), ``config.yaml`` (:func:`run_config_yaml`)
and the model it trains (:func:`build_model_config`).

Every run option is declared once, as a :class:`RunConfig` field whose metadata (a
:class:`~gnn_treelstm.training.flags.RunOption`, :func:`~gnn_treelstm.training.flags.option`)
names its command-line flag, help text, choices, argument type and the checks of its values
(:func:`run_options` reads them): the ``train`` parser, the keys of
``--config`` files (:mod:`gnn_treelstm.training.options`), :meth:`RunConfig.check` and the
reproduction runner's train commands (:func:`gnn_treelstm.reproduce.runner.command`) are
derived from these fields.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnn_treelstm.argtypes import machine_memory, non_negative_int, positive_int, usable_cpus
from gnn_treelstm.cells import ENGINES, cell_names, cells, check_cell_options, run_defaults
from gnn_treelstm.files import jsonable
from gnn_treelstm.models.checkpoint import fastest_engine
from gnn_treelstm.models.treelstm import EMBEDDING_MODES, SENTENCE_STATES, ModelConfig, meta_model
from gnn_treelstm.tasks import build_task, tasks
from gnn_treelstm.training.batching import CUDA_WORKERS
from gnn_treelstm.training.flags import Check, RunOption, option, options_of

if TYPE_CHECKING:
    import torch

__all__ = ["RunConfig", "run_options", "TREE_KINDS",
           "OPTIMIZERS",
           "LOSS_REDUCTIONS", "DEVICES", "MAX_LR", "LR_SCHEDULES", "config_changes",
           "run_config_yaml", "build_model_config", "absolute_path", "MAX_SEED", "MAX_WIDTH",
           "estimate_memory", "machine_memory"]

TREE_KINDS = ("constituency", "dependency", "chain", "amr", "dependency-spacy",
              "constituency-spacy")
OPTIMIZERS = ("adagrad", "adam")
#: ``mean``: the batch's mean loss (Tai's code); ``sum``: the summed loss, i.e. one
#: backward per example accumulated over the batch (Tran & Cheng's code)
LOSS_REDUCTIONS = ("mean", "sum")
DEVICES = ("cpu", "cuda")
#: largest learning rate accepted: beyond it a run only diverges (AdaGrad's papers: 0.05)
MAX_LR = 10.0
#: tasks trained with Adam by default (Tran §6.1: inference)
ADAM_TASKS = ("sick-e", "snli", "pair-classify")
#: learning-rate schedules, stepped once per epoch
#: (:mod:`gnn_treelstm.training.schedule`); ``constant`` is the papers'
LR_SCHEDULES = ("constant", "cosine", "step", "plateau")

#: the largest seed: torch's, numpy's and DGL's generators take 64-bit seeds; a run's seeds
#: ``--seed`` .. ``--seed + --seeds - 1`` are in ``[0, MAX_SEED]``
MAX_SEED = 2**63 - 1
#: the longest run name (``--name``), in bytes: a directory name, with room for the
#: temporary names made beside it (a file system's limit is 255)
MAX_NAME = 200
#: the most epochs a seed trains (the papers train 10-30) and seeds a run trains: a count
#: beyond them is a typing slip, refused before anything starts
MAX_EPOCHS = 100_000
MAX_SEEDS = 1_000
#: the largest ``--emb-dim`` and ``--head-hidden`` (the papers use 50-300 and 50-128)
MAX_WIDTH = 65536
#: what :func:`estimate_memory` assumes of a batch: nodes per tree (a binarized 32-word
#: sentence has 63), and float values a training step keeps per node and hidden unit (the
#: states, the gates and their gradients; evaluation keeps a third of them)
_NODES_PER_TREE = 64
_VALUES_PER_NODE = 24

#: the time stamp of a run's default name (:meth:`RunConfig.run_name`)
RUN_TIME = "%Y%m%d-%H%M%S"

#: the groups of ``gnn-treelstm train --help``, in their order
WHAT, MODEL, OPTIMIZATION, SCHEDULE, OUTPUT = (
    "what to train", "model", "optimization", "schedule and stopping", "output")


def _one_of(names: Callable[[], Iterable[str]]) -> Callable[[], str]:
    """A help text listing a registry's names as they are when ``--help`` is shown."""
    return lambda: f"one of: {', '.join(names())}"


def _known(noun: str, names: Sequence[str], key: Callable[[Any], Any] = lambda v: v) -> Check:
    """The value (``key`` of it) is one of ``names``."""
    return Check(lambda v: key(v) in names,
                 f"unknown {noun} {{value!r}}; choose one of: {', '.join(names)}")


def _at_most(high: int) -> Check:
    return Check(lambda v: v <= high, f"{{flag}} {{value}}: at most {high:,}")


def _at_least(low: int, why: str = "") -> Check:
    return Check(lambda v: v >= low, f"{{flag}} {{value}}: must be >= {low}{why}")


#: the checks of sizes and counts whose default is the papers' (None)
_POSITIVE_OR_DEFAULT = Check(lambda v: v > 0, "{flag} {value}: must be a positive integer "
                                              "(leave it out for the default)")
_POSITIVE = Check(lambda v: v > 0, "{name} must be positive, got {value}")
_WIDTH = (_POSITIVE_OR_DEFAULT,
          Check(lambda v: v <= MAX_WIDTH, f"{{flag}} {{value}}: at most {MAX_WIDTH} (the "
                                          "papers use 50-300)"))
_LEARNING_RATE = Check(lambda v: math.isfinite(v) and 0 < v <= MAX_LR,
                       f"{{flag}} {{value}}: a learning rate must be in (0, {MAX_LR:g}] (the "
                       "papers use 0.05-0.1 with AdaGrad, 0.001 with Adam)")
_L2 = Check(lambda v: math.isfinite(v) and v >= 0,
            "{flag} {value}: must be a finite number >= 0 (the papers use 1e-4)")
_DROPOUT = Check(lambda v: 0 <= v < 1, "{flag} {value}: must be in [0, 1)")


@dataclass
class RunConfig:
    """A training run. ``None`` fields take the task's / optimizer's paper default.

    Each field is also a ``gnn-treelstm train`` option and a ``--config`` file key: its
    ``metadata`` declares the flag (:func:`run_options`). The fields are in the order of
    ``--help``."""

    task: str = option("sst-5", "--task", WHAT, _one_of(tasks.names))
    model: str = option("nary", "--model", WHAT, _one_of(cell_names))
    tree: str = option("constituency", "--tree", WHAT, f"one of: {', '.join(TREE_KINDS)}",
                       checks=(_known("tree", TREE_KINDS),))
    supervision: str | None = option(
        None, "--supervision", WHAT,
        "SST: phrase (every labelled node, Tai), root (Tran Table 1) or phrase-sequences "
        "(--tree chain: every labelled phrase its own sequence, Teng's BiLSTM); default: the "
        "task's")
    data: str | None = option(
        None, "--data", WHAT,
        "built data directory (default: $GNN_TREELSTM_DATA, else the embedded sample); "
        "recorded as an absolute path", metavar="DIR", path=True)
    embeddings: str | None = option(
        None, "--embeddings", MODEL,
        "GloVe/word2vec text file (plain or .gz); default: the first known file in the "
        "glove/ directory of the raw data the data set was built from; none found is an "
        "error unless --embeddings-mode random. Recorded as its resolved path, with its "
        "size, SHA-256 and the words found", metavar="FILE", path=True)
    embeddings_sha256: str | None = option(
        None, "--embeddings-sha256", MODEL,
        "the SHA-256 the vectors file must have (a run's config.yaml records it, so a run "
        "trained from that file reads the same vectors); another file is an error",
        metavar="HEX", checks=(Check(
            lambda v: isinstance(v, str) and len(v) == 64
            and all(c in "0123456789abcdef" for c in v),
            "{flag} {value!r}: expected the 64 lowercase hex digits of a SHA-256 (as "
            "`sha256sum FILE` prints them)"),))
    embeddings_mode: str | None = option(
        None, "--embeddings-mode", MODEL,
        "Tai Table 2: tuned, fixed or random word vectors (default: fixed for sick-r, tuned "
        "otherwise, as Tai §5.3)", choices=EMBEDDING_MODES,
        checks=(_known("embeddings mode", EMBEDDING_MODES),))
    emb_dim: int | None = option(
        None, "--emb-dim", MODEL, "word vector size (default: the vectors file's, else 300)",
        type=int, checks=_WIDTH)
    hidden: int = option(150, "--hidden", MODEL, "cell memory size", type=positive_int,
                         checks=(_POSITIVE,))
    head_hidden: int | None = option(
        None, "--head-hidden", MODEL,
        "hidden layer of the head (default: the paper's for the task)", type=int,
        checks=_WIDTH)
    dropout: float | None = option(
        None, "--dropout", MODEL, "dropout on the head input (default: 0.5, relatedness 0)",
        type=float, checks=(_DROPOUT,))
    emb_dropout: float | None = option(
        None, "--emb-dropout", MODEL,
        "dropout on the word vectors (default: 0.5 for Teng's cells lex, topdown, bitree "
        "(Teng §6), else 0)", type=float, checks=(_DROPOUT,))
    cell_kwargs: dict[str, Any] = option(
        {}, "--cell-arg", MODEL, "extra cell keyword argument (JSON value), e.g. n_ary=3")
    head_kwargs: dict[str, Any] = option(
        {}, "--head-arg", MODEL,
        "extra head keyword argument (JSON value), e.g. features=abs, activation=relu "
        "(inference)")
    sentence_state: str | None = option(
        None, "--sentence-state", MODEL,
        "root state used as the sentence vector (default: the task's)",
        choices=SENTENCE_STATES, checks=(_known("sentence state", SENTENCE_STATES),))
    engine: str | None = option(
        None, "--engine", MODEL, "propagation engine passed to the cell (default: the fastest "
        "the cell runs on with its options: level, else dgl; the same results)",
        choices=ENGINES)
    optimizer: str | None = option(
        None, "--optimizer", OPTIMIZATION,
        "default: adam for Teng's cells and for sick-e/snli, else adagrad", choices=OPTIMIZERS,
        checks=(_known("optimizer", OPTIMIZERS),))
    lr: float | None = option(
        None, "--lr", OPTIMIZATION, "learning rate (default: adagrad 0.05, adam 0.001)",
        type=float, checks=(_LEARNING_RATE,))
    emb_lr: float | None = option(
        None, "--emb-lr", OPTIMIZATION,
        "embedding learning rate (default: adagrad 0.1, adam = --lr)", type=float,
        checks=(_LEARNING_RATE,))
    l2: float = option(1e-4, "--l2", OPTIMIZATION, "per-minibatch L2 strength", type=float,
                       checks=(_L2,))
    emb_l2: float | None = option(
        None, "--emb-l2", OPTIMIZATION,
        "L2 on the word embeddings (default: the task's, 0 for most)", type=float,
        checks=(_L2,))
    rel_lr: float | None = option(
        None, "--rel-lr", OPTIMIZATION,
        "learning rate of mtree's relation embeddings, without L2 (Tran §6.1: 0.1; default: "
        "with the other weights)", type=float, checks=(_LEARNING_RATE,))
    clip_grad_norm: float | None = option(
        None, "--clip-grad-norm", OPTIMIZATION,
        "clip the gradient of all trained weights, word embeddings included, to this L2 "
        "norm before each optimizer step (default: no clipping, as the papers)",
        type=float, metavar="X", checks=(Check(
            lambda v: math.isfinite(v) and v > 0,
            "{flag} {value}: must be a positive number (leave it out for no clipping)"),))
    loss_reduction: str | None = option(
        None, "--loss-reduction", OPTIMIZATION,
        "mean or sum of the batch's losses (default: the task's)", choices=LOSS_REDUCTIONS,
        checks=(_known("loss reduction", LOSS_REDUCTIONS),))
    batch_size: int = option(25, "--batch-size", OPTIMIZATION,
                             "training examples per optimizer step", type=positive_int,
                             checks=(_POSITIVE,))
    eval_batch_size: int = option(256, "--eval-batch-size", OPTIMIZATION,
                                  "batch size of dev/test evaluation", type=positive_int,
                                  in_command=False, checks=(_POSITIVE,))
    epochs: int = option(10, "--epochs", OPTIMIZATION, "training epochs per seed",
                         type=positive_int, checks=(_POSITIVE, _at_most(MAX_EPOCHS)))
    seed: int = option(1, "--seed", OPTIMIZATION, "random seed of the first run", type=int)
    seeds: int = option(
        1, "--seeds", OPTIMIZATION,
        "number of runs with seeds SEED, SEED+1, ... (mean (std) reported)", type=positive_int,
        checks=(_POSITIVE, _at_most(MAX_SEEDS)))
    device: str = option("cpu", "--device", OPTIMIZATION, "where to train",
                         choices=DEVICES,
                         checks=(_known("device", DEVICES, lambda d: d.split(":")[0]),))
    distributed: bool = option(
        False, "--distributed", OPTIMIZATION,
        "data-parallel over the processes torchrun starts (--batch-size is the global batch; "
        "see gnn_treelstm/training/distributed.py)", in_command=False)
    lr_schedule: str = option(
        "constant", "--lr-schedule", SCHEDULE,
        "learning-rate schedule, stepped once per epoch: constant (the papers), cosine "
        "(from the learning rates towards 0 over the epochs), step (x --lr-gamma every "
        "--lr-step-size epochs), plateau (x --lr-gamma when more than "
        "--lr-plateau-patience epochs in a row bring no better dev score)",
        choices=LR_SCHEDULES, checks=(_known("learning-rate schedule", LR_SCHEDULES),))
    lr_warmup_epochs: int = option(
        0, "--lr-warmup-epochs", SCHEDULE,
        "raise the learning rates linearly over the first N epochs (epoch k of N at "
        "k/(N+1) of them) before the schedule; not with plateau", type=int, metavar="N",
        checks=(_at_least(0),))
    lr_step_size: int = option(5, "--lr-step-size", SCHEDULE,
                               "epochs between the step schedule's decays", type=int,
                               metavar="N", checks=(_at_least(1),))
    lr_gamma: float = option(0.1, "--lr-gamma", SCHEDULE,
                             "the factor of each step or plateau decay", type=float,
                             checks=(Check(lambda v: math.isfinite(v) and 0 < v <= 1,
                                           "{flag} {value}: a decay factor must be in (0, 1]"),))
    lr_plateau_patience: int = option(
        1, "--lr-plateau-patience", SCHEDULE,
        "plateau: epochs in a row without a better dev score that pass without a decay "
        "(the next one decays)", type=int, metavar="N", checks=(_at_least(0),))
    patience: int | None = option(
        None, "--patience", SCHEDULE,
        "early stopping: end a seed's training after N epochs without a better dev score "
        "(default: train every epoch, as the papers)", type=int, metavar="N",
        checks=(Check(lambda v: v >= 1, "{flag} {value}: must be a positive number of epochs "
                                        "(leave it out to train every epoch)"),))
    runs_dir: str = option("runs", "--runs-dir", OUTPUT, "where run directories are made",
                           metavar="DIR", in_command=False)
    name: str | None = option(None, "--name", OUTPUT,
                              "run name (default: task-model-tree-time)", in_command=False)
    workers: int | None = option(
        None, "--workers", OPTIMIZATION,
        "data loader processes building the training batches, their level schedules and "
        "pinned copies (0: built in the training process; default: "
        f"{CUDA_WORKERS} on CUDA, at most the CPUs less one, else 0; the batches are the "
        "same for any number)",
        type=non_negative_int, metavar="N", in_command=False,
        checks=(_at_least(0, " (0: the batches are built in the training process)"),))
    max_train: int | None = option(None, "--max-train", OUTPUT,
                                   "use only the first N training examples", type=int,
                                   checks=(_POSITIVE_OR_DEFAULT,))
    max_eval: int | None = option(None, "--max-eval", OUTPUT,
                                  "use only the first N examples of dev/test", type=int,
                                  checks=(_POSITIVE_OR_DEFAULT,))
    test: bool = option(True, "--no-test", OUTPUT, "skip the test-set evaluation")
    checkpoint_every: int = option(
        0, "--checkpoint-every", OUTPUT,
        "also save the training state every N batches (default: at the end of every epoch "
        "only)", type=int, metavar="N", in_command=False,
        checks=(_at_least(0, " (0: at the end of every epoch only)"),))
    skip_nonfinite: bool = option(
        False, "--skip-nonfinite", OUTPUT,
        "skip (and count) batches whose loss or gradients are NaN/inf instead of stopping "
        "the run", in_command=False)
    tensorboard: bool = option(
        False, "--tensorboard", OUTPUT,
        "write train loss, dev metrics and learning rate per epoch for TensorBoard to "
        "RUN_DIR/tensorboard/ (needs: pip install tensorboard)", in_command=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def run_name(self) -> str:
        """The run's name: ``name``, else ``TASK-MODEL-TREE-YYYYmmdd-HHMMSS`` (the local time
        now), the run directory's name under ``runs_dir``."""
        return self.name or f"{self.task}-{self.model}-{self.tree}-{time.strftime(RUN_TIME)}"

    def resolved(self) -> RunConfig:
        """A copy with every paper default filled in (what ``config.json`` records).

        A field the run sets (not ``None``; for ``optimizer`` and ``loss_reduction``, not
        empty) keeps its value. The others take, in this order, the defaults of the cell's
        paper family (:func:`gnn_treelstm.cells.run_defaults`: ``optimizer``,
        ``emb_dropout``, ``loss_reduction``), then the task's and the optimizer's:

        * optimizer: Adam for Teng & Zhang's cells (Teng §6) and for inference (Tran
          §6.1), AdaGrad otherwise (Tai §5.3, Tran §6.1);
        * lr: AdaGrad 0.05, Adam 0.001; embedding lr: AdaGrad 0.1, Adam = lr;
        * dropout on the head input: the task's (0.5; relatedness 0);
        * dropout on the word vectors: 0.5 for Teng & Zhang's cells (Teng §6), else 0;
        * supervision: the task's (SST: phrase);
        * word vectors: fixed for relatedness (Tai §5.3), tuned otherwise;
        * mTreeLSTM (``mtree``): the authors' code's optimization on every task, Adam lr
          0.001 on the *summed* batch loss with L2 1e-4. Under the paper's text (AdaGrad, or
          Adam, on the mean loss) L2 zeroes its relation path ``W_hm diag(W_mr e) W_mh``
          within the first epoch and the model trains on as Child-Sum without ``U h~``;
          under AdaGrad on the summed loss the path grows until training fails (measured:
          ``docs/RESULTS.md``, "mTreeLSTM's relation path").
        """
        task = build_task(self.task, supervision=self.supervision)
        family = run_defaults(self.model)
        opt = self.optimizer or family.get("optimizer") \
            or ("adam" if task.name in ADAM_TASKS else "adagrad")
        lr = self.lr if self.lr is not None else (0.05 if opt == "adagrad" else 1e-3)
        emb_lr = self.emb_lr if self.emb_lr is not None else (0.1 if opt == "adagrad" else lr)
        return dataclasses.replace(
            self, optimizer=opt, lr=lr, emb_lr=emb_lr,
            sentence_state=self.sentence_state or task.default_sentence_state,
            head_kwargs={**task.default_head_kwargs, **self.head_kwargs},
            loss_reduction=self.loss_reduction or family.get("loss_reduction")
            or task.default_loss_reduction,
            emb_l2=self.emb_l2 if self.emb_l2 is not None else task.default_emb_l2,
            dropout=task.default_dropout if self.dropout is None else self.dropout,
            emb_dropout=family.get("emb_dropout", 0.0) if self.emb_dropout is None
            else self.emb_dropout,
            supervision=task.supervision, cell_kwargs=dict(self.cell_kwargs),
            engine=self.engine or fastest_engine(self.model, self.cell_kwargs)[0],
            embeddings_mode=self.embeddings_mode
            or ("fixed" if task.name in ("sick-r", "pair-score") else "tuned"))

    def check(self) -> None:
        """Refuse bad names and values before anything is loaded (``ValueError``): each
        option's own checks (its field's
        :attr:`~gnn_treelstm.training.flags.RunOption.checks`; a ``None`` of an option whose
        default is ``None`` asks for the default and passes), then those that join
        options."""
        tasks.get(self.task)                      # UnknownNameError lists the choices
        cells.get(self.model)
        check_cell_options(self.model, self.cell_kwargs)  # --cell-arg names and types
        for opt in run_options():
            value = getattr(self, opt.name)
            if value is None and opt.default is None:
                continue
            for c in opt.checks:
                c.verify(opt.flag, opt.name, value)
        build_task(self.task, supervision=self.supervision)  # valid supervision
        if self.embeddings is not None and not Path(self.embeddings).is_file():
            raise ValueError(f"--embeddings {self.embeddings}: no such file")
        self._check_schedule()
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("--tensorboard needs the tensorboard package, which is not "
                             "installed: pip install tensorboard (or drop --tensorboard)")
        self._check_seed()
        self._check_name()
        self._check_workers()
        self._check_model_size()

    def _check_name(self) -> None:
        """The run's name can be a directory's (``ValueError``)."""
        if not self.name:
            return
        size = len(self.name.encode("utf-8", "surrogatepass"))
        if size > MAX_NAME or "\0" in self.name or self.name.strip() in ("", ".", ".."):
            raise ValueError(f"--name {self.name[:40]!r}{'...' if size > 40 else ''}: a run "
                             f"name is a directory's name of 1 to {MAX_NAME} bytes (this one "
                             f"has {size:,})")

    def _check_workers(self) -> None:
        """At most a loader process per CPU this process may use (``ValueError``)."""
        cpus = usable_cpus()
        if self.workers is not None and self.workers > cpus:
            raise ValueError(f"--workers {self.workers}: more loader processes than the "
                             f"{cpus} CPU(s) this process may use; give at most {cpus}, or 0 "
                             "to build the batches in the training process")

    def _check_seed(self) -> None:
        """The run's seeds are in ``[0, MAX_SEED]`` (``ValueError`` naming ``--seed``)."""
        last = self.seed + self.seeds - 1
        if not (0 <= self.seed and last <= MAX_SEED):
            more = f" (with --seeds {self.seeds}, up to {MAX_SEED - self.seeds + 1})" \
                if self.seeds > 1 else ""
            raise ValueError(f"--seed {self.seed}: a seed must be an integer from 0 to "
                             f"{MAX_SEED} (2**63 - 1){more}; e.g. --seed 1")

    def _check_model_size(self) -> None:
        """The model's estimated memory (:func:`estimate_memory`) fits the machine's
        (:func:`machine_memory`); ``ValueError`` with both and the flags to lower."""
        have, where = machine_memory(self.device)
        h, e, hh = self.hidden, self.emb_dim or 300, self.head_hidden or 300
        rough = 4 * (4 * 64 * h * (h + e + hh) + max(self.batch_size, self.eval_batch_size)
                     * _VALUES_PER_NODE * _NODES_PER_TREE * h)
        if rough <= have:  # far above every cell's count: no need to count
            return
        params, need = estimate_memory(self)
        if need > have:
            raise ValueError(
                f"--hidden {self.hidden}: the model would need about {_gib(need)} to train "
                f"({params:,} weights besides the word vectors, with their gradients and "
                f"optimizer state, and a batch of --batch-size {self.batch_size}) and "
                f"{where} has {_gib(have)}; lower --hidden (the papers use 120-300), "
                "--emb-dim, --head-hidden or --batch-size")

    def _check_schedule(self) -> None:
        """The learning-rate warm-up against the schedule and the epochs (``ValueError``)."""
        if self.lr_warmup_epochs and self.lr_schedule == "plateau":
            raise ValueError("--lr-warmup-epochs with --lr-schedule plateau: the plateau "
                             "schedule follows the dev score and takes no warm-up; use "
                             "cosine or step with a warm-up, or plateau without one")
        if self.lr_warmup_epochs and self.lr_warmup_epochs >= self.epochs:
            raise ValueError(f"--lr-warmup-epochs {self.lr_warmup_epochs}: must be fewer "
                             f"than --epochs {self.epochs}")

    def with_absolute_paths(self) -> RunConfig:
        """A copy whose path options (``data``, ``embeddings``: the fields declared with
        ``path``) are absolute, as a run records them, so that its ``config.json``,
        ``config.yaml`` and checkpoints name the same files from any working directory
        (``~`` is expanded; symbolic links are kept as given)."""
        return dataclasses.replace(self, **{o.name: absolute_path(getattr(self, o.name))
                                            for o in run_options() if o.path})


def absolute_path(value: str | None) -> str | None:
    """``value`` as an absolute path (``~`` expanded, ``..`` folded; None stays None)."""
    return None if value is None else os.path.abspath(os.path.expanduser(value))


def run_options() -> list[RunOption]:
    """The run options, one per :class:`RunConfig` field, in the order of ``--help``."""
    return options_of(RunConfig)


def config_changes(recorded: dict[str, Any], cfg: RunConfig,
                   ignore: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
    """The :class:`RunConfig` fields (not in ``ignore``) whose value in ``cfg`` differs from
    ``recorded`` (a ``config.json``'s ``run_config``), as ``(field, recorded, now)``.

    A field added after the run was recorded counts as its default there (so a run recorded
    before an option existed is unchanged while the option keeps its default); a recorded
    field RunConfig no longer has is not compared. Path options (``data``, ``embeddings``)
    are compared by the file they name: a relative path, as runs recorded them before
    recording absolute ones, is read from the current directory, so ``built/sick`` and
    ``/abs/built/sick`` are the same when run from ``/abs``. ``embeddings_sha256`` is a
    check, not a choice: it differs only where both name a digest; ``embeddings`` left unset
    now (the data's default vectors) matches the file the run recorded having read."""
    want = json.loads(json.dumps(jsonable(cfg.to_dict())))
    default = json.loads(json.dumps(jsonable(RunConfig().to_dict())))
    had = {**default, **recorded}
    skip = set(ignore)
    paths = {o.name for o in run_options() if o.path}

    def same(k: str) -> bool:
        a, b = had.get(k), want.get(k)
        if k == "embeddings_sha256" and (a is None or b is None):
            return True
        if k == "embeddings" and b is None:  # no file named now: the data's default vectors,
            return True                      # which the run recorded as the file it read
        if k in paths and isinstance(a, str) and isinstance(b, str):
            return os.path.realpath(os.path.expanduser(a)) == \
                os.path.realpath(os.path.expanduser(b))
        return a == b

    return [(k, had.get(k), want.get(k)) for k in sorted(want)
            if k not in skip and not same(k)]


def run_config_yaml(cfg: RunConfig, vectors: dict | None = None) -> str:
    """``config.yaml`` of a run: the resolved :class:`RunConfig` (every default filled in)
    as YAML, which ``gnn-treelstm train --config`` reads back. The run's ``name`` is left
    out, so training from the file makes a new run directory instead of overwriting this
    one (``--name`` picks one). ``vectors``: the record of the word vectors the run read
    (:func:`gnn_treelstm.training.data.load_embeddings`), written as a comment beside the
    ``embeddings`` and ``embeddings_sha256`` keys that select and check them."""
    import yaml

    body = {k: v for k, v in jsonable(cfg.to_dict()).items() if k != "name"}
    used = ""
    if vectors and vectors.get("path"):
        used = (f"# word vectors read: {vectors['path']} ({vectors.get('size')} bytes, "
                f"sha256 {vectors.get('sha256')}), {vectors.get('words_found')} of "
                f"{vectors.get('vocab_words')} words found\n")
    elif vectors:
        used = "# word vectors: random (--embeddings-mode random)\n"
    return ("# the resolved configuration of this run; `gnn-treelstm train --config "
            "THIS_FILE` trains it again\n# (command-line flags override these keys)\n"
            + used + yaml.safe_dump(body, sort_keys=False, allow_unicode=True))


def build_model_config(cfg: RunConfig, *, vocab_size: int, num_relations: int,
                 embeddings: torch.Tensor | None, emb_info: dict) -> ModelConfig:
    """The :class:`~gnn_treelstm.models.treelstm.ModelConfig` a resolved ``cfg`` trains on data with
    ``vocab_size`` words and ``num_relations`` edge relations; ``embeddings`` (None: random
    word vectors, ``cfg.emb_dim`` or 300 wide) and ``emb_info`` as
    :func:`gnn_treelstm.training.data.load_embeddings` returns them. The head is Teng &
    Zhang's (``teng_head``) where the cell's paper family says so
    (:func:`gnn_treelstm.cells.run_defaults`)."""
    if embeddings is not None and cfg.emb_dim is not None \
            and embeddings.shape[1] != cfg.emb_dim:
        raise ValueError(f"--emb-dim {cfg.emb_dim} but {emb_info['path']} has "
                         f"{embeddings.shape[1]}-dimensional vectors")
    emb_dim = int(embeddings.shape[1]) if embeddings is not None else (cfg.emb_dim or 300)
    return ModelConfig(
        task=cfg.task, cell=cfg.model, vocab_size=vocab_size, emb_dim=emb_dim,
        hidden=cfg.hidden, embeddings_mode=emb_info["mode"], dropout=cfg.dropout,
        emb_dropout=cfg.emb_dropout, head_hidden=cfg.head_hidden,
        teng_head=bool(run_defaults(cfg.model).get("teng_head", False)),
        supervision=cfg.supervision, num_relations=max(num_relations, 1),
        engine=cfg.engine, cell_kwargs=dict(cfg.cell_kwargs),
        sentence_state=cfg.sentence_state, head_kwargs=dict(cfg.head_kwargs),
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def estimate_memory(cfg: RunConfig) -> tuple[int, int]:
    """``(weights, bytes)``: the model's weights besides the word vectors (whose number
    is the data's), and the bytes training it takes about: the weights, their gradients
    and the optimizer's state (AdaGrad one value per weight, Adam two) in float32, and a
    batch's states (``--batch-size`` trees of 64 nodes, 24 values per node and hidden
    unit; ``--eval-batch-size`` trees with a third of that).

    The weights are counted on the model built on the ``meta`` device
    (:func:`~gnn_treelstm.models.treelstm.meta_model`), so nothing of the run's size is
    allocated."""
    r = cfg.resolved()
    try:
        model = meta_model(_model_config(r, r.hidden))
    except RuntimeError:  # too large for torch to count: extrapolated below
        model = None
    if model is not None:
        weights = sum(p.numel() for p in model.parameters())
    else:
        weights = _extrapolated_weights(r)
    copies = 2 + (2 if r.optimizer == "adam" else 1)
    batch = max(cfg.batch_size * _VALUES_PER_NODE,
                cfg.eval_batch_size * _VALUES_PER_NODE // 3) * _NODES_PER_TREE * cfg.hidden
    return weights, 4 * (weights * copies + batch)


def _model_config(r: RunConfig, hidden: int) -> ModelConfig:
    """The model configuration of the resolved ``r`` with ``hidden``, one word, one
    relation and random word vectors: the weights :func:`estimate_memory` counts."""
    return build_model_config(dataclasses.replace(r, hidden=hidden), vocab_size=1,
                              num_relations=1, embeddings=None,
                              emb_info={"mode": r.embeddings_mode})


def _extrapolated_weights(r: RunConfig) -> int:
    """The weights of the resolved ``r``'s model where it cannot be built on the ``meta``
    device (a cell that needs real tensors while it is built, none of the registry's, or
    weights too large for torch to count): counted on models built with ``hidden`` 2, 4,
    6 and 8 and extrapolated to ``r.hidden``, exact since a cell's weights are a
    polynomial of degree at most 3 in ``hidden``; these small models are built on the
    CPU."""
    from gnn_treelstm.models.treelstm import TreeLSTMModel

    counts = [sum(p.numel() for p in TreeLSTMModel(_model_config(r, h)).parameters())
              for h in (2, 4, 6, 8)]
    t = (r.hidden - 2) / 2  # Newton's forward differences over the steps of 2
    d1 = counts[1] - counts[0]
    d2 = counts[2] - 2 * counts[1] + counts[0]
    d3 = counts[3] - 3 * counts[2] + 3 * counts[1] - counts[0]
    return max(int(round(counts[0] + t * d1 + t * (t - 1) / 2 * d2
                         + t * (t - 1) * (t - 2) / 6 * d3)), 0)

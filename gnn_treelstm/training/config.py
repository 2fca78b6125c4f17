"""The run configuration: :class:`RunConfig` (what ``gnn-treelstm train`` flags and
``--config`` files set), its paper defaults (:meth:`RunConfig.resolved`), its checks, how two
configurations differ (:func:`config_changes`), ``config.yaml`` (:func:`run_config_yaml`)
and the model it trains (:func:`build_model_config`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnn_treelstm.cells import cells, check_cell_options
from gnn_treelstm.files import jsonable
from gnn_treelstm.models.treelstm import EMBEDDING_MODES, SENTENCE_STATES, TENG_CELLS, ModelConfig
from gnn_treelstm.tasks import build_task, tasks

if TYPE_CHECKING:
    import torch

__all__ = ["RunConfig", "TREE_KINDS", "OPTIMIZERS", "LOSS_REDUCTIONS", "DEVICES", "MAX_LR",
           "TRAN_CODE_CELLS",
           "config_changes", "run_config_yaml", "build_model_config"]

TREE_KINDS = ("constituency", "dependency", "chain", "amr", "dependency-spacy",
              "constituency-spacy")
OPTIMIZERS = ("adagrad", "adam")
#: ``mean``: the batch's mean loss (Tai's code); ``sum``: the summed loss, i.e. one
#: backward per example accumulated over the batch (Tran & Cheng's code)
LOSS_REDUCTIONS = ("mean", "sum")
DEVICES = ("cpu", "cuda")
#: cells trained by default with Tran & Cheng's code's optimization (Adam, summed loss):
#: with the paper's text L2 zeroes mTreeLSTM's relation path (see RunConfig.resolved)
TRAN_CODE_CELLS = ("mtree",)
#: largest learning rate accepted: beyond it a run only diverges (AdaGrad's papers: 0.05)
MAX_LR = 10.0


@dataclass
class RunConfig:
    """A training run. ``None`` fields take the task's / optimizer's paper default."""

    task: str = "sst-5"
    model: str = "nary"
    tree: str = "constituency"
    data: str | None = None
    embeddings: str | None = None
    embeddings_mode: str | None = None
    emb_dim: int | None = None
    hidden: int = 150
    head_hidden: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    emb_lr: float | None = None
    l2: float = 1e-4
    dropout: float | None = None
    emb_dropout: float | None = None
    supervision: str | None = None
    batch_size: int = 25
    eval_batch_size: int = 256
    epochs: int = 10
    seed: int = 1
    seeds: int = 1
    device: str = "cpu"
    engine: str = "dgl"
    cell_kwargs: dict[str, Any] = field(default_factory=dict)
    sentence_state: str | None = None
    head_kwargs: dict[str, Any] = field(default_factory=dict)
    loss_reduction: str | None = None
    emb_l2: float | None = None
    rel_lr: float | None = None
    runs_dir: str = "runs"
    name: str | None = None
    max_train: int | None = None
    max_eval: int | None = None
    test: bool = True
    skip_nonfinite: bool = False
    checkpoint_every: int = 0
    distributed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved(self) -> RunConfig:
        """A copy with every paper default filled in (what ``config.json`` records).

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
        teng = self.model in TENG_CELLS
        tran_code = self.model in TRAN_CODE_CELLS
        adam_tasks = ("sick-e", "snli", "pair-classify")
        opt = self.optimizer or ("adam" if teng or tran_code or task.name in adam_tasks
                                 else "adagrad")
        lr = self.lr if self.lr is not None else (0.05 if opt == "adagrad" else 1e-3)
        emb_lr = self.emb_lr if self.emb_lr is not None else (0.1 if opt == "adagrad" else lr)
        return dataclasses.replace(
            self, optimizer=opt, lr=lr, emb_lr=emb_lr,
            sentence_state=self.sentence_state or task.default_sentence_state,
            head_kwargs={**task.default_head_kwargs, **self.head_kwargs},
            loss_reduction=self.loss_reduction
            or ("sum" if tran_code else task.default_loss_reduction),
            emb_l2=self.emb_l2 if self.emb_l2 is not None else task.default_emb_l2,
            dropout=task.default_dropout if self.dropout is None else self.dropout,
            emb_dropout=(0.5 if teng else 0.0) if self.emb_dropout is None
            else self.emb_dropout,
            supervision=task.supervision, cell_kwargs=dict(self.cell_kwargs),
            embeddings_mode=self.embeddings_mode
            or ("fixed" if task.name in ("sick-r", "pair-score") else "tuned"))

    def check(self) -> None:
        """Refuse bad names and values before anything is loaded (``ValueError``)."""
        tasks.get(self.task)                      # UnknownNameError lists the choices
        cells.get(self.model)
        check_cell_options(self.model, self.cell_kwargs)  # --cell-arg names and types
        if self.tree not in TREE_KINDS:
            raise ValueError(f"unknown tree {self.tree!r}; choose one of: "
                             f"{', '.join(TREE_KINDS)}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of: "
                             f"{', '.join(OPTIMIZERS)}")
        if self.embeddings_mode is not None and self.embeddings_mode not in EMBEDDING_MODES:
            raise ValueError(f"unknown embeddings mode {self.embeddings_mode!r}; choose one "
                             f"of: {', '.join(EMBEDDING_MODES)}")
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; choose one of: "
                             f"{', '.join(DEVICES)}")
        build_task(self.task, supervision=self.supervision)  # valid supervision
        if self.checkpoint_every < 0:
            raise ValueError(f"--checkpoint-every {self.checkpoint_every}: must be >= 0 "
                             "(0: at the end of every epoch only)")
        for name in ("batch_size", "eval_batch_size", "epochs", "seeds", "hidden"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("lr", "emb_lr", "rel_lr"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and 0 < v <= MAX_LR):
                raise ValueError(f"--{name.replace('_', '-')} {v}: a learning rate must be in "
                                 f"(0, {MAX_LR:g}] (the papers use 0.05-0.1 with AdaGrad, "
                                 "0.001 with Adam)")
        for name in ("l2", "emb_l2"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be a finite number "
                                 ">= 0 (the papers use 1e-4)")
        for name in ("dropout", "emb_dropout"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 1:
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be in [0, 1)")
        for name in ("max_train", "max_eval", "emb_dim", "head_hidden"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be a positive integer "
                                 "(leave it out for the default)")
        if self.loss_reduction not in (None, *LOSS_REDUCTIONS):
            raise ValueError(f"unknown loss reduction {self.loss_reduction!r}; choose one of: "
                             f"{', '.join(LOSS_REDUCTIONS)}")
        if self.sentence_state not in (None, *SENTENCE_STATES):
            raise ValueError(f"unknown sentence state {self.sentence_state!r}; choose one of: "
                             f"{', '.join(SENTENCE_STATES)}")
        if self.embeddings is not None and not Path(self.embeddings).is_file():
            raise ValueError(f"--embeddings {self.embeddings}: no such file")


def config_changes(recorded: dict[str, Any], cfg: RunConfig,
                   ignore: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
    """The :class:`RunConfig` fields (not in ``ignore``) whose value in ``cfg`` differs from
    ``recorded`` (a ``config.json``'s ``run_config``), as ``(field, recorded, now)``. A
    field added after the run was recorded counts as its default there; a recorded field
    RunConfig no longer has is not compared."""
    want = json.loads(json.dumps(jsonable(cfg.to_dict())))
    default = json.loads(json.dumps(jsonable(RunConfig().to_dict())))
    had = {**default, **recorded}
    skip = set(ignore)
    return [(k, had.get(k), want.get(k)) for k in sorted(want)
            if k not in skip and had.get(k) != want.get(k)]


def run_config_yaml(cfg: RunConfig) -> str:
    """``config.yaml`` of a run: the resolved :class:`RunConfig` (every default filled in)
    as YAML, which ``gnn-treelstm train --config`` reads back. The run's ``name`` is left
    out, so training from the file makes a new run directory instead of overwriting this
    one (``--name`` picks one)."""
    import yaml

    body = {k: v for k, v in jsonable(cfg.to_dict()).items() if k != "name"}
    return ("# the resolved configuration of this run; `gnn-treelstm train --config "
            "THIS_FILE` trains it again\n# (command-line flags override these keys)\n"
            + yaml.safe_dump(body, sort_keys=False, allow_unicode=True))


def build_model_config(cfg: RunConfig, *, vocab_size: int, num_relations: int,
                 embeddings: torch.Tensor | None, emb_info: dict) -> ModelConfig:
    """The :class:`~gnn_treelstm.models.treelstm.ModelConfig` a resolved ``cfg`` trains on data with
    ``vocab_size`` words and ``num_relations`` edge relations; ``embeddings`` (None: random
    word vectors, ``cfg.emb_dim`` or 300 wide) and ``emb_info`` as
    :func:`gnn_treelstm.training.data.load_embeddings` returns them."""
    if embeddings is not None and cfg.emb_dim is not None \
            and embeddings.shape[1] != cfg.emb_dim:
        raise ValueError(f"--emb-dim {cfg.emb_dim} but {emb_info['path']} has "
                         f"{embeddings.shape[1]}-dimensional vectors")
    emb_dim = int(embeddings.shape[1]) if embeddings is not None else (cfg.emb_dim or 300)
    return ModelConfig(
        task=cfg.task, cell=cfg.model, vocab_size=vocab_size, emb_dim=emb_dim,
        hidden=cfg.hidden, embeddings_mode=emb_info["mode"], dropout=cfg.dropout,
        emb_dropout=cfg.emb_dropout, head_hidden=cfg.head_hidden,
        supervision=cfg.supervision, num_relations=max(num_relations, 1),
        engine=cfg.engine, cell_kwargs=dict(cfg.cell_kwargs),
        sentence_state=cfg.sentence_state, head_kwargs=dict(cfg.head_kwargs),
    )

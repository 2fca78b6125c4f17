"""Checkpoints that rebuild a model on their own.

A checkpoint is one ``torch.save`` file holding a plain dictionary::

    format        CHECKPOINT_FORMAT
    model_config  ModelConfig as a dict (rebuilds the architecture)
    state_dict    the weights
    vocab         the word list (id = index, 0 = "<unk>"), as DIR/vocab.json
    relations     the relation names of the tree kind (id = index)
    label_names   class names (None for relatedness)
    run_config    the training run's resolved configuration (a dict)
    meta          free-form: epoch, dev metrics, data set meta.json, ...
    cell_module   the module that defines the cell (imported on loading, for cells of
                  other packages)

It is written to a temporary file in the same directory and renamed over the target
(:func:`os.replace`), so a crash never leaves a half-written checkpoint.
:func:`load_model` rebuilds the model from the file alone.
"""

from __future__ import annotations

import importlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gnn_treelstm.cells import cell_module, cells
from gnn_treelstm.files import atomic_write
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.trees.vocab import Vocab

__all__ = ["CHECKPOINT_FORMAT", "PRETRAINED_FILE", "Checkpoint", "save_checkpoint",
           "load_checkpoint", "load_model", "checkpoint_path"]

CHECKPOINT_FORMAT = 4
#: the checkpoint file of a directory written by ``Predictor.save_pretrained``
PRETRAINED_FILE = "model.pt"
#: the checkpoint file of a training run's directory
RUN_FILE = "best.pt"
#: format 1 (before ``sentence_state`` and ``head_kwargs``) is read as the model it was:
#: root ``h`` and, for inference heads, the signed difference feature
_FORMAT_1_INFERENCE_TASKS = ("sick-e", "snli")
#: formats 1-2 (before 2-layer sequential LSTMs read every layer by default) are read as the
#: model they were: the top layer's ``h`` only
_FORMAT_2_MULTILAYER_CELLS = ("lstm2", "bilstm2")
#: formats 1-3 (before ``ModelConfig.teng_head``) gave these cells Teng & Zhang's head
_FORMAT_3_TENG_HEAD_CELLS = ("lex", "topdown", "bitree")


@dataclass
class Checkpoint:
    """A loaded checkpoint: the rebuilt model plus everything saved with it."""

    model: TreeLSTMModel
    vocab: Vocab
    relations: list[str]
    label_names: list[str] | None
    run_config: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def tree(self) -> str | None:
        """The tree kind the model was trained on (``dependency``, ``constituency``,
        ``chain``...): the run's ``--tree``, else the one recorded in ``meta``."""
        return self.run_config.get("tree") or self.meta.get("tree")


def save_checkpoint(
    path: str | os.PathLike,
    model: TreeLSTMModel,
    *,
    vocab: Vocab | list[str],
    relations: list[str] | None = None,
    label_names: list[str] | None = None,
    run_config: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` and its context to ``path`` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    itos = list(vocab.itos) if isinstance(vocab, Vocab) else list(vocab)
    if len(itos) != model.config.vocab_size:
        raise ValueError(
            f"vocabulary has {len(itos)} words but the model's embedding has "
            f"{model.config.vocab_size} rows"
        )
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model_config": model.config.to_dict(),
        "state_dict": state,
        "vocab": itos,
        "relations": list(relations or []),
        "label_names": None if label_names is None else list(label_names),
        "run_config": dict(run_config or {}),
        "meta": dict(meta or {}),
        "cell_module": cell_module(model.config.cell),
    }
    return atomic_write(path, lambda f: torch.save(payload, f))


def checkpoint_path(path: str | os.PathLike) -> Path:
    """A checkpoint file given itself or its directory: a run directory (``runs/NAME`` ->
    its ``best.pt``) or a saved model's directory (-> its ``model.pt``)."""
    path = Path(path)
    if not path.is_dir():
        return path
    for name in (RUN_FILE, PRETRAINED_FILE):
        if (path / name).is_file():
            return path / name
    return path / RUN_FILE


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The raw dictionary of a checkpoint file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        hint = ""
        if path.is_dir():
            hint = f"; did you mean {path / RUN_FILE}?"
        elif path.name == RUN_FILE and path.parent.is_dir():
            hint = (f"; {path.parent} holds neither {RUN_FILE} (a training run's directory) "
                    f"nor {PRETRAINED_FILE} (a model written by save_pretrained)")
        raise FileNotFoundError(f"checkpoint not found: {path}{hint}")
    try:
        # tensors and plain containers only: unpickling never calls code from the file
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" not in str(exc):  # damaged or not a pickle at all
            raise ValueError(f"{path}: not a readable checkpoint "
                             f"({_unpickling_reason(exc)})") from exc
        raise ValueError(
            f"{path}: refused: the file holds objects other than tensors, numbers, strings, "
            f"lists and dicts, which gnn_treelstm checkpoints never contain, and loading "
            f"them could run code from the file ({_unpickling_reason(exc)}). Unpickle it in full "
            "yourself only if you trust where it came from."
        ) from exc
    except Exception as exc:
        raise ValueError(f"{path}: not a readable checkpoint ({exc})") from exc
    if not isinstance(payload, dict) or "model_config" not in payload:
        raise ValueError(f"{path}: not a gnn_treelstm checkpoint (no model_config)")
    if payload.get("format") == 1:
        payload = _upgrade_format_1(payload)
    if payload.get("format") == 2:
        payload = _upgrade_format_2(payload)
    if payload.get("format") == 3:
        payload = _upgrade_format_3(payload)
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path}: checkpoint format {payload.get('format')!r}, this version reads "
            f"{CHECKPOINT_FORMAT}"
        )
    return payload


def _upgrade_format_1(payload: dict[str, Any]) -> dict[str, Any]:
    """A format-1 checkpoint, with the defaults it was trained under made explicit."""
    mc = dict(payload["model_config"])
    mc.setdefault("sentence_state", "h")
    if "head_kwargs" not in mc:
        mc["head_kwargs"] = ({"features": "paper"} if mc.get("task") in _FORMAT_1_INFERENCE_TASKS
                             else {})
    return {**payload, "model_config": mc, "format": 2}


def _upgrade_format_2(payload: dict[str, Any]) -> dict[str, Any]:
    """A format-2 checkpoint: its 2-layer sequential LSTMs read the top layer only."""
    mc = dict(payload["model_config"])
    if mc.get("cell") in _FORMAT_2_MULTILAYER_CELLS:
        mc["cell_kwargs"] = {"concat_layers": False, **(mc.get("cell_kwargs") or {})}
    return {**payload, "model_config": mc, "format": 3}


def _upgrade_format_3(payload: dict[str, Any]) -> dict[str, Any]:
    """A format-3 checkpoint: its head is Teng & Zhang's where its cell's was then."""
    mc = dict(payload["model_config"])
    mc.setdefault("teng_head", mc.get("cell") in _FORMAT_3_TENG_HEAD_CELLS)
    return {**payload, "model_config": mc, "format": 4}


def import_cell_module(payload: dict[str, Any], path: str | os.PathLike = "checkpoint") -> None:
    """Register the checkpoint's cell where it is not yet: import the module the checkpoint
    records as defining it (``cell_module``), by name from the Python path (a module
    installed or put there by the user: nothing of the file itself runs); ``ValueError``
    naming that module where it cannot be imported."""
    name = (payload.get("model_config") or {}).get("cell")
    module = payload.get("cell_module")
    if not isinstance(name, str) or name in cells:
        return
    if not isinstance(module, str) or not module:
        return  # written before cell_module was recorded: the registry's own error follows
    try:
        cells.get(name)   # an installed package's entry point
        return
    except KeyError:
        pass
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(
            f"{path}: the model's cell {name!r} is defined in the module {module!r}, which "
            f"cannot be imported ({exc}); put the directory holding it on PYTHONPATH or "
            f"install its package (command line: --cell-module {module})") from exc


def _unpickling_reason(exc: BaseException) -> str:
    """The line of torch's refusal that names the offending object."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    named = [ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln] or lines[1:]
    return (named or lines or [type(exc).__name__])[0]


def load_model(path: str | os.PathLike, *, device: str | torch.device = "cpu",
               engine: str | None = None) -> Checkpoint:
    """Rebuild the model of a checkpoint (in eval mode) from the file alone.

    ``path``: a checkpoint file, a run directory (its ``best.pt``) or a directory written by
    ``Predictor.save_pretrained`` (its ``model.pt``). ``engine`` overrides the propagation
    engine the model was trained with.
    """
    path = checkpoint_path(path)
    payload = load_checkpoint(path)
    import_cell_module(payload, path)
    config = ModelConfig.from_dict(payload["model_config"])
    if engine is not None:
        config.engine = engine
    model = TreeLSTMModel(config)
    model.load_state_dict(payload["state_dict"])
    model.to(device).eval()
    vocab = Vocab(unk_token=payload["vocab"][0])
    vocab.update(payload["vocab"][1:])
    return Checkpoint(
        model=model, vocab=vocab, relations=list(payload.get("relations") or []),
        label_names=payload.get("label_names"), run_config=payload.get("run_config") or {},
        meta=payload.get("meta") or {}, path=Path(path),
    )

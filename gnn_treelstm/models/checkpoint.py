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
    digest        "sha256:..." of the weights (:func:`tensor_digest`)
    contents_digest  "sha256:..." of every other entry (:func:`contents_digest`: the
                  configuration, vocabulary, relations, label names, run configuration,
                  meta, cell module and ``digest``), so that nothing a checkpoint holds can
                  change unnoticed
    cell_module   the module that defines the cell (never imported on loading: a cell
                  of another package is registered by the user's --cell-module or
                  ``cell_modules=``, or by an installed entry point)

It is written to a temporary file in the same directory and renamed over the target
(:func:`os.replace`), so a crash never leaves a half-written checkpoint.
:func:`load_model` rebuilds the model from the file alone.

What loading checks, each refusal a ``ValueError`` naming the file (the commands exit 2
with it): the weights against their ``digest`` (:func:`check_digest`: a file damaged or
changed after it was written; a checkpoint written before digests loads unchecked, with
an INFO line), the entries a model needs (``vocab``, ``state_dict``...), and the
configuration against the weights' shapes before any weight is loaded into the model
(:func:`fitted_model`: a changed ``hidden`` is named with the value the weights are for).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gnn_treelstm.argtypes import machine_memory
from gnn_treelstm.cells import (
    ENTRY_POINT_GROUP,
    build_cell,
    cell_module,
    cells,
    import_cell_modules,
)
from gnn_treelstm.cells.registry import MODULE_NAME
from gnn_treelstm.files import atomic_write
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel, cell_accepts, meta_model
from gnn_treelstm.trees.vocab import Vocab

__all__ = ["CHECKPOINT_FORMAT", "PRETRAINED_FILE", "Checkpoint", "save_checkpoint",
           "load_checkpoint", "load_model", "checkpoint_path", "DIGEST_KEY", "tensor_digest",
           "check_digest", "fitted_model", "require_cell", "CONTENTS_KEY", "contents_digest",
           "check_contents", "FASTEST", "FASTEST_ENGINE", "fastest_engine"]

log = logging.getLogger(__name__)

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
        DIGEST_KEY: tensor_digest(state),
        "cell_module": cell_module(model.config.cell),
    }
    payload[CONTENTS_KEY] = contents_digest(payload)
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
    check_contents(payload, path)
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
    _check_entries(payload, path)
    check_digest(payload, path)
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


def require_cell(payload: dict[str, Any], path: str | os.PathLike = "checkpoint") -> None:
    """Refuse a checkpoint whose cell is not registered: by the library, a module the user
    imported (``--cell-module``, ``load_model(cell_modules=...)``, an ``import``) or an
    installed package's entry point. The module the checkpoint names (``cell_module``) is
    never imported on its word: a downloaded file must not choose the code that runs; the
    ``ValueError`` names the module and how to trust it."""
    name = (payload.get("model_config") or {}).get("cell")
    if not isinstance(name, str):
        return  # the configuration's own check names it
    try:
        cells.get(name)   # registered, or an installed package's entry point
        return
    except KeyError:
        pass
    module = payload.get("cell_module")
    if not isinstance(module, str) or not module:
        return  # written before cell_module was recorded: the registry's own error follows
    if not MODULE_NAME.fullmatch(module):
        raise ValueError(f"{path}: the model's cell {name!r} is not registered, and the "
                         f"module the checkpoint names for it ({module[:80]!r}) is not a "
                         "module name; the checkpoint was changed or damaged")
    raise ValueError(
        f"{path}: the model's cell {name!r} is defined in the module {module!r}, which is "
        f"not imported; a checkpoint never imports code by itself. If you trust that "
        f"module, name it: `--cell-module {module}` on the command line, "
        f"`load_model(path, cell_modules=[{module!r}])` in Python (with the directory "
        f"holding it on PYTHONPATH), or install a package declaring the cell in the "
        f"entry-point group {ENTRY_POINT_GROUP}")


def _unpickling_reason(exc: BaseException) -> str:
    """The line of torch's refusal that names the offending object."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    named = [ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln] or lines[1:]
    return (named or lines or [type(exc).__name__])[0]


def load_model(path: str | os.PathLike, *, device: str | torch.device = "cpu",
               engine: str | None = None, cell_modules: Sequence[str] = ()) -> Checkpoint:
    """Rebuild the model of a checkpoint (in eval mode) from the file alone.

    ``path``: a checkpoint file, a run directory (its ``best.pt``) or a directory written by
    ``Predictor.save_pretrained`` (its ``model.pt``). ``engine`` overrides the propagation
    engine the model was trained with; :data:`FASTEST` picks :data:`FASTEST_ENGINE` where
    the model's cell runs on it (with its options), else keeps the checkpoint's.
    ``cell_modules``: modules to import first, which register cells of your own (the
    module a checkpoint names is never imported on its word: :func:`require_cell`).
    """
    import_cell_modules(cell_modules)
    path = checkpoint_path(path)
    payload = load_checkpoint(path)
    require_cell(payload, path)
    try:
        config = ModelConfig.from_dict(payload["model_config"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: its model_config cannot be read ({exc}); the checkpoint "
                         "was changed or damaged: use it as training wrote it") from exc
    if len(payload["vocab"]) != config.vocab_size:
        raise ValueError(
            f"{path}: model_config['vocab_size'] is {config.vocab_size} but the checkpoint's "
            f"vocab has {len(payload['vocab'])} words; the checkpoint was changed or damaged: "
            "use it as training wrote it")
    if engine == FASTEST:
        engine = _fastest_engine(config, path)
    if engine is not None:
        config.engine = engine
    model = fitted_model(config, payload["state_dict"], path)
    model.to(device).eval()
    vocab = Vocab(unk_token=payload["vocab"][0])
    vocab.update(payload["vocab"][1:])
    return Checkpoint(
        model=model, vocab=vocab, relations=list(payload.get("relations") or []),
        label_names=payload.get("label_names"), run_config=payload.get("run_config") or {},
        meta=payload.get("meta") or {}, path=Path(path),
    )


# ------------------------------------------------------------------ integrity and fit
#: the checkpoint entry holding :func:`tensor_digest` of its ``state_dict``
DIGEST_KEY = "digest"
#: the entries every checkpoint has, and what each must be
_ENTRIES = {"model_config": dict, "state_dict": dict, "vocab": list}
#: the model_config sizes a weight's shape follows
_SIZE_KEYS = ("vocab_size", "emb_dim", "hidden", "head_hidden", "num_relations")


def tensor_digest(state: Mapping[str, torch.Tensor]) -> str:
    """``"sha256:<hex>"`` of a ``state_dict``: every tensor's name, dtype, shape and bytes,
    in name order (the same for a state on any device)."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous().reshape(-1)
        h.update(f"{name}\0{t.dtype}\0{tuple(state[name].shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy())
    return f"sha256:{h.hexdigest()}"


#: the checkpoint entry holding :func:`contents_digest` of everything but the tensors
CONTENTS_KEY = "contents_digest"


def _canonical(value: Any, h: Any) -> None:
    """Feed ``value`` (plain containers, strings, numbers, tensors) to the hash ``h``,
    typed, so that no two values feed the same bytes."""
    if isinstance(value, Mapping):
        h.update(b"{%d" % len(value))
        for key in sorted(value, key=repr):
            _canonical(key, h)
            _canonical(value[key], h)
    elif isinstance(value, (list, tuple)):
        h.update(b"[%d" % len(value))
        for item in value:
            _canonical(item, h)
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(value.shape)}".encode())
        h.update(t.view(torch.uint8).numpy())
    else:
        text = repr(value).encode("utf-8", "surrogatepass")
        h.update(b"%s%d:" % (type(value).__name__.encode(), len(text)) + text)


def contents_digest(payload: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of every entry of a checkpoint but ``state_dict`` (covered by
    ``digest``, itself among the entries) and this digest."""
    h = hashlib.sha256()
    _canonical({k: v for k, v in payload.items() if k not in (CONTENTS_KEY, "state_dict")}, h)
    return f"sha256:{h.hexdigest()}"


def check_contents(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse a checkpoint whose entries (label names, vocabulary, configuration, cell
    module...) differ from those written with it (``ValueError`` naming the file); one
    written before :data:`CONTENTS_KEY` passes, with an INFO line."""
    stored = payload.get(CONTENTS_KEY)
    if stored is None:
        log.info("%s: no digest of its configuration, vocabulary and labels (written before "
                 "checkpoints carried one); only its weights are checked", path)
        return
    found = contents_digest(payload)
    if found != stored:
        raise ValueError(
            f"{path}: its configuration, vocabulary, labels or cell module do not match the "
            f"digest written with them (recorded {str(stored)[:23]}..., found {found[:23]}"
            "...): the file was damaged or changed after it was written. Use another copy "
            "of it, or train it again")


def _check_entries(payload: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint without the entries a model needs (``ValueError``)."""
    for key, kind in _ENTRIES.items():
        if not isinstance(payload.get(key), kind):
            got = "missing" if key not in payload else f"a {type(payload[key]).__name__}"
            raise ValueError(
                f"{path}: the checkpoint's {key!r} is {got}, not a {kind.__name__}; the "
                "checkpoint was changed or damaged: use it as training wrote it")
    bad = next((k for k, v in payload["state_dict"].items()
                if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ValueError(f"{path}: state_dict[{bad!r}] is not a tensor; the checkpoint was "
                         "changed or damaged: use it as training wrote it")
    if not payload["vocab"] or not all(isinstance(w, str) for w in payload["vocab"]):
        raise ValueError(f"{path}: the checkpoint's 'vocab' is not a list of words; the "
                         "checkpoint was changed or damaged: use it as training wrote it")


def check_digest(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse weights that differ from the digest written with them (``ValueError``
    naming the file); a checkpoint without a digest (written before checkpoints carried
    one) passes, with an INFO line."""
    stored = payload.get(DIGEST_KEY)
    if stored is None:
        log.info("%s: no digest of its weights (written before checkpoints carried one); "
                 "loaded unchecked", path)
        return
    found = tensor_digest(payload["state_dict"])
    if found != stored:
        raise ValueError(
            f"{path}: the weights do not match the digest written with them (recorded "
            f"{str(stored)[:23]}..., found {found[:23]}...): the file was damaged or changed "
            "after it was written. Use another copy of it (or the run's state.pt), or train "
            "it again")


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def _size_candidates(config: ModelConfig, want: tuple[int, ...],
                     got: tuple[int, ...]) -> list[tuple[str, int]]:
    """``(key, value)`` size changes of ``config`` that would turn the shape ``want`` into
    ``got`` (a dimension k * value of the config's becomes k * another value)."""
    out = []
    for a, b in zip(want, got):
        if a == b:
            continue
        for key in _SIZE_KEYS:
            v = getattr(config, key)
            if isinstance(v, int) and v > 0 and a % v == 0 and b % (a // v) == 0:
                out.append((key, b // (a // v)))
    return out


def fitted_model(config: ModelConfig, state: Mapping[str, torch.Tensor],
                 path: str | os.PathLike) -> TreeLSTMModel:
    """The model of ``config`` with ``state`` loaded, once ``config`` is found to make
    exactly the weights of ``state`` (names and shapes).

    Raises:
        ValueError: names the file and the configuration key whose value does not fit
            the weights (and the value they are for) where one size explains it, else the
            first weight that differs.
    """
    got = {k: tuple(v.shape) for k, v in state.items()}
    _check_size(config, got, path)
    try:
        model = TreeLSTMModel(config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: its model_config cannot be read ({exc}); the checkpoint "
                         "was changed or damaged: use it as training wrote it") from exc
    want = _shapes(model)
    if want != got:
        raise ValueError(f"{path}: {_misfit(config, want, got)}; the checkpoint was changed "
                         "or damaged: use it as training wrote it")
    model.load_state_dict(state)
    return model


def _check_size(config: ModelConfig, got: dict[str, tuple[int, ...]],
                path: str | os.PathLike) -> None:
    """Refuse, before anything is allocated, a configuration whose model does not fit the
    machine's memory (counted on a model built on the ``meta`` device, which allocates
    nothing), or whose ``hidden`` or ``emb_dim`` exceeds every dimension of the file's
    weights (where a cell cannot be built on ``meta``): ``ValueError`` naming the file."""
    try:
        probe = meta_model(config)  # None: the shapes are checked below
    except RuntimeError as exc:
        raise ValueError(f"{path}: model_config (hidden {config.hidden}, emb_dim "
                         f"{config.emb_dim}) makes weights too large to count ({exc}); "
                         "the checkpoint was changed or damaged") from None
    if probe is None:
        largest = max((d for shape in got.values() for d in shape), default=0)
        for key in ("hidden", "emb_dim"):
            value = getattr(config, key)
            if isinstance(value, int) and value > largest:
                raise ValueError(f"{path}: model_config[{key!r}] is {value:,} but no weight "
                                 f"of the file has a dimension that large (the largest is "
                                 f"{largest:,}); the checkpoint was changed or damaged: use "
                                 "it as training wrote it")
        return
    need = sum(t.numel() * t.element_size() for t in probe.state_dict().values())
    have, where = machine_memory()
    if need > have:
        raise ValueError(f"{path}: model_config (hidden {config.hidden:,}, emb_dim "
                         f"{config.emb_dim:,}, vocab_size {config.vocab_size:,}) makes a model "
                         f"of {need / 2**30:,.1f} GiB of weights and {where} has "
                         f"{have / 2**30:,.1f} GiB; the checkpoint was changed or damaged, or "
                         "needs a larger machine")


def _misfit(config: ModelConfig, want: dict[str, tuple[int, ...]],
            got: dict[str, tuple[int, ...]]) -> str:
    """What differs between the weights ``config`` makes and those of the file."""
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        return (f"model_config (cell {config.cell!r}, task {config.task!r}) makes weights the "
                f"file does not have ({', '.join(missing[:3]) or 'none'}) or the file has "
                f"weights it does not make ({', '.join(extra[:3]) or 'none'})")
    name = next(k for k in want if want[k] != got[k])
    for key, value in dict.fromkeys(_size_candidates(config, want[name], got[name])):
        try:
            other = TreeLSTMModel(dataclasses.replace(config, **{key: value}))
        except Exception:  # noqa: BLE001, S112 - a candidate that builds no model
            continue
        if _shapes(other) == got:
            return (f"model_config[{key!r}] is {getattr(config, key)} but the weights are "
                    f"for {key} {value} ({name} is {_dims(got[name])} in the file, "
                    f"{_dims(want[name])} for {key} {getattr(config, key)})")
    return (f"model_config does not fit the weights: {name} is {_dims(got[name])} in the "
            f"file, {_dims(want[name])} for the configuration")


# ------------------------------------------------------------------ engine choice
#: ``load_model(engine=FASTEST)``: the fastest engine the model's cell runs on
FASTEST = "fastest"
#: the fastest engine: the level engine, the same math as the dgl reference engine
#: (``tests/cells/test_registry.py``) level by level instead of frontier by frontier
#: (``docs/speed.md``)
FASTEST_ENGINE = "level"


def fastest_engine(cell: str, cell_kwargs: Mapping[str, Any] | None = None, *,
                   num_relations: int = 2) -> tuple[str, str]:
    """The fastest engine ``cell`` runs on with ``cell_kwargs``, and why it is not
    :data:`FASTEST_ENGINE` ("" when it is): :data:`FASTEST_ENGINE` where a small probe of
    the cell builds on it, else ``"dgl"``, the reference engine. The default engine of
    ``train`` (``RunConfig.resolved``), ``predict``, ``serve`` and ``load_model``."""
    kwargs = dict(cell_kwargs or {})
    if cell_accepts(cell, "num_relations"):
        kwargs.setdefault("num_relations", num_relations)
    try:  # a small probe of the cell, as the model would build it
        build_cell(cell, 4, 4, engine=FASTEST_ENGINE, **kwargs)
    except (TypeError, ValueError) as exc:
        return "dgl", f"the {cell} cell does not run on the {FASTEST_ENGINE} engine ({exc})"
    return FASTEST_ENGINE, ""


def _fastest_engine(config: ModelConfig, path: Path) -> str:
    """:data:`FASTEST_ENGINE` if the model's cell (with its options) is built on it, else
    the checkpoint's engine (logged)."""
    if config.engine == FASTEST_ENGINE:
        return config.engine
    engine, why = fastest_engine(config.cell, config.cell_kwargs,
                                 num_relations=config.num_relations)
    if why:
        log.info("%s: %s; using the checkpoint's %s engine", path, why, config.engine)
        return config.engine
    return engine

"""The ``gnn-treelstm train`` options: the parser, ``--config`` files, and the
:class:`~gnn_treelstm.training.config.RunConfig` they make.

Library code (the reproduction runner's command strings, tests) reads train commands
through :func:`parse_args` and :func:`config_from_args`, the same way the CLI does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnn_treelstm.cells import cells
from gnn_treelstm.cells.base import ENGINES
from gnn_treelstm.models.treelstm import EMBEDDING_MODES, SENTENCE_STATES
from gnn_treelstm.tasks import tasks
from gnn_treelstm.training.config import DEVICES, LOSS_REDUCTIONS, OPTIMIZERS, TREE_KINDS, RunConfig

__all__ = ["build_parser", "config_file_defaults", "parse_args", "config_from_args"]

#: the command's one-line description (``--help``)
DESCRIPTION = "train a Tree-LSTM on a task of the papers"


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class _DefaultsOnce(argparse.HelpFormatter):
    """Appends ``(default: X)`` to a flag's help unless the help already says its default
    or there is none to say."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)".strip()


def build_parser() -> argparse.ArgumentParser:
    d = RunConfig()
    ap = argparse.ArgumentParser(
        prog="gnn-treelstm train", description=DESCRIPTION,
        formatter_class=_DefaultsOnce)
    ap.add_argument("--config", default=None, metavar="YAML",
                    help="a run config (YAML or JSON; every flag below may be a key, with "
                         "- or _; a run's config.yaml reproduces it); flags given on the "
                         "command line override it")
    ap.add_argument("--log-level", default="WARNING",
                    choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                    help="console log level (train.log in the run directory gets INFO)")
    ap.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                    help="= --log-level INFO")
    g = ap.add_argument_group("what to train")
    g.add_argument("--task", default=d.task, help=f"one of: {', '.join(tasks.names())}")
    g.add_argument("--model", default=d.model, help=f"one of: {', '.join(cells.names())}")
    g.add_argument("--tree", default=d.tree, help=f"one of: {', '.join(TREE_KINDS)}")
    g.add_argument("--supervision", default=None,
                   help="SST: phrase (every labelled node, Tai) or root (Tran Table 1); "
                        "default: the task's")
    g.add_argument("--data", default=None,
                   help="built data directory (default: $GNN_TREELSTM_DATA, else the "
                        "embedded sample)")
    g = ap.add_argument_group("model")
    g.add_argument("--embeddings", default=None,
                   help="GloVe/word2vec text file (plain or .gz); default: the raw data's "
                        "glove/ directory if it has one")
    g.add_argument("--embeddings-mode", default=None, choices=EMBEDDING_MODES,
                   help="Tai Table 2: tuned, fixed or random word vectors (default: fixed "
                        "for sick-r, tuned otherwise, as Tai §5.3)")
    g.add_argument("--emb-dim", type=int, default=None,
                   help="word vector size (default: the vectors file's, else 300)")
    g.add_argument("--hidden", type=int, default=d.hidden, help="cell memory size")
    g.add_argument("--head-hidden", type=int, default=None,
                   help="hidden layer of the head (default: the paper's for the task)")
    g.add_argument("--dropout", type=float, default=None,
                   help="dropout on the head input (default: 0.5, relatedness 0)")
    g.add_argument("--emb-dropout", type=float, default=None,
                   help="dropout on the word vectors (default: 0.5 for Teng's cells lex, "
                        "topdown, bitree (Teng §6), else 0)")
    g.add_argument("--cell-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra cell keyword argument (JSON value), e.g. n_ary=3")
    g.add_argument("--head-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra head keyword argument (JSON value), e.g. features=abs, "
                        "activation=relu (inference)")
    g.add_argument("--sentence-state", default=None, choices=SENTENCE_STATES,
                   help="root state used as the sentence vector (default: the task's)")
    g.add_argument("--engine", default=d.engine, choices=ENGINES,
                   help="propagation engine passed to the cell")
    g = ap.add_argument_group("optimization")
    g.add_argument("--optimizer", default=None, choices=OPTIMIZERS,
                   help="default: adam for Teng's cells and for sick-e/snli, else adagrad")
    g.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: adagrad 0.05, adam 0.001)")
    g.add_argument("--emb-lr", type=float, default=None,
                   help="embedding learning rate (default: adagrad 0.1, adam = --lr)")
    g.add_argument("--l2", type=float, default=d.l2, help="per-minibatch L2 strength")
    g.add_argument("--emb-l2", type=float, default=None,
                   help="L2 on the word embeddings (default: the task's, 0 for most)")
    g.add_argument("--rel-lr", type=float, default=None,
                   help="learning rate of mtree's relation embeddings, without L2 (Tran "
                        "§6.1: 0.1; default: with the other weights)")
    g.add_argument("--loss-reduction", default=None, choices=LOSS_REDUCTIONS,
                   help="mean or sum of the batch's losses (default: the task's)")
    g.add_argument("--batch-size", type=int, default=d.batch_size)
    g.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size,
                   help="batch size of dev/test evaluation")
    g.add_argument("--epochs", type=int, default=d.epochs)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--seeds", type=int, default=d.seeds,
                   help="number of runs with seeds SEED, SEED+1, ... (mean (std) reported)")
    g.add_argument("--device", default=d.device, choices=DEVICES)
    g.add_argument("--distributed", action="store_true",
                   help="data-parallel over the processes torchrun starts (--batch-size is "
                        "the global batch; see gnn_treelstm/training/distributed.py)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's; 1 avoids slow-downs when other "
                        "jobs share the cores)")
    g = ap.add_argument_group("output")
    g.add_argument("--runs-dir", default=d.runs_dir)
    g.add_argument("--name", default=None, help="run name (default: task-model-tree-time)")
    g.add_argument("--max-train", type=int, default=None,
                   help="use only the first N training examples")
    g.add_argument("--max-eval", type=int, default=None,
                   help="use only the first N examples of dev/test")
    g.add_argument("--no-test", action="store_true", help="skip the test-set evaluation")
    g.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue a stopped run (its config.yaml, its saved states) where "
                        "it stopped; no other option changes the run")
    g.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="also save the training state every N batches (default: at the "
                        "end of every epoch only)")
    g.add_argument("--overwrite", action="store_true",
                   help="replace the run already in runs/NAME (default: refuse it)")
    g.add_argument("--skip-nonfinite", action="store_true",
                   help="skip (and count) batches whose loss or gradients are NaN/inf "
                        "instead of stopping the run")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return ap


#: config-file keys that are RunConfig fields with another shape on the command line
_CONFIG_DICTS = {"cell_kwargs": "cell_arg", "head_kwargs": "head_arg"}


def config_file_defaults(path: str, ap: argparse.ArgumentParser) -> dict:
    """The parser defaults a ``--config`` file sets (keys checked, values type-checked).

    Raises:
        ValueError: unreadable file, not a mapping, an unknown key, or a value of the wrong
            type or outside the flag's choices; the message names the file and the key.
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not valid YAML ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of options, got "
                         f"{type(data).__name__}")
    actions = {a.dest: a for a in ap._actions if a.dest not in ("help", "config")}
    out: dict = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest == "test":  # RunConfig.test = not --no-test
            dest, value = "no_test", (not value) if isinstance(value, bool) else value
        if dest in _CONFIG_DICTS:
            if not isinstance(value, dict):
                raise ValueError(f"--config {path}: {key} must be a mapping, got {value!r}")
            dest, value = _CONFIG_DICTS[dest], [f"{k}={json.dumps(v)}" for k, v in
                                                 value.items()]
        action = actions.get(dest)
        if action is None:
            known = sorted({*actions, *_CONFIG_DICTS, "test"} - {"no_test", "cell_arg",
                                                                  "head_arg"})
            raise ValueError(f"--config {path}: unknown key {key!r}; known keys: "
                             f"{', '.join(known)}")
        _check_value(path, key, value, action)
        out[dest] = value
    return out


def _check_value(path: str, key: str, value, action: argparse.Action) -> None:
    bad = None
    if isinstance(action, argparse._StoreTrueAction):
        bad = None if isinstance(value, bool) else "true or false"
    elif action.type is int:
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        bad = None if ok else "an integer"
    elif action.type is float:
        ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        bad = None if ok else "a number"
    elif isinstance(action, argparse._AppendAction):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        bad = None if ok else "a list of KEY=VALUE strings"
    elif value is not None and not isinstance(value, str):
        bad = "a string"
    if bad is None and action.choices is not None and value is not None \
            and value not in action.choices:
        bad = f"one of {', '.join(map(str, action.choices))}"
    if bad:
        raise ValueError(f"--config {path}: {key} must be {bad}, got {value!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    pre.add_argument("--resume", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.resume is not None:
        if known.config is not None:
            ap.error("--resume takes the run's own config.yaml; drop --config")
        run_dir = Path(known.resume)
        if not (run_dir / "config.yaml").is_file():
            ap.error(f"--resume {run_dir}: no config.yaml there; is it a run directory "
                     "(runs/NAME)?")
        known.config = str(run_dir / "config.yaml")
    if known.config is not None:
        try:
            ap.set_defaults(**config_file_defaults(known.config, ap))
        except ValueError as exc:
            ap.error(str(exc))  # exit 2 with the message
    a = ap.parse_args(argv)
    if a.resume is not None:  # the run's own directory, wherever it is now
        a.name, a.runs_dir = Path(a.resume).name, str(Path(a.resume).parent)
    return a


def _kwargs(items: list[str], flag: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = _value(v)
    return out


def config_from_args(a: argparse.Namespace) -> RunConfig:
    cell_kwargs = _kwargs(a.cell_arg, "--cell-arg")
    head_kwargs = _kwargs(a.head_arg, "--head-arg")
    return RunConfig(
        task=a.task, model=a.model, tree=a.tree, data=a.data, embeddings=a.embeddings,
        embeddings_mode=a.embeddings_mode, emb_dim=a.emb_dim, hidden=a.hidden,
        head_hidden=a.head_hidden, optimizer=a.optimizer, lr=a.lr, emb_lr=a.emb_lr, l2=a.l2,
        dropout=a.dropout, emb_dropout=a.emb_dropout, supervision=a.supervision,
        batch_size=a.batch_size, eval_batch_size=a.eval_batch_size, epochs=a.epochs,
        seed=a.seed, seeds=a.seeds,
        device=a.device, engine=a.engine, cell_kwargs=cell_kwargs, head_kwargs=head_kwargs,
        sentence_state=a.sentence_state, loss_reduction=a.loss_reduction, emb_l2=a.emb_l2,
        rel_lr=a.rel_lr, runs_dir=a.runs_dir, name=a.name, max_train=a.max_train,
        max_eval=a.max_eval, test=not a.no_test, skip_nonfinite=a.skip_nonfinite,
        checkpoint_every=a.checkpoint_every, distributed=a.distributed,
    )

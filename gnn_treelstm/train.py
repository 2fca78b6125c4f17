"""``gnn-treelstm train``: train a Tree-LSTM on a task of the papers.

    gnn-treelstm train                                # Constituency Tree-LSTM on SST-5
    gnn-treelstm train --task sick-r --model childsum --tree dependency --seeds 5
    gnn-treelstm train --task sst-2 --model nary --embeddings glove.txt.gz --epochs 10

Also ``python -m gnn_treelstm.train`` and, in a checkout, ``python train.py``.

Data: ``--data DIR`` (a directory built by ``python -m data_prep.build``, a directory of
such directories, or raw data laid out like the data mirror), else ``$GNN_TREELSTM_DATA``,
else the embedded sample (built on the fly into ``runs/_sample_data``). Writes
``runs/NAME/`` (config.json, metrics.jsonl, best.pt, results.json, train.log).
"""

from __future__ import annotations

from gnn_treelstm.cli import progress_bar, set_openmp_wait_policy  # no torch, no dgl

set_openmp_wait_policy()  # read by libgomp when torch loads: before any torch import

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm import heap, rundir
from gnn_treelstm.cells import cells
from gnn_treelstm.cells.base import ENGINES
from gnn_treelstm.faults import NonFiniteError
from gnn_treelstm.model import EMBEDDING_MODES, SENTENCE_STATES
from gnn_treelstm.registry import UnknownNameError
from gnn_treelstm.runconfig import DEVICES, LOSS_REDUCTIONS, OPTIMIZERS, TREE_KINDS, RunConfig
from gnn_treelstm.rundata import DataError
from gnn_treelstm.tasks import tasks
from gnn_treelstm.training import run


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
        prog="gnn-treelstm train", description=__doc__.split("\n\n")[0],
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
                        "the global batch; see gnn_treelstm/distributed.py)")
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


def _fmt(metrics: dict) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items()
                    if isinstance(v, float) and not k.startswith("count"))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(a)
        cfg.check()
    except (ValueError, UnknownNameError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.threads is not None:
        if a.threads <= 0:
            print(f"error: --threads must be positive, got {a.threads}", file=sys.stderr)
            return 2
        import torch

        torch.set_num_threads(a.threads)
    heap.keep_heap_pages()  # freed batch buffers stay in the heap: no page faults per batch
    cfg.name = cfg.name or f"{cfg.task}-{cfg.model}-{cfg.tree}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(cfg.runs_dir) / cfg.name
    # ranks > 0 of a distributed run write nothing: no log file, no directory
    writer = not a.distributed or os.environ.get("RANK", "0") == "0"
    try:  # before train.log is opened: a refused directory keeps its old log
        if a.resume is None and writer:
            rundir.check_free(run_dir, overwrite=a.overwrite)
    except rundir.RunDirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if writer:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(run_dir / "train.log",
                                          mode="a" if a.resume else "w", encoding="utf-8")
        except OSError as e:  # --runs-dir is a file, not writable, ...
            print(f"error: cannot write the run directory {run_dir} ({e.strerror or e}); "
                  "pass --runs-dir a writable directory", file=sys.stderr)
            return 2
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.getLogger("gnn_treelstm").setLevel(logging.INFO)
    logging.getLogger("data_prep").setLevel(logging.INFO)
    for h in root.handlers:
        if h is not handler:
            h.setLevel(a.log_level)

    progress = progress_bar(a.quiet)

    def on_epoch(r: dict) -> None:
        star = " *" if r["best"] else ""
        print(f"seed {r['seed']} epoch {r['epoch']:>3}: loss {r['train_loss']:.4f} | dev "
              f"{_fmt(r['dev'])} | {r['train_seconds']:.1f}s "
              f"({r['trees_per_second']:.0f} trees/s, peak {r['peak_rss_mb']:.0f} MB, "
              f"dev {r['eval_seconds']:.1f}s){star}", flush=True)

    try:
        res = run(cfg, progress=progress, on_epoch=on_epoch, overwrite=a.overwrite,
                  keep=("train.log",), resume=a.resume is not None,
                  release_heap=heap.release_free_heap)  # free pages back before each epoch
    except (ValueError, DataError, UnknownNameError, FileNotFoundError,
            NotImplementedError, NonFiniteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: the run's state is saved after every epoch (and every "
              f"--checkpoint-every N batches); continue it with `gnn-treelstm train --resume "
              f"{run_dir}`", file=sys.stderr)
        return 130
    finally:
        root.removeHandler(handler)
        handler.close()
    if "rank" in res:  # a distributed run's other ranks: rank 0 reports
        return 0
    sel = res["selection_metric"]
    for r in res["seeds"]:
        test = f" | test {_fmt(r['test'])}" if "test" in r else ""
        print(f"seed {r['seed']}: best epoch {r['best_epoch']} dev {sel} "
              f"{r['dev'].get(sel, float('nan')):.4f}{test}")
    if len(res["seeds"]) > 1 and res["test"]:
        summary = " ".join(f"{k} {v['mean']:.4f} ({v['std']:.4f})"
                           for k, v in res["test"].items() if not k.startswith("count"))
        print(f"test mean (std) over {len(res['seeds'])} seeds: {summary}")
    print(f"run: {res['run_dir']}  checkpoint: {res['checkpoint']}  "
          f"({res['seconds_per_epoch']:.2f} s/epoch median, training peak "
          f"{res['peak_rss_mb']:.0f} MB RSS, process peak {res['process_peak_rss_mb']:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

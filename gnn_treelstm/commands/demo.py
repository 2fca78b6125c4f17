"""``python -m gnn_treelstm demo`` (``make demo``): the main job on the embedded sample.

1. builds the sample's SST graphs (binarized constituency trees) with
``gnn_treelstm.datasets.build``, 2. draws one tree to ``runs/demo/tree.png``,
3. trains the default model, the Constituency Tree-LSTM (``nary``, Tai et al. 2015 §3.2)
   on SST-5 with the sample's GloVe 50d vectors, for a few epochs,
4. rebuilds the selected checkpoint from the file alone and evaluates it on the test split,

and prints where the PNG, the run directory and the metrics are. A command-line entry
point, so it prints. The sample is tiny (200 training sentences): the point is that the
whole pipeline runs, not the accuracy.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

from gnn_treelstm.commands.cli import description
from gnn_treelstm.models.checkpoint import load_model
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.data import SAMPLE_SRC, managed_data_dir
from gnn_treelstm.training.evaluation import evaluate
from gnn_treelstm.training.options import add_run_flags
from gnn_treelstm.training.trainer import TrainHooks, run
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.drawing import draw_tree

__all__ = ["main"]


def _pick_tree(split: D.Split, lo: int = 7, hi: int = 14) -> int:
    """A training sentence of readable length (its index), else the shortest one."""
    sizes = [int((g.ndata["leaf"]).sum()) for g in split.graphs]
    for i, n in enumerate(sizes):
        if lo <= n <= hi:
            return i
    return min(range(len(sizes)), key=sizes.__getitem__)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``gnn-treelstm demo``."""
    ap = argparse.ArgumentParser(prog="gnn-treelstm demo", description=description(__doc__),
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_run_flags(ap, ("runs_dir", "epochs", "hidden", "seed"), epochs=5)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    t_start = time.perf_counter()
    runs = Path(args.runs_dir)
    out_dir = runs / "demo"
    try:  # every value checked before anything is written
        cfg = _checked_config(args, runs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    # 1. the sample's graphs (GNN_TREELSTM_DATA is ignored here: the demo is the sample)
    t0 = time.perf_counter()
    data_dir = _sample_dir(runs)
    meta = D.load_meta(data_dir)
    counts = ", ".join(f"{k} {v}" for k, v in meta["splits"].items())
    print(f"[1/4] sample SST graphs: {data_dir} ({counts} sentences; "
          f"{time.perf_counter() - t0:.1f}s)")

    # 2. one tree
    vocab = D.load_vocab(data_dir)
    train = D.load_split(data_dir, "train", "constituency")
    i = _pick_tree(train)
    g = train.graphs[i]
    words = [vocab.itos[int(w)] for w in g.ndata["word"] if int(w) >= 0]
    png = draw_tree(g, out_dir / "tree.png", vocab=vocab, title=f"SST train #{i}: "
                    + " ".join(words), label_names=meta.get("label_names"))
    print(f"[2/4] tree drawn: {png}")

    # 3. train the default model
    cfg = dataclasses.replace(cfg, data=str(data_dir))
    print(f"[3/4] training Constituency Tree-LSTM (nary) on SST-5, {args.epochs} epochs:")

    def on_epoch(r: dict) -> None:
        dev = r["dev"]
        print(f"      epoch {r['epoch']}: loss {r['train_loss']:.3f}, dev accuracy "
              f"{dev['accuracy']:.3f} (phrases {dev['phrase_accuracy']:.3f}), "
              f"{r['train_seconds']:.1f}s{' *' if r['best'] else ''}", flush=True)

    # the demo is rerun at will: it replaces its earlier run, keeping the tree just drawn
    res = run(cfg, hooks=TrainHooks(on_epoch_end=on_epoch), overwrite=True, keep=("tree.png",))
    run_dir = Path(res["run_dir"])

    # 4. evaluate the checkpoint, rebuilt from the file alone
    ck = load_model(run_dir / "best.pt")
    test = ck.model.task.prepare_split(D.load_split(data_dir, "test", "constituency"))
    metrics, _ = evaluate(ck.model, test)
    print(f"[4/4] test (best epoch {res['seeds'][0]['best_epoch']}): root accuracy "
          f"{metrics['accuracy']:.3f}, all-phrase accuracy {metrics['phrase_accuracy']:.3f} "
          f"on {metrics['count']} sentences")
    print()
    print(f"tree PNG:     {png}")
    print(f"run:          {run_dir}  (config.json, metrics.jsonl, best.pt, results.json)")
    print(f"metrics:      {run_dir / 'results.json'}")
    print(f"evaluate:     gnn-treelstm evaluate {run_dir / 'best.pt'} --split test")
    print(f"total time:   {time.perf_counter() - t_start:.1f}s")
    return 0


def _checked_config(args: argparse.Namespace, runs: Path) -> RunConfig:
    """The demo's run configuration, checked (``ValueError`` naming a bad value)."""
    cfg = RunConfig(task="sst-5", model="nary", tree="constituency",
                    data=str(runs / "_sample_data" / "sst"), epochs=args.epochs,
                    hidden=args.hidden, seed=args.seed, runs_dir=str(runs), name="demo")
    cfg.check()
    return cfg


def _sample_dir(runs: Path) -> Path:
    """The sample's built SST directory (whatever GNN_TREELSTM_DATA says: the demo is the
    sample)."""
    return managed_data_dir(SAMPLE_SRC, runs / "_sample_data" / "sst", "sst", "constituency")


if __name__ == "__main__":
    sys.exit(main())

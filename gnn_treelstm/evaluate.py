"""``gnn-treelstm evaluate``: evaluate checkpoints, predict on raw text, and tabulate or plot runs.

    gnn-treelstm evaluate runs/NAME/best.pt --split test      # the task's metrics
    gnn-treelstm evaluate runs/NAME/best.pt --predict "a gorgeous, witty film"
    gnn-treelstm evaluate runs/NAME/best.pt --predict sentences.txt   # one per line;
                                                     # pairs: "A<TAB>B" or "A ||| B"
    gnn-treelstm evaluate --table runs/A runs/B               # mean (std) over seeds
    gnn-treelstm evaluate runs/A/best.pt runs/B/best.pt --plot-length length.png

The model is rebuilt from the checkpoint alone; the data directory recorded in it is used
unless ``--data`` is given. ``--predict`` parses raw text with spaCy through the data
path's functions (dependency parse; binarized for constituency models; chain for the
sequential LSTMs).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm import data as D
from gnn_treelstm import metrics as M
from gnn_treelstm.checkpoint import Checkpoint, checkpoint_path, load_model
from gnn_treelstm.devices import pick_device
from gnn_treelstm.evaluation import evaluate
from gnn_treelstm.predict import Input, format_text, predict_records, read_lines
from gnn_treelstm.rundata import DataError, resolve_data_dir
from gnn_treelstm.rundir import check_same_run
from gnn_treelstm.vocab import fingerprint

log = logging.getLogger("evaluate")


# ---------------------------------------------------------------------------- evaluation
def data_dir_for(ck: Checkpoint, data: str | None) -> Path:
    """The built data directory to evaluate on (``--data``, else the checkpoint's)."""
    dataset = ck.model.task.dataset
    tree = ck.run_config.get("tree") or ck.meta.get("tree")
    if data is not None:
        return resolve_data_dir(data, dataset, tree,
                                runs_dir=ck.run_config.get("runs_dir", "runs"))
    stored = ck.meta.get("data_dir")
    if stored and (Path(stored) / "meta.json").exists():
        return Path(stored)
    if ck.run_config.get("data") is None and stored and "_sample_data" in stored:
        return resolve_data_dir(None, dataset, tree,
                                runs_dir=ck.run_config.get("runs_dir", "runs"))
    raise DataError(
        f"the data directory recorded in the checkpoint ({stored}) is gone; pass --data DIR "
        f"or rebuild it with `python -m data_prep.build --dataset {dataset} --src "
        f"RAW_DATA_DIR --out {stored}`"
    )


def load_eval_split(ck: Checkpoint, data_dir: Path, split: str, *,
                    remap_vocab: bool = False) -> D.Split:
    tree = ck.run_config.get("tree") or ck.meta.get("tree")
    meta = D.load_meta(data_dir)
    if split not in meta.get("splits", {}):
        raise DataError(f"{data_dir} has no split {split!r}; splits: "
                        f"{', '.join(meta.get('splits', {}))}")
    raw = check_vocabularies(ck, data_dir, D.load_split(data_dir, split, tree),
                             remap=remap_vocab)
    sp = ck.model.task.prepare_split(raw)
    limit = ck.run_config.get("max_eval")
    if limit is not None and len(sp) > limit:
        sp = sp.subset(list(range(limit)))
    return sp


def _id_map(data_names: Sequence[str], model_ids: dict[str, int], default: int | None,
            what: str, data_file: Path) -> torch.Tensor:
    out = []
    for name in data_names:
        i = model_ids.get(name, default)
        if i is None:
            raise DataError(f"{data_file}: {what} {name!r} is unknown to the checkpoint; it "
                            "cannot be remapped")
        out.append(i)
    return torch.tensor(out, dtype=torch.long)


def check_vocabularies(ck: Checkpoint, data_dir: Path, sp: D.Split, *,
                       remap: bool = False) -> D.Split:
    """The split, its word (and relation) ids checked against the checkpoint's.

    Data built with another vocabulary would be scored with word ids that point at other
    words; that is an error naming both fingerprints, unless ``remap``: ids are then
    translated by the word's text (words the model never saw become ``<unk>``; an unknown
    relation stays an error)."""
    data_vocab = D.load_vocab(data_dir)
    tree = sp.tree
    word_map = rel_map = None
    if data_vocab.itos != ck.vocab.itos:
        if not remap:
            raise DataError(
                f"{data_dir / 'vocab.json'} ({len(data_vocab)} words, fingerprint "
                f"{fingerprint(data_vocab.itos)}) is not the vocabulary the checkpoint was "
                f"trained with ({len(ck.vocab)} words, fingerprint "
                f"{fingerprint(ck.vocab.itos)}): its word ids would point at other words. "
                "Evaluate on the data the model was trained on, or pass --remap-vocab to "
                "translate the ids by word")
        word_map = _id_map(data_vocab.itos, ck.vocab.stoi, ck.vocab.unk, "word",
                           data_dir / "vocab.json")
        unseen = int((word_map == ck.vocab.unk).sum()) - 1
        log.warning("--remap-vocab: %d of %d words of %s are unknown to the model",
                    unseen, len(data_vocab) - 1, data_dir)
    rel_file = data_dir / "relations" / f"{tree}.json"
    if ck.relations and rel_file.exists():
        data_rels = D.load_relations(data_dir, tree).names
        if data_rels != list(ck.relations):
            if not remap:
                raise DataError(
                    f"{rel_file} (fingerprint {fingerprint(data_rels)}) is not the relation "
                    f"set the checkpoint was trained with (fingerprint "
                    f"{fingerprint(ck.relations)}); pass --remap-vocab to translate by name")
            rel_map = _id_map(data_rels, {r: i for i, r in enumerate(ck.relations)}, None,
                              "relation", rel_file)
    if word_map is None and rel_map is None:
        return sp
    from gnn_treelstm import graph as G

    def fix(graphs: list | None) -> list | None:
        if graphs is None:
            return None
        for g in graphs:
            if word_map is not None:
                w = g.ndata[G.WORD]
                g.ndata[G.WORD] = torch.where(w >= 0, word_map[w.clamp(min=0)], w)
            if rel_map is not None and g.num_edges():
                g.edata[G.REL] = rel_map[g.edata[G.REL]]
        return graphs

    return D.Split(fix(sp.graphs), fix(sp.graphs_b), sp.targets, sp.name, sp.tree, sp.meta)


def evaluate_checkpoint(path: str | Path, *, split: str = "test", data: str | None = None,
                        device: str = "cpu", engine: str | None = None,
                        batch_size: int = 256, remap_vocab: bool = False,
                        ) -> tuple[Checkpoint, dict, dict]:
    """Load a checkpoint, evaluate it on ``split``; ``(checkpoint, metrics, gathered)``."""
    ck = load_model(checkpoint_path(path), engine=engine)
    dev, on_device = pick_device(device, ck.model.config.engine)
    ck.model.to(dev)
    data_dir = data_dir_for(ck, data)
    sp = load_eval_split(ck, data_dir, split, remap_vocab=remap_vocab)
    tokens = None
    if getattr(ck.model.task, "subsets", False) and (data_dir / "text").exists():
        recs = D.load_text(data_dir, split)
        tokens = [(list(r["a"]), list(r["b"])) if "a" in r else (list(r["tokens"]), None)
                  for r in recs]
    metrics, gathered = evaluate(ck.model, sp, batch_size=batch_size, device=dev,
                                 graphs_on_device=on_device, tokens=tokens)
    return ck, metrics, gathered


def format_metrics(metrics: dict) -> str:
    parts = []
    for k, v in metrics.items():
        if isinstance(v, float):
            parts.append(f"{k} {v:.4f}")
        else:
            parts.append(f"{k} {v}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------- prediction
def read_inputs(arg: str, pair: bool) -> list[Input]:
    """``--predict`` input: the lines of a file, if ``arg`` names one, else one text.

    ``gnn-treelstm predict`` is the full command (stdin, JSON, per-node output)."""
    try:
        is_file = len(arg) < 4096 and "\n" not in arg and Path(arg).is_file()
    except OSError:  # e.g. a name too long for the file system: it is text
        is_file = False
    if is_file:
        return read_lines(Path(arg).read_text(encoding="utf-8").splitlines(), pair=pair,
                          source=arg)
    inputs = read_lines([arg], pair=pair, source="--predict")
    if not inputs:
        raise ValueError("--predict: no text given")
    return inputs


# ---------------------------------------------------------------------------- tables


def _cell(metric: str, v: dict | None) -> str:
    if not v or v.get("mean") is None or (isinstance(v["mean"], float)
                                          and math.isnan(v["mean"])):
        return "n/a"
    mean, std = v["mean"], v.get("std") or 0.0
    if "accuracy" in metric:
        return f"{100 * mean:.1f} ({100 * std:.1f})"
    return f"{mean:.4f} ({std:.4f})"


def markdown_table(run_dirs: Sequence[str | Path], split: str = "test") -> str:
    """The papers' table form: one row per run, metric mean (std) over its seeds."""
    rows = []
    metrics: list[str] = []
    for d in run_dirs:
        path = Path(d) / "results.json" if Path(d).is_dir() else Path(d)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no results.json (is {d} a finished run?)")
        res = json.loads(path.read_text(encoding="utf-8"))
        config = path.with_name("config.json")
        if config.is_file():  # results and config of one run, never two
            check_same_run(path.parent, {
                "results.json": res,
                "config.json": json.loads(config.read_text(encoding="utf-8"))})
        for m in res.get("metric_names") or list(res.get(split, {})):
            if m not in metrics:
                metrics.append(m)
        rows.append(res)
    header = ["model", "tree", "task", "seeds"] + metrics
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for res in rows:
        vals = res.get(split, {})
        cells = [res.get("name", ""), res.get("tree", ""), res.get("task", ""),
                 str(len(res.get("seeds", [])))]
        cells[0] = f"{res.get('model', '')} ({res.get('name', '')})"
        cells += [_cell(m, vals.get(m)) for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- length plot
def plot_length(curves: list[tuple[str, object]], out: str | Path, *, metric: str,
                split: str) -> Path:
    """Tai Figs 3-4: score against sentence length, pooled in windows of +-2 words."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, (x, y, _c) in curves:
        ax.plot(x, y, marker="o", markersize=3, label=label)
    xlabel = "mean sentence length" if metric == "pearson" else "sentence length"
    ax.set_xlabel(f"{xlabel} (words; windows of \u00b12)")
    ax.set_ylabel("Pearson's r" if metric == "pearson" else "accuracy")
    ax.set_title(f"{metric} vs. sentence length ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def length_curve_of(ck: Checkpoint, gathered: dict, min_count: int = 10) -> tuple:
    """``(length, score, count)`` of one model; windows with fewer than ``min_count``
    examples are left out (they are noise at the long tail)."""
    task = ck.model.task
    pred, gold = task.example_scores(gathered)
    fn = M.pearson if task.curve_metric() == "pearson" else M.accuracy
    return M.length_curve(gathered["length"], pred, gold, fn, window=2,
                          min_count=max(min_count, 3 if fn is M.pearson else 1))


# ---------------------------------------------------------------------------- CLI
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gnn-treelstm evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*",
                    help="checkpoint(s) (runs/NAME/best.pt or runs/NAME), or run "
                         "directories with --table")
    ap.add_argument("--split", default=None, help="split to evaluate (default: test)")
    ap.add_argument("--data", default=None, help="built data directory (default: the "
                    "checkpoint's)")
    ap.add_argument("--predict", metavar="TEXT_OR_FILE", default=None,
                    help="a sentence (pair: 'A<TAB>B' or 'A ||| B') or a file of them")
    ap.add_argument("--spacy-model", default=None, help="spaCy pipeline for --predict")
    ap.add_argument("--table", action="store_true",
                    help="markdown table of the run directories: mean (std) over seeds")
    ap.add_argument("--plot-length", metavar="PNG", default=None,
                    help="plot accuracy (Pearson for sick-r) against sentence length")
    ap.add_argument("--min-count", type=int, default=10,
                    help="--plot-length: leave out windows with fewer examples")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--engine", default=None, choices=("dgl", "level"),
                    help="override the checkpoint's engine")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--remap-vocab", action="store_true",
                    help="data built with another vocabulary: translate word and relation "
                         "ids by name (default: refuse it)")
    ap.add_argument("--log-level", default="WARNING",
                    choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    ap.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                    help="= --log-level INFO")
    ap.add_argument("--json", action="store_true",
                    help="metrics, or --predict records, as JSON lines")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    split = a.split or "test"
    try:
        if a.table:
            if not a.paths:
                raise ValueError("--table needs run directories: evaluate.py --table runs/A ...")
            print(markdown_table(a.paths, split))
            return 0
        if not a.paths:
            raise ValueError("give a checkpoint: evaluate.py runs/NAME/best.pt --split test")
        if a.predict is not None:
            from data_prep.dependency import load_pipeline

            ck = load_model(checkpoint_path(a.paths[0]), engine=a.engine)
            inputs = read_inputs(a.predict, ck.model.task.pair)
            nlp = load_pipeline(a.spacy_model)
            for rec in predict_records(ck, inputs, nlp):
                print(json.dumps(rec, ensure_ascii=False) if a.json else format_text(rec))
            return 0
        if a.plot_length:
            curves = []
            metric = None
            for p in a.paths:
                ck, metrics, gathered = evaluate_checkpoint(
                    p, split=split, data=a.data, device=a.device, engine=a.engine,
                    batch_size=a.batch_size, remap_vocab=a.remap_vocab)
                metric = ck.model.task.curve_metric()
                cp = checkpoint_path(p)
                label = f"{ck.model.config.cell} ({ck.run_config.get('tree')}) "\
                        f"[{cp.parent.name}]"
                curves.append((label, length_curve_of(ck, gathered, a.min_count)))
                print(f"{cp}: {format_metrics(metrics)}")
            out = plot_length(curves, a.plot_length, metric=metric or "accuracy", split=split)
            print(f"wrote {out}")
            return 0
        for p in a.paths:
            ck, metrics, _ = evaluate_checkpoint(p, split=split, data=a.data, device=a.device,
                                                 engine=a.engine, batch_size=a.batch_size,
                                                 remap_vocab=a.remap_vocab)
            if a.json:
                print(json.dumps({"checkpoint": str(checkpoint_path(p)), "split": split,
                                  **metrics}))
            else:
                print(f"{checkpoint_path(p)} [{ck.model.task.name}, {split}]: "
                      f"{format_metrics(metrics)}")
        return 0
    except (ValueError, FileNotFoundError, DataError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

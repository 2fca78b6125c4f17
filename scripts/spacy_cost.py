"""What predicting with spaCy's parses costs a model trained on SICK's Stanford parses.

Every checkpoint given (a run directory's ``best.pt``, every ``seed-*/best.pt`` under a
multi-seed run, or a ``.pt`` file) was trained with ``--tree dependency`` on SICK. Each is
scored on one split (default ``test``) of a built SICK directory four ways, the same
sentences and targets each time:

``stanford``
    the Stanford trees it was trained on (``dependency``): what ``evaluate`` reports;
``spacy``
    spaCy's trees of the same tokens (``dependency-spacy``), each label translated by
    :mod:`gnn_treelstm.datasets.labels` into the model's relations (outside them: ``dep``), as
    ``predict`` now does;
``spacy-by-name``
    the same trees with the labels looked up by name and every other label sent to
    relation 0, as ``predict`` did before the map;
``raw-text`` (with ``--src``)
    the raw sentences (``sick/stanford_parsed/<split>/{a,b}.txt``) tokenized and parsed by
    spaCy and built by :meth:`gnn_treelstm.models.predictor.Predictor.graphs`: exactly the path
    of ``gnn-treelstm predict`` (a few sentences tokenize differently from SICK's tokens).

A Child-Sum Tree-LSTM ignores relations, so its ``spacy`` and ``spacy-by-name`` agree: only
the tree shapes differ. The multiplicative Tree-LSTM composes each child through its
relation (Tran & Cheng 2018). Prints one line per checkpoint and, per task and model, a
Markdown table of mean (sample std, ddof=1) over the checkpoints, with the paired
differences from the Stanford trees (mean and std of the per-checkpoint difference)::

    .venv/bin/python scripts/spacy_cost.py /tmp/spacy_cost/runs/* --data /tmp/built/sick \\
        --src ../shared/data

A measurement, not part of the package; ``--json`` prints the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch

from gnn_treelstm.datasets.dependency import load_pipeline, parse_texts
from gnn_treelstm.datasets.text import RelationMap
from gnn_treelstm.models.checkpoint import Checkpoint, load_model
from gnn_treelstm.models.predictor import Predictor
from gnn_treelstm.training.evaluation import evaluate
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees import graph as G

CONDITIONS = ("stanford", "spacy", "spacy-by-name", "raw-text")
#: the metrics of each task shown in the table
SHOWN = {"sick-r": ("pearson", "spearman", "mse"),
         "sick-e": ("accuracy", "accuracy_ls", "accuracy_negation")}


def checkpoints(paths: list[Path]) -> list[Path]:
    """``best.pt`` files: the path itself, ``DIR/best.pt`` or ``DIR/seed-*/best.pt``."""
    out = []
    for p in paths:
        if p.is_file():
            out.append(p)
        elif sorted(p.glob("seed-*/best.pt")):
            out += sorted(p.glob("seed-*/best.pt"))
        elif (p / "best.pt").is_file():
            out.append(p / "best.pt")
        else:
            raise FileNotFoundError(f"{p}: no best.pt (nor seed-*/best.pt) there")
    return out


def relabel(graphs: list, names: list[str], tokens: list[list[str]], ck: Checkpoint,
            by_name: bool, fell_back: Counter) -> list:
    """Copies of spaCy-tree ``graphs`` (relation ids into ``names``) with relation ids of the
    checkpoint: through the label map, or by name with relation 0 for the rest."""
    ids = {r: i for i, r in enumerate(ck.relations)}
    mapping = RelationMap(ck.relations, stanford=True)
    out = []
    for g, toks in zip(graphs, tokens):
        g = g.clone()
        if g.num_edges():
            child = g.edges()[0].tolist()
            new = []
            for s, r in zip(child, g.edata[G.REL].tolist()):
                label = names[r]
                if by_name:
                    if label not in ids:
                        fell_back[label] += 1
                    new.append(ids.get(label, 0))
                else:
                    new.append(ids[mapping.name(label, toks[s])])
            g.edata[G.REL] = torch.tensor(new, dtype=torch.int64)
        out.append(g)
    if not by_name:
        fell_back.update(mapping.unmapped)
    return out


def raw_texts(src: Path, split: str, ids: list[str]) -> tuple[list[str], list[str]]:
    d = src / "sick" / "stanford_parsed" / split
    a, b, got = ((d / f).read_text(encoding="utf-8").splitlines()
                 for f in ("a.txt", "b.txt", "id.txt"))
    if got != ids:
        raise ValueError(f"{d}/id.txt does not list the built split's pairs in order; give "
                         "the mirror the data were built from")
    return a, b


def score(ck: Checkpoint, ga: list, gb: list, base: D.Split, tokens: list) -> dict:
    raw = D.Split(ga, gb, base.targets, base.name, base.tree, base.meta)
    sp = ck.model.task.prepare_split(raw)
    metrics, _ = evaluate(ck.model, sp, tokens=tokens)
    return {k: float(v) for k, v in metrics.items()}


def measure(path: Path, data: Path, split: str, parsed: tuple | None) -> dict:
    ck = load_model(path)
    tree = ck.run_config.get("tree") or ck.meta.get("tree")
    if tree != "dependency" or (ck.meta.get("dataset") or ck.model.task.dataset) != "sick":
        raise ValueError(f"{path}: trained on {ck.meta.get('dataset')} {tree!r} trees; give "
                         "models trained with --tree dependency on SICK")
    if D.load_vocab(data).itos != ck.vocab.itos:
        raise ValueError(f"{data}: not the vocabulary {path} was trained with; give the "
                         "built directory it was trained on")
    if D.load_relations(data, "dependency").names != list(ck.relations):
        raise ValueError(f"{data}: its Stanford relations are not those of {path}")
    recs = D.load_text(data, split)
    tokens = [(list(r["a"]), list(r["b"])) for r in recs]
    stan = D.load_split(data, split, "dependency")
    spc = D.load_split(data, split, "dependency-spacy")
    names = D.load_relations(data, "dependency-spacy").names
    toks_a, toks_b = [t[0] for t in tokens], [t[1] for t in tokens]
    out: dict = {"checkpoint": str(path), "task": ck.model.task.name,
                 "model": ck.run_config.get("model") or ck.model.config.cell,
                 "seed": ck.meta.get("seed"), "split": split, "metrics": {},
                 "fell_back": {}}
    out["metrics"]["stanford"] = score(ck, stan.graphs, stan.graphs_b, stan, tokens)
    for cond, by_name in (("spacy", False), ("spacy-by-name", True)):
        fell: Counter = Counter()
        ga = relabel(spc.graphs, names, toks_a, ck, by_name, fell)
        gb = relabel(spc.graphs_b, names, toks_b, ck, by_name, fell)
        out["metrics"][cond] = score(ck, ga, gb, stan, tokens)
        out["fell_back"][cond] = dict(fell.most_common())
    if parsed is not None:
        pa, pb = parsed
        predictor = Predictor(ck)
        ga = predictor.graphs(pa, report=False)
        gb = predictor.graphs(pb, report=False)
        out["metrics"]["raw-text"] = score(ck, ga, gb, stan, tokens)
        out["fell_back"]["raw-text"] = dict(predictor.relation_map.unmapped.most_common())
        out["raw_text_same_tokens"] = sum(
            p.tokens == list(t) for side, ts in ((pa, toks_a), (pb, toks_b))
            for p, t in zip(side, ts))
    return out


def table(results: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["task"], r["model"]), []).append(r)
    lines = []
    for (task, model), rs in groups.items():
        shown = SHOWN.get(task, tuple(rs[0]["metrics"]["stanford"]))
        conds = [c for c in CONDITIONS if all(c in r["metrics"] for r in rs)]
        lines.append(f"\n{task} · {model} · {len(rs)} seed(s): "
                     + ", ".join(str(r["seed"]) for r in rs))
        lines.append("| trees | " + " | ".join(shown) + " |")
        lines.append("|---" * (len(shown) + 1) + "|")
        for c in conds:
            cells = []
            for m in shown:
                vals = [r["metrics"][c][m] for r in rs]
                mean = statistics.fmean(vals)
                std = f" ({statistics.stdev(vals):.4f})" if len(vals) > 1 else ""
                cells.append(f"{mean:.4f}{std}")
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
        for c in conds[1:]:  # paired by checkpoint: the cost itself, seed by seed
            cells = []
            for m in shown:
                diff = [r["metrics"][c][m] - r["metrics"]["stanford"][m] for r in rs]
                std = f" ({statistics.stdev(diff):.4f})" if len(diff) > 1 else ""
                cells.append(f"{statistics.fmean(diff):+.4f}{std}")
            lines.append(f"| {c} \u2212 stanford | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories or checkpoints")
    ap.add_argument("--data", type=Path, required=True, help="built SICK directory")
    ap.add_argument("--src", type=Path, default=None,
                    help="raw data mirror: also score the raw-text (predict) path")
    ap.add_argument("--split", default="test")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    try:
        paths = checkpoints(a.runs)
        parsed = None
        if a.src is not None:
            ids = [str(r["id"]) for r in D.load_text(a.data, a.split)]
            texts_a, texts_b = raw_texts(a.src, a.split, ids)
            nlp = load_pipeline(None)
            parsed = (parse_texts(nlp, texts_a), parse_texts(nlp, texts_b))
        results = []
        for p in paths:
            r = measure(p, a.data, a.split, parsed)
            results.append(r)
            if not a.json:
                line = "  ".join(f"{c}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()
                                                      if k in SHOWN.get(r["task"], m))
                                 for c, m in r["metrics"].items())
                print(f"{p}: {line}", flush=True)
    except (OSError, ValueError) as exc:
        print(f"spacy_cost: {exc}", file=sys.stderr)
        return 2
    if a.json_out is not None:
        a.json_out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print(table(results))
        for c, got in (results[0]["fell_back"].items() if results else ()):
            if got:  # the same for every checkpoint (same sentences, same relations)
                print(f"\n{c}: edges sent to a fallback relation in each checkpoint's "
                      f"{a.split} split: " + ", ".join(f"{k} \u00d7{v}" for k, v in got.items()))
        if parsed is not None and results:
            n = 2 * len(parsed[0])
            print(f"\nraw-text: {results[0]['raw_text_same_tokens']} of {n} sentences "
                  "tokenized as in SICK's .toks")
    return 0


if __name__ == "__main__":
    sys.exit(main())

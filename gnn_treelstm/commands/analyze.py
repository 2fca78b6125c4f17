"""``gnn-treelstm analyze``: the papers' analyses as pictures and tables.

    gnn-treelstm analyze tree runs/SST --split dev --index 7 --out tree.png
    gnn-treelstm analyze heads runs/SST-LEX --out heads.png          # + heads.md
    gnn-treelstm analyze relations runs/SICK-MTREE [runs/AMR] --out relations.png
    gnn-treelstm analyze neighbours runs/SICK --query "A woman is slicing potatoes" --out nn.png
    gnn-treelstm analyze length runs/A runs/B --out length.png
    gnn-treelstm analyze curves runs/A runs/B --out curves.png

Each subcommand writes a picture (``--out``: .png, .svg or .pdf) and a markdown table
(``--table``, default beside the picture with ``.md``). See :mod:`gnn_treelstm.analyze`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gnn_treelstm.argtypes import LOG_LEVELS, int_at_least, non_negative_int, positive_int
from gnn_treelstm.commands.cli import description, set_openmp_wait_policy

__all__ = ["main", "build_parser", "run"]


def _common(p: argparse.ArgumentParser, *, data: bool = True) -> None:
    p.add_argument("--out", "-o", required=True, metavar="PICTURE",
                   help="the picture to write (.png, .svg, .pdf)")
    p.add_argument("--table", default=None, metavar="MD",
                   help="the markdown table (default: PICTURE with .md)")
    if data:
        p.add_argument("--data", default=None,
                       help="built data directory (default: the checkpoint's)")
    p.add_argument("--log-level", default="WARNING",
                   choices=LOG_LEVELS)
    p.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                   help="= --log-level INFO")


def build_parser() -> argparse.ArgumentParser:
    """The command's flags, one subparser per analysis."""
    ap = argparse.ArgumentParser(prog="gnn-treelstm analyze",
                                 description=description(__doc__))
    sub = ap.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for add in (_add_tree, _add_heads, _add_relations, _add_neighbours, _add_length,
                _add_curves):
        add(sub)
    return ap


def _add_tree(sub) -> None:
    p = sub.add_parser("tree", help="a sentence's tree, predicted vs gold label per node")
    p.add_argument("run", help="checkpoint (best.pt) or run directory")
    p.add_argument("--split", default="dev")
    p.add_argument("--index", type=non_negative_int, default=0,
                   help="sentence number in the split (from 0)")
    p.add_argument("--text", default=None, help="a raw sentence instead (no gold labels)")
    p.add_argument("--edge-labels", default="auto", choices=("auto", "on", "off"),
                   help="relation names on the edges (auto: not for child positions)")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also a self-contained HTML drawing (gnn_treelstm.trees.treesvg)")
    _common(p)


def _add_heads(sub) -> None:
    p = sub.add_parser("heads", help="head words of a lexicalized model vs a rule-based "
                                     "head finder (Teng & Zhang Fig 5)")
    p.add_argument("run", help="checkpoint (best.pt) or run directory of a lex model")
    p.add_argument("--splits", nargs="+", default=["dev", "test"],
                   help="splits for the agreement table")
    p.add_argument("--split", default="dev", help="split of the drawn sentence")
    p.add_argument("--index", type=non_negative_int, default=0,
                   help="the drawn sentence (from 0)")
    p.add_argument("--rule", default="cosine", choices=("cosine", "gate"),
                   help="how the model's head is read off (see gnn_treelstm.analyze.heads)")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also the drawn tree as self-contained HTML (gnn_treelstm.trees.treesvg)")
    _common(p)


def _add_relations(sub) -> None:
    p = sub.add_parser("relations", help="relations by the Frobenius norm of their "
                                         "composition matrix (Tran & Cheng §6.2-6.3)")
    p.add_argument("runs", nargs="+", help="mtree / mtree-full runs, one panel each")
    p.add_argument("--top", type=positive_int, default=15, help="relations per panel")
    p.add_argument("--counts-split", default="train",
                   help="split whose edges are counted per relation ('none': no counts)")
    p.add_argument("--out", "-o", required=True, metavar="PICTURE")
    p.add_argument("--table", default=None, metavar="MD")
    p.add_argument("--data", nargs="+", default=None,
                   help="built data directories: one, or one per run (default: the "
                        "checkpoints')")
    p.add_argument("--log-level", default="WARNING",
                   choices=LOG_LEVELS)
    p.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO")


def _add_neighbours(sub) -> None:
    p = sub.add_parser("neighbours", help="nearest-neighbour sentences: relatedness model "
                                          "vs mean word vectors (Tai Table 4)")
    p.add_argument("run", help="a sick-r checkpoint or run directory")
    p.add_argument("--split", default="test")
    p.add_argument("--query", action="append", default=[],
                   help="a query sentence of the split (repeatable)")
    p.add_argument("--queries", type=positive_int, default=3,
                   help="without --query: this many sentences of the sample")
    p.add_argument("--sample", type=int_at_least(2, "an integer >= 2"), default=1000,
                   help="sentences in the sample (at least 2)")
    p.add_argument("-k", type=positive_int, default=3, help="neighbours per query")
    p.add_argument("--seed", type=int, default=1)
    _common(p)


def _add_length(sub) -> None:
    p = sub.add_parser("length", help="metric against sentence length (Tai Figs 3-4)")
    p.add_argument("runs", nargs="+", help="checkpoints or run directories")
    p.add_argument("--split", default="test")
    p.add_argument("--min-count", type=non_negative_int, default=10,
                   help="leave out windows with fewer examples")
    p.add_argument("--label", action="append", default=None, help="a legend name per run")
    _common(p)


def _add_curves(sub) -> None:
    p = sub.add_parser("curves", help="training loss and dev metric per epoch")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--metric", default=None,
                   help="dev metric (default: the run's selection metric)")
    p.add_argument("--label", action="append", default=None, help="a legend name per run")
    _common(p, data=False)


def run(a: argparse.Namespace) -> str:
    """Run one parsed subcommand; returns a one-line summary."""
    from gnn_treelstm.analyze.common import table_path

    table = table_path(a.out, a.table)
    if a.command == "tree":
        from gnn_treelstm.analyze.tree import TreeOptions, tree_analysis

        r = tree_analysis(a.run, a.out, table, TreeOptions(
            data=a.data, split=a.split, index=a.index, text=a.text,
            edge_labels=a.edge_labels, html=a.html))
        return f"{r['correct']}/{r['labelled']} labelled nodes right"
    if a.command == "heads":
        from gnn_treelstm.analyze.heads import HeadsOptions, heads_analysis

        res = heads_analysis(a.run, a.out, table, HeadsOptions(
            data=a.data, splits=a.splits, draw_split=a.split, index=a.index, rule=a.rule,
            html=a.html))
        return "; ".join(f"{s}: {100 * r['model'] / max(r['constituents'], 1):.2f} % of "
                         f"{r['constituents']} constituents" for s, r in res.items())
    if a.command == "relations":
        from gnn_treelstm.analyze.relations import relations_analysis

        split = None if a.counts_split.lower() == "none" else a.counts_split
        ranked = relations_analysis(a.runs, a.out, table, data=a.data, top=a.top,
                                    counts_split=split)
        return " | ".join(", ".join(n for n, _, _ in r[:5]) for r in ranked)
    if a.command == "neighbours":
        from gnn_treelstm.analyze.neighbours import NeighboursOptions, neighbours_analysis

        res = neighbours_analysis(a.run, a.out, table, NeighboursOptions(
            data=a.data, split=a.split, queries=a.query, num_queries=a.queries,
            sample=a.sample, k=a.k, seed=a.seed))
        return f"{len(res)} queries"
    if a.command == "length":
        from gnn_treelstm.analyze.length import length_analysis

        res = length_analysis(a.runs, a.out, table, data=a.data, split=a.split,
                              min_count=a.min_count, labels=a.label)
        return f"{len(res)} runs"
    from gnn_treelstm.analyze.curves import curves_analysis

    res = curves_analysis(a.runs, a.out, table, metric=a.metric, labels=a.label)
    return f"{len(res)} curves"


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    set_openmp_wait_policy()
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    from gnn_treelstm.training.data import DataError

    try:
        summary = run(a)
    except (ValueError, FileNotFoundError, DataError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from gnn_treelstm.analyze.common import table_path

    print(f"wrote {a.out} and {table_path(a.out, a.table)}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

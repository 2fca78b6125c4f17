"""``gnn-treelstm build``: parse a data set into packed DGL sentence graphs.

    gnn-treelstm build --dataset {sst,sick,trec,snli} --src RAW --out DIR
        [--force] [--check-counts] [--spacy-model NAME] [--trees T [T ...]] [--workers N]
    gnn-treelstm build --dataset amr --src FILE_OR_DIR [...] --out DIR [--amr-...]
    gnn-treelstm build --dataset jsonl --src FILE [FILE ...] --out DIR
        [--labels A B ...] [--score-range LO HI] [--name NAME]

What is built, and the Python API behind the command: :mod:`gnn_treelstm.datasets.build`.
Exit status 2 names the bad input (a missing file, a count that does not hold, a full disk).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from gnn_treelstm.argtypes import finite_float, positive_int, worker_count
from gnn_treelstm.commands.cli import description
from gnn_treelstm.datasets import dependency
from gnn_treelstm.datasets.build import DATASETS, build
from gnn_treelstm.datasets.example import FILE_DATASETS
from gnn_treelstm.files import NoSpaceError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    ap = argparse.ArgumentParser(prog="gnn-treelstm build", description=description(
        __doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, choices=DATASETS)
    ap.add_argument("--src", required=True, type=Path, nargs="+",
                    help="raw data root laid out like the data mirror; for amr/jsonl the "
                    "files or directories (names say the split, or SPLIT=FILE)")
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument("--force", action="store_true", help="rebuild even what exists")
    ap.add_argument("--check-counts", action="store_true",
                    help="fail unless the published counts hold (full data only)")
    ap.add_argument("--spacy-model", default=None,
                    help="installed spaCy pipeline (default: "
                    f"{' then '.join(dependency.DEFAULT_PIPELINES)})")
    ap.add_argument("--trees", nargs="+", default=None,
                    help="tree kinds to build (default: all of the data set's)")
    ap.add_argument("--batch-size", type=positive_int, default=512,
                    help="spaCy nlp.pipe batch size")
    ap.add_argument("--workers", type=worker_count, default=1,
                    help="spaCy parser processes, at most the CPUs this process may use (the "
                    "graphs are the same for any number)")
    ap.add_argument("--labels", nargs="+", default=None,
                    help="jsonl: the class names in id order (default: sorted)")
    ap.add_argument("--score-range", nargs=2, type=finite_float, default=None,
                    metavar=("LO", "HI"),
                    help="jsonl: integer range of the scores (default: floor(min) ceil(max))")
    ap.add_argument("--name", default=None,
                    help="jsonl: the data set name in meta.json (default jsonl; 'sick' for "
                    "SICK-like pairs trained with --task sick-e/sick-r)")
    ap.add_argument("--amr-reentrancy", choices=("copy", "drop"), default="copy",
                    help="AMR re-entrancies: a leaf copy of the concept (Takase et al. "
                    "2016) or removed")
    ap.add_argument("--amr-normalize-inverse", action="store_true",
                    help="AMR: :ARG0-of -> :ARG0 (default: inverse roles are relations)")
    ap.add_argument("--amr-merge-ops", action="store_true",
                    help="AMR: :op1, :op2 ... -> :opN and :snt1 ... -> :sntN")
    ap.add_argument("--amr-keep-senses", action="store_true",
                    help="AMR: keep the sense suffix of concepts (see-01; default: see)")
    ap.add_argument("--amr-cycles", choices=("split", "error"), default="split",
                    help="AMR graphs with a cycle: broken by the re-entrancy split, or an "
                    "error")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar (none is drawn where standard error is no terminal)")
    ap.add_argument("-q", "--quiet", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.dataset not in FILE_DATASETS:
            for flag in ("labels", "score_range", "name"):
                if getattr(args, flag) is not None:
                    raise ValueError(f"--{flag.replace('_', '-')} is for --dataset jsonl")
        amr_options = {"reentrancy": args.amr_reentrancy,
                       "normalize_inverse": args.amr_normalize_inverse,
                       "merge_ops": args.amr_merge_ops, "strip_senses": not args.amr_keep_senses,
                       "cycles": args.amr_cycles}
        src = args.src[0] if len(args.src) == 1 and args.dataset not in FILE_DATASETS \
            else args.src
        meta = build(args.dataset, src, args.out, force=args.force,
                     check=args.check_counts, spacy_model=args.spacy_model, trees=args.trees,
                     batch_size=args.batch_size, workers=args.workers,
                     progress=not (args.no_progress or args.quiet) and sys.stderr.isatty(),
                     name=args.name,
                     labels=args.labels, score_range=args.score_range,
                     amr_options=amr_options)
    except (ValueError, FileNotFoundError, NoSpaceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # --out a file, read-only, not writable; --src unreadable
        print(f"error: {e.filename or args.out}: {e.strerror or e}; --out must be a "
              "directory you can write and --src files you can read", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"{args.dataset}: {meta['splits']} -> {args.out} "
              f"({meta['build_seconds']['total_last_run']}s; trees {', '.join(meta['trees'])})")
        for split, st in meta.get("amr", {}).items():
            print(f"  amr {split}: {st['graphs']} graphs, {st['nodes']} nodes, "
                  f"{st['reentrancies']} re-entrancies, {st['relations']} relations, "
                  f"{len(st['cycles'])} with a cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())

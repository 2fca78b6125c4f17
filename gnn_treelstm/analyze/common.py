"""What the analyses share: loading a checkpoint with its data, writing tables and figures.

Every analysis writes one picture (PNG, or SVG/PDF by suffix) and one markdown table,
both atomically (:func:`gnn_treelstm.files.atomic_write`). The table goes to ``--table``,
by default beside the picture with the suffix ``.md``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.files import atomic_write
from gnn_treelstm.models.checkpoint import Checkpoint, checkpoint_path, load_model
from gnn_treelstm.trees import data as D

__all__ = ["AnalysisError", "SST_COLOURS", "load", "split_of", "tokens_of", "table_path",
           "write_table", "save_figure", "markdown", "figure"]

log = logging.getLogger(__name__)

#: SST's five classes, very negative .. very positive (as :mod:`gnn_treelstm.trees.drawing`)
SST_COLOURS = ("#d7301f", "#fc8d59", "#d9d9d9", "#91cf60", "#1a9850")
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


class AnalysisError(ValueError):
    """Bad input to an analysis (the CLI prints it and exits 2)."""


def load(path: str | os.PathLike, *, tasks: Sequence[str] | None = None,
         cells: Sequence[str] | None = None) -> Checkpoint:
    """The checkpoint of a run (``runs/NAME`` or its ``best.pt``), on the CPU, eval mode.

    ``tasks`` / ``cells``: the task and cell names this analysis needs; another one is an
    :class:`AnalysisError` naming the checkpoint, what it holds and what is needed."""
    cp = checkpoint_path(path)
    ck = load_model(cp)
    task, cell = ck.model.task.name, ck.model.config.cell
    if tasks is not None and task not in tasks:
        raise AnalysisError(f"{cp}: a {task} model; this analysis needs one of: "
                            f"{', '.join(tasks)}")
    if cells is not None and cell not in cells:
        raise AnalysisError(f"{cp}: a {cell!r} model; this analysis needs one of: "
                            f"{', '.join(cells)}")
    return ck


def split_of(ck: Checkpoint, data: str | None, split: str, tree: str | None = None
             ) -> tuple[Path, D.Split]:
    """``(data_dir, split)`` of the checkpoint's data (``data`` overrides the recorded
    directory), checked against the checkpoint's vocabularies; ``tree``: another tree kind
    of the same data (its word ids are the same vocabulary, its relations are not checked).
    """
    from gnn_treelstm.training.evaluation import check_vocabularies, data_dir_for, load_eval_split

    data_dir = data_dir_for(ck, data)
    if tree is None or tree == ck.tree:
        return data_dir, load_eval_split(ck, data_dir, split)
    raw = D.load_split(data_dir, split, tree)
    ck_no_rel = Checkpoint(ck.model, ck.vocab, [], ck.label_names, ck.run_config, ck.meta,
                           ck.path)
    return data_dir, check_vocabularies(ck_no_rel, data_dir, raw)


def tokens_of(data_dir: Path, split: str) -> list[dict]:
    """The split's ``text/<split>.jsonl`` records (``tokens``, or ``a`` / ``b`` for pairs)."""
    path = data_dir / "text" / f"{split}.jsonl"
    if not path.is_file():
        raise AnalysisError(f"{path}: missing; the analysis needs the sentences' tokens "
                            f"(rebuild the data with `gnn-treelstm build`)")
    return D.load_text(data_dir, split)


def table_path(out: str | os.PathLike, table: str | os.PathLike | None) -> Path:
    """The table's path: ``table``, else the picture's with the suffix ``.md``."""
    return Path(table) if table is not None else Path(out).with_suffix(".md")


def check_figure_path(out: str | os.PathLike) -> Path:
    out = Path(out)
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        raise AnalysisError(f"--out {out}: the picture must end in one of "
                            f"{', '.join(FIGURE_SUFFIXES)}")
    return out


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table (``|`` inside cells escaped)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            v = f"{v:.4f}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, header)) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(path: str | os.PathLike, text: str) -> Path:
    """Write a table (markdown text) atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, text.encode("utf-8"))


def figure(width: float, height: float):
    """A bare matplotlib ``Figure`` (Agg canvas; pyplot's global state untouched)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def save_figure(fig, out: str | os.PathLike, *, dpi: int = 130) -> Path:
    """Write ``fig`` atomically (format from the suffix); returns the path."""
    out = check_figure_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fmt = out.suffix.lstrip(".").lower()
    path = atomic_write(out, lambda f: fig.savefig(f, dpi=dpi, format=fmt,
                                                   bbox_inches="tight", pad_inches=0.1))
    log.info("wrote %s", path)
    return path

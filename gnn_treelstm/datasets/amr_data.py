"""AMR banks as a data set: ``gnn-treelstm build --dataset amr --src FILE_OR_DIR``.

Every PENMAN graph of the source files (one per block, ``# ::id`` / ``# ::snt`` metadata,
as in the AMR releases and the Little Prince bank) becomes one example: its tree
(:func:`gnn_treelstm.datasets.amr.amr_tree`: re-entrancies split, roles as relations) with a word
per node (:func:`gnn_treelstm.datasets.amr.node_words`: the concept without its sense suffix, or the
aligned token), and the sentence's tokens (``# ::tok``, else ``# ::snt`` split on spaces)
for the other tree kinds and for ``text/<split>.jsonl``. The examples have no targets: an
AMR bank has no labels; train on AMRs of a labelled corpus with ``--dataset jsonl`` (an
``amr`` per sentence).

Splits come from the file names (``...-training.txt`` -> train, ``...-dev...`` -> dev,
``...-test.txt`` -> test) or ``SPLIT=FILE`` (:func:`gnn_treelstm.datasets.example.split_files`).

:func:`amr_stats` counts what ``meta.json`` records per split: graphs, nodes, edges,
re-entrancies (later references of a variable, each one split node with
``reentrancy="copy"``), graphs with a re-entrancy, graphs whose AMR has a cycle (their ids).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence

from gnn_treelstm.datasets import amr as A
from gnn_treelstm.datasets.example import Example, Sentence, split_files

log = logging.getLogger(__name__)

__all__ = ["AMR_SUFFIXES", "AMR_OPTIONS", "load_amr_bank", "amr_stats", "amr_tally",
           "merge_tallies", "tally_stats"]

AMR_SUFFIXES = (".txt", ".amr", ".penman")
#: the :func:`gnn_treelstm.datasets.amr.amr_tree` options the build accepts, with their defaults
AMR_OPTIONS = {"strip_senses": True, "reentrancy": "copy", "normalize_inverse": False,
               "merge_ops": False, "cycles": "split"}


def amr_options(options: dict | None) -> dict:
    """The defaults of :data:`AMR_OPTIONS` updated with ``options`` (unknown keys refused)."""
    opts = dict(AMR_OPTIONS)
    bad = sorted(set(options or {}) - set(opts))
    if bad:
        raise ValueError(f"unknown AMR option(s) {bad}; known: {sorted(opts)}")
    opts.update(options or {})
    return opts


def load_amr_bank(sources: Sequence[str | os.PathLike], options: dict | None = None
                  ) -> tuple[dict[str, list[Example]], dict[str, list[str]]]:
    """``({split: examples}, {split: files})`` of PENMAN files (module docstring).

    Raises:
        gnn_treelstm.datasets.amr.AmrError: a malformed graph (file, line and graph id named).
        ValueError: a file whose split cannot be told; two graphs with the same id.
    """
    files = split_files(sources, AMR_SUFFIXES)
    opts = amr_options(options)
    out: dict[str, list[Example]] = {}
    seen: dict[str, str] = {}
    for split, paths in files.items():
        exs = out.setdefault(split, [])
        for path in paths:
            for e in A.read_amr(path):
                if e.id in seen:
                    raise A.AmrError(f"{e.where}: graph id {e.id!r} is also used at "
                                     f"{seen[e.id]}; ids must be unique")
                seen[e.id] = e.where
                tokens = e.tokens()
                tree = A.amr_tree(e, **opts)
                words = A.node_words(tree, tokens or None, where=e.where)
                sent = Sentence(tokens or list(words), e.where, amr=tree, amr_words=words,
                                amr_id=e.id)
                text = {"id": e.id, "tokens": sent.tokens, "snt": e.sentence}
                exs.append(Example([sent.tokens], {}, text, sources=[sent]))
        log.info("AMR %s: %d graphs from %s", split, len(exs), ", ".join(map(str, paths)))
    return out, {s: [str(p) for p in ps] for s, ps in files.items()}


def amr_tally(examples: Sequence[Example]) -> dict:
    """What :func:`amr_stats` counts of some examples, in a form two tallies of
    consecutive examples merge in (:func:`merge_tallies`): counts, cycle ids, roles."""
    c: Counter[str] = Counter()
    cycles: list[str] = []
    roles: set[str] = set()
    for ex in examples:
        for s in ex.sources:
            t = s.amr
            if t is None:
                continue
            c["graphs"] += 1
            c["nodes"] += len(t.parents)
            c["edges"] += len(t.parents) - 1
            c["reentrancies"] += t.reentrancies
            c["graphs_with_reentrancies"] += t.reentrancies > 0
            c["constants"] += sum(t.is_constant)
            c["copies"] += sum(t.is_copy)
            roles.update(r for r, p in zip(t.roles, t.parents) if p >= 0)
            if t.cycle:
                cycles.append(s.amr_id or s.where)
    return {"counts": dict(c), "cycles": cycles, "roles": sorted(roles)}


def merge_tallies(first: dict, then: dict) -> dict:
    """The tally of the examples of ``first`` followed by those of ``then``."""
    c = Counter(first["counts"])
    c.update(then["counts"])
    return {"counts": dict(c), "cycles": first["cycles"] + then["cycles"],
            "roles": sorted(set(first["roles"]) | set(then["roles"]))}


def tally_stats(tally: dict) -> dict:
    """``meta.json``'s AMR record of one split from its tally."""
    c = Counter(tally["counts"])
    return {**{k: c[k] for k in ("graphs", "nodes", "edges", "reentrancies",
                                 "graphs_with_reentrancies", "copies", "constants")},
            "relations": len(tally["roles"]), "cycles": list(tally["cycles"])}


def amr_stats(data: dict[str, list[Example]]) -> dict[str, dict]:
    """Per split: graphs, nodes, edges, re-entrancies, graphs with one, cycles (ids),
    constants, copies (split nodes) and the number of distinct roles."""
    return {split: tally_stats(amr_tally(exs)) for split, exs in data.items()}

"""How far spaCy's dependency parses of SICK agree with the Stanford parses shipped with it.

Reads a built SICK directory (``gnn-treelstm build --dataset sick --src RAW --out
DIR``), whose ``dependency`` trees are the Stanford parses and ``dependency-spacy`` trees are
spaCy's parses of the same tokens, and prints per split and over all splits:

* ``attachment``: share of Stanford edges (child, head) whose child has the same head in
  spaCy's parse;
* ``label agreement``: share of those same-head edges whose spaCy label, mapped by
  :mod:`gnn_treelstm.datasets.labels` (and sent to ``dep`` when outside SICK's 37 Stanford
  relations, as a model trained on them sees it), equals the Stanford label; and the same share with
  the labels compared by name, without the map;
* ``labelled attachment``: same head and same mapped label, over all Stanford edges;
* the commonest disagreements on same-head edges, and the labels that fell back to ``dep``.

With ``--src RAW`` (the data mirror holding ``sick/stanford_parsed/<split>/{a,b}.txt``) it
also tokenizes the raw sentences with spaCy's tokenizer, as ``predict`` does, counts those
whose tokens equal the Stanford tokens, and prints the shares over those sentences only
(spaCy parses them exactly as in the built trees, which were parsed from the same tokens)::

    .venv/bin/python scripts/parser_agreement.py --data /tmp/built/sick --src ../shared/data

A measurement, not part of the package. ``--json`` prints the numbers as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gnn_treelstm.datasets.labels import ParsedSentence, agreement, built_parses

SPLITS = ("train", "dev", "test")


def raw_tokens(src: Path, split: str) -> list[list[str]]:
    """spaCy's tokens of the raw sentences of one split, sentence A then B per pair."""
    from gnn_treelstm.datasets.dependency import load_pipeline

    nlp = load_pipeline(None)
    d = src / "sick" / "stanford_parsed" / split
    sides = [(d / f"{s}.txt").read_text(encoding="utf-8").splitlines() for s in "ab"]
    texts = [x for pair in zip(*sides) for x in pair]
    return [[t.text for t in doc if not t.is_space] for doc in nlp.tokenizer.pipe(texts)]


def measure(data: Path, src: Path | None, splits: tuple[str, ...]) -> dict:
    names = json.loads((data / "relations" / "dependency.json").read_text(encoding="utf-8"))
    out: dict = {"splits": {}, "relations": names}
    ref_all: list[ParsedSentence] = []
    spacy_all: list[ParsedSentence] = []
    same_tokens: list[bool] = []
    raw: list[list[str]] = []
    for split in splits:
        ref = built_parses(data, split, "dependency")
        spc = built_parses(data, split, "dependency-spacy")
        ref_all += ref
        spacy_all += spc
        out["splits"][split] = agreement(ref, spc, known=names).summary()
        if src is not None:
            toks = raw_tokens(src, split)
            if len(toks) != len(ref):
                raise ValueError(f"{src}: {len(toks)} raw sentences in {split} for "
                                 f"{len(ref)} built ones; give the mirror the data was "
                                 "built from")
            same_tokens += [list(r.tokens) == t for r, t in zip(ref, toks)]
            raw += toks
    mapped = agreement(ref_all, spacy_all, known=names)
    by_name = agreement(ref_all, spacy_all, translate=None, known=names)
    out["all"] = mapped.summary()
    out["all_without_map"] = by_name.summary()
    wrong = [(n, a, b) for (a, b), n in mapped.confusion.items() if a != b]
    out["disagreements"] = [{"mapped": a, "stanford": b, "edges": n}
                            for n, a, b in sorted(wrong, reverse=True)[:15]]
    out["fell_back_to_dep"] = dict(mapped.unmapped.most_common())
    if src is not None:
        keep = [k for k, same in enumerate(same_tokens) if same]
        out["raw_text"] = agreement([ref_all[k] for k in keep], [spacy_all[k] for k in keep],
                                    known=names).summary()
        out["raw_text"].update(sentences=len(same_tokens), same_tokens=len(keep))
        out["raw_text_differences"] = [
            {"stanford": " ".join(ref_all[k].tokens), "spacy": " ".join(raw[k])}
            for k, same in enumerate(same_tokens) if not same][:5]
    return out


def _line(name: str, s: dict) -> str:
    return (f"| {name} | {s['compared']} | {s['edges']} | {s['attachment']:.4f} | "
            f"{s['label_agreement']:.4f} | {s['labelled_attachment']:.4f} | {s['root']:.4f} |")


def render(r: dict) -> str:
    rows = ["| sentences | compared | edges | attachment (same head) | label agreement "
            "(same-head edges, mapped) | labelled attachment | same root |",
            "|---|---|---|---|---|---|---|"]
    rows += [_line(k, v) for k, v in r["splits"].items()]
    rows.append(_line("all", r["all"]))
    rows.append(_line("all, labels by name (no map)", r["all_without_map"]))
    if "raw_text" in r:
        rows.append(_line(f"raw text tokenized by spaCy, identical tokens "
                          f"({r['raw_text']['same_tokens']} of {r['raw_text']['sentences']})",
                          r["raw_text"]))
    for d in r.get("raw_text_differences", []):
        rows.append(f"tokens differ: Stanford {d['stanford']!r} / spaCy {d['spacy']!r}")
    rows.append("")
    rows.append("commonest disagreements on same-head edges (mapped spaCy -> Stanford):")
    rows += [f"  {d['mapped']:>10} -> {d['stanford']:<10} {d['edges']}"
             for d in r["disagreements"]]
    fell = ", ".join(f"{k} \u00d7{n}" for k, n in r["fell_back_to_dep"].items()) or "none"
    rows.append(f"spaCy labels sent to 'dep' (no counterpart among SICK's relations): {fell}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True,
                    help="built SICK directory (with dependency and dependency-spacy trees)")
    ap.add_argument("--src", type=Path, default=None,
                    help="raw data mirror: also check spaCy's tokenization of the raw text")
    ap.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    try:
        r = measure(a.data, a.src, tuple(a.splits))
    except (OSError, ValueError) as exc:
        print(f"parser_agreement: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(r) if a.json else render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())

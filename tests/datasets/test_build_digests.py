"""The built files of the samples are byte for byte what the build made before it was
rewritten: ``build_digests.json`` holds the SHA-256 of every file the build wrote for the
SST, SICK, TREC and AMR/JSONL samples (``meta.json`` less its timings, paths and versions),
as made by the build of the data path with a ``DGLGraph`` per tree (regenerate it only for
a change meant to alter the files: run ``build_all`` below and write its result)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gnn_treelstm.datasets.build import build

DIGESTS = Path(__file__).with_name("build_digests.json")
#: the keys of meta.json that differ from build to build (seconds, absolute paths, versions)
VOLATILE = ("build_seconds", "src", "built_with", "manifest")
#: name -> (data set, sample sub-directory for file data sets, tree kinds)
BUILDS = {
    "sst": ("sst", None, ["constituency", "chain"]),
    "sick": ("sick", None, ["dependency", "constituency", "chain"]),
    "trec": ("trec", None, ["chain"]),
    "amr": ("jsonl", "sick_amr", ["amr", "chain"]),
}


def digests(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == "meta.json":
                meta = json.loads(data)
                data = json.dumps({k: v for k, v in meta.items() if k not in VOLATILE},
                                  sort_keys=True).encode()
            out[str(p.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


def build_all(sample: Path, out: Path, **flags) -> dict[str, dict[str, str]]:
    got = {}
    for name, (dataset, sub, trees) in BUILDS.items():
        build(dataset, [sample / sub] if sub else sample, out / name, trees=trees, **flags)
        got[name] = digests(out / name)
    return got


@pytest.mark.parametrize("workers", [1, 2])
def test_the_samples_build_to_the_recorded_bytes(sample_data, tmp_path, workers):
    want = json.loads(DIGESTS.read_text())
    got = build_all(sample_data, tmp_path, workers=workers)
    for name in BUILDS:
        assert sorted(got[name]) == sorted(want[name]), name  # the same files
        differ = [f for f in want[name] if got[name][f] != want[name][f]]
        assert not differ, f"{name}: {differ}"

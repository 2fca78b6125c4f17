"""``gnn-treelstm build --workers``: the same data set for any number of spaCy processes,
and a killed build resumes from its finished parse shards.

Every file but ``meta.json`` (build times) is compared byte for byte, the packed trees'
arrays included."""

import filecmp
from pathlib import Path

import pytest

from gnn_treelstm.datasets import build as B
from gnn_treelstm.datasets import dependency
from gnn_treelstm.training.data import SAMPLE_SRC


@pytest.fixture(scope="module")
def nlp():
    try:
        return dependency.load_pipeline(None)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"no spaCy pipeline: {e}")


def _files(d: Path) -> list[Path]:
    return sorted(p.relative_to(d) for p in d.rglob("*")
                  if p.is_file() and p.name != "meta.json")


def test_two_workers_give_byte_identical_graphs(nlp, tmp_path):
    trees = ["dependency-spacy", "constituency-spacy"]
    one = B.build("sick", SAMPLE_SRC, tmp_path / "one", trees=trees, workers=1)
    two = B.build("sick", SAMPLE_SRC, tmp_path / "two", trees=trees, workers=2)
    assert one["splits"] == two["splits"]
    files = _files(tmp_path / "one")
    assert files == _files(tmp_path / "two") and any(f.suffix == ".npy" for f in files)
    for f in files:
        assert filecmp.cmp(tmp_path / "one" / f, tmp_path / "two" / f, shallow=False), f
    assert not (tmp_path / "two" / B.SHARD_DIR).exists()  # shards dropped when complete


def test_an_interrupted_build_resumes_from_its_shards(nlp, tmp_path, monkeypatch):
    trees = ["dependency-spacy"]
    ref = B.build("sick", SAMPLE_SRC, tmp_path / "ref", trees=trees)
    monkeypatch.setattr(B, "SHARD_SIZE", 100)
    real = dependency.parse_tokenized
    calls = []

    def flaky(nlp_, sents, **kw):
        calls.append(len(sents))
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a kill in the middle of the third shard
        return real(nlp_, sents, **kw)

    monkeypatch.setattr(dependency, "parse_tokenized", flaky)
    with pytest.raises(KeyboardInterrupt):
        B.build("sick", SAMPLE_SRC, tmp_path / "run", trees=trees)
    shards = sorted((tmp_path / "run" / B.SHARD_DIR).glob("*.json"))
    assert len(shards) == 2
    calls.clear()
    monkeypatch.setattr(dependency, "parse_tokenized", real)
    got = B.build("sick", SAMPLE_SRC, tmp_path / "run", trees=trees)
    assert got["splits"] == ref["splits"]
    for f in _files(tmp_path / "ref"):
        assert filecmp.cmp(tmp_path / "ref" / f, tmp_path / "run" / f, shallow=False), f


def test_packed_shards_any_workers_and_resumed(tmp_path, monkeypatch):
    """The trees (every kind at once) are packed in shards by ``--workers`` processes: the
    same files for one or two, and a build killed part-way reuses the shards it
    finished."""
    monkeypatch.setattr(B, "PACK_SHARD", 16)
    trees = ["dependency", "constituency", "chain"]
    ref = B.build("sick", SAMPLE_SRC, tmp_path / "one", trees=trees, workers=1)
    B.build("sick", SAMPLE_SRC, tmp_path / "two", trees=trees, workers=2)
    files = _files(tmp_path / "one")
    assert files == _files(tmp_path / "two") and any(f.suffix == ".npy" for f in files)
    for f in files:
        assert filecmp.cmp(tmp_path / "one" / f, tmp_path / "two" / f, shallow=False), f
    real, calls, kill = B.shard_arrays, [], [True]

    def killed(job, task):
        calls.append((task.split, task.start))
        if kill[0] and len(calls) == 5:
            raise KeyboardInterrupt  # as a kill while the fifth shard is built
        return real(job, task)

    monkeypatch.setattr(B, "shard_arrays", killed)
    with pytest.raises(KeyboardInterrupt):
        B.build("sick", SAMPLE_SRC, tmp_path / "run", trees=trees)
    assert len(list((tmp_path / "run" / B.PACK_DIR).rglob("*.npz"))) == 4
    calls.clear()
    kill[0] = False
    B.build("sick", SAMPLE_SRC, tmp_path / "run", trees=trees)
    assert calls[0] == ("train", 4 * 16)  # the first four were reused
    assert not (tmp_path / "run" / B.PACK_DIR).exists()
    assert _files(tmp_path / "run") == files
    for f in files:
        assert filecmp.cmp(tmp_path / "one" / f, tmp_path / "run" / f, shallow=False), f
    assert ref["splits"] == {"train": 150, "dev": 50, "test": 100}

"""A built data directory is proven whole before it is used (gnn_treelstm/trees/manifest.py):
a file of another build, a split of another data set, damaged bytes or swapped splits are
refused naming the file and the rebuild command."""

import json
import logging
import os
import shutil

import numpy as np
import pytest

from gnn_treelstm.commands import train as train_cmd
from gnn_treelstm.datasets.build import build
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.manifest import DataMismatchError


@pytest.fixture(scope="module")
def built(tmp_path_factory, sample_data):
    root = tmp_path_factory.mktemp("sealed")
    build("sst", sample_data, root / "sst", trees=["constituency"], progress=False)
    build("sick", sample_data, root / "sick", trees=["constituency"], progress=False)
    return root


@pytest.fixture
def sst(built, tmp_path):
    shutil.copytree(built / "sst", tmp_path / "sst")
    return tmp_path / "sst"


def test_a_build_records_its_id_and_every_file(sst):
    man = json.loads((sst / "meta.json").read_text())["manifest"]
    assert len(man["build_id"]) == 32
    files = man["files"]
    assert "vocab.json" in files and "constituency/train.packed/n.word.npy" in files
    assert files["vocab.json"]["size"] == (sst / "vocab.json").stat().st_size
    assert len(D.load_split(sst, "train", "constituency")) == 200


def test_a_half_rebuilt_directory_is_refused(sst, tmp_path, capsys):
    """A build killed after it replaced vocab.json: the new vocabulary, the old trees."""
    words = json.loads((sst / "vocab.json").read_text())
    (sst / "vocab.json").write_text(json.dumps(words[:1] + sorted(words[1:], reverse=True)))
    with pytest.raises(DataMismatchError, match=r"sst/vocab\.json: ") as e:
        D.load_meta(sst)
    assert "gnn-treelstm build --dataset sst --src" in str(e.value)
    assert f"--out {sst} --force" in str(e.value)
    code = train_cmd.main(["--data", str(sst), "--epochs", "1", "--hidden", "4",
                           "--emb-dim", "4", "--embeddings-mode", "random", "-q",
                           "--runs-dir", str(tmp_path / "runs"), "--name", "r"])
    assert code == 2
    assert "vocab.json" in capsys.readouterr().err


def test_a_split_of_another_data_set_is_refused(sst, built):
    target = sst / "constituency" / "train.packed"
    shutil.rmtree(target)
    shutil.copytree(built / "sick" / "constituency" / "train.a.packed", target)
    with pytest.raises(DataMismatchError, match=r"constituency/train\.packed/"):
        D.load_split(sst, "train", "constituency")


def test_inverted_bytes_in_a_packed_array_are_refused(sst):
    path = sst / "constituency" / "train.packed" / "n.word.npy"
    raw = bytearray(path.read_bytes())
    assert len(raw) > 6000
    raw[1000:5000] = bytes(255 - b for b in raw[1000:5000])
    path.write_bytes(bytes(raw))
    D.load_split(sst, "dev", "constituency")  # the other splits are whole
    with pytest.raises(DataMismatchError, match=r"n\.word\.npy: its contents differ"):
        D.load_split(sst, "train", "constituency")


@pytest.mark.parametrize("sealed", [True, False])
def test_swapped_splits_are_refused(sst, sealed):
    c = sst / "constituency"
    (c / "train.packed").rename(c / "tmp.packed")
    (c / "dev.packed").rename(c / "train.packed")
    (c / "tmp.packed").rename(c / "dev.packed")
    if not sealed:  # a directory built before manifests: the counts in meta.json
        meta = json.loads((sst / "meta.json").read_text())
        del meta["manifest"]
        (sst / "meta.json").write_text(json.dumps(meta))
    msg = r"(train|dev)\.packed/" if sealed else r"train\.packed/header\.json: holds 100 trees " \
        r"where meta\.json counts 200"
    with pytest.raises(DataMismatchError, match=msg):
        D.load_split(sst, "train", "constituency")


def test_a_file_the_build_did_not_write_is_refused(sst):
    np.save(sst / "constituency" / "train.packed" / "n.extra.npy", np.zeros(3))
    with pytest.raises(DataMismatchError, match=r"n\.extra\.npy: not written by the build"):
        D.load_split(sst, "train", "constituency")


def test_an_unsealed_build_loads_with_an_info_line(sst, caplog):
    meta = json.loads((sst / "meta.json").read_text())
    del meta["manifest"]
    (sst / "meta.json").write_text(json.dumps(meta))
    (sst / "vocab.json").write_text((sst / "vocab.json").read_text())  # not checked
    with caplog.at_level(logging.INFO, logger="gnn_treelstm.trees.manifest"):
        assert len(D.load_split(sst, "train", "constituency")) == 200
    assert "built before build manifests" in caplog.text


@pytest.mark.parametrize("content", ["[1, 2]", '{"manifest": [1]}'])
def test_a_damaged_meta_json_is_a_message(sst, content):
    (sst / "meta.json").write_text(content)
    with pytest.raises(DataMismatchError, match=r"meta\.json"):
        D.load_meta(sst)


def _unsealed(sst):
    meta = json.loads((sst / "meta.json").read_text())
    del meta["manifest"]
    (sst / "meta.json").write_text(json.dumps(meta))


def _set(path, edit):
    arr = np.load(path)
    edit(arr)
    np.save(path, arr)


@pytest.mark.parametrize("damage,message", [
    ("header a list", r"train\.packed/header\.json: damaged"),
    ("header without trees", r"train\.packed/header\.json: damaged"),
    ("0-byte array", r"train\.packed/n\.leaf\.npy: damaged packed trees: not a readable array"),
    ("label out of range", r"train\.packed/n\.label\.npy: values \d+ to 7, beyond the 5 "
                           r"entries of the label names"),
    ("word out of range", r"train\.packed/n\.word\.npy: values -1 to 30000, beyond the "
                          r"2,680 entries of the vocabulary"),
    ("corrupt offsets", r"train\.packed/node_offsets\.npy: offsets that do not run from 0"),
])
def test_damaged_arrays_of_an_unsealed_build_are_named(sst, damage, message):
    """Without a manifest (built before them, or hand-made), what would fail far from the
    file (an index error in the loss, numpy's "repeats may not contain negative values")
    is refused naming it."""
    _unsealed(sst)
    p = sst / "constituency" / "train.packed"
    header = json.loads((p / "header.json").read_text())
    if damage == "header a list":
        (p / "header.json").write_text("[1, 2]")
    elif damage == "header without trees":
        del header["trees"]
        (p / "header.json").write_text(json.dumps(header))
    elif damage == "0-byte array":
        (p / "n.leaf.npy").write_bytes(b"")
    elif damage == "label out of range":
        _set(p / "n.label.npy", lambda a: a.__setitem__(3, 7))
    elif damage == "word out of range":
        _set(p / "n.word.npy", lambda a: a.__setitem__(np.argmax(a >= 0), 30000))
    else:
        _set(p / "node_offsets.npy", lambda a: a.__setitem__(5, a[7]))
    with pytest.raises(DataMismatchError, match=message) as e:
        D.load_split(sst, "train", "constituency")
    assert "the data directory is damaged: rebuild the data with `gnn-treelstm build " \
        "--dataset sst" in str(e.value)


def test_a_mapped_file_changed_on_disk_is_named(tmp_path):
    """:func:`manifest.watch` records a mapped file as it was; rewritten in place (the same
    size), cut short or replaced, it is named; arrays in memory are not watched."""
    from gnn_treelstm.trees import manifest

    paths = [tmp_path / f"{name}.npy" for name in ("same", "cut", "replaced", "kept")]
    for p in paths:
        np.save(p, np.arange(1000, dtype=np.int32))
    arrays = [manifest.watch(np.load(p, mmap_mode="r")) for p in paths]
    arrays.append(manifest.watch(np.arange(3)))  # not mapped: returned as it is
    assert manifest.changed(arrays) == []
    np.save(paths[0], np.arange(1000, dtype=np.int32)[::-1])  # other bytes, the same size
    os.truncate(paths[1], 100)
    np.save(tmp_path / "new.npy", np.arange(1000, dtype=np.int32))
    os.replace(tmp_path / "new.npy", paths[2])  # another file at the name
    assert manifest.changed(arrays) == [str(p) for p in paths[:3]]
    assert {str(p) for p in paths} <= set(manifest.mapped_files())
    assert set(manifest.changed_mapped()) >= {str(p) for p in paths[:3]}
    with pytest.raises(manifest.DataChangedError, match=r"same\.npy, .*cut\.npy, .*"
                       r"replaced\.npy: changed on disk while this process was reading it"):
        manifest.check_unchanged(arrays)
    manifest.check_unchanged(arrays[3:])  # the file left alone

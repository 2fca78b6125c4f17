"""A checkpoint scored on data built with another vocabulary: refused, or remapped by word
(``--remap-vocab``); damaged built data gets a message, not DGL's backtrace."""

import json
import shutil

import dgl
import pytest
import torch

from gnn_treelstm.commands import evaluate, train
from gnn_treelstm.trees.vocab import fingerprint
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab")
    build_tiny(root / "data", "sick")
    assert train.main(["--data", str(root / "data"), "--runs-dir", str(root / "runs"),
                       "--task", "sick-r", "--model", "childsum", "--tree", "dependency",
                       "--name", "r", *TINY]) == 0
    return root


def _permuted_copy(src, dst):
    """The same data with the vocabulary in another order (ids rewritten to match)."""
    shutil.copytree(src, dst)
    itos = json.loads((dst / "vocab.json").read_text())
    order = [0, *reversed(range(1, len(itos)))]            # new id -> old id
    new_of_old = torch.empty(len(itos), dtype=torch.long)
    new_of_old[torch.tensor(order)] = torch.arange(len(itos))
    (dst / "vocab.json").write_text(json.dumps([itos[i] for i in order]))
    for path in (dst / "dependency").glob("*.bin"):
        graphs, labels = dgl.load_graphs(str(path))
        for g in graphs:
            w = g.ndata["word"]
            g.ndata["word"] = torch.where(w >= 0, new_of_old[w.clamp(min=0)], w)
        dgl.save_graphs(str(path), graphs, labels)
    return itos, [itos[i] for i in order]


def test_other_vocabulary_is_refused_then_remapped(trained, tmp_path, capsys):
    run, data = trained / "runs" / "r", trained / "data" / "sick"
    itos, permuted = _permuted_copy(data, tmp_path / "sick")
    args = [str(run), "--data", str(tmp_path / "sick"), "--json"]
    assert evaluate.main(args) == 2
    err = capsys.readouterr().err
    assert f"fingerprint {fingerprint(permuted)}" in err
    assert f"fingerprint {fingerprint(itos)}" in err and "--remap-vocab" in err
    assert evaluate.main([*args, "--remap-vocab"]) == 0
    remapped = json.loads(capsys.readouterr().out)
    assert evaluate.main([str(run), "--data", str(data), "--json"]) == 0
    original = json.loads(capsys.readouterr().out)
    assert remapped["pearson"] == pytest.approx(original["pearson"], abs=1e-9)


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "dependency" / "test.a.bin").unlink(), "test.a.bin: missing"),
    (lambda d: (d / "dependency" / "test.a.bin").write_bytes(
        (d / "dependency" / "test.a.bin").read_bytes()[:100]), "damaged graph file"),
    (lambda d: (d / "meta.json").write_text((d / "meta.json").read_text()[:40]),
     "meta.json: damaged"),
])
def test_damaged_built_data_gets_a_message(trained, tmp_path, capsys, damage, message):
    shutil.copytree(trained / "data" / "sick", tmp_path / "sick")
    damage(tmp_path / "sick")
    assert evaluate.main([str(trained / "runs" / "r"), "--data",
                          str(tmp_path / "sick")]) == 2
    err = capsys.readouterr().err
    assert message in err and "gnn-treelstm build" in err and "Traceback" not in err
    assert "Stack trace" not in err

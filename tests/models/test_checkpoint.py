import dgl
import pytest
import torch

from gnn_treelstm.models import checkpoint as C
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.trees.vocab import Vocab
from tests.handbuilt import random_batch


def _model(**kw):
    cfg = dict(task="sst-5", cell="nary", vocab_size=50, emb_dim=6, hidden=5)
    cfg.update(kw)
    return TreeLSTMModel(ModelConfig(**cfg))


def _vocab(n=50):
    return Vocab([f"w{i}" for i in range(1, n)])


def test_round_trip_rebuilds_the_same_model(tmp_path):
    m = _model(cell="bitree", supervision="root", head_hidden=9).eval()
    path = C.save_checkpoint(tmp_path / "run" / "best.pt", m, vocab=_vocab(),
                             relations=["left", "right"], label_names=list("abcde"),
                             run_config={"tree": "constituency"}, meta={"epoch": 3})
    ck = C.load_model(path)
    assert ck.model.config == m.config and not ck.model.training
    assert ck.vocab == _vocab() and ck.relations == ["left", "right"]
    assert ck.label_names == list("abcde") and ck.run_config == {"tree": "constituency"}
    assert ck.meta == {"epoch": 3}
    g = dgl.batch(random_batch(0, 4, words="leaves", exact_children=True))
    with torch.no_grad():
        for k, v in m(g).items():
            torch.testing.assert_close(ck.model(g)[k], v)
    assert [p.name for p in path.parent.iterdir()] == ["best.pt"]  # no temp file left


def test_save_is_atomic(tmp_path, monkeypatch):
    m = _model()
    path = C.save_checkpoint(tmp_path / "best.pt", m, vocab=_vocab())
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(C.torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        C.save_checkpoint(path, _model(), vocab=_vocab())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["best.pt"]


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="vocabulary has 3 words"):
        C.save_checkpoint(tmp_path / "x.pt", _model(), vocab=["<unk>", "a", "b"])
    with pytest.raises(FileNotFoundError, match="holds neither best.pt"):
        C.load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="did you mean"):
        C.load_checkpoint(tmp_path)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        C.load_model(tmp_path / "junk.pt")
    torch.save({"format": 99, "model_config": {}}, tmp_path / "new.pt")
    with pytest.raises(ValueError, match="format 99"):
        C.load_model(tmp_path / "new.pt")


def test_format_1_checkpoints_load_as_the_model_they_were(tmp_path):
    m = _model(task="sick-e", cell="childsum", head_kwargs={"features": "paper"}).eval()
    path = C.save_checkpoint(tmp_path / "best.pt", m, vocab=_vocab(), relations=["r"],
                             label_names=None, run_config={}, meta={})
    payload = torch.load(path, weights_only=False)
    payload["format"] = 1
    for key in ("sentence_state", "head_kwargs"):
        del payload["model_config"][key]
    torch.save(payload, tmp_path / "old.pt")
    ck = C.load_model(tmp_path / "old.pt")
    assert ck.model.head.features == "paper" and ck.model.sentence_state == "h"
    assert C.load_model(path).model.head.features == "paper"
    new = _model(task="sick-e", cell="childsum")         # today's task default
    assert new.head.features == "abs"
    # the resolved head is saved: a later change of the task default cannot change it
    assert new.config.head_kwargs == {"features": "abs"} and new.config.sentence_state == "h"


def test_format_2_two_layer_lstms_load_as_the_model_they_were(tmp_path):
    """Format 2 predates ``concat_layers=True`` as the default: its 2-layer sequential
    LSTMs fed the head the top layer only, and must load that way."""
    old = _model(task="sick-r", cell="lstm2", cell_kwargs={"concat_layers": False}).eval()
    path = C.save_checkpoint(tmp_path / "best.pt", old, vocab=_vocab())
    payload = torch.load(path, weights_only=True)
    payload["format"] = 2
    payload["model_config"]["cell_kwargs"] = {}  # as format 2 wrote it
    torch.save(payload, tmp_path / "old.pt")
    ck = C.load_model(tmp_path / "old.pt")
    assert ck.model.config.cell_kwargs == {"concat_layers": False}
    assert ck.model.cell.out_size == 5
    assert _model(task="sick-r", cell="lstm2").cell.out_size == 10  # today's default


def test_format_3_teng_cells_load_with_their_teng_head(tmp_path):
    """Format 3 predates ``ModelConfig.teng_head``: Teng & Zhang's cells had that head
    (eq 17's hidden layer) without saying so, and must load with it."""
    old = _model(task="sst-5", cell="lex", teng_head=True).eval()
    assert old.head.hidden == 128
    path = C.save_checkpoint(tmp_path / "best.pt", old, vocab=_vocab())
    payload = torch.load(path, weights_only=True)
    payload["format"] = 3
    del payload["model_config"]["teng_head"]  # as format 3 wrote it
    torch.save(payload, tmp_path / "old.pt")
    ck = C.load_model(tmp_path / "old.pt")
    assert ck.model.config.teng_head and ck.model.head.hidden == 128
    payload["model_config"]["cell"] = "nary"  # any other cell: the task's plain head
    assert C._upgrade_format_3(payload)["model_config"]["teng_head"] is False


class _RunsCode:
    def __reduce__(self):
        return (print, ("this ran from a checkpoint",))


def test_checkpoint_with_a_pickled_callable_is_refused(tmp_path, capsys):
    path = C.save_checkpoint(tmp_path / "best.pt", _model(), vocab=_vocab())
    payload = torch.load(path, weights_only=True)  # genuine checkpoints load this way
    payload["meta"] = {"note": _RunsCode()}
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match=r"evil\.pt: refused.*GLOBAL print"):
        C.load_model(tmp_path / "evil.pt")
    assert "this ran" not in capsys.readouterr().out

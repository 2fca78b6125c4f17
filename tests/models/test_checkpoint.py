import re
import sys

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
    del payload[C.CONTENTS_KEY]  # as format 1 wrote it
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
    del payload[C.CONTENTS_KEY]
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
    del payload[C.CONTENTS_KEY]
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
    # torch's refusal names the global: "GLOBAL print", torch 2.4: "GLOBAL builtins.print"
    with pytest.raises(ValueError, match=r"evil\.pt: refused.*GLOBAL (builtins\.)?print\b"):
        C.load_model(tmp_path / "evil.pt")
    assert "this ran" not in capsys.readouterr().out


def flip_tensor_bytes(path, n=4000):
    """Invert ``n`` bytes (fewer if it is smaller) in the middle of the largest tensor
    stored in the checkpoint file ``path`` (torch's zip entries are stored uncompressed),
    leaving the file a readable zip: the damage only a digest sees."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename),
                   key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    # the local header: 30 bytes, the name, the extra field; then the data
    name_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    n = min(n, info.file_size // 2)
    mid = start + (info.file_size - n) // 2
    raw[mid:mid + n] = bytes(b ^ 0xFF for b in raw[mid:mid + n])
    path.write_bytes(bytes(raw))


def test_checkpoints_carry_a_digest_of_their_weights(tmp_path):
    m = _model()
    path = C.save_checkpoint(tmp_path / "best.pt", m, vocab=_vocab())
    raw = torch.load(path, weights_only=True)
    assert raw[C.DIGEST_KEY] == C.tensor_digest(m.state_dict())
    assert raw[C.DIGEST_KEY].startswith("sha256:") and len(raw[C.DIGEST_KEY]) == 71
    other = _model()
    assert C.tensor_digest(other.state_dict()) != raw[C.DIGEST_KEY]


def test_damaged_weights_are_refused_naming_the_file(tmp_path):
    path = C.save_checkpoint(tmp_path / "best.pt", _model(vocab_size=2000), vocab=_vocab(2000))
    flip_tensor_bytes(path)
    torch.load(path, weights_only=True)  # torch itself reads it without a word
    with pytest.raises(ValueError, match=rf"{path}: the weights do not match the digest "
                       r"written with them \(recorded sha256:.*, found sha256:"):
        C.load_model(path)


def test_a_checkpoint_without_digest_loads_with_a_log_line(tmp_path, caplog):
    m = _model().eval()
    path = C.save_checkpoint(tmp_path / "best.pt", m, vocab=_vocab())
    raw = torch.load(path, weights_only=True)
    del raw[C.DIGEST_KEY], raw[C.CONTENTS_KEY]
    torch.save(raw, path)
    with caplog.at_level("INFO", logger="gnn_treelstm.models.checkpoint"):
        ck = C.load_model(path)
    assert "no digest of its weights" in caplog.text and str(path) in caplog.text
    for k, v in m.state_dict().items():
        torch.testing.assert_close(ck.model.state_dict()[k], v)


def _edited(tmp_path, edit, **kw):
    path = C.save_checkpoint(tmp_path / "best.pt", _model(**kw), vocab=_vocab())
    raw = torch.load(path, weights_only=True)
    edit(raw)
    raw.pop(C.CONTENTS_KEY)  # as a checkpoint written before it carried one
    torch.save(raw, path)
    return path


@pytest.mark.parametrize("key,value,message", [
    ("hidden", 7, "model_config['hidden'] is 7 but the weights are for hidden 5 ("),
    ("emb_dim", 8, "model_config['emb_dim'] is 8 but the weights are for emb_dim 6 ("),
    ("vocab_size", 60, "model_config['vocab_size'] is 60 but the checkpoint's vocab has 50"),
    ("cell", "childsum", "model_config (cell 'childsum', task 'sst-5') makes weights the "
     "file does not have"),
])
def test_a_config_that_does_not_fit_its_weights_is_refused(tmp_path, key, value, message):
    path = _edited(tmp_path, lambda raw: raw["model_config"].update({key: value}))
    with pytest.raises(ValueError) as info:
        C.load_model(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "use it as training wrote it" in str(info.value)


@pytest.mark.parametrize("edit,message", [
    (lambda raw: raw.pop("vocab"), "the checkpoint's 'vocab' is missing, not a list"),
    (lambda raw: raw.update(state_dict=[1, 2]), "'state_dict' is a list, not a dict"),
    (lambda raw: raw["model_config"].pop("hidden") and raw["model_config"].update(
        hidden="x"), "its model_config cannot be read"),
])
def test_a_checkpoint_missing_what_a_model_needs_is_refused(tmp_path, edit, message):
    path = _edited(tmp_path, edit)
    with pytest.raises(ValueError, match=message) as info:
        C.load_model(path)
    assert str(info.value).startswith(f"{path}: ")


def _swap_bytes(path, a: bytes, b: bytes):
    """Swap every occurrence of ``a`` and ``b`` (same length) in the file: an edit that
    leaves torch's zip entries readable."""
    assert len(a) == len(b)
    raw = path.read_bytes()
    assert a in raw
    path.write_bytes(re.sub(re.escape(a) + b"|" + re.escape(b),
                            lambda m: b if m.group() == a else a, raw))


def test_edited_labels_vocabulary_or_cell_module_are_refused(tmp_path):
    """Same-length byte edits inside the pickled entries: torch reads them without a word."""
    for edit in [(b"negative", b"positive"), (b"w12", b"w34"), (b"gnn_treelstm.cells.nary",
                                                              b"gnn_treelstm.cells.mean")]:
        path = C.save_checkpoint(tmp_path / "best.pt", _model(), vocab=_vocab(),
                                 label_names=["very negative", "negative", "neutral",
                                              "positive", "very positive"])
        assert C.load_model(path).label_names[1] == "negative"
        _swap_bytes(path, *edit)
        torch.load(path, weights_only=True)  # readable
        with pytest.raises(ValueError, match=rf"{path}: its configuration, vocabulary, labels "
                           r"or cell module do not match the digest written with them"):
            C.load_model(path)


def test_the_contents_digest_covers_every_entry(tmp_path):
    path = C.save_checkpoint(tmp_path / "best.pt", _model(), vocab=_vocab(),
                             run_config={"seed": 1}, meta={"epoch": 2})
    raw = torch.load(path, weights_only=True)
    assert raw[C.CONTENTS_KEY] == C.contents_digest(raw)
    for key, value in [("run_config", {"seed": 2}), ("meta", {"epoch": 3}),
                       ("relations", ["x"]), ("cell_module", "this"), (C.DIGEST_KEY, "sha256:0"),
                       ("vocab", raw["vocab"][:-1] + ["zz"]), ("format", 3)]:
        assert C.contents_digest({**raw, key: value}) != raw[C.CONTENTS_KEY], key
    assert C.contents_digest({**raw, "meta": {"epoch": 2.0}}) != raw[C.CONTENTS_KEY]


def _naming_module(tmp_path, cell: str, module: str):
    """A checkpoint whose cell is ``cell``, recorded as defined in ``module``, its digests
    made to match (as anyone can): what a downloaded file may say."""
    path = C.save_checkpoint(tmp_path / "best.pt", _model(), vocab=_vocab())
    raw = torch.load(path, weights_only=True)
    raw["model_config"]["cell"], raw["cell_module"] = cell, module
    raw[C.CONTENTS_KEY] = C.contents_digest(raw)
    torch.save(raw, path)
    return path


def test_a_checkpoint_never_imports_the_module_it_names(tmp_path, monkeypatch):
    (tmp_path / "evil_cellmod.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('ran').write_text('ran')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as for `python -c` in that directory
    path = _naming_module(tmp_path, "evilcell", "evil_cellmod")
    with pytest.raises(ValueError, match=r"defined in the module 'evil_cellmod', which is not "
                       r"imported; a checkpoint never imports code by itself\. If you trust "
                       r"that module, name it: `--cell-module evil_cellmod`"):
        C.load_model(tmp_path)
    assert not (tmp_path / "ran").exists() and "evil_cellmod" not in sys.modules
    with pytest.raises(ValueError, match="not a module name"):
        C.load_model(_naming_module(tmp_path, "evilcell", "../evil_cellmod"))
    with pytest.raises(ValueError, match=r"--cell-module '\.\.x': not a module name"):
        C.load_model(path, cell_modules=["..x"])
    assert not (tmp_path / "ran").exists()


def test_predict_does_not_import_this(tmp_path, capsys, monkeypatch):
    """``cell_module="this"``: importing it would print the Zen of Python."""
    from gnn_treelstm.commands import predict

    monkeypatch.delitem(sys.modules, "this", raising=False)
    path = _naming_module(tmp_path, "zen", "this")
    assert predict.main([str(path), "a good film"]) == 2
    out, err = capsys.readouterr()
    assert "Beautiful is better" not in out + err and "this" not in sys.modules
    assert "--cell-module this" in err


@pytest.mark.parametrize("cell,hidden,message", [
    ("nary", 10**9, r"makes weights too large to count"),
    ("nary", 10**6, r"makes a model of [\d,.]+ GiB of weights and this machine has"),
    ("lstm", 10**6, r"makes a model of [\d,.]+ GiB of weights and this machine has"),
    ("uncountable", 10**6, r"model_config\['hidden'\] is 1,000,000 but no weight of the "
                           r"file has a dimension that large"),
])
def test_a_checkpoint_larger_than_the_machine_is_refused_before_allocating(
        tmp_path, monkeypatch, cell, hidden, message):
    if cell == "uncountable":  # a cell that cannot be built on the meta device
        monkeypatch.setattr(C, "meta_model", lambda config: None)
        cell = "nary"
    path = C.save_checkpoint(tmp_path / "best.pt", _model(cell=cell), vocab=_vocab())
    raw = torch.load(path, weights_only=True)
    raw["model_config"]["hidden"] = hidden
    raw[C.CONTENTS_KEY] = C.contents_digest(raw)  # as a hostile edit would
    torch.save(raw, path)
    with pytest.raises(ValueError, match=rf"{path}: .*{message}"):
        C.load_model(path)

"""The bad-input corpus: every damaged input a user can hand the command lines gets exit
code 2, a message naming the file (and line, or option) and what to do, no traceback, and
no partly written output. Each case damages one file of the embedded sample or of a tiny
run."""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gnn_treelstm.commands import evaluate, predict, train
from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.training.data import SAMPLE_SRC
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


def _edit(rel: str, fn):
    def damage(src: Path) -> None:
        p = src / rel
        p.write_bytes(fn(p.read_bytes()))
    return damage


BUILD_CASES = {
    "ptb unbalanced": ("sst", _edit("sst/trees/train.txt", lambda b: b.replace(
        b"\n", b")\n", 3).replace(b")\n", b"\n", 2)), "train.txt:3: unbalanced parentheses"),
    "ptb label out of range": ("sst", _edit("sst/trees/dev.txt", lambda b: b"(7" + b[2:]),
                               "dev.txt:1: label 7 at column 2 is outside 0-4"),
    "ptb empty line": ("sst", _edit("sst/trees/test.txt", lambda b: b.replace(
        b"\n", b"\n\n", 1)), "test.txt:2: empty line"),
    "sst empty split": ("sst", _edit("sst/trees/train.txt", lambda b: b""),
                        "train.txt: no trees (the file is empty)"),
    "non-utf-8 byte": ("sst", _edit("sst/trees/dev.txt", lambda b: b.replace(
        b"\n", b"\n\xff", 1)), "dev.txt:2: not utf-8 text (byte 0xff at column 1)"),
    "sick missing columns": ("sick", _edit("sick/semeval2014/SICK_train.txt", lambda b:
                             b.replace(b"\n", b"\nbroken\trow\n", 1)),
                             "SICK_train.txt:2: missing field(s)"),
    "trec label": ("trec", _edit("trec/TREC_10.label", lambda b: b"justwords\n" + b),
                   "TREC_10.label:1: label 'justwords' is not COARSE:fine"),
    "truncated gzip": ("snli", _edit("snli/s1.dev.gz", lambda b: b[: len(b) // 2]),
                       "s1.dev.gz: the gzip stream is truncated or corrupt"),
}


@pytest.mark.parametrize("case", BUILD_CASES, ids=list(BUILD_CASES))
def test_build_refuses_damaged_raw_data(case, tmp_path, capsys):
    dataset, damage, message = BUILD_CASES[case]
    src, out = tmp_path / "src", tmp_path / "out"
    shutil.copytree(SAMPLE_SRC, src)
    damage(src)
    rc = build_main(["--dataset", dataset, "--src", str(src), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert not out.exists()  # nothing half-built left behind


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    build_tiny(root / "data", "sst")
    assert train.main(["--data", str(root / "data"), "--runs-dir", str(root / "runs"),
                       "--name", "r", *TINY]) == 0
    return root


def _vectors(tmp_path: Path, body: bytes, name: str = "v.txt") -> Path:
    p = tmp_path / name
    p.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    return p


@pytest.mark.parametrize("name,body,message", [
    ("v.txt", b"the 0.1 0.2 0.3\nof 0.4 0.5\n", "v.txt:2"),
    ("v.txt.gz", b"the 0.1 0.2 0.3\n" * 200, "truncated or corrupt"),
    ("v.txt", b"the 0.1 0.2 x\n", "v.txt:1"),
])
def test_train_refuses_bad_vector_files(tiny_run, tmp_path, capsys, name, body, message):
    path = _vectors(tmp_path, body, name)
    if name.endswith(".gz"):
        path.write_bytes(path.read_bytes()[:-20])  # cut the stream
    rc = train.main(["--data", str(tiny_run / "data"), "--runs-dir", str(tmp_path / "runs"),
                     "--embeddings", str(path), "--epochs", "1", "--hidden", "5", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("best.pt"))


@pytest.mark.parametrize("make,message", [
    (lambda p, good: p.write_bytes(good.read_bytes()[:500]), "not a readable checkpoint"),
    (lambda p, good: torch.save({"weights": torch.zeros(2)}, p), "not a gnn_treelstm checkpoint"),
    (lambda p, good: p.write_text("hello"), "not a readable checkpoint"),
])
def test_evaluate_and_predict_refuse_bad_checkpoints(tiny_run, tmp_path, capsys, make,
                                                     message):
    bad = tmp_path / "best.pt"
    make(bad, tiny_run / "runs" / "r" / "best.pt")
    for cli in (evaluate.main, predict.main):
        assert cli([str(bad), "w1"] if cli is predict.main else [str(bad)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_relation_ids_beyond_the_vocabulary(tmp_path, capsys):
    build_tiny(tmp_path / "data", "sick")
    rel = tmp_path / "data" / "sick" / "relations" / "dependency.json"
    rel.write_text('["only-one"]')
    rc = train.main(["--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"),
                     "--task", "sick-r", "--model", "mtree", "--tree", "dependency", *TINY])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "relation" in err


def test_train_refuses_a_runs_dir_that_is_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_DATA", raising=False)
    not_a_dir = tmp_path / "runs.txt"
    not_a_dir.write_text("x")
    assert train.main(["--runs-dir", str(not_a_dir), "--name", "r", *TINY]) == 2
    err = capsys.readouterr().err
    assert "cannot write the run directory" in err and "--runs-dir" in err
    assert "Traceback" not in err


def test_train_interrupted_says_how_to_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_DATA", raising=False)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "run", interrupted)
    assert train.main(["--runs-dir", str(tmp_path), "--name", "r", *TINY]) == 130
    err = capsys.readouterr().err
    assert f"gnn-treelstm train --resume {tmp_path / 'r'}" in err and "Traceback" not in err


def test_demo_refuses_non_positive_sizes(tmp_path, capsys):
    from gnn_treelstm.commands import demo

    with pytest.raises(SystemExit) as exc:
        demo.main(["--runs-dir", str(tmp_path), "--epochs", "0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --epochs: expected a positive integer, got 0" in err


def test_build_on_a_disk_that_fills_up(tmp_path, capsys, monkeypatch):
    """The third array file of a build fails for want of space (500 bytes of it written,
    then ENOSPC): exit 2 naming the split directory being written, the bytes written and
    the free space, and the partly built directory is removed."""
    import errno

    from gnn_treelstm.trees import packed

    real, calls = np.save, []

    def save(name, *a, **k):
        calls.append(name)
        if len(calls) == 3:
            with open(name, "wb") as f:
                f.write(b"\0" * 500)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(name, *a, **k)

    monkeypatch.setattr(packed.np, "save", save)
    out = tmp_path / "out"
    rc = build_main(["--dataset", "sst", "--src", str(SAMPLE_SRC), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert f"cannot write {out}/" in err and ": no space left on the disk that holds it (" \
        in err and "the write stopped after " in err, err
    assert not out.exists() and len(calls) == 3


def test_build_on_a_real_full_disk(tmp_path, capsys):
    from tests.disks import small_filesystem

    with small_filesystem(tmp_path / "small", "400k") as disk:
        out = disk / "sst"
        rc = build_main(["--dataset", "sst", "--src", str(SAMPLE_SRC), "--out", str(out),
                         "-q"])
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err and "[bt]" not in err, err
        assert f"cannot write {out}/" in err and "no space left on the disk" in err
        assert not out.exists()


def _edited_checkpoint(tiny_run, tmp_path, edit) -> Path:
    bad = tmp_path / "best.pt"
    raw = torch.load(tiny_run / "runs" / "r" / "best.pt", weights_only=True)
    edit(raw)
    raw.pop("contents_digest")  # as a checkpoint written before it carried one
    torch.save(raw, bad)
    return bad


@pytest.mark.parametrize("damage,message", [
    ("flipped bytes", "the weights do not match the digest written with them"),
    ("hidden 1e6", "GiB of weights and this machine has"),
    ("hidden changed", "model_config['hidden'] is 6 but the weights are for hidden 5"),
    ("vocab removed", "the checkpoint's 'vocab' is missing"),
])
def test_evaluate_and_predict_refuse_damaged_or_misfitting_checkpoints(
        tiny_run, tmp_path, capsys, damage, message):
    from tests.models.test_checkpoint import flip_tensor_bytes

    if damage == "flipped bytes":
        bad = tmp_path / "best.pt"
        shutil.copy(tiny_run / "runs" / "r" / "best.pt", bad)
        flip_tensor_bytes(bad)
    elif damage == "hidden changed":
        bad = _edited_checkpoint(tiny_run, tmp_path,
                                 lambda raw: raw["model_config"].update(hidden=6))
    elif damage == "hidden 1e6":
        bad = _edited_checkpoint(tiny_run, tmp_path,
                                 lambda raw: raw["model_config"].update(hidden=10**6))
    else:
        bad = _edited_checkpoint(tiny_run, tmp_path, lambda raw: raw.pop("vocab"))
    for cli in (evaluate.main, predict.main):
        assert cli([str(bad), "w1"] if cli is predict.main else [str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"error: {bad}: " in err and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("command,flags,message", [
    ("build", ["--workers", "99999999999999999999999"], "argument --workers: expected a number "
     "of worker processes up to the CPUs this process may use, from 1 to "),
    ("reproduce", ["--seeds", "99999999999999999999999"], "argument --seeds: expected a "
     "positive integer (seeds), from 1 to 1,000, got 99999999999999999999999"),
    ("reproduce", ["--epochs", "100000000000000000000000"], "argument --epochs: expected a "
     "positive integer (epochs), from 1 to 100,000"),
])
def test_counts_beyond_the_machine_are_refused_before_anything_starts(
        tmp_path, capsys, monkeypatch, command, flags, message):
    import multiprocessing

    from gnn_treelstm.commands import reproduce

    def no_fork(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(multiprocessing.Process, "start", no_fork)
    if command == "build":
        argv = ["--dataset", "sst", "--src", str(SAMPLE_SRC), "--out", str(tmp_path / "o")]
        run = build_main
    else:
        argv, run = ["--quick", "--root", str(tmp_path / "r")], reproduce.main
    with pytest.raises(SystemExit) as exc:
        run([*argv, *flags])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_flag_fuzz_is_a_message_not_a_traceback(tiny_run, tmp_path, capsys):
    """A 10,000-deep YAML --config, a deeply nested --cell-arg, a 5,000-character --name:
    exit 2 with a message, nothing written."""
    data = tiny_run / "data" / "sst"
    deep = tmp_path / "deep.yaml"
    deep.write_text("hidden: " + "[" * 10000 + "]" * 10000 + "\n")
    runs = tmp_path / "runs"
    cases = [
        (["--config", str(deep)], f"--config {deep}: nested too deeply to read"),
        (["--cell-arg", "x=" + "[" * 5000 + "]" * 5000], "--cell-arg x='[[[["),
        (["--name", "n" * 5000], "a run name is a directory's name of 1 to 200 bytes (this "
         "one has 5,000)"),
    ]
    for flags, message in cases:
        try:
            rc = train.main(["--data", str(data), "--runs-dir", str(runs), "--epochs", "1",
                             "-q", *flags])
        except SystemExit as exc:
            rc = exc.code
        err = capsys.readouterr().err
        assert rc == 2 and message in err and "Traceback" not in err, err
        assert not runs.exists()


def test_demo_checks_its_seed_before_writing_anything(tmp_path, capsys):
    from gnn_treelstm.commands import demo

    assert demo.main(["--runs-dir", str(tmp_path / "runs"), "--seed", "-1"]) == 2
    assert "--seed -1: a seed must be an integer from 0 to" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_serve_answers_a_5001_digit_number_with_400():
    from gnn_treelstm.commands.http import BadRequest
    from gnn_treelstm.commands.serve import _Handler

    for body in ['{"sentence": "a film", "n": ' + "7" * 5001 + "}",
                 "[" * 30000 + "]" * 30000]:
        with pytest.raises(BadRequest, match="not valid JSON, or not JSON this server reads"):
            _Handler._json_fields(body)


def test_bench_checks_its_json_before_the_run(tiny_run, tmp_path, capsys, monkeypatch):
    from gnn_treelstm.commands import bench

    monkeypatch.setattr(bench, "matmul_peak", lambda: pytest.fail("the run started"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--cells", "nary", "--data", str(tiny_run / "data" / "sst"), "--json",
                    str(blocker / "bench.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"--json {blocker / 'bench.json'}: cannot write it" in err


def test_build_out_a_file_is_a_message(tmp_path, capsys):
    out = tmp_path / "out"
    out.write_text("")
    assert build_main(["--dataset", "sst", "--src", str(SAMPLE_SRC), "--out", str(out),
                       "--trees", "constituency", "-q"]) == 2
    err = capsys.readouterr().err
    assert "--out must be a directory you can write" in err and "Traceback" not in err


def test_an_unwritable_home_does_not_stop_the_commands(tmp_path):
    """DGL's first import writes ``~/.dgl/config.json`` unless ``DGLBACKEND`` is set; a
    HOME that is a file made every command fail importing it."""
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    home.write_text("")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("DGLBACKEND", "DGLDEFAULTDIR")}
    env.update(HOME=str(home), PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-m", "gnn_treelstm", "evaluate", "--help"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]

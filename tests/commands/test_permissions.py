"""Files a command may not read or write, for real: the commands run as an unprivileged
user in a subprocess (the super-user ignores file modes, and the suite may run as it),
and end with exit status 2 and a message naming the path and the fix, never a traceback.

* ``train --data`` a directory this user may not read, or one array of it;
* ``train --resume`` a run directory this user may not write, and a new run into a
  ``--runs-dir`` it may not write;
* ``build --out`` a directory this user may not write, ``--src`` a file it may not read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnn_treelstm.commands import train
from tests.tiny_data import build_tiny

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "--threads", "1", "-q"]
NOBODY = 65534


def _unprivileged() -> list[str]:
    """The command prefix that runs a program as an unprivileged user (nothing where this
    process is one already); skips the test where there is none."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to run a command as an "
                    "unprivileged user, whose file modes the test needs")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory every user may enter (pytest's own temporary directories are the
    super-user's alone), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gnn-treelstm-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody(place: Path, command: str, args: list[str]) -> tuple[int, str]:
    home = place / "home"
    home.mkdir(exist_ok=True)
    home.chmod(0o777)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "OMP_NUM_THREADS": "1",
           "GNN_TREELSTM_NATIVE": "off", "GNN_TREELSTM_CACHE": str(home / "cache")}
    proc = subprocess.run([*_unprivileged(), sys.executable, "-m", "gnn_treelstm", command,
                           *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode in (126, 127) and "setpriv" in proc.stderr:
        pytest.skip(f"the interpreter cannot run as uid {NOBODY} here: {proc.stderr[-300:]}")
    return proc.returncode, proc.stderr


def test_data_this_user_may_not_read_is_exit_2_naming_it(place):
    data = build_tiny(place / "data", "sst")
    runs = place / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    (place / "data").chmod(0o700)  # the data set's directory: its owner's alone
    rc, err = _as_nobody(place, "train", ["--data", str(data), "--runs-dir", str(runs), *TINY])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: cannot read {data} (Permission denied); give this user read permission " \
        "on it (chmod a+r, and a+x on its directories) or run as the user who owns it" in err

    (place / "data").chmod(0o755)
    (data / "vocab.json").chmod(0o600)  # one file of it
    rc, err = _as_nobody(place, "train", ["--data", str(data), "--runs-dir", str(runs), *TINY])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: cannot read {data / 'vocab.json'} (Permission denied); give this user " \
        "read permission on it" in err


def test_a_run_directory_this_user_may_not_write_is_exit_2_naming_it(place, tiny_sst):
    runs, data = place / "runs", place / "data"
    shutil.copytree(tiny_sst, data)
    assert train.main(["--data", str(data / "sst"), "--runs-dir", str(runs), "--name", "r",
                       *TINY]) == 0  # written by its owner; others may read it
    run = runs / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    rc, err = _as_nobody(place, "train", ["--resume", str(run)])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: cannot write the run directory {run}" in err and "Permission denied" in err
    assert "a resumed run writes where it is: give this user write permission on it " \
        "(chmod u+w, chown) or resume it as the user who owns it" in err, err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # untouched

    rc, err = _as_nobody(place, "train", ["--data", str(data / "sst"), "--runs-dir", str(runs),
                                       "--name", "new", *TINY])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: cannot write the run directory {runs / 'new'}" in err
    assert "make it writable for this user (chmod u+w, chown) or write the run elsewhere " \
        "(--runs-dir, --name)" in err, err
    assert not (runs / "new").exists()


def test_build_out_and_src_this_user_may_not_use_are_exit_2_naming_them(place, sample_data):
    locked = place / "locked"
    locked.mkdir()  # the super-user's: others may enter, not write
    rc, err = _as_nobody(place, "build", ["--dataset", "sst", "--src", str(sample_data),
                                          "--out", str(locked / "out"), "-q"])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: {locked / 'out'}: Permission denied; --out must be a directory you can " \
        "write and --src files you can read" in err
    assert not (locked / "out").exists()

    src, out = place / "src", place / "out"
    shutil.copytree(sample_data / "sst", src / "sst")
    (src / "sst" / "trees" / "train.txt").chmod(0o600)
    out.mkdir()
    out.chmod(0o777)
    rc, err = _as_nobody(place, "build", ["--dataset", "sst", "--src", str(src),
                                          "--out", str(out / "sst"), "-q"])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: {src / 'sst' / 'trees' / 'train.txt'}: Permission denied; --out must be " \
        "a directory you can write and --src files you can read" in err
    assert not (out / "sst").exists()

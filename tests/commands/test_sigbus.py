"""The bus-error handler of ``train`` (gnn_treelstm/commands/sigbus.py): inside its block a
real bus error (a mapped file cut short) writes the message, records it and exits with
status 3; after the block the process's previous handler is back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import os, signal, sys, numpy as np
from gnn_treelstm.commands import sigbus
from gnn_treelstm.trees import manifest
path = sys.argv[1]
np.save(path, np.arange(100000))
arr = manifest.watch(np.load(path, mmap_mode="r"))
def record(text):
    open(path + ".status", "w").write(text)
with sigbus.installed(lambda: "changed: " + " ".join(manifest.changed_mapped()), record) as ok:
    assert ok
print("installed and put back", flush=True)
if sys.argv[2] == "inside":
    with sigbus.installed(lambda: "changed: " + " ".join(manifest.changed_mapped()), record):
        os.truncate(path, 0)
        print(int(arr[50000]))  # a page past the file's end: SIGBUS
else:
    os.kill(os.getpid(), signal.SIGBUS)  # the default action again: the process dies
print("not reached", flush=True)
"""


def _run(tmp_path: Path, where: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "a.npy"), where],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_a_bus_error_inside_the_block_is_the_message_and_exit_3(tmp_path):
    proc = _run(tmp_path, "inside")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout == "installed and put back\n"
    assert proc.stderr.strip() == f"changed: {tmp_path / 'a.npy'}"
    assert (tmp_path / "a.npy.status").read_text() == f"changed: {tmp_path / 'a.npy'}"


def test_the_previous_handler_is_back_after_the_block(tmp_path):
    proc = _run(tmp_path, "after")
    assert proc.returncode == -signal.SIGBUS, proc.stderr[-2000:]
    assert "not reached" not in proc.stdout and "changed:" not in proc.stderr

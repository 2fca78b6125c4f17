"""Importing the package and running a cell change nothing process-wide: no environment
variable, thread count, logging handler, warning filter or torch setting, and Dynamo /
Inductor stay unloaded until something compiles. Process-wide settings belong to the
command lines (:mod:`gnn_treelstm.commands.cli`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gnn_treelstm.commands import cli

REPO = Path(__file__).resolve().parent.parent

# run in a fresh interpreter: the user's stack (torch, dgl) first, then the package
SCRIPT = r"""
import json, logging, os, sys, warnings

import torch
import dgl


def snapshot():
    loggers = {"": logging.getLogger()} | {
        name: lg for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)}
    return {
        "env": dict(os.environ),
        "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "handlers": {name: [repr(h) for h in lg.handlers] for name, lg in loggers.items()
                     if lg.handlers},
        "levels": {name: lg.level for name, lg in loggers.items() if lg.level},
        "warnings": [repr(f) for f in warnings.filters],
        "torch": [str(torch.get_default_dtype()), torch.are_deterministic_algorithms_enabled(),
                  torch.is_grad_enabled(), torch.backends.cudnn.benchmark],
        "compile_modules": sorted(m for m in sys.modules
                                  if m.startswith(("torch._dynamo", "torch._inductor"))),
    }


before = snapshot()
import gnn_treelstm
from gnn_treelstm import batch_roots, build_cell, make_tree

for engine in ("dgl", "level"):
    for name in ("childsum", "nary"):
        cell = build_cell(name, x_size=4, h_size=3, engine=engine)
        tree = make_tree(parents=[2, 2, 4, 4, -1], words=[5, 6, -1, 7, -1])
        batch = dgl.batch([tree, tree])
        h, c = cell(batch, torch.randn(batch.num_nodes(), 4))
        h[batch_roots(batch)].sum().backward()
EXTRA
after = snapshot()
changed = {}
for key in before:
    if before[key] != after[key]:
        if isinstance(before[key], dict):
            changed[key] = {k: [before[key].get(k), after[key].get(k)]
                            for k in set(before[key]) | set(after[key])
                            if before[key].get(k) != after[key].get(k)}
        else:
            changed[key] = [before[key], after[key]]
print(json.dumps(changed))
"""


def _changes(extra: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", SCRIPT.replace("EXTRA", extra)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_and_running_cells_changes_nothing_process_wide():
    assert _changes() == {}


def test_the_comparison_sees_a_compile_import():
    """What the first test would report, had the package decorated a function with
    ``torch.compiler.disable`` at import (it imports Dynamo and Inductor)."""
    changed = _changes("torch.compiler.disable(lambda: 0)")
    assert "torch._dynamo" in changed["compile_modules"][1]
    assert "torch._inductor" in changed["compile_modules"][1]


def test_the_command_lines_set_the_compile_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("GNN_TREELSTM_CACHE", str(tmp_path))
    cli.set_compile_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    cli.set_compile_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere"


def test_importing_the_predict_and_serve_commands_changes_nothing(monkeypatch):
    """The OpenMP wait policy is set by a command's ``main``, not by importing it."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert _changes("import gnn_treelstm.commands.http, gnn_treelstm.commands.predict, "
                    "gnn_treelstm.commands.serve") == {}

"""Building the native level loops says so before it starts: a script that never set up
logging still shows why it waits."""

from __future__ import annotations

import logging
from pathlib import Path

from gnn_treelstm.kernels import native


def test_build_announces_itself_before_compiling(tmp_path, monkeypatch, caplog):
    out = tmp_path / "loops.so"
    seen: list[str] = []

    def fake_compile(cxx: str, torch_dir: Path, tmp: str) -> None:
        seen.extend(r.getMessage() for r in caplog.records)  # what was logged before
        Path(tmp).write_bytes(b"\x7fELF")

    monkeypatch.setattr(native, "library_path", lambda: out)
    monkeypatch.setattr(native, "_compile", fake_compile)
    monkeypatch.setattr(native.shutil, "which", lambda cxx: "/usr/bin/" + cxx)
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.build() == out
    assert any("compiling the C++ level loops" in m and str(tmp_path) in m for m in seen)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.build() == out  # cached: silent
    assert not caplog.records

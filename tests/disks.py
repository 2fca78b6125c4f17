"""Small real filesystems for the full-disk tests: a tmpfs of a few MiB mounted where the
test may mount one (root in a namespace that allows it; else the test is skipped, and the
injected-failure tests cover the same code), and a filler that leaves a given number of
bytes free."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(path: Path, size: str = "4m") -> Iterator[Path]:
    """``path`` (created) as the mount point of a ``size`` tmpfs for the block."""
    path.mkdir()
    try:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(path)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        res = subprocess.CompletedProcess([], 1, "", str(exc))
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({res.stderr.strip()}); the injected "
                    "ENOSPC tests cover the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the filesystem of ``directory`` up to ``leave`` free bytes (to the last byte
    when 0); the filler's path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize \
                        >= leave + chunk:
                    fh.write(b"\0" * chunk)
    return filler

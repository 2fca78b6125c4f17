"""The project speaks of itself only: no text file tells how it was made (tickets, work
sessions, earlier runs or machines of its making, whoever works on it next).

Scans every text file git knows of (tracked, or new and not ignored) except the embedded
sample data (third-party text) and this file, whose patterns and planted examples would
match themselves.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()

SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".json", ".cpp", ".h",
            ".sh", ".ini"}
NAMES = {"Makefile"}
EXCLUDED_DIRS = ("gnn_treelstm/sample_data/",)

# Each pattern names words about the making of the project. "session" only where it is a
# work session ("this session", "earlier sessions"), so that pytest's scope="session" and
# "a test session" stay legitimate.
PATTERNS = [re.compile(p, re.I) for p in (
    r"\bissues? ?#?\d+",
    r"\b(?:the|this) issue'?s?\b",
    r"\b(?:this|that|the|a|an|each|every|one|previous|next|earlier|later|last|same|another|"
    r"other|new)\s+sessions?\b",
    r"\b(?:the )?previous run\b",
    r"\bthe next (?:person|engineer|agent)\b",
    r"\bearlier machine\b",
    r"\bticket ?#?\d+",
)]


def offending_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line of ``text`` that a pattern matches."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if any(p.search(line) for p in PATTERNS)]


def _scanned(path: str) -> bool:
    if path == THIS or path.startswith(EXCLUDED_DIRS):
        return False
    p = Path(path)
    return p.suffix in SUFFIXES or p.name in NAMES or path.startswith(".ci/")


def _files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted({f for f in out.split("\0") if f and _scanned(f) and (REPO / f).is_file()})


def test_no_words_about_how_the_project_was_made():
    files = _files()
    assert "README.md" in files and "Makefile" in files and ".ci/run" in files
    hits = []
    for f in files:
        try:
            text = (REPO / f).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{f}:{n}: {line}" for n, line in offending_lines(text)]
    assert not hits, "words about how the project was made:\n" + "\n".join(hits)


@pytest.mark.parametrize("line", [
    "Not done yet (issue 13): resume a distributed run.",
    "see issue #7",
    "the issue's targets are met",
    "measured in this session on the slow host",
    "about 3-4x the earlier sessions' times",
    "The regression the previous run reported is fixed.",
    "left for the next person",
    "2.46 s on an earlier machine",
])
def test_scanner_catches_a_planted_line(line):
    text = f"first line\n{line}\nlast line\n"
    assert offending_lines(text) == [(2, line)]


@pytest.mark.parametrize("line", [
    '@pytest.fixture(scope="session")',
    "started once per test session (the browser test reuses it)",
    "--overwrite: remove an earlier run's files",
    "the previous word of a chain",
    "requests.Session() keeps the connection",
])
def test_scanner_leaves_legitimate_words(line):
    assert offending_lines(line) == []

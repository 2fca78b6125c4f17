"""The README is the front door: its Python examples run, its links lead somewhere, it stays
short, and its test command is the one the Makefile (and so CI) runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES = 250

FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
# [text](target) and ![alt](target); the target ends at whitespace or ')'
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _blocks(text: str, lang: str) -> list[str]:
    return [m.group("body") for m in FENCE.finditer(text) if m.group("lang") == lang]


def _without_code(text: str) -> str:
    """The text with fenced blocks and inline code removed (links inside code are not links)."""
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move details to docs/"


PYTHON_BLOCKS = _blocks(README.read_text(encoding="utf-8"), "python")


def test_readme_has_a_python_example():
    assert PYTHON_BLOCKS, "README.md has no ```python block"


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_readme_python_block_runs(index, tmp_path):
    """Each ```python block runs as a script of its own, from an empty directory (so no path
    relative to a checkout works), with the caches in a temporary directory."""
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(PYTHON_BLOCKS[index], encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    env = dict(os.environ)
    env["GNN_TREELSTM_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, str(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"README.md python block {index} failed (exit {proc.returncode}):\n"
        f"{PYTHON_BLOCKS[index]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )


def _relative_links(text: str) -> list[str]:
    links = []
    for m in LINK.finditer(_without_code(text)):
        target = m.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http:, mailto:, ... and anchors in the page itself
        links.append(target)
    return links


def test_readme_relative_links_exist():
    links = _relative_links(README.read_text(encoding="utf-8"))
    assert links, "README.md has no relative links (the docs pages are linked from it)"
    missing = [t for t in links if not (REPO / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_link_check_catches_a_missing_file():
    text = "see [the page](docs/no-such-page.md) and [site](https://example.org) `[x](nope.md)`"
    assert _relative_links(text) == ["docs/no-such-page.md"]
    assert not (REPO / "docs/no-such-page.md").exists()


def test_readme_test_command_is_the_makefiles():
    """The README's test command is the recipe of ``make test`` (what ``.ci/run`` calls)."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    m = re.search(r"^test:[^\n]*\n\t(?P<recipe>[^\n]+)", makefile, re.M)
    assert m, "Makefile has no 'test' target"
    recipe = m.group("recipe").replace("$(PY)", ".venv/bin/python")
    readme = README.read_text(encoding="utf-8")
    assert "make test" in readme
    assert recipe in readme, f"README.md should name make test's command: {recipe!r}"
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_every_source_folder_of_the_readme_says_where_it_comes_from():
    text = README.read_text(encoding="utf-8")
    sources = set(re.findall(r"--src (\S+)", text))
    assert sources
    for src in sources:
        assert f"fetch --dest {src}" in text and f"--dest {src}" in text.replace(
            f"fetch --dest {src}", ""), f"the README never says where {src} comes from"

import importlib.metadata
import os
from pathlib import Path

import pytest
import torch
from packaging.version import Version

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)

# Tiny trees: one thread is faster than two fighting over small matmuls, and keeps the suite
# quick on a loaded 2-core machine.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent


def _at_least(dist: str, version: str) -> bool:
    try:
        return Version(importlib.metadata.version(dist)) >= Version(version)
    except importlib.metadata.PackageNotFoundError:
        return False


#: what a test may need that one end of the declared range (pyproject.toml; .ci/ends) lacks:
#: name -> (what, the release that brings it, whether this environment has it). A test marked
#: ``@pytest.mark.needs(NAME)`` skips where it is missing, with that reason; docs/install.md
#: ("What differs at the ends") lists each.
NEEDS = {
    "triton-fp64-dot": (
        "tl.dot on float64 (the Teng & Zhang kernels' peephole product in float64)",
        "triton 3.9 (torch 2.13 to 2.15 bring 3.9.0; torch 2.4's triton 3.0.0 rejects it: "
        "'Unsupported dtype fp64')",
        lambda: _at_least("triton", "3.9")),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers(name="needs"):
        what, since, present = NEEDS[mark.args[0]]
        if not present():
            pytest.skip(f"needs {what}: {since}")


@pytest.fixture(autouse=True)
def cpu_denormal_default():
    """The training CLIs, run in-process by some tests, flush denormal floats for the whole
    process (commands/denormals.py); every test starts from the CPU's default."""
    torch.set_flush_denormal(False)
    yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark data (``../shared/data`` or $GNN_TREELSTM_DATA); skip if absent."""
    env = os.environ.get("GNN_TREELSTM_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    if not (path / "README.md").exists():
        pytest.skip(f"real benchmark data not found at {path}")
    return path


@pytest.fixture(scope="session")
def sample_data() -> Path:
    return REPO / "gnn_treelstm" / "sample_data"


@pytest.fixture(scope="session")
def tiny_sst(tmp_path_factory) -> Path:
    """A built tiny SST data set (``tests/tiny_data.py``; 16 training sentences), shared
    by the tests that only read it."""
    from tests.tiny_data import build_tiny

    root = tmp_path_factory.mktemp("tiny_sst")
    build_tiny(root, "sst")
    return root

import os
from pathlib import Path

import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)

# Tiny trees: one thread is faster than two fighting over small matmuls, and keeps the suite
# quick on a loaded 2-core machine.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent


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

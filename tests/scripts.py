"""The checkout's ``scripts/`` (not part of the package) imported as modules, for the tests
that run them."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> types.ModuleType:
    """``scripts/<name>.py`` as a fresh module named ``name`` (not put in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

"""Build step beyond pyproject.toml: ship the start-up file that lets ``import dgl`` come first.

The metadata live in pyproject.toml. This file only adds one file to the install root
(site-packages): ``gnn_treelstm_dgl_import.pth``, whose one line installs
``gnn_treelstm/_dgl_hook.py`` at interpreter start (see that module and docs/dgl-import.md).
A wheel carries it in its root; an editable install (``pip install -e .``) writes it
beside setuptools' own editable start-up files.
"""

from __future__ import annotations

import ast
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK = Path(__file__).resolve().parent / "gnn_treelstm" / "_dgl_hook.py"


def _hook_constants() -> tuple[str, str]:
    """``PTH_FILE`` and ``PTH_LINE`` read from the hook module's source (not imported: the
    build environment has neither torch nor dgl, and the package's ``__init__`` must not run
    here)."""
    values: dict[str, str] = {}
    for node in ast.parse(HOOK.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            if name in ("PTH_FILE", "PTH_LINE"):
                values[name] = ast.literal_eval(node.value)
    missing = {"PTH_FILE", "PTH_LINE"} - set(values)
    if missing:
        raise RuntimeError(f"{HOOK} defines no {sorted(missing)}: restore the constants there")
    return values["PTH_FILE"], values["PTH_LINE"]


class BuildPyWithStartupFile(build_py):
    """``build_py`` that also writes the start-up ``.pth`` file into the install root."""

    def _pth_dir(self) -> Path:
        if self.editable_mode:
            # editable_wheel points ``install_lib`` at the root of the wheel it assembles;
            # files under ``build_lib`` would not reach site-packages in this mode
            return Path(self.get_finalized_command("install").install_lib)
        return Path(self.build_lib)

    def run(self) -> None:
        super().run()
        name, line = _hook_constants()
        target = self._pth_dir() / name
        target.parent.mkdir(parents=True, exist_ok=True)
        comment = "# gnn_treelstm: make `import dgl` work before `import gnn_treelstm`"
        target.write_text(f"{comment}\n{line}\n", encoding="utf-8")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs  # written straight into the wheel, not built under build_lib
        return [*outputs, str(Path(self.build_lib) / _hook_constants()[0])]


setup(cmdclass={"build_py": BuildPyWithStartupFile})

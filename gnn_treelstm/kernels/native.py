"""Native (C++) level loops of the level engine, compiled on first use.

The fast level kernels (:mod:`.fused`) would spend most of their time outside the matrix
products if the loop were Python: a level of a batch of 25 SST trees has about 50 nodes,
and each of the ~15 small tensor operations of a level costs 2-5 us of dispatch.
``csrc/nary_levels.cpp`` and ``csrc/childsum_levels.cpp`` run the whole level loop of one
batch (forward bottom-up, backward top-down) in one call: per level one gather, one or two
level-sized matrix products (a register-blocked kernel in ``csrc/common.h``, its tiles split
over PyTorch's intra-op threads), one fused element-wise pass. The arithmetic is that of
the cells' declared recurrences, which the general level driver runs when no kernel applies
(``tests/cells/test_registry.py`` compares the two).

The same library holds two routines of host work, each one call a batch:
``csrc/batch.cpp`` takes a batch's trees from packed trees (:func:`gather_trees`: the
arrays :func:`gnn_treelstm.trees.packed.batch_arrays` gathers in numpy), ``csrc/schedule.cpp``
builds its level schedule (:func:`level_schedule`: the arrays the numpy build of
:class:`gnn_treelstm.trees.schedule.LevelSchedule` gives). The data loader passes both to
``collate`` where it builds level schedules and the library is available
(:func:`batch_builder`).

Building: the sources are compiled with the system C++ compiler (``$CXX``, else ``g++``)
against the installed PyTorch's headers (:data:`FLAGS`; ``-fopenmp`` resolves at run time to
the ``libgomp`` that PyTorch ships and has loaded) into one library in a cache directory
(``$GNN_TREELSTM_CACHE``, else ``~/.cache/gnn_treelstm``); the file name carries a hash of
the sources, PyTorch's version, the compiler, the flags and the CPU, so a change of any of
them rebuilds, and a finished build is renamed into place atomically (several processes
may build at once). The sources compile side by side, one per core, then link. A build
takes under a minute to two minutes (38 s on a 2-core Zen 5 guest, docs/speed.md) and
happens once per machine.

Choice, by ``GNN_TREELSTM_NATIVE``:

* ``auto`` (default): the native loops for float32 CPU tensors when the build succeeds; on
  a failed build (no compiler, say), the general level driver, with one logged warning that
  includes the compiler's message.
* ``on``: as ``auto``, but a failed build is an error.
* ``off``: always the general level driver.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from gnn_treelstm.eager import eager
from gnn_treelstm.files import atomic_path, cache_dir
from gnn_treelstm.kernels.settings import requested
from gnn_treelstm.trees.graph import IGNORE, NO_WORD
from gnn_treelstm.trees.schedule import Builder, Field, Levels, LevelSchedule

logger = logging.getLogger(__name__)

__all__ = ["BUILDER", "CHOICES", "HOST_OPS", "TYPES", "available", "batch_builder", "build",
           "set_choice", "choice", "gather_trees", "library_path", "level_schedule"]

CHOICES = ("auto", "on", "off")
CSRC = Path(__file__).with_name("csrc")
#: the translation units of the library: every ``csrc/*.cpp`` (``nary_levels.cpp`` holds the
#: ``TORCH_LIBRARY`` block, the others ``TORCH_LIBRARY_FRAGMENT``s), and their headers
SOURCES = tuple(sorted(CSRC.glob("*.cpp")))
HEADERS = tuple(sorted(CSRC.glob("*.h")))
FLAGS = ("-O3", "-march=native", "-fno-trapping-math", "-fno-math-errno", "-std=c++20",
         "-shared", "-fPIC", "-fopenmp",
         "-Wno-c++20-extensions")

_state: dict[str, object] = {"choice": None, "loaded": None}


def choice() -> str:
    """The requested mode: ``set_choice`` if called, else ``$GNN_TREELSTM_NATIVE``."""
    if _state["choice"] is None:
        _state["choice"] = requested("native")
    return _state["choice"]  # type: ignore[return-value]


def set_choice(value: str | None) -> None:
    """Choose in-process (``None``: back to ``$GNN_TREELSTM_NATIVE``)."""
    if value is not None and value not in CHOICES:
        raise ValueError(f"unknown native-kernel choice {value!r}; use one of {CHOICES}")
    _state["choice"] = value


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the CPU's model and flags (Linux), else the
    machine name."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return platform.machine() + platform.processor()


def _cache_dir() -> Path:
    return cache_dir()


def library_path() -> Path:
    """Where the shared library for this source, PyTorch, compiler and CPU lives."""
    cxx = _compiler()
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = "?"
    key = hashlib.sha256()
    for part in (*(f.read_bytes() for f in SOURCES + HEADERS), torch.__version__.encode(),
                 cxx.encode(),
                 version.encode(), " ".join(FLAGS).encode(), _cpu_signature().encode(),
                 sys.version.encode()):
        key.update(part)
        key.update(b"\0")
    return _cache_dir() / f"level_loops-{key.hexdigest()[:16]}.so"


def build(force: bool = False) -> Path:
    """Compile the native loops (unless already built) and return the library's path.
    Raises ``RuntimeError`` with the compiler's output when the build fails."""
    out = library_path()
    if out.exists() and not force:
        return out
    cxx = _compiler()
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler {cxx!r} on PATH (set $CXX, or install g++)")
    torch_dir = Path(torch.__file__).parent
    # a warning, so that a script without logging set up shows why it waits
    logger.warning("compiling the C++ level loops for this machine and torch (once; one to "
                   "two minutes; cached in %s; GNN_TREELSTM_NATIVE=off skips them)", out.parent)
    t0 = time.perf_counter()
    with atomic_path(out, mode=0o755) as tmp:  # a concurrent reader never sees half a library
        _compile(cxx, torch_dir, str(tmp))
    logger.info("compiled the C++ level loops in %.1f s: %s", time.perf_counter() - t0, out)
    return out


def _compile(cxx: str, torch_dir: Path, tmp: str) -> None:
    """Compile each source to an object file, side by side on up to one core each, then
    link them into ``tmp``."""
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = [*FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{torch_dir / 'include'}",
             f"-I{torch_dir / 'include/torch/csrc/api/include'}"]
    with tempfile.TemporaryDirectory() as objects:
        objs = [str(Path(objects) / f"{src.stem}.o") for src in SOURCES]
        jobs = [[cxx, *flags, "-c", str(src), "-o", obj] for src, obj in zip(SOURCES, objs)]
        logger.info("building the native level loops: %s", " ".join(jobs[0]))
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
            for _ in pool.map(_run_compiler, jobs, [src.name for src in SOURCES]):
                pass  # the first failure raises
        _run_compiler([cxx, *flags, *objs, f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
                       f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", tmp], "linking")


def _run_compiler(cmd: list[str], what: str) -> None:
    """Run one compiler command (``what``: the source it compiles, or ``linking``);
    ``RuntimeError`` naming ``what`` with the tail of the compiler's output if it fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"compiling the native level loops failed ({what}): {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"compiling the native level loops failed ({what}, exit "
                           f"{proc.returncode}):\n{tail}")


def _ops_loaded() -> bool:
    """Whether the ops are registered already (a library loads once per process)."""
    return hasattr(torch.ops.gnn_treelstm, "nary_forward")


@eager  # building / loading is host work: never traced by torch.compile
def _load() -> bool:
    if _state["loaded"] is None:
        try:
            if not _ops_loaded():
                torch.ops.load_library(str(build()))
            _state["loaded"] = True
        except (RuntimeError, OSError) as exc:
            _state["loaded"] = False
            if choice() == "on":
                raise RuntimeError(
                    f"GNN_TREELSTM_NATIVE=on but the native level loops are unusable: {exc}"
                ) from exc
            logger.warning("native library unusable: CPU level loops run on the general "
                           "level driver, batches are built in numpy: %s", exc)
        if _state["loaded"]:
            register_fakes()
    return bool(_state["loaded"])


#: ops of host-side work, not of a level loop: the data loader's batch arrays and level
#: schedule (``csrc/batch.cpp``, ``csrc/schedule.cpp``; sizes that depend on the data). Only
#: called eagerly (a batch is made outside any trace), so they have no fake kernel.
HOST_OPS = frozenset({"level_schedule", "gather_trees"})


def op_names() -> list[str]:
    """The ops the sources define (``m.def("name(...``), in source order."""
    names: list[str] = []
    for src in SOURCES:
        names += re.findall(r'm\.def\(\s*"(\w+)\(', src.read_text())
    return names


def _no_output(*_args) -> None:
    """Fake (meta) kernel of an op that only writes into its ``(a!)`` arguments."""
    return None


def _fake_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape[0], b.shape[1])


def register_fakes() -> None:
    """Fake-tensor kernels (``torch.library.register_fake``) for every op, so that a
    level kernel called under ``torch.compile`` traces (as opaque ops): the loops only
    write into the buffers they are given (returning nothing), ``matmul`` returns a new
    ``(m, n)`` tensor. An op with another kind of result is logged and left without one.
    The engine itself runs its general driver under compilation
    (:func:`gnn_treelstm.engine.propagator.compiling` says why)."""
    for name in op_names():
        if name in HOST_OPS:
            continue
        op = getattr(torch.ops.gnn_treelstm, name).default
        returns = op._schema.returns
        if name == "matmul":
            fake = _fake_matmul
        elif not returns:
            fake = _no_output
        else:
            logger.warning("no fake kernel for gnn_treelstm::%s (it returns %s)", name, returns)
            continue
        try:
            torch.library.register_fake(f"gnn_treelstm::{name}")(fake)
        except RuntimeError as exc:  # e.g. an op defined with a CompositeImplicit kernel
            logger.info("no fake kernel for gnn_treelstm::%s: %s", name, exc)


def available(t: torch.Tensor | None = None) -> bool:
    """Whether the level kernels use the native loops (for tensor ``t``: float32, CPU)."""
    if choice() == "off":
        return False
    if t is not None and (t.device.type != "cpu" or t.dtype != torch.float32):
        return False
    loaded = _state["loaded"]  # known once loaded: no call through _load's eager wrapper
    return bool(loaded) if loaded is not None else _load()


def batch_builder() -> Builder | None:
    """:data:`BUILDER` where the native library is available (loading it), else None
    (numpy): what the data loader gives ``collate`` (``builder=``)."""
    return BUILDER if available() else None


def level_schedule(n: int, edges: tuple, levels: tuple, word: np.ndarray | torch.Tensor | None,
                   batch_size: int, top_down: bool) -> LevelSchedule:
    """The :class:`~gnn_treelstm.trees.schedule.LevelSchedule` of ``n`` nodes, ``edges =
    (src, dst, rel, pos)``, ``levels = (depth, height)`` by the C++ routine
    ``gnn_treelstm::level_schedule`` (``csrc/schedule.cpp``): every array the numpy build
    makes, equal element for element and in the same types (the library must be loaded:
    :func:`batch_builder`)."""
    t = _tensor
    try:
        out = torch.ops.gnn_treelstm.level_schedule.default(
            n, *map(t, edges), *map(t, levels), None if word is None else t(word), NO_WORD,
            top_down)
    except RuntimeError as exc:  # an index the routine refused to write through
        raise ValueError(str(exc).splitlines()[0]) from None
    up = _levels("up", n, out[:16])
    down = _levels("down", n, out[16:28]) if top_down else None
    rest = out[28:] if top_down else out[16:]
    word_ids, num_leaf_words, contiguous = None, 0, False
    if word is not None:
        word_ids = rest[1]
        num_leaf_words, contiguous = rest[2].tolist()
    return LevelSchedule(num_nodes=n, batch_size=batch_size, up=up, down=down,
                         word_ids=word_ids, num_leaf_words=num_leaf_words,
                         word_rows_contiguous=bool(contiguous), roots=rest[0])


def _tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    """``a`` as a tensor over its memory when it is a tensor, or a writable C-contiguous
    array, else over a copy (``torch.from_numpy`` warns of read-only arrays, refuses
    negative strides)."""
    if isinstance(a, torch.Tensor):
        return a
    a = np.asarray(a)
    if not (a.flags.writeable and a.flags.c_contiguous):
        a = np.array(a, order="C")
    return torch.from_numpy(a)


def _levels(direction: str, n: int, out: list[torch.Tensor]) -> Levels:
    """The :class:`~gnn_treelstm.trees.schedule.Levels` of the tensors
    ``gnn_treelstm::level_schedule`` returns for one direction, in its field order (the
    offsets as host ints)."""
    order, rank, node_offsets, edge_offsets, *edges = out
    return Levels(direction, n, node_offsets.tolist(), edge_offsets.tolist(), order, rank,
                  *edges)


#: the types a field may be read as, by their code in ``csrc/batch.cpp`` (``kTypes``)
TYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
         torch.float32, torch.float64)
_CODES = {t: i for i, t in enumerate(TYPES)}


def gather_trees(offsets: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor,
                 edges: tuple[torch.Tensor, torch.Tensor], base: int,
                 nodes: list[Field], edge_fields: list[Field],
                 label: int | None = None) -> list[torch.Tensor]:
    """A batch's trees taken from packed trees by the C++ routine
    ``gnn_treelstm::gather_trees`` (``csrc/batch.cpp``): ``[nn, ne, src, dst, *nodes,
    *edges]``, and the label order where ``label`` names the node labels among ``nodes``
    (:meth:`gnn_treelstm.trees.schedule.Builder.gather`; the library must be loaded:
    :func:`batch_builder`).

    Raises:
        ValueError: an index the routine would read outside the arrays (damaged trees).
    """
    try:
        return torch.ops.gnn_treelstm.gather_trees.default(
            *offsets, ids, *edges, base, [f[0] for f in nodes], [_code(f[1]) for f in nodes],
            [f[2] for f in nodes], [f[0] for f in edge_fields],
            [_code(f[1]) for f in edge_fields], [f[2] for f in edge_fields],
            -1 if label is None else label, IGNORE)
    except RuntimeError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None


def _code(dtype: torch.dtype | None) -> int:
    return -1 if dtype is None else _CODES[dtype]


class _Routines:
    """The C++ routines of a batch's host work (a
    :class:`~gnn_treelstm.trees.schedule.Builder`)."""

    schedule = staticmethod(level_schedule)
    gather = staticmethod(gather_trees)


#: the native library's :class:`~gnn_treelstm.trees.schedule.Builder`
BUILDER: Builder = _Routines()

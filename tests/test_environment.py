"""pyproject.toml declares ranges, constraints.txt the project's exact versions, environment.yml
the same package set; installing the wheel into an existing torch/DGL stack keeps that stack."""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

# a stack a DGL user has: DGL's last CUDA build (2.4, from DGL's own index) and the torch it was
# built for, a CUDA build of torch 2.4 (docs/install.md, "Into a DGL-on-GPU stack")
USER_STACK = {"torch": "2.4.1+cu121", "dgl": "2.4.0"}
#: the ends of the range that CI tests, each in a venv of its own (`.ci/stack PY TORCH DGL`):
#: .ci/ends names them once, a line "PY TORCH DGL" each in its ENDS=( ... )
ENDS_BLOCK = re.compile(r"^ENDS=\(\n(?P<lines>(?:\s+\"[^\"]*\"\n)+)\)$", re.M)
END_LINE = re.compile(r'^\s+"(?P<py>3\.\d+) (?P<torch>\d+\.\d+\.\d+) (?P<dgl>\d+\.\d+\.\d+)"$',
                      re.M)
#: what the range promises at each end, at the least: the cells, engines, trees, models and
#: training (.ci/ends CI_TESTS, what .ci/run runs there)
ENDS_MINIMUM = ("tests/cells", "tests/engine", "tests/trees", "tests/models", "tests/training")


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _constraints() -> dict[str, Requirement]:
    reqs = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            reqs[canonicalize_name(req.name)] = req
    return reqs


def test_environment_yml_matches_pyproject():
    project = _project()
    wanted = {_norm(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    pip_lines = []
    in_pip = False
    for line in (REPO / "environment.yml").read_text().splitlines():
        if line.strip() == "- pip:":
            in_pip = True
            continue
        if in_pip:
            m = re.match(r"\s+- (.+)$", line)
            if not m:
                break
            pip_lines.append(m.group(1).split(" #")[0].strip())
    got = {_norm(x) for x in pip_lines if x not in ("-e .", "-c constraints.txt")}
    assert got == wanted, f"pyproject only: {wanted - got}; environment.yml only: {got - wanted}"
    assert "-e ." in pip_lines
    assert "-c constraints.txt" in pip_lines, "environment.yml installs without constraints.txt"


def test_torch_and_dgl_are_ranges_and_the_constraints_pin_them():
    deps = {canonicalize_name(Requirement(r).name): Requirement(r)
            for r in _project()["dependencies"]}
    pins = _constraints()
    for name in ("torch", "dgl"):
        spec = deps[name].specifier
        assert not any(s.operator in ("==", "===", "~=") for s in spec), f"{name}: {spec}"
        pin = [s for s in pins[name].specifier if s.operator == "=="]
        assert len(pin) == 1, f"constraints.txt pins no exact {name}: {pins[name]}"
        assert spec.contains(pin[0].version), f"constraints.txt {pins[name]} outside {spec}"
    # the ends CI tests, and the user's stack, lie inside the declared range
    for end in _tested_ends():
        assert deps["torch"].specifier.contains(end["torch"]), end
        assert deps["dgl"].specifier.contains(end["dgl"]), end
    assert deps["torch"].specifier.contains(USER_STACK["torch"])
    # every pin names a declared dependency and lies inside its range
    for name, pin in pins.items():
        assert name in deps, f"constraints.txt pins {name}, which pyproject does not declare"
        version = next(iter(pin.specifier)).version
        assert deps[name].specifier.contains(version), f"{pin} outside {deps[name]}"


def _tested_ends() -> list[dict[str, str]]:
    block = ENDS_BLOCK.search((REPO / ".ci" / "ends").read_text())
    assert block, ".ci/ends declares no ENDS=( ... ) block of 'PY TORCH DGL' lines"
    ends = [m.groupdict() for m in END_LINE.finditer(block["lines"])]
    assert len(ends) == block["lines"].count("\n"), (
        f"a line of .ci/ends ENDS is not 'PY TORCH DGL': {block[0]}")
    return ends


def test_ci_runs_both_ends():
    """.ci/run builds the ends' venvs in the background from its start, waits for that build
    (its exit status), and runs the ends' tests, which hold at least ENDS_MINIMUM."""
    run = (REPO / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in run.splitlines() if not ln.lstrip().startswith("#")]
    start = next(i for i, ln in enumerate(lines) if ".ci/ends build" in ln)
    assert lines[start].endswith("&"), lines[start]
    assert start < lines.index("make test"), "the ends' venvs build while make test runs"
    job = re.search(r"^(\w+)=\$!$", "\n".join(lines[start:]), re.M)
    assert job, "the build's job id is not kept (NAME=$!)"
    assert any(re.search(rf"\bwait \"?\${job[1]}\b", ln) for ln in lines[start:]), "no wait"
    assert any(re.fullmatch(r"(bash )?\.ci/ends ci-tests", ln) for ln in lines), lines
    ends = (REPO / ".ci" / "ends").read_text()
    ci_tests = re.search(r"^CI_TESTS=\((?P<args>[^)]*)\)", ends, re.M)
    assert ci_tests and set(ENDS_MINIMUM) <= set(ci_tests["args"].split()), ci_tests


def _floor(name: str) -> Version:
    req = next(Requirement(r) for r in _project()["dependencies"]
               if canonicalize_name(Requirement(r).name) == name)
    return Version(next(s.version for s in req.specifier if s.operator == ">="))


def test_the_declared_range_is_the_tested_range():
    """.ci/ends runs the suite on the lowest torch, dgl and Python the project declares and on
    the newest torch with the newest Python it names; the pinned set-up lies between them."""
    ends = _tested_ends()
    torches = sorted({Version(e["torch"]) for e in ends})
    assert len(torches) >= 2, f".ci/ends tests {torches}: both ends of the torch range"
    assert torches[0].release[:2] == _floor("torch").release[:2], (torches, _floor("torch"))
    assert all(Version(e["dgl"]).release[:2] == _floor("dgl").release[:2] for e in ends), ends
    pythons = sorted({Version(e["py"]) for e in ends})
    project = _project()
    assert f">={pythons[0]}" == project["requires-python"], (pythons, project["requires-python"])
    declared = sorted(Version(c.rsplit(" :: ", 1)[1]) for c in project["classifiers"]
                      if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert (declared[0], declared[-1]) == (pythons[0], pythons[-1]), (declared, pythons)
    pinned = Version(next(iter(_constraints()["torch"].specifier)).version)
    assert torches[0] <= pinned <= torches[-1], (pinned, torches)
    newest_end = next(e for e in ends if Version(e["torch"]) == torches[-1])
    assert Version(newest_end["py"]) == pythons[-1], newest_end


def test_make_install_and_ci_use_the_constraints():
    makefile = (REPO / "Makefile").read_text()
    assert "-c constraints.txt" in makefile
    assert "constraints.txt" in makefile.split("$(STAMP):")[1].splitlines()[0]
    wheel = (REPO / ".ci" / "wheel").read_text()
    assert wheel.count('-c "$REPO/constraints.txt"') == 2
    assert "torch==" not in makefile + wheel


# -- the wheel installs into an existing stack without replacing it ------------------------


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(folder: Path, name: str, version: str, metadata: str | None = None) -> Path:
    """A stand-in wheel: metadata only (``metadata`` replaces the generated METADATA)."""
    dist = f"{name.replace('-', '_')}-{version}"
    plain = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = {
        f"{dist}.dist-info/METADATA": metadata or plain,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
    }
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        record = []
        for arc, text in files.items():
            zf.writestr(arc, text)
            record.append(_record_line(arc, text.encode()))
        record.append(f"{dist}.dist-info/RECORD,,")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _installed(site: Path, name: str, version: str) -> None:
    """A stand-in installed distribution: a .dist-info folder in the venv's site-packages."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def _lowest(req: Requirement) -> str:
    """A version inside ``req``'s range (its lower bound, or 1.0 where it has none)."""
    lower = [s.version for s in req.specifier if s.operator in (">=", "==")]
    version = lower[0] if lower else "1.0"
    assert req.specifier.contains(version), req
    return version


@pytest.fixture(scope="module")
def project_metadata(tmp_path_factory) -> str:
    """The METADATA that ``pip wheel .`` writes, from setuptools' own metadata hook."""
    out = tmp_path_factory.mktemp("metadata")
    subprocess.run([sys.executable, "-c",
                    "import sys; from setuptools import build_meta;"
                    "build_meta.prepare_metadata_for_build_wheel(sys.argv[1])", str(out)],
                   cwd=REPO, check=True, capture_output=True)
    (info,) = out.glob("gnn_treelstm-*.dist-info")
    return (info / "METADATA").read_text()


def test_wheel_requires_no_exact_torch_or_dgl(project_metadata):
    meta = Parser().parsestr(project_metadata)
    requires = {canonicalize_name(Requirement(r).name): r for r in meta.get_all("Requires-Dist")
                if "extra ==" not in r}
    assert "==" not in requires["torch"] and "==" not in requires["dgl"], requires


def _dry_run(tmp: Path, metadata: str, label: str) -> dict[str, str]:
    """pip's install plan for a gnn_treelstm wheel with ``metadata`` into a venv that already
    holds USER_STACK's torch and DGL (and every other requirement at its lowest version), offline,
    with the project's own pinned versions on offer too: {name: version to install}."""
    venv = tmp / f"venv-{label}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    wheels = tmp / "wheels"
    if not wheels.exists():
        wheels.mkdir()
        for name, pin in _constraints().items():   # the project's versions, on offer
            _wheel(wheels, name, next(iter(pin.specifier)).version)
    requires = [Requirement(r) for r in Parser().parsestr(metadata).get_all("Requires-Dist")
                if "extra ==" not in r]
    for req in requires:
        name = canonicalize_name(req.name)
        _installed(site, name, USER_STACK.get(name) or _lowest(req))
    version = Parser().parsestr(metadata)["Version"]
    project_wheel = _wheel(tmp / f"venv-{label}", "gnn_treelstm", version, metadata)
    report = tmp / f"report-{label}.json"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "--dry-run", "--quiet", "--report", str(report), "--no-index",
                    "--find-links", str(wheels), "--disable-pip-version-check",
                    str(project_wheel)], check=True, capture_output=True, text=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    plan = json.loads(report.read_text())["install"]
    return {canonicalize_name(p["metadata"]["name"]): p["metadata"]["version"] for p in plan}


def test_wheel_install_keeps_an_existing_torch_and_dgl(tmp_path, project_metadata):
    plan = _dry_run(tmp_path, project_metadata, "ranges")
    assert plan == {"gnn-treelstm": Parser().parsestr(project_metadata)["Version"]}, (
        f"installing the wheel into torch {USER_STACK['torch']} / DGL {USER_STACK['dgl']} "
        f"would install {plan}")


def test_exact_pins_would_replace_the_stack(tmp_path, project_metadata):
    """The same dry run tells pinned metadata apart: it plans to replace torch and DGL."""
    pinned = "".join(f"Requires-Dist: {name}{next(iter(pin.specifier))}\n"
                     for name, pin in _constraints().items())
    kept = "".join(line + "\n" for line in project_metadata.splitlines()
                   if not re.match(r"Requires-Dist: (torch|dgl)\b", line))
    metadata = kept.replace("Requires-Dist:", pinned + "Requires-Dist:", 1)
    plan = _dry_run(tmp_path, metadata, "pinned")
    for name, pin in _constraints().items():
        assert plan.get(name) == next(iter(pin.specifier)).version, plan
    assert Version(plan["torch"]) > Version(USER_STACK["torch"])


# -- checkpoints cross the declared range ----------------------------------------------------

RANGE_CHECKPOINTS = REPO / "tests" / "range_checkpoints"


def _range_checkpoints() -> list[Path]:
    return sorted(RANGE_CHECKPOINTS.glob("torch-*.pt"))


def test_each_end_of_the_range_wrote_a_checkpoint():
    """One file per end of the declared torch range (scripts/range_checkpoint.py wrote them,
    each under its torch), so loading them all under any torch crosses the range."""
    written = {Version(p.stem.removeprefix("torch-")) for p in _range_checkpoints()}
    ends = {Version(e["torch"]) for e in _tested_ends()}
    assert ends, ".ci/ends names no end of the range (.ci/stack PY TORCH DGL)"
    assert written >= ends, (
        f"{RANGE_CHECKPOINTS} holds {sorted(written)}; write the missing end with "
        "scripts/range_checkpoint.py in that end's venv")


@pytest.mark.parametrize("path", _range_checkpoints(), ids=lambda p: p.stem)
def test_a_checkpoint_written_under_another_torch_loads_and_gives_its_outputs(path):
    import torch

    from gnn_treelstm.models.checkpoint import load_model
    from tests.scripts import load_script

    probe = load_script("range_checkpoint")
    ck = load_model(path)
    written = ck.meta["written_by"]
    assert path.stem == f"torch-{written['torch']}"
    assert ck.meta["probe"] == probe.PROBE and ck.model.config.cell == "nary"
    got = probe.outputs(ck.model)
    assert sorted(got) == sorted(ck.meta["outputs"])
    for key, want in ck.meta["outputs"].items():
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(want), rtol=1e-5,
                                   atol=1e-6, msg=lambda m, k=key, w=written:
                                   f"{k} of the model written under {w}: {m}")


# -- the oldest torch of the range: what it lacks, filled in where the package uses it ------


def test_total_norm_where_torch_has_no_get_total_norm(monkeypatch):
    """torch 2.4 and 2.5 have no ``torch.nn.utils.get_total_norm``: the same norm without it."""
    import torch

    from gnn_treelstm.training.faults import total_norm

    grads = [torch.randn(3, 4), torch.randn(5), torch.tensor([float("inf")])]
    finite = grads[:2]
    want = torch.linalg.vector_norm(torch.cat([g.flatten() for g in finite]))
    monkeypatch.delattr(torch.nn.utils, "get_total_norm", raising=False)
    torch.testing.assert_close(total_norm(finite), want)
    assert not torch.isfinite(total_norm(grads))


def test_eager_where_torch_compiler_disable_takes_no_reason(monkeypatch):
    """torch 2.4's ``torch.compiler.disable`` takes no ``reason``: the function is disabled
    all the same once Dynamo is loaded."""
    import torch
    import torch._dynamo  # noqa: F401  (what makes eager() call torch.compiler.disable)

    from gnn_treelstm.eager import eager

    calls = []

    def disable(fn, recursive=True):  # torch 2.4's signature
        calls.append(fn)
        return fn

    monkeypatch.setattr(torch.compiler, "disable", disable)

    @eager(reason="host-side work")
    def double(x):
        return 2 * x

    assert double(3) == 6 and len(calls) == 1

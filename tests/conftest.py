"""Fixtures for krig's self-tests."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import hermetic  # before anything imports krig: krig reads where results go at its import

HERMETIC_BASE, HERMETIC_OWNER = hermetic.enter()

from kernels.trees import ensure_pristine  # noqa: E402
from kernels.definition import DEFAULT_TARBALL  # noqa: E402
from kernels.digest import tarball_sha256  # noqa: E402

from tiers import pytest_addoption  # noqa: F401,E402 (--tier: make test, make test-lab, make test-all)
from xdist_groups import pytest_collection_modifyitems  # noqa: F401,E402 (make test's worker groups)
from slowlog import pytest_configure, pytest_runtest_logreport  # noqa: F401,E402 (slow phases, failures)

ROOT = pathlib.Path(__file__).resolve().parent.parent
KRIG = [sys.executable, "-m", "workflows.cli"]

# tests/ is laid out like the code (tests/rigs/ipmi/ for rigs/ipmi/, tests/project/ for the checks
# of the project itself), and a test file takes another's helpers and fixtures by its module name
# (`from test_fake_rig import fake_run`) wherever the two live: every folder of test files is on
# the path. pytest's prepend import mode puts only a file's own folder there, when it collects it.
for _folder in sorted({p.parent for p in (ROOT / "tests").rglob("test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


def qemu_pids(mark: str = "") -> set:
    """qemu processes, only those whose argv mentions `mark` (a test's tmp dir) if given.

    Filtering by the test's own paths keeps concurrent, unrelated guests on the
    machine from failing (or hiding) a test's leftover check."""
    out = subprocess.run(["pgrep", "-af", "^qemu-system-x86_64 "], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in out.splitlines() if mark in line}


def run_dir_of(p) -> pathlib.Path:
    """The run directory `krig run` printed."""
    for line in p.stdout.splitlines():
        if line.startswith("results: "):
            return pathlib.Path(line[len("results: "):])
    raise AssertionError(f"no results line in:\n{p.stdout}\n{p.stderr}")


def krig_run(tmp_path, *args, timeout=600):
    """`krig run ARGS` with results under tmp_path/results."""
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    return subprocess.run(KRIG + ["run", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def check_a_copy(run_dir: pathlib.Path, where: pathlib.Path) -> tuple[int, str, dict]:
    """`krig check` on a copy of run_dir (its verdict.json removed): exit code, the verdict line,
    and the original's verdict.json, so a test can assert the copy is judged as the run was."""
    import shutil
    copy = where / "copy-of-run"
    shutil.copytree(run_dir, copy)
    (copy / "verdict.json").unlink()
    p = subprocess.run(KRIG + ["check", str(copy)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    return p.returncode, p.stdout.strip(), json.loads((run_dir / "verdict.json").read_text())


def build_kernels(*names: str) -> dict:
    """Build kernels as `make kernel KERNEL=...` builds them (a no-op when cached). Returns what
    this call did for each: "cached" (built before, by anyone: nothing done), or "incremental" /
    "full build" (built now), as the build's own line says. A test asserts how a kernel was
    built only from this, never from the build.json of a kernel an earlier run may have made."""
    p = subprocess.run([sys.executable, "-m", "kernels.build", "build", *names], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
    assert p.returncode == 0, f"kernel build failed: {last}"
    return {n: how_built(p.stdout, n) for n in names}


def tree_ready(name: str) -> bool:
    """Whether the build tree the cached kernel `name` was built in is there, built: a build in
    it, or one seeded from it, then compiles only what changed."""
    from kernels.build import status
    from kernels.trees import load_state
    tree = json.loads((pathlib.Path(status(name)["dir"]) / "build.json").read_text())["tree"]
    return pathlib.Path(tree).is_dir() and bool(load_state(pathlib.Path(tree)).get("built"))


def how_built(output: str, name: str) -> str:
    """What kbuild's output says it did for kernel `name`: "cached", "incremental" or "full build"."""
    for line in output.splitlines():
        if line.startswith(f"kbuild: {name} is built (") and line.endswith("; nothing to do"):
            return "cached"
        m = re.match(rf"kbuild: {re.escape(name)}: tree .* \((incremental|full build)\), log ", line)
        if m:
            return m.group(1)
    raise AssertionError(f"kbuild said neither how it built {name} nor that it was cached:\n{output[-3000:]}")


def rig_with_memory(directory: pathlib.Path, memory: str) -> pathlib.Path:
    """rigs/qemu-default.toml with another `memory`, written into directory (for `--rig PATH`)."""
    text = (ROOT / "rigs" / "qemu-default.toml").read_text()
    path = directory / f"qemu-{memory.lower()}.toml"
    path.write_text(re.sub(r"(?m)^memory = .*$", f'memory = "{memory}"', text))
    return path


def unbuilt_kernel(directory: pathlib.Path) -> str:
    """A --kernel krig builds before a run: a git repository of one commit (no kernel source: its
    build, once started, stops at `make tinyconfig` within seconds), at HEAD like tiny-6.1."""
    repo = directory / "unbuilt-kernel"
    repo.mkdir()
    (repo / "README").write_text("not a kernel\n")
    for argv in (["init", "-q"], ["add", "README"], ["-c", "user.name=krig", "-c", "user.email=krig@localhost",
                                                    "commit", "-q", "-m", "one commit"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True, timeout=60)
    return f"{repo}@HEAD,like=tiny-6.1"


def setup_missing(missing, what: str) -> None:
    """Fail, naming the packages, when something `make setup` installs is missing.

    A missing program or header that setup installs is a broken setup, not a fact of the
    machine: the test fails with one line saying what to install, it never skips."""
    if missing:
        pytest.fail(f"broken setup: {what} need {', '.join(missing)}; run `make setup`", pytrace=False)


def require_program(program: str, package: str) -> None:
    """Fail (never skip) unless `program`, installed by `make setup` from `package`, is on PATH."""
    import shutil
    found = shutil.which(program) or os.path.exists(f"/usr/sbin/{program}")
    setup_missing([] if found else [f"{program} ({package})"], "these tests")


def recorded_contention(run_dir: pathlib.Path) -> float | None:
    """What the contention rule gives for the host.tsv a run recorded: the % of its samples in
    which the host was contended (workflows/hostload.py), from the host CPU count the manifest
    recorded; None when the run recorded no host.tsv."""
    from workflows.hostload import contended_pct
    host = json.loads((run_dir / "manifest.json").read_text()).get("host") or {}
    if not (run_dir / "host.tsv").exists() or not host.get("cpus"):
        return None
    return contended_pct(run_dir / "host.tsv", host["cpus"])


def judged_as(verdict: dict, expected: str, run_dir: pathlib.Path) -> bool:
    """The run got `expected`, or the judge said the host was too busy to blame the kernel
    and the host.tsv the run recorded shows it was.

    A TCG guest runs as fast as the host lets it; on a busy (shared CI) host a timing
    threshold marked host_sensitive can be crossed by the host alone, and krig then gives
    ERROR naming host contention instead of FAIL (docs/verdicts.md). A test expecting PASS
    accepts that only when the contention rule, recomputed here from the run's own host.tsv,
    is over the limit and the reason states that same share; any other ERROR, and any FAIL,
    still fails the test."""
    from krig.verdict import CONTENDED_LIMIT_PCT
    if verdict["verdict"] == expected:
        return True
    if not (expected == "PASS" and verdict["verdict"] == "ERROR"
            and verdict["reason"].startswith("host contention: ")):
        return False
    pct = recorded_contention(run_dir)
    assert pct is not None and pct > CONTENDED_LIMIT_PCT, \
        f"ERROR host contention, but the run's host.tsv gives {pct}% (limit {CONTENDED_LIMIT_PCT}%)"
    assert f"saturated in {pct:.0f}% of" in verdict["reason"], (pct, verdict["reason"])
    return True


# The seed reproducers' smoke runs: the verdict (exit code, verdict) each gives on Debian's 6.1.
EXPECTED = {"unlink-dentry-growth": (0, "PASS"), "neg-dentry-flood": (1, "FAIL"), "xfs-ail-storm": (0, "PASS")}

# The smallest guest that shows the result: the flood runs until its negatives reach twice
# the 5%-of-RAM limit, which takes about twice as long at twice the RAM
# (docs/negative-dentry-flood.md).
RIG_MEMORY = {"neg-dentry-flood": "1G"}


@pytest.fixture(scope="session", params=sorted(EXPECTED))
def smoke_run(request, tmp_path_factory):
    """One smoke run of each seed reproducer, shared by every test that takes it (one guest
    each per session: tests/reproducers/test_smoke.py checks them, tests/workflows/test_kcidb.py exports them).
    Returns (reproducer, the `krig run` process, run directory)."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    rig = ["--rig", str(rig_with_memory(tmp, RIG_MEMORY[name]))] if name in RIG_MEMORY else []
    p = krig_run(tmp, name, "--preset", "smoke", *rig, timeout=1800)
    assert not qemu_pids(str(tmp)), "qemu left behind"
    return name, p, run_dir_of(p)


@pytest.fixture(scope="session")
def linux_source() -> pathlib.Path:
    """Debian's linux-source-6.1 extracted once into the real kernel cache (~20 s the first
    time; `make test` has already done it when building the CI kernels). Session-scoped,
    so it is made before any test points $KRIG_CACHE elsewhere."""
    tarball = pathlib.Path(DEFAULT_TARBALL)
    return ensure_pristine(tarball, tarball_sha256(tarball), log=lambda m: None)


@pytest.fixture
def krig_cli(tmp_path):
    """Run the krig CLI as a user would; returns CompletedProcess (text)."""
    def run(*args, timeout=600, env=None):
        e = {**os.environ, **(env or {})}
        return subprocess.run(KRIG + list(args), capture_output=True, text=True, cwd=ROOT,
                              timeout=timeout, env=e)
    return run


@pytest.fixture
def trace_cmd():
    """trace-cmd, the oracle of the trace reader's tests: installed by `make setup`."""
    require_program("trace-cmd", "trace-cmd")


@pytest.fixture
def no_leftover_qemu(tmp_path):
    """Fail the test if it leaves a qemu process behind (its run dirs live in tmp_path)."""
    yield
    left = qemu_pids(str(tmp_path))
    assert not left, f"qemu processes left behind: {sorted(left)}"


from labsim_fixture import lab_sim  # noqa: E402,F401 (one lab server a session: krig lab sim up)


def pytest_sessionfinish(session, exitstatus):
    """The session's end, in the process that made its directory (not an xdist worker): the
    directory removed. The user's own krig directories are not compared before and after (their
    own krig may write there meanwhile); tests/project/test_hermetic.py proves the suite's processes
    are pointed away from them."""
    if HERMETIC_OWNER and not hasattr(session.config, "workerinput"):
        hermetic.leave(HERMETIC_BASE)

"""The static checks are clean on the checkout and see what they are for: ruff (the rule set in
pyproject.toml), mypy (its [tool.mypy] files) and shellcheck (every Bash or sh file krig ships,
.shellcheckrc beside them) each report nothing here, and each names the line of one violation
injected into a copy of the tree; mypy checks krig/ strict, so what only --strict refuses (an
unannotated def, a bare generic, Any returned as a declared type, a name imported through a
module that does not export it) is named there too. make test-fast runs this file, so CI does too."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

BIN = pathlib.Path(sys.executable).parent


def shell_files(root: pathlib.Path) -> list[str]:
    """The shell scripts krig ships: every tracked *.sh and .ci/run."""
    out = subprocess.run(["git", "ls-files", "*.sh"], cwd=root, capture_output=True, text=True, check=True).stdout
    return [*out.split(), ".ci/run"]


def ruff(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=root, capture_output=True, text=True, timeout=300)


def mypy(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mypy"), "--no-incremental"], cwd=root, capture_output=True,
                          text=True, timeout=600)


def shellcheck(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "shellcheck"), "-x", "-f", "gcc", *shell_files(ROOT)], cwd=root,
                          capture_output=True, text=True, timeout=300)


CHECKS = {"ruff": ruff, "mypy": mypy, "shellcheck": shellcheck}
INJECTED = {  # a copy of the tree with one line that breaks the check, and what it must name
    "ruff": ("workflows/run.py", "import json as _never_used\n", "workflows/run.py:"),
    "mypy": ("workflows/listing.py", "_NUMBER: int = 'not a number'\n", "workflows/listing.py:"),
    "shellcheck": ("reproducers/selftest-pass/run.sh", "echo $undefined_spaces\n", "reproducers/selftest-pass/run.sh:"),
}


STRICT_ONLY = [  # (file, line, error code): lines mypy passes unless strict, each named in krig/
    ("krig/errors.py", "def _untyped(x):\n    return x\n", "[no-untyped-def]"),
    ("krig/tally.py", "_BARE: list = []\n", "[type-arg]"),
    ("krig/config.py", "def _any() -> int:\n    return json.loads('1')\n", "[no-any-return]"),
    ("krig/hashsize.py", "from .schema import re as _re\n", "[attr-defined]"),
]
# and a record's field read as what it is declared to be (krig/schema.py Record): an int is no str
RECORD_FIELD = ("krig/schema.py", 'class _R(Record, fields=(Field("port", int),)):\n    port: int\n\n\n'
                '_PORT: str = _R.of({"port": 1}).port\n', "[assignment]")


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_clean_here(name):
    done = CHECKS[name](ROOT)
    assert done.returncode == 0, f"{name} is not clean:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


def copy_checkout(dst: pathlib.Path) -> pathlib.Path:
    """The tracked files of the checkout, as they are in the work tree."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in out.split():
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


@pytest.mark.parametrize("name", ["ruff", "shellcheck"])     # mypy's: the test below, in the same run
def test_a_violation_is_named(name, tmp_path):
    root = copy_checkout(tmp_path / "tree")
    rel, line, named = INJECTED[name]
    with open(root / rel, "a") as f:
        f.write(line)
    done = CHECKS[name](root)
    assert done.returncode != 0, f"{name} passed a tree with {line!r} added to {rel}"
    assert named in done.stdout, done.stdout[-2000:]
    assert os.path.exists(root / rel)


def test_mypy_names_a_violation_is_strict_on_krig_and_sees_record_fields(tmp_path):
    """One mypy run over a copy with every injected line: a type error outside krig/ (INJECTED),
    what only strict refuses in krig/, and a record field read as another type; each is named."""
    root = copy_checkout(tmp_path / "tree")
    rel, line, named = INJECTED["mypy"]
    with open(root / rel, "a") as f:
        f.write(line)
    for rel, line, _ in [*STRICT_ONLY, RECORD_FIELD]:
        with open(root / rel, "a") as f:
            f.write("\n\n" + line)
    done = mypy(root)
    assert done.returncode != 0, f"mypy passed krig/ with {[line for _, line, _ in STRICT_ONLY]}"
    said = done.stdout.splitlines()
    assert any(s.startswith(named) for s in said), (INJECTED["mypy"], done.stdout[-3000:])
    for rel, line, code in [*STRICT_ONLY, RECORD_FIELD]:
        assert any(s.startswith(f"{rel}:") and s.endswith(code) for s in said), (line, done.stdout[-3000:])

"""A fix behind a sysctl, validated end to end on real guests (`make test`).

The series is kernels/patches/negative-dentry-knob (the kernel tiny-6.1-negative-dentry-knob):
negative-dentry-cap's cap with its sysctl, fs.negative-dentry-limit, at 0 by default (off). It
is validated on tiny-6.1 with neg-dentry-flood's smoke preset, one run a side, on 1 GB guests
(the flood reaches its bound, 10% of RAM, in a quarter of the names a 4 GB guest needs):

- with `--series-sysctl fs.negative-dentry-limit=10` on the patched side: *fixed*; the base is
  unbounded, the patched kernel settles at its cap (1% of RAM) on a plateau, PASS, and the
  reply names the knob;
- without it: *not fixed*, the patched kernel as unbounded as the base.

validate says, each time, that the series adds the sysctl and names the flag, never a value.
The two validations share their base side: the second is given the first's base/ group, which
it resumes as `krig validate` resumes any group made for the same reproducer, kernel, rig and
parameters (workflows/group.py), so three floods answer both. Each flood is also held to what
the flood's own tests assert of a run of its kind (tests/reproducers/test_flood_stop.py's
assert_settled_at_the_cap, tests/reproducers/test_flood_retention.py's assert_unbounded): the cap kernel's
plateau and tiny-6.1's unbounded FAIL are here for `make test`, their own guest runs in
`make test-lab`.
"""
import json
import os
import shutil
import subprocess

import pytest

from conftest import KRIG, ROOT, build_kernels, qemu_pids, rig_with_memory
from test_flood_retention import assert_unbounded
from test_flood_stop import assert_settled_at_the_cap

pytestmark = [pytest.mark.kbuild, pytest.mark.guest, pytest.mark.long(4)]     # minutes: 9.9 building the series kernel (load 12-15), 4.5 with it cached (load 7-10)
TESTER = "Krig Tester <tester@example.org>"
SERIES = ROOT / "kernels" / "patches" / "negative-dentry-knob"
KNOB = "fs.negative-dentry-limit"
SAID = f"krig: the series adds the sysctl {KNOB} (fs/dcache.c): validate with it on as --series-sysctl {KNOB}=VALUE"


def validate_flood(tmp_path, out: str, *args, timeout=7200):
    """`krig validate neg-dentry-flood --base tiny-6.1 --preset smoke ARGS -o tmp_path/out`: the
    process and validate.json (None when it wrote none)."""
    argv = ["validate", "neg-dentry-flood", "--base", "tiny-6.1", "--preset", "smoke", "--from", TESTER,
            "-o", str(tmp_path / out), *args]
    env = {**os.environ, "KRIG_RESULTS": str(tmp_path / "results")}
    p = subprocess.run(KRIG + argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    state = tmp_path / out / "validate.json"
    return p, json.loads(state.read_text()) if state.exists() else None


def side_runs(vdir, side) -> list:
    """[(run directory, manifest, verdict, metric values)] of one side of a validation."""
    out = []
    for r in sorted((vdir / side).glob("run-*")):
        metrics = json.loads((r / "metrics.json").read_text())
        out.append((r, json.loads((r / "manifest.json").read_text()), json.loads((r / "verdict.json").read_text()),
                    {k: v["value"] for k, v in metrics.items()}))
    return out


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """The validation with the knob on (on/), then the one without it (off/), given on/'s base."""
    build_kernels("tiny-6.1")
    tmp = tmp_path_factory.mktemp("knob")
    rig = rig_with_memory(tmp, "1G")
    runs = {"on": validate_flood(tmp, "on", "--rig", str(rig), "--series", str(SERIES), "--repeat", "1",
                                 "--series-sysctl", f"{KNOB}=10")}
    shutil.copytree(tmp / "on" / "base", tmp / "off" / "base")
    runs["off"] = validate_flood(tmp, "off", "--rig", str(rig), "--series", str(SERIES), "--repeat", "1")
    assert not qemu_pids(str(tmp)), "qemu left behind"
    return tmp, runs


def test_fixed_with_the_knob_on(validated):
    tmp, runs = validated
    p, state = runs["on"]
    assert SAID in p.stdout.splitlines(), p.stdout[-3000:]
    assert p.returncode == 0 and state["answer"] == "fixed", p.stdout[-3000:] + p.stderr[-2000:]
    assert state["knobs"] == {"base": [], "series": [f"sysctl {KNOB}=10"]}
    [(run, man, verdict, m)] = side_runs(tmp / "on", "new")
    assert man["knobs"]["sysctl"] == [{"name": KNOB, "set": "10", "read_back": "10"}], run
    assert_settled_at_the_cap(verdict, m)
    [(run, man, verdict, m)] = side_runs(tmp / "on", "base")
    assert "knobs" not in man, run
    assert_unbounded(verdict, m)
    reply = (tmp / "on" / "reply.txt").read_text()
    assert f"  patched knob    sysctl {KNOB}=10" in reply
    assert f"--series-sysctl {KNOB}=10" in " ".join(reply.replace("\\\n", " ").split())


def test_not_fixed_without_the_knob(validated):
    tmp, runs = validated
    p, state = runs["off"]
    assert SAID in p.stdout.splitlines(), p.stdout[-3000:]
    assert p.returncode == 1 and state["answer"] == "not fixed", p.stdout[-3000:] + p.stderr[-2000:]
    assert not (state.get("knobs") or {}).get("series"), state.get("knobs")
    [(run, man, verdict, m)] = side_runs(tmp / "off", "new")
    assert "knobs" not in man, run
    assert_unbounded(verdict, m)
    # the base side is the first validation's run, resumed, not run again
    [(base, man, _, _)] = side_runs(tmp / "off", "base")
    [(first, first_man, _, _)] = side_runs(tmp / "on", "base")
    assert base.name == first.name and man == first_man
    assert "patched knob" not in (tmp / "off" / "reply.txt").read_text()

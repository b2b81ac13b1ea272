"""Two kernel builds started at the same moment on one host, both from tiny-6.1's built tree:
a bisection step (a commit of the bisect demo's history with tiny-6.1's config, given as
`--kernel TREE@COMMIT,like=tiny-6.1`: the same git build `krig bisect` makes of a step, in a git
tree krig has never built, so its build tree is seeded from a built one) and a series from
outside krig's tree on tiny-6.1 (built in a throwaway layer over tiny-6.1's tree). Each runs in
a process of its own;
for each, what build.json says (incremental, the tree it was seeded from or built over), whether
it waited for the other's lock, the objects make compiled (`CC` lines of its log, in the tree and
in the layer), minutes and the load.

    python bench/bench_build_pair.py        (tiny-6.1 built first: krig kernel build tiny-6.1)

Both kernels are new on every run (the step is a commit of its own on the demo's first bad
commit, the series carries a note of its own), so both are built, never taken from the cache;
the two kernels, the step's build tree and its repository are removed afterwards. One JSON line
per build, then the minutes of both builds and of the removal; exit 0 when both were
incremental (docs/measurements.md, kernel builds).
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels import derived, given, trees as kt          # noqa: E402
from kernels.demo_repo import commit_on, make_demo_repo     # noqa: E402
from kernels.digest import cache_key      # noqa: E402
from kernels.spec import build_inputs, kernel_cache, source_identity      # noqa: E402
from krig.paths import cache_dir      # noqa: E402

LIKE = "tiny-6.1"
SERIES_PATCH = ROOT / "kernels" / "patches" / "negative-dentry-cap" / "0001-dcache-cap-unused-negative-dentries.patch"
NOTE = """\
From: A Neighbour <neighbour@example.org>
Subject: [PATCH 2/2] Documentation: a note

---
--- /dev/null
+++ b/Documentation/krig-pair-note.txt
@@ -0,0 +1 @@
+{text}
"""
CC = re.compile(r"^\s+CC\s")


def compiled(log: pathlib.Path) -> dict:
    """`CC` lines of a build's log, by where make ran: in the build tree, or in a series' layer
    (seen by krig through the layer's holder, /proc/PID/root: kernels/overlay.py)."""
    out, where = {"tree": 0, "layer": 0}, "tree"
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("$ "):
            where = "layer" if re.search(r"\(cwd /proc/\d+/root/", line) else "tree"
        elif CC.match(line):
            out[where] += 1
    return out


def one(arg: str) -> dict:
    """Build one given kernel (not cached); what its build did."""
    said = []
    load0, t0 = os.getloadavg()[0], time.monotonic()
    kernel = derived.derived_kernel(given.parse(arg), build=True, log=said.append)
    meta = json.loads((kernel.image.parent / "build.json").read_text())
    how = [m for m in said if re.match(r"kbuild: \S+: .*\((incremental|full build)\)", m)]
    return {"kernel": arg, "dir": str(kernel.image.parent), "incremental": meta["incremental"],
            "layer": meta["layer"], "tree": meta["tree"], "seeded_from": meta["seeded_from"],
            "said": how, "waited": [m for m in said if "waiting for" in m],
            "compiled": compiled(pathlib.Path(meta["log"])), "minutes": round((time.monotonic() - t0) / 60, 2),
            "load": f"{load0:.1f}-{os.getloadavg()[0]:.1f}"}


def inputs(work: pathlib.Path) -> tuple[str, str]:
    """--kernel arguments of a new bisection step and a new series, each unique to this run."""
    demo, info = make_demo_repo(log=lambda m: None)
    repo = work / "step.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--shared", str(demo), str(repo)], check=True, timeout=300)
    stamp = uuid.uuid4().hex
    doc = "Documentation/filesystems/vfs.rst"
    text = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob", f"{info['culprit']}:{doc}"],
                          capture_output=True, check=True).stdout
    step = commit_on(repo, info["culprit"], doc, text + f"\n.. {stamp}\n".encode(),
                     "Documentation: a note of this step", work / "index")
    series = work / "series"
    series.mkdir()
    shutil.copy(SERIES_PATCH, series / "0001.patch")
    (series / "0002.patch").write_text(NOTE.format(text=stamp))
    return f"{repo}@{step},like={LIKE}", f"{LIKE},series={series}"


def at_once(args) -> list:
    """Each argument built by a process of its own, all started together; their results in order."""
    procs = [subprocess.Popen([sys.executable, __file__, "--one", a], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for a in args]
    ended = [p.communicate(timeout=3600) for p in procs]      # every one ends before anything is removed
    for a, p, (_, stderr) in zip(args, procs, ended):
        if p.returncode != 0:
            raise SystemExit(f"build of {a} failed: {(stderr.strip().splitlines() or ['no output'])[-1]}")
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in ended]


def made_by(args) -> tuple[list, list]:
    """Where the builds of args will put their kernels, and the git build trees they will make."""
    kernels, trees = [], []
    for a in args:
        g = given.parse(a)
        spec, _, _ = derived.derived_spec(g, log=lambda m: None)
        identity = source_identity(spec)
        kernels.append(kernel_cache(cache_key(build_inputs(spec, identity))))
        if spec.source == "git":
            trees.append(cache_dir("kbuild", "trees") / kt.origin_of(spec, identity)[0])
    return kernels, trees


def main(argv) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(argv[1])), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="krig-pair-") as work:
        args = inputs(pathlib.Path(work))
        kernels, trees = made_by(args)
        if any((k / "build.json").exists() for k in kernels) or any(t.exists() for t in trees):
            raise SystemExit("the pair's kernels or the step's build tree exist already: nothing to measure")
        t0 = time.monotonic()
        try:
            results = at_once(args)
        finally:            # nothing of this run stays in krig's cache
            t1 = time.monotonic()
            for k in kernels:
                shutil.rmtree(k, ignore_errors=True)
            for t in trees:
                kt.remove_tree(t, log=lambda m: None)
        for label, r in zip(("bisection step", "series"), results):
            print(json.dumps({"build": label, **r}), flush=True)
        print(json.dumps({"both": round((t1 - t0) / 60, 2), "removing": round((time.monotonic() - t1) / 60, 2)}),
              flush=True)
    return 0 if all(r["incremental"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

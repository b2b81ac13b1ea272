"""`make docs-pictures`: the pictures and examples docs/ ships, made again by today's code
from real runs.

- docs/report.png: report.html of a neg-dentry-flood smoke run on tiny-6.1 (no bound: FAIL),
  as headless Chromium shows it;
- docs/negative-dentry-flood-cap70.png: the flood plot of the same preset on
  tiny-6.1-negative-dentry-cap-70 (a bound above the limit: FAIL, bounded);
- docs/examples/reply.txt and reply.mbox: `krig validate`'s reply to a real validation, the
  bisect demo's fix series (kernels/demo_repo.py) on its tip, unlink-dentry-growth's smoke
  preset, 2 runs a side.

The flood kernels are CI kernels (`make ci-kernels`); the validation builds the demo tip and the
fix incrementally. Runs go under build/pictures/ (never into git); each flood takes a few
minutes under TCG, the validation 20-40. Look at the pictures before committing them.
`python docs/pictures.py reply` makes only the reply.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))          # this checkout's packages, whatever the venv points at
KRIG = [sys.executable, "-m", "workflows.cli"]
OUT = ROOT / "build" / "pictures"
RIG = "qemu-2g"
SENDER = "Krig Example <krig@example.org>"


def flood(kernel: str) -> pathlib.Path:
    """A smoke flood on `kernel`; its run directory (a FAIL is what these pictures show)."""
    env = {**os.environ, "KRIG_RESULTS": str(OUT)}
    p = subprocess.run(KRIG + ["run", "neg-dentry-flood", "--preset", "smoke", "--kernel", kernel, "--rig", RIG],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("results: ")]
    if not lines or p.returncode not in (0, 1):
        sys.exit(f"docs-pictures: the {kernel} run did not give a verdict (exit {p.returncode}): "
                 f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return pathlib.Path(lines[-1][len("results: "):])


def screenshot(page: pathlib.Path, dest: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--user-data-dir={profile}", "--window-size=1000,2600", f"--screenshot={dest}",
                            page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    if p.returncode != 0 or not dest.exists():
        sys.exit(f"docs-pictures: chromium made no screenshot of {page}: {p.stderr.strip()[-300:]}")


def reply_example() -> None:
    """docs/examples/reply.{txt,mbox} from a real `krig validate` of the demo's fix series."""
    from kernels.demo_repo import fix_series, make_demo_repo
    work = OUT / "reply"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    demo, info = make_demo_repo(log=print)
    mbox, _ = fix_series(demo, info, work / "dev.git", work / "fix.mbox")
    env = {**os.environ, "KRIG_RESULTS": str(OUT)}
    p = subprocess.run(KRIG + ["validate", "unlink-dentry-growth", "--base", f"{demo}@,like=tiny-6.1",
                               "--series", str(mbox), "--repeat", "2", "--preset", "smoke", "--from", SENDER,
                               "-o", str(work / "validation")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=3 * 3600)
    if p.returncode not in (0, 1) or not (work / "validation" / "reply.txt").exists():
        said = [ln for ln in p.stdout.splitlines() if not ln.startswith(("krig: ", "kbuild: "))]
        sys.exit(f"docs-pictures: the validation gave no example reply (exit {p.returncode}): "
                 f"{(said or p.stderr.strip().splitlines() or ['no output'])[0]} (an example needs a quiet host: "
                 "a contended one makes unlink's timing thresholds ERROR)")
    write_example(work / "validation", demo)
    print(f"docs-pictures: docs/examples/reply.txt and reply.mbox from {work / 'validation'}: "
          f"{p.stdout.splitlines()[-1] if p.stdout.strip() else ''}")


PUBLISHED = "https://git.example.org/pat/linux.git"


def write_example(validation: pathlib.Path, demo: pathlib.Path) -> None:
    """docs/examples/reply.{txt,mbox}: the validation's record with the demo tree's cache path
    replaced by the URL a developer's published tree would have (PUBLISHED: the demo tree has
    no remote, and this machine's paths are not the example's business), written again by the
    real reply code, so the tree is named and cloned as a real one would be."""
    from workflows.reply import identity, write_reply
    from krig.record_validation import ValidationRecord, read_validation
    text = json.dumps(read_validation(validation).to_json())
    state = ValidationRecord.from_json(json.loads(text.replace(json.dumps(str(demo))[1:-1], PUBLISHED)))
    dest = ROOT / "docs" / "examples"
    dest.mkdir(exist_ok=True)
    write_reply(dest, state, state.comparison, identity(SENDER))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["reply"]:
        return reply_example()
    plain = flood("tiny-6.1")
    screenshot(plain / "report.html", ROOT / "docs" / "report.png")
    capped = flood("tiny-6.1-negative-dentry-cap-70")
    plots = sorted(capped.glob("plot-*.png"))
    if not plots:
        sys.exit(f"docs-pictures: {capped} has no plot")
    shutil.copyfile(plots[0], ROOT / "docs" / "negative-dentry-flood-cap70.png")
    print(f"docs-pictures: docs/report.png from {plain}, docs/negative-dentry-flood-cap70.png from {capped}")
    reply_example()


if __name__ == "__main__":
    main()

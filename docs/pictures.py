"""`make docs-pictures`: the pictures docs/ ships, made again by today's code from real runs.

- docs/report.png: report.html of a neg-dentry-flood smoke run on tiny-6.1 (no bound: FAIL),
  as headless Chromium shows it;
- docs/negative-dentry-flood-cap70.png: the flood plot of the same preset on
  tiny-6.1-negative-dentry-cap-70 (a bound above the limit: FAIL, bounded).

Both kernels are CI kernels (`make ci-kernels`). Runs go under build/pictures/ (never into git);
each takes a few minutes under TCG. Look at the pictures before committing them.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
KRIG = [sys.executable, "-m", "krig.cli"]
OUT = ROOT / "build" / "pictures"
RIG = "qemu-2g"


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


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    plain = flood("tiny-6.1")
    screenshot(plain / "report.html", ROOT / "docs" / "report.png")
    capped = flood("tiny-6.1-negative-dentry-cap-70")
    plots = sorted(capped.glob("plot-*.png"))
    if not plots:
        sys.exit(f"docs-pictures: {capped} has no plot")
    shutil.copyfile(plots[0], ROOT / "docs" / "negative-dentry-flood-cap70.png")
    print(f"docs-pictures: docs/report.png from {plain}, docs/negative-dentry-flood-cap70.png from {capped}")


if __name__ == "__main__":
    main()

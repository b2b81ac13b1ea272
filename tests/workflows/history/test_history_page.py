"""`krig history html`'s dashboard as a person sees it: headless Chromium renders it (a screenshot
that is not blank), every plot it references loads as a picture, and the page's DOM has the
regression, the flaky kernel and each server's health as table rows. Boots nothing: seconds.

Covers: workflows/history/html.py, workflows/history/plot.py."""
import html
import os
import re
import subprocess

from conftest import KRIG, ROOT
from history_runs import kernel_sequence, make_run
import viewers


def test_the_dashboard_renders_with_its_tables_and_plots(tmp_path):
    results = tmp_path / "results"
    kernel_sequence(results)
    for i in range(3):
        make_run(results, "k1", "ERROR", 1.0, rig="sick-server", cause="rig", reason="BMC did not answer",
                 started=f"2026-03-0{i + 1}T00:00:00+00:00")
    env = {**os.environ, "KRIG_HISTORY_URL": f"sqlite:///{tmp_path / 'h.sqlite'}"}
    for args in (["import", str(results)], ["html", "-o", str(tmp_path / "dash")]):
        p = subprocess.run(KRIG + ["history", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    page = tmp_path / "dash" / "index.html"
    res = viewers.check_report_in_chromium(page, tmp_path / "chromium")
    assert res["rc"] == (0, 0) and not res["console"], res
    assert res["images"] >= 1 and res["broken"] == [], res            # every plot loaded
    assert res["screenshot"] and not viewers.blank(viewers.png_pixels(res["screenshot"]))
    dom = viewers.chromium(["--dump-dom", page.resolve().as_uri()], tmp_path / "profile-rows").stdout
    rows = [re.sub(r"<[^>]+>", "|", html.unescape(r)) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", dom, re.S)]
    assert any("|k2 (6.1.0-k2)" in r and "|k3 (6.1.0-k3)" in r and "|fixed in k5" in r for r in rows), rows
    assert any("|kflaky (6.1.0-kflaky)" in r and "|1|" in r for r in rows), rows
    assert any(r.startswith("|sick-server|") and "|UNHEALTHY|" in r for r in rows), rows
    imgs = re.findall(r'<img src="(plots/[^"]+\.png)"', dom)
    assert imgs and all((tmp_path / "dash" / i).stat().st_size > 10_000 for i in imgs), imgs

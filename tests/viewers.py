"""What a person uses to look at a report, driven by the tests: headless
Chromium on report.html, KernelShark under Xvfb on trace.kshark.json.

Every process started here is bounded in time and killed on every path.
"""
import contextlib
import html
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import time

import matplotlib.image
import numpy as np

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREEN = (1280, 800)


def _kill(p):
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


def _stop(p):
    """SIGTERM first, so an X server removes its lock and socket; SIGKILL after 10 s."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    _kill(p)


def chromium(args: list, profile: pathlib.Path, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def console_errors(stderr: str) -> list[str]:
    """Page console messages Chromium logged with --enable-logging=stderr --v=0."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def image_check_page(report: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A page that loads report.html in an iframe and writes, into its own DOM,
    how many images loaded and which did not (for --dump-dom)."""
    out.write_text(f"""<!DOCTYPE html><html><body><pre id="r">pending</pre>
<iframe id="f" src="{report.resolve().as_uri()}" width="1000" height="800" onload="
  var imgs = this.contentDocument.images, bad = [];
  for (var i = 0; i < imgs.length; i++)
    if (!imgs[i].complete || imgs[i].naturalWidth === 0) bad.push(imgs[i].getAttribute('src'));
  document.getElementById('r').textContent = 'images=' + imgs.length + ' broken=' + JSON.stringify(bad);
"></iframe></body></html>""")
    return out


def check_report_in_chromium(report: pathlib.Path, tmp: pathlib.Path) -> dict:
    """Screenshot of report.html, console messages, and the images that did not load."""
    tmp.mkdir(parents=True, exist_ok=True)
    shot = tmp / "report-shot.png"
    p = chromium(["--enable-logging=stderr", "--v=0", "--window-size=1000,1400", "--hide-scrollbars",
                  f"--screenshot={shot}", report.resolve().as_uri()], tmp / "profile-shot")
    wrapper = image_check_page(report, tmp / "imgcheck.html")
    d = chromium(["--allow-file-access-from-files", "--dump-dom", wrapper.as_uri()], tmp / "profile-dom")
    m = re.search(r'<pre id="r">(images=.*?)</pre>', d.stdout)
    status = html.unescape(m.group(1)) if m else ""
    n_images = int(status.split()[0].split("=")[1]) if status else -1
    broken = json.loads(status.split("broken=")[1]) if status else None
    return {"screenshot": shot if shot.exists() else None, "console": console_errors(p.stderr + d.stderr),
            "images": n_images, "broken": broken, "rc": (p.returncode, d.returncode)}


def png_pixels(path: pathlib.Path) -> np.ndarray:
    return matplotlib.image.imread(str(path))


def blank(img: np.ndarray) -> bool:
    """True if (almost) every pixel has one colour."""
    rgb = img[..., :3].reshape(-1, 3)
    if rgb.dtype != np.uint8:
        rgb = (rgb * 255).astype(np.uint8)
    _, counts = np.unique(rgb[:: max(1, len(rgb) // 200000)], axis=0, return_counts=True)
    return counts.max() / counts.sum() > 0.995


# ------------------------------------------------------------------ Xvfb + KernelShark
@contextlib.contextmanager
def xvfb(tmp: pathlib.Path):
    """An Xvfb server whose screen is also a file (xwd format) in tmp/fb.

    `-noreset`: without it the server resets whenever its last client leaves,
    and a client connecting during that reset is dropped ("could not connect
    to display"); xdotool's short calls beside KernelShark's start make one.
    The display answers a client before it is handed out."""
    fb = tmp / "fb"
    fb.mkdir(exist_ok=True)
    r, w = os.pipe()
    with open(tmp / "Xvfb.log", "w") as log:
        p = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
                              "-fbdir", str(fb), "-nolisten", "tcp", "-noreset"], pass_fds=(w,),
                             stdout=log, stderr=log)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            display = ":" + f.readline().strip()
        if display == ":" or _xdotool(display, "getdisplaygeometry").returncode != 0:
            raise AssertionError(f"Xvfb gave no display that answers: {(tmp / 'Xvfb.log').read_text()[-2000:]}")
        yield display, fb / "Xvfb_screen0"
    finally:
        _stop(p)


def xwd_pixels(path: pathlib.Path) -> np.ndarray:
    """The Xvfb framebuffer file (XWD, 32 bits per pixel, LSB first) as an RGB array."""
    b = path.read_bytes()
    h = struct.unpack(">25I", b[:100])
    header, width, height, bpl, ncolors = h[0], h[4], h[5], h[12], h[19]
    off = header + ncolors * 12
    a = np.frombuffer(b[off:off + bpl * height], np.uint8).reshape(height, bpl)[:, :width * 4]
    return a.reshape(height, width, 4)[:, :, [2, 1, 0]].copy()


def _xdotool(display, *args, timeout=20):
    return subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DISPLAY": display})


def kernelshark_session(session: pathlib.Path, tmp: pathlib.Path, cwd: pathlib.Path, settle=6.0,
                        timeout=90) -> dict:
    """Open `kernelshark -s session` under Xvfb, screenshot it, quit it with
    Ctrl+Q and return {"screenshot": RGB array, "saved": the session KernelShark
    wrote on exit (lastsession.json), "log": its output}."""
    cache = tmp / "kshark-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    # root runs get a warning dialog unless this is set (its "don't show again" box)
    (cache / "setting.ini").write_text("[General]\nnoRootWarn=true\n")
    log = tmp / "kernelshark.log"
    with xvfb(tmp) as (display, fb):
        runtime = tmp / "xdg-runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "DISPLAY": display, "KS_USER_CACHE_DIR": str(cache),
               "XDG_RUNTIME_DIR": str(runtime), "QT_QPA_PLATFORM": "xcb"}
        with open(log, "w") as lf:
            p = subprocess.Popen(["kernelshark", "-s", str(session)], cwd=cwd, env=env, stdout=lf, stderr=lf)
        try:
            deadline = time.monotonic() + timeout
            win = ""
            while time.monotonic() < deadline and p.poll() is None and not win:
                win = _xdotool(display, "search", "--name", "^kernelshark$").stdout.split()
                win = win[0] if win else ""
                time.sleep(0.5)
            if not win:
                raise AssertionError(f"no kernelshark window: {log.read_text()[-2000:]}")
            time.sleep(settle)   # data loading and the first OpenGL draws
            shot = xwd_pixels(fb)
            matplotlib.image.imsave(str(tmp / "kernelshark.png"), shot)
            _xdotool(display, "mousemove", "300", "200", "click", "1")
            time.sleep(0.5)
            # a loaded host may drop or delay the first key press: ask again until it quits
            for _ in range(24):
                _xdotool(display, "key", "ctrl+q")
                try:
                    p.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            else:
                raise AssertionError(f"kernelshark did not quit on Ctrl+Q within 2 minutes: {log.read_text()[-2000:]}")
        finally:
            _kill(p)
    saved = cache / "lastsession.json"
    return {"screenshot": shot, "saved": json.loads(saved.read_text()) if saved.exists() else None,
            "log": log.read_text(errors="replace")}

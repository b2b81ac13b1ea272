"""Progress of long waits (krig/progress.py): what is waited for, said every interval, on the
terminal unless quiet and in the run's krig.log. The interval is made fast (0.01 s) and every
loop waiting for lines is bounded; nothing asserts a duration."""
import threading
import time

from krig import progress
from test_fake_rig import fake_run

FAST = 0.01


def _until(lines: list, n: int) -> None:
    """Until `lines` holds n lines (bounded: at most 2000 naps)."""
    for _ in range(2000):
        if len(lines) >= n:
            return
        time.sleep(FAST)


def test_a_wait_says_what_it_waits_for_every_interval():
    lines = []
    with progress.waiting("the server lab1 to answer SSH after power on", 900, every=FAST, out=lines.append):
        _until(lines, 5)
    assert len(lines) >= 5
    for line in lines:
        assert line.startswith("krig: waiting for the server lab1 to answer SSH after power on, "), line
        assert line.endswith(" so far (at most 15 min)"), line
    said = len(lines)
    time.sleep(FAST * 5)
    assert len(lines) == said           # the wait ended: nothing more is said


def test_a_step_inside_a_wait_is_named_after_it():
    lines = []
    step = ": kexec to load the kernel 6.1.0 on the server lab1, "
    with progress.waiting("kernel 6.1.0 to boot on lab1", 900, every=FAST, out=lines.append):
        with progress.waiting("kexec to load the kernel 6.1.0 on the server lab1", 120):
            start = len(lines)
            _until(lines, start + 4)
            inner = lines[start + 1:]       # (a line said as the step began may not name it yet)
        n = len(lines)
        _until(lines, n + 3)
    assert len(inner) >= 3 and all(ln.startswith("krig: waiting for kernel 6.1.0 to boot on lab1, ") and step in ln
                                   for ln in inner), inner
    assert lines[-1].startswith("krig: waiting for kernel 6.1.0 to boot on lab1, ") and "kexec" not in lines[-1]


def test_a_fake_clock_says_how_long():
    now = [100.0]
    lines = []
    w = progress.waiting("the workload neg-dentry-flood on lab1", None, every=FAST, clock=lambda: now[0],
                         out=lines.append)
    with w:
        now[0] = 1000.0
        assert w.line() == "krig: waiting for the workload neg-dentry-flood on lab1, 15 min so far"
        now[0] = 130.0
        assert w.line() == "krig: waiting for the workload neg-dentry-flood on lab1, 30 s so far"


def test_quiet_keeps_the_terminal_silent_and_the_run_log_full(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, str(FAST))
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    log = tmp_path / "krig.log"
    with open(log, "a") as f, progress.run_log(f):
        with progress.waiting("the results to come back from lab1"):
            for _ in range(2000):
                if log.read_text().count("\n") >= 3:
                    break
                time.sleep(FAST)
    assert capsys.readouterr().out == ""
    got = log.read_text().splitlines()
    assert len(got) >= 3 and all(ln.startswith("krig: waiting for the results to come back from lab1, ")
                                 for ln in got), got
    monkeypatch.delenv(progress.QUIET_ENV)
    with progress.waiting("the results to come back from lab1"):
        _until_out = []
        for _ in range(2000):
            _until_out.append(capsys.readouterr().out)
            if "krig: waiting for the results" in "".join(_until_out):
                break
            time.sleep(FAST)
    assert "krig: waiting for the results to come back from lab1, " in "".join(_until_out)


def test_the_interval_is_bounded(monkeypatch):
    assert progress.INTERVAL == 30
    for value, want in (("0.5", 0.5), ("60", 30.0), ("0", 30.0), ("soon", 30.0)):
        monkeypatch.setenv(progress.INTERVAL_ENV, value)
        assert progress.interval() == want, value


def test_a_run_keeps_its_log(tmp_path, monkeypatch):
    """A real run (the fake rig): krig.log holds what krig said of it; no wait is left running."""
    d, verdict = fake_run(tmp_path)
    assert verdict.verdict == "PASS"
    text = (d / "krig.log").read_text()
    assert text.startswith("krig: selftest-pass on fake-none-none with kernel "), text
    assert not [t for t in threading.enumerate() if t.name == "krig-progress"]
    assert not progress._stack



def bounds_said(line: str) -> list:
    """[(so far, at most)] in seconds of each wait a line names."""
    import re
    sec = {"s": 1, "min": 60}
    return [(float(a) * sec[u], float(b) * sec[v])
            for a, u, b, v in re.findall(r"(\d+) (s|min) so far \(at most (\d+) (s|min)\)", line)]


def test_nested_waits_never_say_more_so_far_than_at_most():
    """A boot of two SSH waits, a copy and a load, each at its own limit, inside a wait given less
    than their sum: what the outer wait says it may take grows to cover the step under way."""
    now = [0.0]
    clock = lambda: now[0]      # noqa: E731
    outer = progress.waiting("kernel 6.1.0 to boot on lab1", 900, every=3600, clock=clock, out=lambda _: None)
    seen = []
    with outer:
        for what, limit in (("the server lab1 to answer SSH", 600), ("the kernel to copy", 300),
                            ("kexec to load the kernel", 120), ("the server lab1 to answer SSH after kexec", 600)):
            with progress.waiting(what, limit, clock=clock):
                for _ in range(4):          # the step takes its whole limit
                    now[0] += limit / 4
                    seen.append(outer.line())
    said = [n for line in seen for n in bounds_said(line)]
    assert len(said) == 2 * len(seen)
    assert all(so_far <= most for so_far, most in said), seen
    assert bounds_said(seen[-1])[0] == (1620.0, 1620.0), seen[-1]        # 27 min: 600 + 300 + 120 + 600 s


def _lab_rig(tmp_path, **top):
    from rigs import load_rig
    for name in ("key", "pw", "known_hosts"):
        (tmp_path / name).write_text("pw\nbmc = 127.0.0.1\n" if name == "pw" else "k\n")
        (tmp_path / name).chmod(0o600)
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in top.items())
    path = tmp_path / "lab1.toml"
    path.write_text(f'driver = "ipmi"\n{extra}[bmc]\nhost = "127.0.0.1"\nuser = "krig"\n'
                    f'password_file = "{tmp_path / "pw"}"\n[ssh]\nhost = "127.0.0.1"\nkey = "{tmp_path / "key"}"\n'
                    f'known_hosts = "{tmp_path / "known_hosts"}"\n')
    return load_rig(str(path))


def test_a_kexec_boot_is_bounded_by_its_steps(tmp_path):
    """The boot's "at most" of a kexec rig is the sum of its steps' limits (the two SSH waits, the
    two copies, the facts, the load, the jump), from the limits the steps use."""
    from rigs.ipmi import kexec
    rig = _lab_rig(tmp_path, boot="kexec", boot_timeout=600, pull_timeout=300)
    steps = 2 * 600 + 2 * 300 + kexec.FACTS_TIMEOUT + kexec.LOAD_TIMEOUT + kexec.JUMP_TIMEOUT
    assert rig.boot.bound() == steps > 2 * 600 + 300 + kexec.LOAD_TIMEOUT     # more than its waits
    assert _lab_rig(tmp_path, boot_timeout=600).boot.bound() == 600           # a cold boot: one SSH wait
    from rigs import load_rig
    assert load_rig("qemu-default").boot.bound() is None


def test_a_wait_past_its_limit_says_so():
    now = [0.0]
    w = progress.waiting("the server lab1 to answer SSH", 600, every=3600, clock=lambda: now[0], out=lambda _: None)
    with w:
        now[0] = 700.0
        assert w.line() == "krig: waiting for the server lab1 to answer SSH, 12 min so far (past its limit of 10 min)"

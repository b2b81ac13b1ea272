"""The questions a person asks of the history, answered from the store (the same answers from SQLite
and PostgreSQL: the selections are SQLAlchemy Core, the reasoning over them is here).

    list_runs       runs newest first, filtered
    trend           a metric across kernels on one class of machine, repeats as spread
    regressions     (reproducer, SKU, threshold) that went PASS -> FAIL between two kernels,
                    active or fixed; flaky: a verdict that flips on reruns of one kernel, SKU and
                    parameters (never a regression)
    health          servers whose last M runs ended ERROR for a rig cause K times or more

Kernels go in version order (kernel_order): by their release, and among kernels of one
version (a series and its base, a variant) in the order they were first run; when one of
them has no release krig can read, all of them in the order first run.
"""
import dataclasses
import re
import statistics

import sqlalchemy as sa

from .store import metrics, runs, thresholds

RIG_CAUSES = ("rig", "machine", "host-fault")     # an ERROR the server or its rig is to blame for
HEALTH_K, HEALTH_M = 3, 5                           # unhealthy: K rig ERRORs in its last M runs
JUDGED = ("PASS", "FAIL")


def kernel_label(r) -> str:
    """A kernel as a person names it: its name, release and commit when known."""
    name, rel, commit = r["kernel"], r["kernel_release"], r["kernel_commit"]
    label = name or rel or "?"
    if rel and name and rel not in name:
        label = f"{name} ({rel})"
    return f"{label} @{commit[:12]}" if commit else label


_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:-rc(\d+))?")


def version_key(release: str | None) -> tuple[int, int, int, int, int] | None:
    """A kernel release's place among versions: 6.5 before 6.8, 6.8-rc3 before 6.8, 6.8 before
    6.8.2; what follows the version (Debian's `-57-amd64`, a `-00012-gabcdef` describe) is not
    read. None for a release without a version."""
    m = _VERSION.match(release or "")
    if m is None:
        return None
    major, minor, patch, rc = m.groups()
    return int(major), int(minor), int(patch or 0), 0 if rc else 1, int(rc or 0)


def kernel_order(kernels: list[tuple[str | None, str, str]]) -> list[int]:
    """(release, first run, label) of each kernel -> their positions in version order, the first
    run (then the label) deciding among one version; all by first run when a release has no
    version."""
    keys = [version_key(rel) for rel, _, _ in kernels]
    by_version = all(k is not None for k in keys)
    return sorted(range(len(kernels)), key=lambda i: (keys[i] if by_version else (), kernels[i][1], kernels[i][2]))


def list_runs(eng, repro=None, kernel=None, rig=None, server=None, verdict=None, since=None, limit=50) -> list:
    q = sa.select(runs).order_by(runs.c.started.desc(), runs.c.id.desc()).limit(limit)
    if repro:
        q = q.where(runs.c.reproducer == repro)
    if kernel:
        q = q.where(sa.or_(runs.c.kernel == kernel, runs.c.kernel_release == kernel, runs.c.kernel_commit.startswith(kernel)))
    if rig:
        q = q.where(runs.c.rig == rig)
    if server:
        q = q.where(sa.or_(runs.c.rig == server, runs.c.server_model == server, runs.c.sku == server))
    if verdict:
        q = q.where(runs.c.verdict == verdict.upper())
    if since:
        q = q.where(runs.c.started >= since)
    with eng.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


@dataclasses.dataclass
class TrendPoint:
    kernel: str
    first: str          # when the kernel was first run
    values: list
    unit: str
    limit: str | None   # the threshold on the metric, as the judge said it
    release: str | None = None

    @property
    def median(self):
        return statistics.median(self.values)

    @property
    def spread(self):
        return (min(self.values), max(self.values))


def trend(eng, metric: str, repro: str, rig=None, server=None, sku=None) -> list:
    """The metric's values per kernel (kernel_order: by version, then first run), on the judged
    runs asked: plain rows (the values exact as stored), grouped here."""
    q = (sa.select(runs.c.kernel, runs.c.kernel_release, runs.c.kernel_commit, runs.c.started, metrics.c.unit,
                   metrics.c.value)
         .join(metrics, metrics.c.run_id == runs.c.id)
         .where(metrics.c.name == metric, runs.c.reproducer == repro, metrics.c.value.is_not(None),
                runs.c.verdict.in_(JUDGED)))      # an ERROR's numbers are the rig's, not the kernel's
    for col, want in ((runs.c.rig, rig), (runs.c.server_model, server), (runs.c.sku, sku)):
        if want:
            q = q.where(col == want)
    lim = (sa.select(thresholds.c.limit_text).join(runs, runs.c.id == thresholds.c.run_id)
           .where(runs.c.reproducer == repro, thresholds.c.name.startswith(metric + " "))
           .order_by(runs.c.started.desc()).limit(1))
    groups: dict = {}
    with eng.connect() as conn:
        limit = conn.execute(lim).scalar()
        for k, rel, commit, started, unit, value in conn.execute(q):
            g = groups.get((k, rel, commit))
            if g is None:
                g = groups[(k, rel, commit)] = [started or "", unit or "", []]
            elif started and started < g[0]:
                g[0] = started
            g[2].append(value)
    points = [TrendPoint(kernel_label({"kernel": k, "kernel_release": rel, "kernel_commit": commit}), first,
                         sorted(values), unit, limit, rel) for (k, rel, commit), (first, unit, values) in groups.items()]
    return [points[i] for i in kernel_order([(p.release, p.first, p.kernel) for p in points])]


def threshold_limit(text: str | None):
    """The number a threshold's limit gives ("<= 5", ">= 0.5 and <= 2": the first), or None."""
    m = re.search(r"(?:<=|>=)\s*(-?[\d.]+(?:e[-+]?\d+)?)", text or "")
    return float(m.group(1)) if m else None


def _judged_runs(eng) -> list:
    """Every PASS or FAIL run with its failed thresholds, oldest first."""
    q = (sa.select(runs.c.id, runs.c.reproducer, runs.c.sku, runs.c.rig, runs.c.params, runs.c.kernel,
                   runs.c.kernel_release, runs.c.kernel_commit, runs.c.started, runs.c.verdict, runs.c.preset)
         .where(runs.c.verdict.in_(JUDGED)).order_by(runs.c.started, runs.c.id))
    tq = sa.select(thresholds.c.run_id, thresholds.c.name, thresholds.c.outcome).join(
        runs, runs.c.id == thresholds.c.run_id).where(runs.c.verdict.in_(JUDGED))
    with eng.connect() as conn:
        rows = [dict(r) for r in conn.execute(q).mappings()]
        failed: dict = {}
        for run_id, name, outcome in conn.execute(tq):
            if outcome == "fail":
                failed.setdefault(run_id, set()).add(name)
    for r in rows:
        r["failed"] = failed.get(r["id"]) or ({"verdict"} if r["verdict"] == "FAIL" else set())
        r["label"] = kernel_label(r)
    return rows


def flaky(eng, rows=None) -> list:
    """Verdicts that flip on reruns with the same kernel, SKU and parameters: one entry each."""
    groups: dict = {}
    for r in rows if rows is not None else _judged_runs(eng):
        groups.setdefault((r["reproducer"], r["sku"], r["label"], r["params"]), []).append(r)
    out = []
    for (repro, sku, label, _params), rs in groups.items():
        verdicts = [r["verdict"] for r in rs]
        if len(set(verdicts)) > 1:
            out.append({"reproducer": repro, "sku": sku, "kernel": label, "pass": verdicts.count("PASS"),
                        "fail": verdicts.count("FAIL"), "last": rs[-1]["started"]})
    return sorted(out, key=lambda f: (f["reproducer"], f["sku"], f["kernel"]))


def regressions(eng) -> tuple[list, list]:
    """(regressions, flaky results): a regression is a (reproducer, SKU, threshold) whose kernels,
    in version order (kernel_order), went from consistently passing to consistently failing;
    a kernel whose reruns disagree is flaky there and neither passes nor fails it."""
    rows = _judged_runs(eng)
    flakes = flaky(eng, rows)
    flaky_keys = {(f["reproducer"], f["sku"], f["kernel"]) for f in flakes}
    series: dict = {}               # (repro, sku, params) -> kernel label -> [runs]
    for r in rows:
        series.setdefault((r["reproducer"], r["sku"], r["params"]), {}).setdefault(r["label"], []).append(r)
    out = []
    for (repro, sku, _params), by_kernel in series.items():
        labels = list(by_kernel)
        ranked = kernel_order([(by_kernel[k][0]["kernel_release"], by_kernel[k][0]["started"] or "", k) for k in labels])
        order = [labels[i] for i in ranked if (repro, sku, labels[i]) not in flaky_keys]
        names = set().union(*(r["failed"] for k in order for r in by_kernel[k]))
        for name in sorted(names):
            out.extend(_transitions(repro, sku, name, order, by_kernel))
    return sorted(out, key=lambda g: (g["reproducer"], g["sku"], g["threshold"], g["first_failing"])), flakes


def _transitions(repro, sku, name, order, by_kernel) -> list:
    """Each PASS -> FAIL of one threshold along the kernels, with the kernel that passed again after."""
    states = [(k, all(name in r["failed"] for r in by_kernel[k]), by_kernel[k][0]) for k in order]
    out, last_pass = [], None
    i = 0
    while i < len(states):
        k, failing, first = states[i]
        if not failing:
            last_pass = (k, first)
        elif last_pass is not None:
            fixed = next(((k2, f2) for k2, failing2, f2 in states[i + 1:] if not failing2), None)
            out.append({"reproducer": repro, "sku": sku, "threshold": name, "last_passing": last_pass[0],
                        "first_failing": k, "status": "fixed" if fixed else "active",
                        "fixed_in": fixed[0] if fixed else None,
                        "bisect": bisect_line(repro, last_pass[1], first)})
            last_pass = None
            if fixed is None:
                break
            i = order.index(fixed[0])
            continue
        i += 1
    return out


def bisect_line(repro: str, good: dict, bad: dict) -> str:
    """The `krig bisect run` that would find the commit between two kernels' runs."""
    ref = lambda r: r["kernel_commit"] or r["kernel_release"] or r["kernel"]  # noqa: E731
    preset = f" --preset {good['preset']}" if good.get("preset") else ""
    return f"krig bisect run --good {ref(good)} --bad {ref(bad)} --repro {repro}{preset} --rig {good['rig']}"


def health(eng, k: int = HEALTH_K, m: int = HEALTH_M) -> list:
    """Each server (rig) with its last M runs: how many ended ERROR for a rig cause; unhealthy at K."""
    q = sa.select(runs.c.rig, runs.c.verdict, runs.c.cause, runs.c.reason, runs.c.started).order_by(
        runs.c.rig, runs.c.started.desc(), runs.c.id.desc())
    last: dict = {}
    with eng.connect() as conn:
        for r in conn.execute(q).mappings():
            if r["rig"] and len(last.setdefault(r["rig"], [])) < m:
                last[r["rig"]].append(dict(r))
    out = []
    for rig, rs in sorted(last.items()):
        errs = [r for r in rs if r["verdict"] == "ERROR" and r["cause"] in RIG_CAUSES]
        out.append({"server": rig, "runs": len(rs), "rig_errors": len(errs), "unhealthy": len(errs) >= k,
                    "last_error": errs[0]["reason"] if errs else None})
    return out


def unhealthy(eng, k: int = HEALTH_K, m: int = HEALTH_M) -> dict:
    """{server: why} of the unhealthy servers."""
    return {h["server"]: f"{h['rig_errors']} of its last {h['runs']} runs ended ERROR for a rig cause"
            f" (last: {h['last_error']})" for h in health(eng, k, m) if h["unhealthy"]}

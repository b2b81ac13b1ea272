"""A run directory as the history store's rows, read only through krig/record.py (the safe reader:
a run directory whose files are links, FIFOs or oversized is refused as every command refuses it).

The workflow a run belongs to is said by its caller (a bisection step, a qualification case) or
read from where the run is (krig/results.py's layout): a group's run-NN, a validation's base/ or
new/ side, a qualification's runs/, else a plain run.
"""
import json
import pathlib
import socket

from krig import safeio
from krig.record import RunRecord
from krig.results import GROUP_FILE, GROUP_RUN, SUITE_FILE, VALIDATE_FILE, VALIDATE_SIDES

WORKFLOWS = ("run", "group", "validation-base", "validation-new", "bisect-step", "qualify-case")
_SUITE_DEPTH = 6        # qualify/<suite>/runs/<repro>/<kernel>/<rig>/<time>: suite.json that far up


def workflow_of(run_dir: pathlib.Path) -> str:
    """The workflow a run directory's place in the results layout says it belongs to."""
    d = pathlib.Path(run_dir)
    if d.name.startswith(GROUP_RUN) and safeio.is_file(d.parent, GROUP_FILE):
        side = d.parent                 # a validation's side is a group: validate/<name>/new/run-01
        if side.name in VALIDATE_SIDES and safeio.is_file(side.parent, VALIDATE_FILE):
            return f"validation-{side.name}"
        return "group"
    for up in list(d.parents)[:_SUITE_DEPTH]:
        if up.name == "runs" and safeio.is_file(up.parent, SUITE_FILE):
            return "qualify-case"
    return "run"


def _gib(n) -> int | None:
    return round(n / (1 << 30)) if isinstance(n, (int, float)) and n > 0 else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v, cap: int = 200) -> str | None:
    return str(v)[:cap] if v not in (None, "") else None


def sku_of(kind, model, cpus, ram_bytes) -> str:
    """The class of machine a run's numbers compare within: a lab server's model (its rig file's
    [lab] model), else its kind, CPUs and RAM (qemu-2c-1g)."""
    if model:
        return str(model)
    gib = _gib(ram_bytes)
    return f"{kind or 'rig'}-{cpus or '?'}c-{gib if gib is not None else '?'}g"


def run_rows(run_dir, workflow: str | None = None) -> tuple[dict, list, list]:
    """(the runs row, the metrics rows, the thresholds rows) of one run directory."""
    rec = RunRecord.read(run_dir)
    man, verdict = rec.manifest, rec.verdict
    kernel, rig, facts = man.kernel, man.rig, man.rig_facts if isinstance(man.rig_facts, dict) else {}
    lab = rig.table("lab")
    series = man.series if isinstance(man.series, dict) else {}
    prov = series.get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    ram = man.mem_total_bytes or _int(rig.memory_bytes) or (_int(lab.get("memory_gib")) or 0) << 30 or None
    model = _str(facts.get("system")) or _str(lab.get("model"))
    row = {
        "run_dir": str(pathlib.Path(run_dir).resolve()), "workflow": workflow or workflow_of(run_dir),
        "reproducer": _str(man.reproducer), "preset": _str(man.preset),
        "params": json.dumps(man.params if isinstance(man.params, dict) else {}, sort_keys=True, default=str),
        "kernel": _str(kernel.name), "kernel_release": _str(man.release),
        "kernel_commit": _str((kernel.git or {}).get("commit"), 64) if isinstance(kernel.git, dict) else None,
        "kernel_config": _str(kernel.config_sha256_16, 64),
        "series": _str(series.get("message_id") or series.get("subject") or series.get("source"), 2000),
        "patchset_hash": _str(series.get("patchset_hash") or prov.get("patchset_hash"), 128),
        "rig": _str(rig.name), "driver": _str(rig.spec.get("driver") or rig.kind, 64),
        "server_model": model, "server_firmware": _str(facts.get("firmware"), 2000),
        "ram_bytes": ram, "cpus": _int(man.cpus), "numa_nodes": _int(lab.get("numa")),
        "verdict": _str(verdict.verdict if verdict else None, 32) or "INCOMPLETE",
        "cause": _str(verdict.cause if verdict else None, 64), "reason": _str(verdict.reason if verdict else man.reason, 2000),
        "started": _str(man.started, 40), "ended": _str(man.ended, 40), "host_load": _str(man.host_load, 64),
        "controller": _str((man.owner or {}).get("host") if isinstance(man.owner, dict) else None) or socket.gethostname(),
    }
    row["sku"] = sku_of(rig.kind, model, row["cpus"], ram)
    metric_rows = [{"name": name[:200], "value": e.value, "unit": e.unit[:64]}
                   for name, e in rec.metric_entries.items()]
    # a threshold's id is its metric and its limit (analysis/test_thresholds.py): "peak_pct <= 5"
    threshold_rows = [{"name": t.threshold[:300], "outcome": t.outcome[:32],
                       "limit_text": t.threshold.partition(" ")[2][:200] or None} for t in rec.thresholds]
    return row, metric_rows, threshold_rows

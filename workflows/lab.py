"""`krig lab sync` and `krig lab status`: the lab server rigs (IPMI and Redfish) as places of a labgrid coordinator,
and a qualification suite's servers chosen by tags ([lab] in the suite).

The coordinator is KRIG_LAB_COORDINATOR=HOST:PORT; docs/lab-coordinator.md says
how to run one, which tags a rig gets and what happens when a controller or the
coordinator goes away. Holding a server during a run is rigs/lab.py.
"""
import time

from krig.config import load_toml
from krig.errors import UsageError
from krig.schema import optional, reject_unknown
from rigs import lab, lab_tags, load_rig, rig_names, rig_path, rig_places

SELECT = {"tags", "min", "count"}


def _coordinator() -> lab.Coordinator:
    addr = lab.address()
    if not addr:
        raise UsageError(f"{lab.ENV}: not set; set it to the lab coordinator's HOST:PORT "
                         "(see docs/lab-coordinator.md)")
    return lab.Coordinator(addr)


def ipmi_rigs(names: list[str] | None = None) -> dict[str, dict]:
    """rig name -> its place tags, for the lab server rigs named (default: every IPMI and Redfish rig found).
    Reads only the rig file's [lab] table and scratch_dev: no password is needed or read."""
    out = {}
    for n in names or rig_names():
        path = rig_path(n)
        if path is None:
            load_rig(n, "RIG")  # the usual one-line error for an unknown rig
        assert path is not None, f"load_rig found a rig {n} without a rig file"
        spec = load_toml(path, "RIG" if names else "")
        if spec.get("driver") not in ("ipmi", "redfish"):
            if names:
                raise UsageError(f"RIG {n}: a {spec.get('driver')!r} rig is not a lab server "
                                 "(driver = \"ipmi\" or \"redfish\")")
            continue
        out[path.stem] = lab_tags(spec, str(path))
    return out


def sync(names: list[str] | None = None, log=print) -> int:
    rigs = ipmi_rigs(names)         # the names first: a wrong one is said before the coordinator is asked
    coord = _coordinator()
    if not rigs:
        raise UsageError(f"krig lab sync: no IPMI or Redfish rig files found in {rig_places()}")
    for name, tags in rigs.items():
        how = coord.sync_place(name, tags)
        log(f"lab: place {name}: {how}: " + " ".join(f"{k}={v}" for k, v in sorted(tags.items())))
    return 0


def _clock(t) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "?"


def status(log=print) -> int:
    coord = _coordinator()
    places, reservations = coord.places(), coord.reservations()
    now = time.time()
    log(f"lab coordinator {coord.addr}: {len(places)} places, {len(reservations)} reservations")
    from .history.health import sick_servers
    sick = sick_servers(log)
    for name, p in sorted(places.items()):
        t = p["tags"]
        tags = " ".join(f"{k}={v}" for k, v in sorted(t.items()) if k not in lab.LEASE_TAGS)
        if p["acquired"]:
            state = f"locked by {p['acquired']}"
            if lab.HOLDER in t:
                ends = float(t.get(lab.LEASE, 0) or 0)
                state += (f" (krig {t[lab.HOLDER]} since {_clock(t.get(lab.SINCE))}, lease "
                          + (f"until {_clock(ends)})" if ends >= now else f"ENDED {_clock(ends)}: stale, "
                             "the next krig that waits releases it)"))
            else:
                state += f" since {_clock(p['changed'])}"
        elif p["reservation"]:
            state = "allocated to a reservation"
        else:
            state = "free"
        log(f"  {name}: {state}; {tags}" + (f"; UNHEALTHY: {sick[name]}" if name in sick else ""))
    waiting = [r for r in reservations if r["state"] == "waiting"]
    for r in sorted(waiting, key=lambda r: (-r["prio"], r["created"])):
        want = " ".join(f"{k}={v}" for k, v in r["filters"].get("main", {}).items())
        log(f"  waiting: {r['owner']} prio {r['prio']:g} for {want or 'any place'} since {_clock(r['created'])} "
            f"(reservation {r['token']})")
    return 0


# -- a suite's servers by tags -------------------------------------------------

def select_rigs(sel: dict, where: str) -> list[str]:
    """[lab] tags = {model = "r760"}, min = {memory_gib = 256}, count = N (default: all that match):
    the names of matching places that have a rig file here, free ones first."""
    reject_unknown(sel, SELECT, where)
    want = optional(sel, "tags", dict, where, {})
    mins = optional(sel, "min", dict, where, {})
    for k, v in mins.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"{where}.min.{k}: expected a number, got {v!r}")
    count = optional(sel, "count", int, where, 0)
    if "count" in sel and count < 1:
        raise UsageError(f"{where}.count: must be at least 1, got {count}")
    want = {k: str(v).lower() for k, v in want.items()}
    places = _coordinator().places()

    def fits(p):
        t = p["tags"]
        if any(t.get(k) != v for k, v in want.items()):
            return False
        for k, v in mins.items():
            try:
                if float(t.get(k, "")) < v:
                    return False
            except ValueError:
                return False
        return True
    match = [n for n, p in places.items() if fits(p) and rig_path(n) is not None]
    if not match:
        asked = " ".join([f"{k}={v}" for k, v in want.items()] + [f"{k}>={v:g}" for k, v in mins.items()])
        raise UsageError(f"{where}: no lab server matches {asked or 'anything'} among the coordinator's "
                         f"{len(places)} places with a rig file here (krig lab status shows them)")
    match.sort(key=lambda n: (bool(places[n]["acquired"] or places[n]["reservation"]), n))
    if count and len(match) < count:
        raise UsageError(f"{where}.count: {count} servers asked, {len(match)} match: {', '.join(match)}")
    return match[:count] if count else match


def cmd_sync(a) -> int:
    """`krig lab sync [RIG]...`."""
    return sync(a.rigs or None)


def cmd_status(a) -> int:
    """`krig lab status`."""
    return status()


def cmd_sim_up(a) -> int:
    """`krig lab sim up NAME [--memory SIZE] [--nic MODEL] [--owner PID] [--bmc ipmi|redfish]`: its last
    line is the rig file's path."""
    from rigs.labsim import sim as labsim
    print(labsim.up(a.name, a.memory, owner=a.owner, nic=a.nic, bmc=a.bmc))
    return 0


def cmd_sim_down(a) -> int:
    """`krig lab sim down NAME`."""
    from rigs.labsim import sim as labsim
    return labsim.down(a.name)


def cmd_sim_list(a) -> int:
    """`krig lab sim list`: one line per simulated server."""
    from rigs.labsim import sim as labsim
    rows = labsim.servers()
    if not rows:
        print("no simulated lab servers (krig lab sim up NAME starts one)")
        return 0
    table = [("NAME", "STATE", "MEMORY", "BMC", "NIC", "SSH", "OWNER", "RIG FILE")]
    for r in rows:
        mem = "-" if r["memory_mb"] is None else f"{r['memory_mb']} MiB" + (" sparse" if r["sparse"] else "")
        port = lambda n: "-" if n is None else f"127.0.0.1:{n}"    # noqa: E731
        bmc = f"{r['bmc_kind']} {port(r['bmc_port'])}"
        table.append((r["name"], r["state"], mem, bmc, r["nic"], port(r["ssh_port"]),
                      "-" if r["owner"] is None else f"pid {r['owner']}", r["rig"] or "-"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return 0

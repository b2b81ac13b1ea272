"""Server health as the workflows ask it: `krig qualify` leaves an unhealthy server out (unless
told), `krig lab status` marks it. A history that cannot be read is one line and no server is
held back by it."""
import pathlib

from .remember import said


def sick_servers(log=print) -> dict:
    """{server (rig name): why it is unhealthy} from the history; {} when there is none to read."""
    try:
        from . import query, store
        url = store.store_url()
        return {} if url is None else query.unhealthy(store.engine(url))
    except Exception as e:      # noqa: BLE001 - a store that fails holds no server back
        log(f"history not read: {said(e)} (server health unknown)")
        return {}


def healthy_cases(cases: list, include_unhealthy: bool, log=print) -> list:
    """A qualification's cases without those on an unhealthy server (one line each such server)."""
    if include_unhealthy:
        return cases
    sick = sick_servers(log)
    named = {c["rig"]: rig_name(c["rig"]) for c in cases}
    for rig in sorted(r for r, name in named.items() if name in sick):
        log(f"qualify: not scheduling {rig}: unhealthy: {sick[named[rig]]} (krig history health; "
            "--include-unhealthy runs it)")
    return [c for c in cases if named[c["rig"]] not in sick]


def rig_name(rig: str) -> str:
    """The name a rig's runs are recorded under: its name, or its rig file's without .toml."""
    return pathlib.PurePath(rig).name.removesuffix(".toml")

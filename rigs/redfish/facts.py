"""What a Redfish BMC says about its server, for the manifest, and the server's log services
read as the IPMI SEL is (sel-before.txt, sel.txt): through sushy's resources where sushy has
them (the system, its manager, the update service's firmware inventory) and through its
connector for the LogService schema it has no class for. A BMC without some of it gives
what it has; nothing here fails a run. Every string the BMC wrote comes out printable
(krig.safeio.printable: no control character reaches a terminal, the manifest or a report)."""
from krig.errors import RigError
from krig.safeio import printable
from rigs.ipmi.bmc import BmcAuthError

LOG_ENTRIES = 1000          # entries read from one log service
INVENTORY = 40              # firmware inventory items in the facts


def _text(v, limit: int = 160) -> str:
    """A value the BMC gave as one printable line ("" for none)."""
    return printable(getattr(v, "value", v), limit) if v is not None else ""


def manager_line(bmc) -> str:
    """The BMC's identity: its manager's model and firmware, the Redfish version."""
    def line(s):
        try:
            m = s.managers[0] if s.managers else None
        except Exception as e:      # a manager link the BMC does not serve
            return f"manager unknown ({type(e).__name__})"
        who = " ".join(_text(x) for x in (m.json.get("Manufacturer"), m.model) if x) if m else "manager unknown"
        fw = f", firmware {_text(m.firmware_version)}" if m is not None and m.firmware_version else ""
        return f"{who or 'manager ' + _text(m.identity)}{fw}, Redfish {_text(bmc._root.redfish_version or '?')}"
    try:
        return bmc.call("reading the manager", line)
    except BmcAuthError:
        raise
    except RigError as e:
        return f"unknown ({e})"


def server_facts(bmc) -> dict:
    """The server as the BMC describes it: model, memory, processors, firmware versions."""
    def facts(s):
        out = {"redfish_system": _text(s.path),
               "redfish_auth": "session token" if bmc._auth.can_refresh_session() else "basic (no SessionService)"}
        model = " ".join(_text(x) for x in (s.manufacturer, s.model) if x)
        if model:
            out["server_model"] = model
        if s.memory_summary and isinstance(s.memory_summary.size_gib, (int, float)):
            out["memory_gib"] = s.memory_summary.size_gib
        ps = s.json.get("ProcessorSummary") or {}
        model = ps.get("Model") or _first_processor(s)
        if ps.get("Count") or model:
            out["processors"] = f"{_text(ps.get('Count', '?'))} x {_text(model) or 'model not given'}"
        fw = {"bios": _text(s.bios_version)} if s.bios_version else {}
        out["firmware_versions"] = fw
        return out
    out, fault = _asked(bmc, "reading the system", facts)
    if fault:
        return {"server_facts_error": fault}
    out["firmware_versions"].update(_inventory(bmc))
    return out


def _asked(bmc, what: str, fn):
    """(bmc.call(what, fn), None), or (None, the fault's line) for what the run can go without; a
    refused login is no such fault (BmcAuthError: the run stops)."""
    try:
        return bmc.call(what, fn), None
    except BmcAuthError:
        raise
    except RigError as e:
        return None, str(e)


def _first_processor(s) -> str | None:
    """The model of the system's first processor, when its summary does not say."""
    try:
        members = s.processors.get_members() if s.processors else []
    except Exception:       # a Processors link the BMC does not serve: the facts go without it
        return None
    return members[0].model if members else None


def _inventory(bmc) -> dict:
    """Firmware versions from the update service's FirmwareInventory (name -> version), bounded."""
    def inv(s):
        us = bmc._root.get_update_service()
        items = {}
        for item in us.firmware_inventory.get_members()[:INVENTORY]:
            if item.version:
                items[_text(item.name or item.identity, 80)] = _text(item.version)
        return items
    try:
        return bmc.call("reading the firmware inventory", inv)
    except RigError as e:
        if isinstance(e, BmcAuthError):
            raise
        return {}


def _services(bmc, s) -> list[str]:
    link = (s.json.get("LogServices") or {}).get("@odata.id")
    if not link:
        return []
    return [m["@odata.id"] for m in bmc.raw(link).get("Members", []) if "@odata.id" in m]


def log_text(bmc) -> str:
    """Every log service of the system: its entries, newest last, as lines of text."""
    def read(s):
        lines = []
        for svc in _services(bmc, s):
            body = bmc.raw(svc)
            st = body.get("Status")
            state = st.get("State", "") if isinstance(st, dict) else ""
            lines.append(f"== {_text(svc)} ({_text(body.get('Name', ''))}, {_text(state)})")
            link = (body.get("Entries") or {}).get("@odata.id")
            entries = bmc.raw(link).get("Members", []) if link else []
            for e in entries[-LOG_ENTRIES:]:
                lines.append(" | ".join(_text(e.get(k, ""), 1000) for k in ("Created", "Severity", "EntryType",
                                                                             "Message")))
            lines.append(f"({len(entries)} entries)")
        return lines
    lines, fault = _asked(bmc, "reading the log services", read)
    if fault:
        return f"log services not read: {fault}\n"
    return "\n".join(lines) + "\n" if lines else "the system lists no log services\n"


def clear_logs(bmc) -> str | None:
    """LogService.ClearLog on every log service that offers it (best effort). An account the BMC
    does not let clear them (401/403 on the action: Operator on most BMCs) is no lost session:
    the logs stay, and the line returned says so (the run's facts keep it)."""
    import sushy.exceptions as sx
    refused = []

    def clear(s):
        for svc in _services(bmc, s):
            act = (bmc.raw(svc).get("Actions") or {}).get("#LogService.ClearLog", {}).get("target")
            if act:
                try:
                    bmc._conn.post(act, data={})
                except sx.AccessError as e:     # the action refused, not the login: the session holds
                    refused.append(f"{svc} (HTTP {e.status_code})")
    try:
        bmc.call("clearing the log services", clear)
    except RigError as e:
        if isinstance(e, BmcAuthError):
            raise
    if not refused:
        return None
    said = (f"not cleared: the BMC refused LogService.ClearLog to user {bmc.cfg.user!r} on {', '.join(refused)}; "
            "the account lacks ConfigureManager (set bmc.clear_log = false)")
    bmc._log(f"log clearing {said}")
    return said

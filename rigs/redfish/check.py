"""`krig rig check` of a Redfish BMC (rigs/check.py): its TLS certificate against the pin or the
CAs, the login, the system (a multi-system BMC's members listed), the reset types and boot
targets krig will ask for, the account's privileges, the power state.

The privileges are read from the AccountService (the account's role, its AssignedPrivileges:
ConfigureComponents for power, the boot override and the NMI, ConfigureManager for
LogService.ClearLog, as the Redfish privilege registry maps them). A BMC that does not list them
is asked a ComputerSystem.Reset with a ResetType no BMC has: refused as a bad request (or
ignored) by one that lets the account reset, 403 by one that does not; nothing changes either
way. Nothing is powered, no boot override set, no log cleared.
"""
import socket
import ssl

from krig.errors import RigError
from rigs.check import bad, note, ok, password_field
from rigs.ipmi.bmc import BmcAuthError
from rigs.redfish.bmc import RESETS, fingerprint_of, power_of
from rigs.redfish.origin import BmcRefused
from rigs.redfish.spec import colons

NO_SUCH_RESET = "KrigCheckNoSuchResetType"
MEMBERS = 100               # accounts read from an AccountService
POWER_PRIV, LOG_PRIV = "ConfigureComponents", "ConfigureManager"


def pin_line(fp_hex: str) -> str:
    """The rig file's line that pins a certificate, ready to paste under [bmc]."""
    return f'fingerprint = "{colons(fp_hex)}"'


def tls_item(cfg):
    """(the item, whether the login can be tried)."""
    try:
        got = fingerprint_of(cfg.host, cfg.port, timeout=min(cfg.timeout, 15))
    except (OSError, ssl.SSLError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return bad("tls", f"https://{cfg.host}:{cfg.port} does not answer TLS: {why}", "bmc.host or bmc.port"), False
    if cfg.fingerprint is not None:
        if got == cfg.fingerprint:
            return ok("tls", f"the certificate matches the pinned SHA-256 fingerprint {colons(got)}"), True
        return bad("tls", f"the BMC presents a certificate with SHA-256 fingerprint {colons(got)}, not the pinned "
                   f"{colons(cfg.fingerprint)}; if the BMC's own screen or web page shows the new one, paste: "
                   f"{pin_line(got)}", "bmc.fingerprint"), False
    trust = f"ca_file {cfg.ca_file}" if cfg.ca_file else "the system's CAs"
    ctx = ssl.create_default_context(cafile=cfg.ca_file)
    try:
        with socket.create_connection((cfg.host, cfg.port), min(cfg.timeout, 15)) as s, \
                ctx.wrap_socket(s, server_hostname=cfg.host):
            pass
    except ssl.SSLError as e:
        why = getattr(e, "verify_message", None) or e.reason or str(e)
        return bad("tls", f"{trust} do not trust the certificate ({why}); once its SHA-256 fingerprint is checked "
                   f"on the BMC's own screen or web page, pin it: {pin_line(got)}",
                   "bmc.fingerprint or bmc.ca_file"), False
    except OSError as e:
        return bad("tls", f"https://{cfg.host}:{cfg.port}: {e.strerror or e}", "bmc.host or bmc.port"), False
    return ok("tls", f"trusted by {trust}; to pin it instead: {pin_line(got)}"), True


def bmc_items(rig, power: dict):
    """The BMC's items; power["state"] is set to what the BMC said, a Power (None for a PowerState
    that is neither on nor off)."""
    b, c = rig.bmc, rig.spec.bmc
    item, go_on = tls_item(c)
    yield item
    if not go_on:
        yield note("login", "not tried: the TLS check failed")
        return
    try:
        try:
            members = b.call("logging in", lambda s: b._root.get_system_collection().members_identities)
        except BmcRefused as e:         # the BMC's own doing (another origin, too much): not the account's
            yield bad("login", f"{b.where} {str(e).split(f'{b.where} ', 1)[-1]}", "bmc.host or bmc.port")
            return
        except BmcAuthError as e:
            yield bad("login", f"{b.where} {str(e).split(f'{b.where} ', 1)[-1]}",
                      f"bmc.user or {password_field(c)}" + (" or bmc.auth" if c.auth == "session" else ""))
            return
        except RigError as e:
            text = str(e).split(f"{b.where}: ", 1)[-1]
            if "system" not in text:
                yield bad("login", f"{b.where}: {text}", "bmc.host or bmc.port")
                return
            yield ok("login", f"user {c.user!r} ({c.auth})")
            yield bad("system", text, "bmc.system")
            return
        names = [m.rstrip("/").rsplit("/", 1)[-1] for m in members]
        yield ok("login", f"user {c.user!r} ({'session' if c.auth == 'session' else 'session or basic'}): "
                 f"{b.mc_info()}")
        name = f" ({b._system.name})" if b._system.name else ""
        yield ok("system", f"{b._system.identity}{name}, the BMC lists: {', '.join(names)}")
        yield from _actions(rig)
        yield from privilege_items(rig)
        state = b.call("reading the power state", lambda s: s.power_state.value if s.power_state else "?")
        power["state"] = power_of(state)
        yield ok("power", f"{state} (a check changes nothing)")
    except RigError as e:
        yield bad("bmc", str(e).split(": ", 1)[-1], "bmc.timeout or bmc.retries")
    finally:
        b.close()


def _actions(rig):
    """The reset types krig asks (power on and off, the NMI) and the boot target it sets."""
    b, c = rig.bmc, rig.spec.bmc
    allowed = b.reset_types()
    missing = [f"power {a} ({' or '.join(RESETS[a])})" for a in ("on", "off") if not set(RESETS[a]) & set(allowed)]
    if missing:
        yield bad("reset types", f"the system offers no ResetType for {', '.join(missing)}; it offers "
                  f"{', '.join(allowed) or 'none'}", "bmc.system")
    elif "Nmi" not in allowed:
        yield note("reset types", f"{', '.join(allowed)}: no Nmi, so a hung kernel is power cycled without its "
                   "stacks")
    else:
        yield ok("reset types", ", ".join(allowed))
    if c.boot_device:
        targets = sorted(v.value for v in b.call("reading the boot targets",
                                                 lambda s: s.get_allowed_system_boot_source_values()))
        if c.boot_device not in targets:
            yield bad("boot target", f"the system does not offer {c.boot_device}; it offers {', '.join(targets)}",
                      "bmc.boot_device")
        else:
            yield ok("boot target", f"{c.boot_device} offered (one-time override before each power on)")


def privilege_items(rig):
    """The account's privileges against power/boot override/NMI and log clearing."""
    c = rig.spec.bmc
    privs, role = role_privileges(rig)
    if privs is None:
        yield _try_reset(rig)
        if c.clear_sel:
            yield note("log clearing", "the BMC does not list the account's privileges; LogService.ClearLog needs "
                       f"{LOG_PRIV} (set bmc.clear_log = false for an Operator account)")
        return
    if POWER_PRIV not in privs:
        yield bad("privileges", f"role {role} lacks {POWER_PRIV}: power, the boot override and the NMI are refused",
                  "bmc.user (an account of a role with ConfigureComponents, e.g. Operator)")
    else:
        yield ok("privileges", f"role {role}: {', '.join(sorted(privs))}")
    if c.clear_sel and LOG_PRIV not in privs:
        yield bad("log clearing", f"role {role} lacks {LOG_PRIV}: LogService.ClearLog is refused", "bmc.clear_log = false")
    elif c.clear_sel:
        yield ok("log clearing", f"role {role} has {LOG_PRIV}")


def role_privileges(rig) -> tuple[set | None, str]:
    """(the privileges of the account's role, the role), or (None, "") when the BMC does not say."""
    b, user = rig.bmc, rig.spec.bmc.user

    def read(_s):
        svc = (b._root.json.get("AccountService") or {}).get("@odata.id")
        if not svc:
            return None, ""
        body = b.raw(svc)
        link = (body.get("Accounts") or {}).get("@odata.id")
        for m in (b.raw(link).get("Members", []) if link else [])[:MEMBERS]:
            acct = b.raw(m["@odata.id"])
            if acct.get("UserName") != user:
                continue
            role = acct.get("RoleId") or ""
            rl = ((acct.get("Links") or {}).get("Role") or {}).get("@odata.id") or \
                f"{(body.get('Roles') or {}).get('@odata.id', svc + '/Roles')}/{role}"
            r = b.raw(rl)
            return set(r.get("AssignedPrivileges") or []) | set(r.get("OemPrivileges") or []), role
        return None, ""
    try:
        return b.call("reading the account's role", read)
    except BmcAuthError:
        raise
    except (RigError, KeyError, TypeError, ValueError):
        return None, ""


def _try_reset(rig):
    """A Reset with a ResetType that does not exist: 403 says the account may not reset."""
    import sushy.exceptions as sx
    b = rig.bmc
    try:
        target = b.call("reading the reset action", lambda s: s._get_reset_action_element().target_uri)
        b._conn.post(target, data={"ResetType": NO_SUCH_RESET})
        said = "accepted and ignored"
    except sx.AccessError as e:
        return bad("privileges", f"a ComputerSystem.Reset was refused (HTTP {e.status_code}): the account may not "
                   "power the server", "bmc.user (an account of a role with ConfigureComponents, e.g. Operator)")
    except sx.HTTPError as e:
        said = f"refused as HTTP {e.status_code}, not 403"
    except RigError as e:
        return note("privileges", f"not known: {e}")
    return ok("privileges", f"the BMC lists no role; a Reset with a ResetType that does not exist was {said}: "
              "the account may reset (nothing changed)")

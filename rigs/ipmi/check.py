"""`krig rig check` of an IPMI BMC (rigs/check.py): the login at the rig's privilege level, the
account's privilege against what krig asks of it, Serial over LAN, the power state. Only
reading commands are sent (`chassis power status`, `mc info`, `channel getaccess`, `sol info`):
nothing is powered, no boot device set, no SEL cleared."""
import re

from krig.errors import RigError
from rigs.check import bad, note, ok, password_field
from rigs.ipmi.bmc import BmcAuthError

# what krig asks of the BMC and the privilege IPMI needs for it (IPMI 2.0, Appendix G)
NEEDS = "power, boot device, NMI and SEL clearing need OPERATOR"
RANK = {"CALLBACK": 1, "USER": 2, "OPERATOR": 3, "ADMINISTRATOR": 4, "OEM": 5}
# ipmitool's classification of a refused login (rigs/ipmi/bmc.py _AUTH) -> the field to change
AUTH_FIELDS = {"unknown user": "bmc.user",
               "cipher suite not supported by the BMC": "bmc.cipher_suite"}


def bmc_items(rig, power: dict):
    """The BMC's items; power["state"] is set to what the BMC said (a Power)."""
    b, c = rig.bmc, rig.spec.bmc
    try:
        power["state"] = b.power_status()
    except BmcAuthError as e:
        why = str(e).rsplit(": ", 1)[-1].split(" (")[0]
        field = password_field(c) if why == "wrong password" else AUTH_FIELDS.get(why, "bmc.user")
        yield bad("login", f"{b.where} refused user {c.user!r}: {why}", field)
        return
    except RigError as e:
        privilege = "lacks the privilege" in str(e)
        yield bad("login", str(e).split(": ", 1)[-1], "bmc.privilege" if privilege else "bmc.host or bmc.port")
        return
    yield ok("login", f"{b.where} user {c.user!r} at {c.privilege}, cipher suite {c.cipher_suite}: {b.mc_info()}")
    yield privilege_item(rig)
    if c.clear_sel:
        yield note("log clearing", "not tried (a check clears nothing): Clear SEL is OPERATOR in IPMI's table, "
                   "some BMCs keep it to ADMINISTRATOR; a refusal is a line in the run's facts (log_clearing)")
    if rig.spec.console == "sol":
        yield sol_item(rig)
    yield ok("power", f"{power['state']} (a check changes nothing)")


def privilege_item(rig):
    """The session's privilege (bmc.privilege) and the account's channel limit against OPERATOR."""
    c = rig.spec.bmc
    if RANK[c.privilege] < RANK["OPERATOR"]:
        return bad("privileges", f"the session asks {c.privilege}; {NEEDS}", "bmc.privilege")
    limit = channel_limit(rig)
    if limit is None:
        return ok("privileges", f"a session at {c.privilege} was granted ({NEEDS}); the account's channel "
                  "limit is not readable by it")
    if RANK.get(limit, 0) < RANK["OPERATOR"]:
        return bad("privileges", f"user {c.user!r} is limited to {limit} on the LAN channel; {NEEDS} "
                   "(raise the user's privilege on the BMC)", "bmc.user")
    return ok("privileges", f"user {c.user!r}: channel limit {limit}, session {c.privilege} ({NEEDS})")


def channel_limit(rig) -> str | None:
    """The account's privilege limit on the LAN channel (`channel getaccess`), None when not read."""
    try:
        out = rig.bmc.run("channel", "getaccess", "1", retries=1, check=False)
    except RigError:
        return None
    for block in re.split(r"\n\s*\n", out):
        f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines()) if _}
        if f.get("User Name") == rig.spec.bmc.user:
            level = f.get("Privilege Level", "").upper()
            return level if level in RANK else None
    return None


def sol_item(rig):
    """Serial over LAN enabled on the BMC (`sol info`)."""
    try:
        out = rig.bmc.run("sol", "info", retries=1, check=False)
    except RigError as e:
        return bad("console", f"sol info: {str(e).split(': ', 1)[-1]}", "console")
    f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if _}
    if not f:
        return note("console", "sol: the BMC says nothing of Serial over LAN (`sol info`); the run's console "
                    "may stay empty")
    if f.get("Enabled", "true").lower() != "true":
        return bad("console", "Serial over LAN is disabled on the BMC (`ipmitool sol set enabled true`), or use "
                   "a network console", "console")
    rate = f.get("Volatile Bit Rate (kbps)", "")
    return ok("console", "sol: enabled" + (f", {rate} kbps" if re.fullmatch(r"[0-9.]+", rate) else ""))


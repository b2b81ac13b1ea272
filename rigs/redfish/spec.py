"""Rig files of Redfish servers (driver = "redfish"): validation on load.

The file is an IPMI rig file (rigs/ipmi/spec.py: the SSH, kexec and lab tables, the timeouts)
whose [bmc] table names a Redfish service instead (BMC below) and whose `console` is a
network serial console (rfc2217:// or telnet://, or unix:/PATH of a console server on this
host: rigs/netconsole.py): Redfish has no Serial over LAN. TLS is always verified: against the system's CAs, a CA file (`ca_file`), or a
pinned SHA-256 certificate fingerprint (`fingerprint`); there is no way to turn it off. The
password comes from the environment or a 0600 file like the IPMI one, returned apart from the
spec (never in describe(), the manifest, a log or an error). The checked file is a RedfishSpec
(TOP_REDFISH as a frozen record, its bmc a RedfishSpecBmc).
"""
import dataclasses
import re
from typing import TYPE_CHECKING

from krig.errors import UsageError
from krig.schema import OMIT, Field, Record, check, record
from rigs.ipmi.spec import TOP, a_file, check_ssh, login, password_of
from rigs.netconsole import net_console_ok

# BootSourceOverrideTarget values of the Redfish schema (ComputerSystem.v1_x BootSource)
BOOT_TARGETS = ("Pxe", "Floppy", "Cd", "Usb", "Hdd", "BiosSetup", "Utilities", "Diags", "UefiShell",
                "UefiTarget", "SDCard", "UefiHttp", "RemoteDrive", "UefiBootNext")
# 64 hex digits, colons allowed; a `sha256:` prefix, or openssl's whole line pasted
# (`openssl x509 -noout -fingerprint -sha256` prints `sha256 Fingerprint=AB:CD:...`)
FINGERPRINT_RE = re.compile(r"^(sha256:|sha256 fingerprint=)?([0-9A-Fa-f]{2}(:?[0-9A-Fa-f]{2}){31})$", re.I)


def _fingerprint(value: str, field: str) -> str:
    """A SHA-256 certificate fingerprint: 64 hex digits, colons allowed, an optional sha256:
    prefix, or the line `openssl x509 -noout -fingerprint -sha256` prints (`sha256
    Fingerprint=AB:CD:...`) as it is; kept as lowercase hex."""
    m = FINGERPRINT_RE.match(value.strip()) if isinstance(value, str) else None
    if not m:
        raise UsageError(f"{field}: {value!r} is not a SHA-256 fingerprint (64 hex digits, colons allowed, or "
                         f"the line `openssl x509 -noout -fingerprint -sha256` prints; `krig rig check` prints it)")
    return m.group(2).replace(":", "").lower()


def colons(fp_hex: str) -> str:
    """A fingerprint kept as hex in the form the rig file and openssl show it: AB:CD:..."""
    return ":".join(fp_hex[i:i + 2] for i in range(0, len(fp_hex), 2)).upper()


BMC = (
    *login(443),
    Field("ca_file", str, OMIT, convert=a_file),
    Field("fingerprint", str, OMIT, convert=_fingerprint),
    Field("system", str, "", pattern=r"[A-Za-z0-9._:-]*", says="{v!r} is not a Systems member id "
          "(the last part of /redfish/v1/Systems/<id>)"),
    Field("auth", str, "session", choices=("session", "auto")),
    Field("timeout", int, 30, min=1, max=300, says="must be 1-300 s, got {v}"),
    Field("retries", int, 3, min=0, max=10, says="must be 0-10, got {v}"),
    Field("boot_device", str, "", choices=("", *BOOT_TARGETS),
          says="{v!r} is not a Redfish BootSourceOverrideTarget: " + ", ".join(BOOT_TARGETS)),
    # the server's logs cleared after sel-before.txt: off by default, as LogService.ClearLog needs
    # ConfigureManager, which an Operator account lacks on most BMCs
    Field("clear_log", bool, False, name="clear_sel"),
)


TOP_REDFISH = tuple(
    Field("driver", str, "redfish", choices=("redfish",)) if f.key == "driver" else
    Field("bmc", dict, table=BMC) if f.key == "bmc" else
    Field("console", str, test=net_console_ok, says="{v!r}: use rfc2217://HOST:PORT, telnet://HOST:PORT or "
          "raw://HOST:PORT (a network serial console such as ser2net: Redfish has no Serial over LAN), or "
          "unix:/PATH (a console server's Unix socket on this host)") if f.key == "console" else f
    for f in TOP)


if TYPE_CHECKING:       # the records' fields as mypy sees them: record() makes the classes at run time
    @dataclasses.dataclass(frozen=True)
    class RedfishSpecBmc(Record):
        host: str
        port: int
        user: str
        password_env: str | None
        password_file: str | None
        ca_file: str | None
        fingerprint: str | None
        system: str
        auth: str
        timeout: int
        retries: int
        boot_device: str
        clear_sel: bool

    @dataclasses.dataclass(frozen=True)
    class RedfishSpec(Record):
        bmc: RedfishSpecBmc     # (its other fields are rigs/ipmi/spec.py's TOP, a Record there)

        @classmethod
        def of(cls, table: dict) -> "RedfishSpec": ...
else:
    RedfishSpec = record("RedfishSpec", TOP_REDFISH)


def validate_spec(name: str, spec: dict, where: str | None = None) -> tuple[Record, str]:
    """The rig file (TOP_REDFISH) checked: (the checked spec, BMC password)."""
    where = where or f"rigs/{name}.toml"
    out = RedfishSpec.of(check(spec, TOP_REDFISH, where))
    b, bw = out.bmc, f"{where}.bmc"
    if (b.password_env is None) == (b.password_file is None):
        raise UsageError(f"{bw}: set exactly one of password_env (an environment variable's name) "
                         "or password_file (a file of mode 0600)")
    if b.ca_file is not None and b.fingerprint is not None:
        raise UsageError(f"{bw}: set at most one of ca_file (the CA that signed the BMC's certificate) "
                         "or fingerprint (the BMC certificate's SHA-256 fingerprint, pinned)")
    password = password_of(b, bw)
    return check_ssh(out, spec, where), password

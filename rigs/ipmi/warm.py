"""A lab server between two runs of one workflow (a group, a validation): kept powered and held,
and how the next run boots it.

A real server spends minutes in its firmware (POST) per power on; a run of `boot = "kexec"`
needs none of it when the kernel it ran is healthy. After a run whose results are pulled,
park() checks that kernel over SSH: it answers with the boot_id it booted with, its dmesg shows
no oops, panic or BUG, it is not tainted by a warning, an oops, a lockup, a bad page or a
machine check, and it can kexec (/sys/kernel/kexec_loaded: CONFIG_KEXEC). Then the next run
kexecs straight from it into its own kernel ("warm"). A hang, a crash, a failed pull, an error,
an unhealthy kernel, or `cold_boot = true` in the rig file make the next boot a power cycle
through the firmware and the installed system ("cold"); after a hang the rig already power
cycled back into the installed system, so the next run kexecs from that one. The new kernel
is a fresh kernel either way: the work directory and the scratch disk are made again after
each boot, as for any run.

What each run's boot was is its fact `booted_by` (manifest.json); what a run left for the
next, `next_boot`. The last run's server is powered off by the workflow (workflows/session.py).
"""
import subprocess
from typing import NamedTuple

from krig.errors import KrigError
from krig.verdict import first_crash
from rigs.ipmi.ssh import SshLost
from rigs.ipmi.state import BootPlan, NextBoot, Power, ServerState

# /proc/sys/kernel/tainted bits of a kernel not to kexec from: machine check (M), bad page (B),
# oops (D), warning (W), soft lockup (L)
UNHEALTHY_TAINT = {4: "M", 5: "B", 7: "D", 9: "W", 14: "L"}
COLD_BOOT = "the rig file asks for cold boots (cold_boot = true)"
HEALTH = ("uname -r; cat /proc/sys/kernel/random/boot_id; cat /proc/sys/kernel/tainted; "
          "[ -e /sys/kernel/kexec_loaded ] && echo kexec=yes || echo kexec=no; dmesg 2>/dev/null | tail -n +{since}")


def health(server) -> tuple[str | None, str | None]:
    """(release, None) for a kernel the next run may kexec from, else (None, why not)."""
    if server.state is not ServerState.UP:
        return None, f"the server is {server.state.value}"
    if server.results is not None and not server.salvaged:
        return None, "a failed pull (the results were not brought back)"
    try:
        rc, out, _ = server.ssh.run(HEALTH.format(since=server.at_boot.get("dmesg_lines", 0) + 1), timeout=60)
    except (SshLost, subprocess.TimeoutExpired, KrigError):
        return None, "the kernel did not answer SSH after the run"
    lines = out.decode(errors="replace").splitlines()
    if rc != 0 or len(lines) < 4:
        return None, f"the kernel's health check failed (exit {rc})"
    release, boot_id, tainted, kexec = (ln.strip() for ln in lines[:4])
    if boot_id != server.boot_id:
        return None, f"the server rebooted during the run (boot_id {boot_id})"
    crash = first_crash("\n".join(lines[4:]))
    if crash:
        return None, f"{release}'s dmesg shows: {crash[:200]}"
    new = int(tainted) & ~server.at_boot.get("tainted", 0) if tainted.isdigit() else 0
    bad = "".join(f for bit, f in UNHEALTHY_TAINT.items() if new >> bit & 1)
    if bad:
        return None, f"{release} is tainted ({bad}: {tainted})"
    if kexec != "kexec=yes":
        return None, f"{release} cannot kexec (built without CONFIG_KEXEC)"
    return release, None


def next_boot(server, cold: str | None) -> BootPlan:
    """How the next run boots: WARM (kexec from this kernel), INSTALLED (kexec from the installed
    system a hang's power cycle brought back) or CYCLE (through the firmware), and why."""
    why = cold or (COLD_BOOT if server.spec.cold_boot else None)
    recovered = server.hang is not None and server.hang.recovered
    if why and recovered and not server.spec.cold_boot and server.state is ServerState.UP:
        return BootPlan(NextBoot.INSTALLED, why)
    if why is None:
        release, why = health(server)
        if release:
            return BootPlan(NextBoot.WARM, release)
    return BootPlan(NextBoot.CYCLE, str(why))


def park(server, cold: str | None) -> bool:
    """Keep the server powered and held for the next run of the workflow; False when it is not
    a server of this process or does not boot with kexec (the run powers it off as ever)."""
    if not server.holding or server.bmc.failed or server.spec.boot != "kexec":
        return False
    server.plan_next(next_boot(server, cold))
    server.end_run(off=False)
    return True


class Booted(NamedTuple):
    """How begin brought the server up: the run's booted_by, and whether the system it kexecs
    from is the previous run's kernel (warm) rather than the installed system."""
    how: str
    warm: bool = False


def begin(server, power, timeout: float) -> Booted:
    """Bring the server to a running system to kexec from, as the previous run left it
    (next_boot)."""
    plan = server.take_plan()
    before = "into its installed system (before kexec)"
    old = server.boot_id
    crashed = server.state is ServerState.CRASHED     # nothing runs on it but its power off (rigs/ipmi/state.py)
    if server.bmc.power_status() is Power.OFF:
        if crashed:
            server.become(ServerState.OFF)
        power.on()
        server.wait_up(timeout, before)
        return Booted(plan.powered_on() if plan is not None else "cold: power on")
    if plan is not None and plan.how is NextBoot.CYCLE:
        if crashed:                 # the cycle as its two halves: a hard power off, then on
            server.hard_off()
            power.on()
        else:
            server.power_cycle()
        server.wait_up(timeout, "after the power cycle (before kexec)", old_boot_id=old)
        return Booted(plan.said())
    bid = server.ssh.probe(server.spec.ssh.connect_timeout)
    if bid is None or (plan is not None and bid != old):
        server.power_cycle()
        server.wait_up(timeout, before, old_boot_id=old)
        what = "the previous run's system" if plan is not None else "the server (found on)"
        return Booted(f"cold: power cycle: {what} did not answer SSH")
    server.answered(bid)
    if plan is None:
        return Booted("found on: kexec from its running system")
    return Booted(plan.said(), plan.how is NextBoot.WARM)


# What a kexec from another kernel under test takes from the installed system, read there before
# the workflow's first kexec: its command line, and the ACPI root pointer (RSDP) from its EFI
# system table. A kernel under test without EFI (tiny-6.1) knows the RSDP only from the boot
# parameters the installed system's kexec gave it, and kexec-tools finds it, for the kernel it
# loads, only in the running kernel's EFI system table; a kernel booted from UEFI firmware has
# no other way to its ACPI tables. `acpi_rsdp=` on the next kernel's command line carries it over.
INSTALLED = ("echo \"running_cmdline=$(cat /proc/cmdline)\"; echo \"acpi_rsdp=$( (sed -n 's/^ACPI20=//p' "
             "/sys/firmware/efi/systab; sed -n 's/^ACPI=//p' /sys/firmware/efi/systab) 2>/dev/null | head -n 1)\"")


def installed_cmdline(running: str) -> str:
    """The installed system's command line as a kexec may reuse it (no BOOT_IMAGE= of its loader)."""
    return " ".join(w for w in running.split() if not w.startswith("BOOT_IMAGE="))


def installed_of(text: str) -> tuple[str, str | None]:
    """INSTALLED's lines (in text) -> (the command line a kexec may reuse, the ACPI root pointer
    or None)."""
    kv = dict(ln.split("=", 1) for ln in text.splitlines() if ln.startswith(("running_cmdline=", "acpi_rsdp=")))
    rsdp = kv.get("acpi_rsdp", "").strip()
    return installed_cmdline(kv.get("running_cmdline", "")), rsdp if rsdp.lower().startswith("0x") else None


def keep_installed(server, text: str, warm: bool) -> None:
    """INSTALLED's lines (in text) kept when read in the installed system, not a kernel under test."""
    if warm and server.installed_cmdline is not None:
        return
    server.keep_installed(*installed_of(text))


def warm_words(server) -> list:
    """The next kernel's command line words a kexec from a kernel under test adds."""
    return [f"acpi_rsdp={server.acpi_rsdp}"] if server.acpi_rsdp else []

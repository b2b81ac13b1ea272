"""What drivers a lab server uses, read from its installed system over the rig's SSH, for a kernel
built like it (`--kernel KERNEL,drivers=RIG`: kernels/drivers.py reads this text).

SCRIPT runs as every command krig runs on a server (rigs/ipmi/ssh.py: as root, through
`sudo -n` for a user other than root), reads only, and prints `krig-drivers 1`, the running
release, its loaded modules (/proc/modules), the drivers its devices are bound to
(/sys/bus/*/devices/*/driver: bus, device, driver, the driver's module), the drivers its network
cards and disks hang off (`== boot`: for each /sys/class/net/*/device and /sys/block/*/device,
every ancestor of the device's real sysfs path up to /sys/devices that has a driver: role,
interface or disk, bus, device, driver, module; at most 16 levels) and its running config
(/proc/config.gz, or /boot/config-$(uname -r)) when it has one. The server is held as a run
holds it (its lock, or the lab coordinator's reservation) while it is read; a server that is
off is powered on into its installed system and left on (the run that follows boots from
there); nothing is written on it.
"""
import pathlib
import subprocess

from krig.errors import RigError
from krig.paths import cache_dir
from krig.safeio import printable
from rigs.ipmi.ssh import ERR_CAP, SshLost, remote_command
from rigs.protocol import DriversProtocol
from rigs.ipmi.state import Power

SCRIPT = """echo 'krig-drivers 1'
echo "release $(uname -r)"
echo '== modules'
cat /proc/modules 2>/dev/null
echo '== bound'
for l in /sys/bus/*/devices/*/driver; do
  cd -P "$l" 2>/dev/null || continue
  drv=${PWD##*/}; mod=
  cd -P module 2>/dev/null && mod=${PWD##*/}
  dev=${l%/driver}; bus=${dev#/sys/bus/}
  printf '%s %s %s %s\\n' "${bus%%/*}" "${dev##*/}" "$drv" "$mod"
done | tr -c 'A-Za-z0-9_.:+@ \\n-' '_'
echo '== boot'
for l in /sys/class/net/*/device /sys/block/*/device; do
  cd -P "$l" 2>/dev/null || continue
  case $l in /sys/class/net/*) role=net ;; *) role=block ;; esac
  name=${l%/device}; name=${name##*/}; p=$PWD; n=0
  while [ "${p#/sys/devices/}" != "$p" ] && [ $n -lt 16 ]; do
    if cd -P "$p/driver" 2>/dev/null; then
      drv=${PWD##*/}; mod=; bus=none
      cd -P module 2>/dev/null && mod=${PWD##*/}
      cd -P "$p/subsystem" 2>/dev/null && bus=${PWD##*/}
      printf '%s %s %s %s %s %s\\n' "$role" "$name" "$bus" "${p##*/}" "$drv" "$mod"
    fi
    p=${p%/*}; n=$((n + 1))
  done
done | tr -c 'A-Za-z0-9_.:+@ \\n-' '_'
cd /
echo '== config'
if [ -r /proc/config.gz ]; then zcat /proc/config.gz
elif [ -r "/boot/config-$(uname -r)" ]; then cat "/boot/config-$(uname -r)"; fi
"""
READ_TIMEOUT = 300          # no fork a device (cd -P, not readlink): seconds even under TCG
MAX_BYTES = 4 << 20         # what is read of it (kernels/drivers.py reads at most as much)


def kept(name: str) -> pathlib.Path:
    """Where the last reading of rig `name`'s server is kept ($KRIG_CACHE/servers/<rig>.drivers)."""
    return cache_dir("servers") / f"{name}.drivers"


class ServerDrivers(DriversProtocol):
    """The drivers of a lab rig's server behind a BMC (rigs/ipmi/rig.py IpmiRig, and the Redfish
    rig built on it): its power asked of the BMC, its installed system read over SSH (read)."""

    def __init__(self, rig):
        self.rig = rig

    def is_off(self) -> bool:
        return self.rig.bmc.power_status() is Power.OFF

    def read(self, log) -> str:
        return read(self.rig, log)

    def close(self) -> None:
        self.rig.close()


def read(rig, log=print) -> str:
    """The inventory's text from the server of a lab rig behind a BMC (ServerDrivers)."""
    s = rig.server
    s.take_lock()
    try:
        s.make_local_workdir()
        if s.bmc.power_status() is Power.OFF:
            log(f"krig: powering {rig.name} on into its installed system to read its drivers")
            s.boot_override()           # into the installed system (bmc.boot_device)
            s.bmc.power("on")           # not s.power_on(): left on for the run that follows
            s.wait_up(s.spec.boot_timeout, "into its installed system (to read its drivers)")
        elif s.ssh.probe(s.spec.ssh.connect_timeout) is None:
            raise RigError(f"rig {rig.name}: the server is on but does not answer SSH; its drivers cannot be "
                           "read (power it off, or give them as files: drivers=DIR)")
        return read_running(s)
    finally:
        rig.close()


def inventory(ssh, name: str) -> str:
    """Run SCRIPT over ssh (rigs/ipmi/ssh.py Ssh): its text, read as it comes and at most
    MAX_BYTES (more: krig stops reading, ends ssh and says so in one line, a RigError)."""
    try:
        rc, out, err = ssh.run(remote_command(["sh", "-c", SCRIPT], None), timeout=READ_TIMEOUT,
                               caps=(MAX_BYTES, ERR_CAP), what="reading the server's drivers")
    except subprocess.TimeoutExpired:
        raise RigError(f"rig {name}: reading the server's drivers failed: no answer within "
                       f"{READ_TIMEOUT}s") from None
    except SshLost as e:
        raise RigError(f"rig {name}: reading the server's drivers failed: {e or 'SSH lost'}") from None
    if rc != 0:
        why = (err.decode(errors="replace").strip().splitlines() or [f"exit {rc}"])[-1]
        raise RigError(f"rig {name}: reading the server's drivers failed: {printable(why, 200)}")
    return out.decode(errors="replace")


def read_running(s) -> str:
    """The inventory's text from a server up and answering SSH (s: an IpmiServer)."""
    return inventory(s.ssh, s.name)

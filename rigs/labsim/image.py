"""The simulated lab server's disk: Debian 12 built with mmdebstrap, booted by UEFI firmware + GRUB.

One image, built once and cached under ~/.cache/krig/labsim/<key>/ (the key
hashes this file's code, so a change to it builds a new one; this text is not hashed):
  disk.qcow2      GPT: an EFI system partition (FAT, GRUB as \\EFI\\BOOT\\BOOTX64.EFI
                  looking for the root by UUID and reading its /boot/grub/grub.cfg)
                  and an ext4 root with Debian's kernel + initramfs-tools initrd,
                  systemd, systemd-networkd (DHCP), openssh-server and the
                  reproducers' tools (PACKAGES)
  client_key      the SSH key of the non-root user `krig` (sudo without a password)
  host_key.pub    the image's own SSH host key (made by openssh-server's install)
  image.json      release of the installed kernel, root UUID, build seconds
Each server gets its own qcow2 overlay on disk.qcow2 and its own copy of the
firmware's variable store, so what the server writes survives power cycles.

Needs root (mmdebstrap's root mode, mkfs.ext4 -d with the right owners) and
Debian's packages: mmdebstrap, ovmf, grub-efi-amd64-bin, mtools, dosfstools.

    python rigs/labsim/image.py         build it (or print where the cached one is);
                                        `krig lab sim up` and `make test-prereqs` do too
"""
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from krig.paths import cache_dir  # noqa: E402

SUITE = "bookworm"
# What a lab server needs for krig (docs/lab-server.md), plus what boots it.
PACKAGES = ["systemd-sysv", "udev", "openssh-server", "sudo", "kexec-tools", "xfsprogs", "trace-cmd", "fio",
            "time", "linux-image-amd64", "initramfs-tools", "iproute2", "procps", "kmod", "mawk", "e2fsprogs"]
INITRD_MODULES = ["virtio_pci", "virtio_blk", "nvme", "ext4", "crc32c_generic"]
USER = "krig"
ROOT_SIZE = "3G"
ESP_MIB = 64
OVMF_CODE = pathlib.Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = pathlib.Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
# QEMU's cache of translated code for the server (MiB; QEMU's own default is 1 GiB, never
# filled). A kexec copies the next kernel into pages that earlier programs ran from; while QEMU
# still holds their translations, each store there is slow (docs/measurements.md: 40 s to
# 7 min a warm boot). A small cache is flushed often, so few stale translations are left.
TB_CACHE_MIB = 64
# Not on a test server: timers that start apt or man-db under TCG, waiting for the network;
# gettys on VGA consoles it has none of (the serial one stays); Debian's kexec-load (krig loads
# the kernel itself); e2scrub's reaper and module loads for what it never mounts. Each boot
# (every run boots this system at least once) has one vCPU of TCG: what starts beside sshd
# delays it.
MASKED = ("apt-daily.timer", "apt-daily-upgrade.timer", "man-db.timer", "e2scrub_all.timer", "fstrim.timer",
          "dpkg-db-backup.timer", "systemd-networkd-wait-online.service", "getty@tty1.service",
          "getty-static.service", "kexec-load.service", "e2scrub_reap.service", "modprobe@dm_mod.service",
          "modprobe@efi_pstore.service", "modprobe@fuse.service", "modprobe@loop.service")
# The server's own kernel command line. panic=0: a panicked server stays down until
# krig power cycles it through the BMC, as a real one does with panic=0.
CMDLINE = "ro console=ttyS0,115200 panic=0 loglevel=6 systemd.show_status=1"
NEEDED = {"mmdebstrap": "mmdebstrap", "grub-mkstandalone": "grub-efi-amd64-bin", "mcopy": "mtools",
          "mkfs.fat": "dosfstools", "sfdisk": "fdisk", "qemu-img": "qemu-utils", "mkfs.ext4": "e2fsprogs"}


def missing_tools() -> list[str]:
    out = [f"{t} ({pkg})" for t, pkg in NEEDED.items() if not shutil.which(t)
           and not os.path.exists(f"/usr/sbin/{t}") and not os.path.exists(f"/sbin/{t}")]
    if not (OVMF_CODE.exists() and OVMF_VARS.exists()):
        out.append(f"{OVMF_CODE} (ovmf)")
    if not os.path.exists("/usr/lib/grub/x86_64-efi"):
        out.append("GRUB's x86_64-efi modules (grub-efi-amd64-bin)")
    if os.geteuid() != 0:
        out.append("root (mmdebstrap's root mode)")
    return out


def image_key() -> str:
    code = pathlib.Path(__file__).read_text()
    h = hashlib.sha256(code[code.index('"""', 3) + 3:].encode())       # the code after this docstring
    h.update(SUITE.encode())
    return h.hexdigest()[:16]


def image_dir() -> pathlib.Path:
    return cache_dir("labsim", image_key())


def apt_sources() -> list[str]:
    """The host's own Debian sources (the mirrors this machine is allowed to reach)."""
    cands = [pathlib.Path("/etc/apt/sources.list"), *sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*"))]
    return [str(p) for p in cands if p.suffix in (".list", ".sources") and p.is_file()
            and "debian" in p.read_text() and p.read_text().strip()]


def _run(argv, log, timeout=1800, **kw):
    log.write(f"$ {' '.join(map(str, argv))}\n")
    log.flush()
    p = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed (exit {p.returncode}); see {log.name}")


def _customize(rootdir: pathlib.Path, pubkey: str, root_uuid: str):
    """Everything a lab server has that the packages do not make: the user, sudo, network, grub.cfg."""
    def w(rel, text, mode=0o644):
        p = rootdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(mode)
    subprocess.run(["chroot", str(rootdir), "useradd", "-m", "-s", "/bin/bash", "-G", "sudo", USER],
                   check=True, timeout=60)
    w(f"home/{USER}/.ssh/authorized_keys", pubkey, 0o600)
    uid = (rootdir / "etc/passwd").read_text().split(f"\n{USER}:")[1].split(":")[1]
    for p in (f"home/{USER}/.ssh", f"home/{USER}/.ssh/authorized_keys"):
        os.chown(rootdir / p, int(uid), int(uid))
    (rootdir / f"home/{USER}/.ssh").chmod(0o700)
    w(f"etc/sudoers.d/{USER}", f"{USER} ALL=(ALL) NOPASSWD: ALL\n", 0o440)
    w("etc/hostname", "labsim\n")
    w("etc/hosts", "127.0.0.1 localhost\n127.0.1.1 labsim\n")
    w("etc/fstab", f"UUID={root_uuid} / ext4 errors=remount-ro 0 1\n")
    w("etc/systemd/network/10-wired.network", "[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n")
    w("etc/ssh/sshd_config.d/krig.conf", "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
      "UseDNS no\nPermitRootLogin no\nMaxStartups 50\nMaxSessions 50\n")
    w("etc/modules-load.d/krig.conf", "ipmi_si\nipmi_devintf\n")
    units = rootdir / "etc/systemd/system"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for u in ("systemd-networkd.service",):
        (wants / u).unlink(missing_ok=True)
        (wants / u).symlink_to(f"/lib/systemd/system/{u}")
    for u in MASKED:
        (units / u).unlink(missing_ok=True)
        (units / u).symlink_to("/dev/null")
    kernels = sorted((rootdir / "boot").glob("vmlinuz-*"))
    release = kernels[-1].name[len("vmlinuz-"):]
    w("boot/grub/grub.cfg", f"""set timeout=0
set default=0
menuentry "Debian GNU/Linux, {release}" {{
    search --no-floppy --fs-uuid --set=root {root_uuid}
    linux /boot/vmlinuz-{release} root=UUID={root_uuid} {CMDLINE}
    initrd /boot/initrd.img-{release}
}}
""")
    return release


def build(log=print) -> pathlib.Path:
    """The cached image directory; built first if missing. A second caller at the same time
    (`make test` builds it beside the CI kernels; the labsim tests ask for it) waits for the
    first one's build instead of starting its own."""
    d = image_dir()
    with open(d.with_name(d.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / "image.json").exists():
            _build(d, log)
    return d


def _build(d: pathlib.Path, log) -> None:
    miss = missing_tools()
    if miss:
        raise RuntimeError(f"building the lab server image needs: {', '.join(miss)} (make setup)")
    t0 = time.monotonic()
    work = pathlib.Path(d / "build")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    rootdir = work / "root"
    logf = open(d / "build.log", "w")
    try:
        key = work / "client_key"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "krig-labsim", "-f", str(key)], logf, 60)
        sources = apt_sources()
        if not sources:
            raise RuntimeError("no Debian apt sources on this host (/etc/apt/sources.list*)")
        log(f"labsim: mmdebstrap {SUITE} ({len(PACKAGES)} packages) into {rootdir}")
        hook = ("mkdir -p \"$1/etc/initramfs-tools/conf.d\" && "
                "printf 'MODULES=list\\nCOMPRESS=zstd\\n' > \"$1/etc/initramfs-tools/conf.d/krig.conf\" && "
                f"printf '%s\\n' {' '.join(INITRD_MODULES)} >> \"$1/etc/initramfs-tools/modules\" && "
                "echo 'kexec-tools kexec-tools/load_kexec boolean false' | chroot \"$1\" debconf-set-selections")
        _run(["mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
              "--include=" + ",".join(PACKAGES), "--essential-hook=" + hook,
              "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
              "--dpkgopt=path-exclude=/usr/share/locale/*",
              SUITE, str(rootdir), *sources], logf, 3600)
        root_uuid = str(uuid.uuid4())
        release = _customize(rootdir, (work / "client_key.pub").read_text(), root_uuid)
        shutil.copy(rootdir / "etc/ssh/ssh_host_ed25519_key.pub", work / "host_key.pub")
        shutil.rmtree(rootdir / "var/cache/apt/archives", ignore_errors=True)
        (rootdir / "var/cache/apt/archives/partial").mkdir(parents=True)
        log("labsim: making the disk (GPT: EFI system partition + ext4 root)")
        esp, rootfs, raw = work / "esp.img", work / "root.img", work / "disk.raw"
        _run(["mkfs.ext4", "-q", "-F", "-L", "krig-root", "-U", root_uuid, "-d", str(rootdir), str(rootfs),
              ROOT_SIZE], logf)
        efi = work / "BOOTX64.EFI"
        stub = work / "grub-stub.cfg"
        stub.write_text(f"search --no-floppy --fs-uuid --set=root {root_uuid}\n"
                        "set prefix=($root)/boot/grub\nconfigfile /boot/grub/grub.cfg\n")
        _run(["grub-mkstandalone", "-O", "x86_64-efi", "-o", str(efi),
              "--modules=part_gpt ext2 search_fs_uuid linux normal configfile", "--locales=", "--fonts=",
              "--themes=", f"boot/grub/grub.cfg={stub}"], logf)
        _run(["mkfs.fat", "-C", "-F", "32", "-n", "EFI", str(esp), str(ESP_MIB * 1024)], logf)
        _run(["mmd", "-i", str(esp), "::/EFI", "::/EFI/BOOT"], logf)
        _run(["mcopy", "-i", str(esp), str(efi), "::/EFI/BOOT/BOOTX64.EFI"], logf)
        root_bytes = rootfs.stat().st_size
        total = (1 + ESP_MIB) * (1 << 20) + root_bytes + (1 << 20)
        with open(raw, "wb") as f:
            f.truncate(total)
        esp_start, root_start = 2048, 2048 + ESP_MIB * 2048
        table = (f"label: gpt\nstart={esp_start}, size={ESP_MIB * 2048}, type=U, name=esp\n"
                 f"start={root_start}, size={root_bytes // 512}, type=L, name=root\n")
        p = subprocess.run(["sfdisk", "-q", str(raw)], input=table.encode(), stdout=logf,
                           stderr=subprocess.STDOUT, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"sfdisk failed; see {logf.name}")
        for img, start in ((esp, esp_start), (rootfs, root_start)):
            _run(["dd", f"if={img}", f"of={raw}", "bs=1M", f"seek={start * 512}", "oflag=seek_bytes",
                  "conv=notrunc,sparse", "status=none"], logf)
        _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(d / "disk.qcow2")], logf)
        shutil.copy(key, d / "client_key")
        (d / "client_key").chmod(0o600)
        shutil.copy(work / "host_key.pub", d / "host_key.pub")
        seconds = round(time.monotonic() - t0, 1)
        (d / "image.json").write_text(json.dumps({"release": release, "root_uuid": root_uuid,
                                                   "build_seconds": seconds, "suite": SUITE,
                                                   "packages": PACKAGES}, indent=1) + "\n")
        log(f"labsim: image {d / 'disk.qcow2'} (kernel {release}) built in {seconds:.0f}s")
    finally:
        logf.close()
        shutil.rmtree(work, ignore_errors=True)


def client_files(base: pathlib.Path, image_dir: pathlib.Path, ssh_port: int) -> None:
    """What krig's SSH to a server of this image needs in base: the image's client key, a
    known_hosts with the image's host key, and a bad_known_hosts with another key (the tests'
    wrong host key)."""
    shutil.copy(image_dir / "client_key", base / "client_key")
    (base / "client_key").chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "krig-labsim-other",
                    "-f", str(base / "other_host_key")], check=True, timeout=60)
    host = f"[127.0.0.1]:{ssh_port}"
    good = (image_dir / "host_key.pub").read_text().split()[:2]
    bad = (base / "other_host_key.pub").read_text().split()[:2]
    (base / "known_hosts").write_text(f"{host} {' '.join(good)}\n")
    (base / "bad_known_hosts").write_text(f"{host} {' '.join(bad)}\n")

if __name__ == "__main__":
    try:
        print(build())
    except RuntimeError as e:
        print(f"labsim image: {e}", file=sys.stderr)
        sys.exit(1)

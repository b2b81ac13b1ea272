#!/bin/sh
# krig guest /init (busybox sh): load modules, assemble the guest's root from
# read-only 9p shares (rigs/qemu/guestroot.py: a skeleton with a public copy of
# /etc, tag host; the host's /usr etc., tags sys-<dir>; never the host's /),
# mount the run's writable share, chroot into that root and run the krig
# agent. Options come from the kernel command line:
#   krig.mode=probe     print KRIG-PROBE-OK and power off (accelerator probe)
#   krig.agent=PATH     agent script (a path in the guest's root)
#   krig.sysdirs=A,B    system directories shared as tags sys-A, sys-B
#   krig.tree=PATH      the krig tree's reproducers/, shared as 9p tag
#                       krigtree and mounted at PATH after the tmpfs mounts
#                       (a clone under /tmp or /run would otherwise be
#                       hidden by them)
#   krig.ctl=DIR        control directory inside the run share
#   krig.mode=sshd      instead of the agent, run the host's own sshd in the
#                       chroot (a stand-in for a lab server, used by the IPMI
#                       rig's tests): its config comes from a read-only 9p
#                       share tagged `krigcfg` (mounted on /run/krig/cfg, file
#                       sshd_config); the network from krig.ip=ADDR/LEN and
#                       krig.gw=ADDR (eth0, static)
#   krig.mode=root      boot a server's own system instead (the initrd krig
#                       gives a kernel it kexecs into, rigs/ipmi/kexec.py):
#                       mount root= (UUID=, LABEL=, PARTUUID= or a device;
#                       rootfstype=, rootflags=, ro/rw as the kernel has them)
#                       and switch_root to init= (default /sbin/init)
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null

mode=run agent='' tree='' hostname=krig-guest ip='' gw='' sysdirs=''
root='' rootfstype='' rootflags='' rootmode=ro init=/sbin/init
# the command line's words, as the kernel split them
# shellcheck disable=SC2013
for opt in $(cat /proc/cmdline); do
    case "$opt" in
        krig.mode=*) mode=${opt#krig.mode=} ;;
        krig.agent=*) agent=${opt#krig.agent=} ;;
        krig.tree=*) tree=${opt#krig.tree=} ;;
        krig.sysdirs=*) sysdirs=${opt#krig.sysdirs=} ;;
        krig.hostname=*) hostname=${opt#krig.hostname=} ;;
        krig.ip=*) ip=${opt#krig.ip=} ;;
        krig.gw=*) gw=${opt#krig.gw=} ;;
        root=*) root=${opt#root=} ;;
        rootfstype=*) rootfstype=${opt#rootfstype=} ;;
        rootflags=*) rootflags=${opt#rootflags=} ;;
        rw) rootmode=rw ;;
        ro) rootmode=ro ;;
        init=*) init=${opt#init=} ;;
    esac
done

die() {
    echo "krig-init: FATAL: $*"
    echo o > /proc/sysrq-trigger
    sleep 30
}

if [ "$mode" = probe ]; then
    echo "KRIG-PROBE-OK"
    echo o > /proc/sysrq-trigger
    sleep 30
fi

while read -r m; do
    [ -n "$m" ] || continue
    insmod "$m" 2>/tmp/insmod.err || grep -q 'File exists' /tmp/insmod.err || \
        echo "krig-init: insmod $m failed: $(cat /tmp/insmod.err)"
done < /modules/order
echo "krig-init: modules loaded"

if [ "$mode" = root ]; then
    [ -n "$root" ] || die "krig.mode=root without root= on the kernel command line"
    dev=
    n=0
    while [ "$n" -lt 120 ]; do            # up to 60 s for the disk to appear
        case "$root" in
            /dev/*) [ -b "$root" ] && dev=$root ;;
            *=*) dev=$(findfs "$root" 2>/dev/null) ;;
        esac
        [ -n "$dev" ] && break
        n=$((n + 1))
        sleep 0.5
    done
    [ -n "$dev" ] || die "root device $root not found"
    mkdir -p /newroot
    mount -o "$rootmode${rootflags:+,$rootflags}" ${rootfstype:+-t "$rootfstype"} "$dev" /newroot ||
        die "cannot mount $root ($dev)"
    echo "krig-init: root $root ($dev) mounted $rootmode, switching to $init"
    umount /proc /sys 2>/dev/null
    mount --move /dev /newroot/dev 2>/dev/null || umount /dev 2>/dev/null
    exec switch_root /newroot "$init"
fi

hostname "$hostname"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 host /host || die "cannot mount the guest root"
for d in $(echo "$sysdirs" | tr , ' '); do
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 "sys-$d" "/host/$d" || die "cannot mount /$d"
done
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm 2>/dev/null
mount -t devpts devpts /host/dev/pts 2>/dev/null
mount -t tmpfs tmpfs /host/dev/shm 2>/dev/null
mount -t tracefs tracefs /host/sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /host/sys/kernel/debug 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs /host/tmp
mount -t tmpfs -o mode=755 tmpfs /host/run
mount -t tmpfs -o mode=755 tmpfs /host/var
mkdir -p /host/var/lib /host/var/log /host/var/cache /host/var/tmp && chmod 1777 /host/var/tmp
ln -s /run /host/var/run && ln -s /run/lock /host/var/lock
mount -t tmpfs -o mode=700 tmpfs /host/root         # a fresh, empty home for root
if [ -n "$tree" ]; then
    mkdir -p "/host$tree" 2>/dev/null
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 krigtree "/host$tree" ||
        die "cannot mount the krig tree at $tree"
fi
if [ "$mode" = sshd ]; then
    mkdir -p /host/run/krig/cfg /host/run/sshd
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 krigcfg /host/run/krig/cfg ||
        die "cannot mount the sshd config share (tag krigcfg)"
    ip link set lo up
    if [ -n "$ip" ]; then
        ip link set eth0 up || die "no eth0 for krig.ip=$ip"
        ip addr add "$ip" dev eth0
        [ -z "$gw" ] || ip route add default via "$gw"
    fi
    echo "krig-init: starting sshd"
    n=0
    while [ "$n" -lt 100 ]; do
        chroot /host /usr/sbin/sshd -D -f /run/krig/cfg/sshd_config -E /run/krig/sshd.log
        echo "krig-init: sshd exited ($?), restarting"
        n=$((n + 1))
        sleep 1
    done
    die "sshd keeps exiting; see /run/krig/sshd.log"
fi
mkdir -p /host/run/krig/share /host/run/krig/home
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 krig /host/run/krig/share || die "cannot mount run share"
[ -n "$agent" ] || die "no krig.agent= on the kernel command line"
echo "krig-init: starting agent $agent"
# Not exec: PID 1 stays this busybox, whose pages live in the initramfs. A
# PID 1 running from the 9p root takes a fault once power-off tears the 9p
# transport down, and "Attempted to kill init" would look like a crash.
chroot /host /bin/bash "$agent" /run/krig/share/ctl
rc=$?
[ -e /host/run/krig/powering-off ] && sleep 30
die "the krig agent exited ($rc)"

#!/bin/bash
# krig guest agent. Runs inside the guest (chroot into its root, rigs/qemu/guestroot.py) and
# executes the commands the host drops into the control directory:
#   N.argv (NUL-separated argv), N.env (NUL-separated KEY=VALUE), then N.req
# answering with N.out, N.err and finally N.rc. A file named `poweroff`
# powers the guest off. Workload output never touches the kernel console.
# While N runs, a watcher takes one salvage request for it: N.salvage.argv then
# N.salvage.req, answered with N.salvage.out/.err/.rc (the host asks for it when N
# overran its timeout, to keep the trace before it calls the run HUNG).
set -u
ctl=$1
mkdir -p "$ctl"
mkfifo /run/krig/tick && exec 9<>/run/krig/tick
cd /run/krig/home || exit 1
: > "$ctl/ready"
echo "krig-agent: ready"

# salvage_watch N ENV...: until killed, wait for N.salvage.req and run it once.
salvage_watch() {
    local n=$1 s
    shift
    s=$ctl/$n.salvage
    until [[ -e $s.req ]]; do read -r -t 0.2 -u 9 _ || true; done
    mapfile -d '' -t sargv < "$s.argv"
    env -i "$@" "${sargv[@]}" > "$s.out" 2> "$s.err" < /dev/null 9<&-
    echo "$?" > "$s.rc.tmp"
    mv "$s.rc.tmp" "$s.rc"
}

n=0
while :; do
    if [[ -e $ctl/$n.req ]]; then
        mapfile -d '' -t argv < "$ctl/$n.argv"
        mapfile -d '' -t envs < "$ctl/$n.env"
        salvage_watch "$n" "${envs[@]}" &
        watcher=$!
        env -i "${envs[@]}" "${argv[@]}" > "$ctl/$n.out" 2> "$ctl/$n.err" < /dev/null 9<&-
        echo "$?" > "$ctl/$n.rc.tmp"
        kill "$watcher" 2> /dev/null
        wait "$watcher" 2> /dev/null
        mv "$ctl/$n.rc.tmp" "$ctl/$n.rc"
        n=$((n + 1))
        continue
    fi
    if [[ -e $ctl/poweroff ]]; then
        echo "krig-agent: powering off"
        : > /run/krig/powering-off
        sync
        echo o > /proc/sysrq-trigger
    fi
    read -r -t 0.2 -u 9 _ || true
done

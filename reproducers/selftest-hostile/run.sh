#!/bin/bash
# selftest-hostile: plant links, FIFOs and a device node where the host reads and writes
# (the results directory and the agent's control directory); expected verdict ERROR.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
out=$KRIG_OUT
ctl=$(dirname "$out")/ctl
n=0
plant() { "$@" && n=$((n + 1)); }
# results: names krig writes into the run directory after the pull, and names it reads
for name in verdict.json.tmp junit.xml analysis.log report.html summary.txt samples.tsv stdout; do
    plant ln -sf "$TARGET" "$out/$name"
done
plant mkfifo "$out/trace.dat"
plant mknod "$out/null-device" c 1 3
plant mkdir -p "$out/sub"
plant ln -sf "$TARGET" "$out/sub/link"
plant ln -sfn /etc "$out/etc-dir"
echo "not krig's" > "$out/manifest.json" && n=$((n + 1))
# the agent's mailbox: later commands' argv, and this command's own output, which the
# host reads once it ends (a FIFO there would block a host that opened it as-is)
plant mknod "$ctl/9.out" c 1 3
for i in 5 6 7; do
    plant ln -sf "$TARGET" "$ctl/$i.argv"
done
# the mailbox's names are the agent's own numbers: ls lists them as they are
# shellcheck disable=SC2012
me=$(ls "$ctl" | sed -n 's/^\([0-9]*\)\.req$/\1/p' | sort -n | tail -n 1)
echo "planted $n hostile entries"
krig_metric planted "$((n + 2))"
rm -f "$ctl/$me.out" "$ctl/$me.err"
mkfifo "$ctl/$me.out"
ln -s "$TARGET" "$ctl/$me.err"

#!/bin/bash
# neg-dentry-flood: parallel negative-dentry generators on the fs under test; see repro.toml.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
krig_require_scratch
mnt=$KRIG_SCRATCH_MNT
bin=$KRIG_BIN

case $FS in
    xfs) mkfs.xfs -f -q "$KRIG_SCRATCH_DEV" ;;
    ext4) mkfs.ext4 -F -q "$KRIG_SCRATCH_DEV" ;;
esac
mount -t "$FS" "$KRIG_SCRATCH_DEV" "$mnt"
mkdir "$mnt/flood"

# Generators per CPU, each count rounded up (0.5 per CPU on 1 CPU is 1 process).
ncpu=$(nproc)
per_cpu() { awk -v p="$1" -v n="$ncpu" 'BEGIN { c = p * n; printf "%d", (c > int(c)) ? int(c) + 1 : c }'; }
gens=$(per_cpu "$LOOKUP_PER_CPU"),$(per_cpu "$TMPFILE_PER_CPU"),$(per_cpu "$SAMENAME_PER_CPU")

# negflood stops the flood itself (bound, plateau, name cap or time limit; see repro.toml).
# -l 5: the RAM limit, the peak_negative_pct_ram threshold (tests/reproducers/test_flood_stop.py checks);
# past it the flood goes on to SETTLE_LIMIT_X x the limit (at most SETTLE_MEM_AVAILABLE_PCT %
# of MemAvailable) unless the negatives settle first. flood.tsv: new names and nr_negative
# as the flood goes, kept with the run (`negflood -R flood.tsv` replays the stop rule on it).
# A sparse guest's host budget (KRIG_HOST_BUDGET_FILE, rewritten by the host every second):
# the flood stops first where the host can back no more of the guest's memory (host_budget).
budget=()
if [ -n "${KRIG_HOST_BUDGET_FILE:-}" ]; then budget=(-H "$KRIG_HOST_BUDGET_FILE"); fi
krig_phase flood
"$bin/negflood" -d "$mnt/flood" -g "$gens" -t "$MAX_DURATION" -l 5 -x "$SETTLE_LIMIT_X" \
    -a "$SETTLE_MEM_AVAILABLE_PCT" -n "$MIN_DURATION" -w "$PLATEAU_WINDOW_PCT" -b "$PLATEAU_RETENTION_PCT" \
    -r "$RATE_SECONDS" -s "$CAP_SAFETY" -k "$SHARED_NAMES" -o "$KRIG_OUT/flood.tsv" "${budget[@]}" \
    > "$KRIG_OUT/flood.txt"
krig_phase flooded
# one more sample of the state the flood stopped at (the analysis reads it)
sleep "$(awk -v i="${SAMPLE_INTERVAL:-1}" 'BEGIN { print 2 * i + 0.2 }')"

# First inotify watch on the flooded directory walks its children.
krig_phase inotify
"$bin/inotify-lat" "$mnt/flood" > "$KRIG_OUT/inotify-us.txt"
krig_phase 'done'
cat "$KRIG_OUT/flood.txt"
echo "inotify_add_watch: $(< "$KRIG_OUT/inotify-us.txt") us"
umount "$mnt"

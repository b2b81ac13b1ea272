#!/bin/bash
# neg-dentry-flood: parallel negative-dentry generators on the fs under test; see repro.toml.
set -euo pipefail
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

krig_phase flood
pids=()
start() {  # start MODE COUNT
    local i
    for ((i = 0; i < $2; i++)); do
        "$bin/negflood" -d "$mnt/flood" -m "$1" -t "$DURATION" -p "$1-$i-" -k "$SHARED_NAMES" \
            > "$KRIG_OUT/gen-$1-$i.txt" &
        pids+=($!)
    done
}
start lookup "$LOOKUP_PROCS"
start tmpfile "$TMPFILE_PROCS"
start samename "$SAMENAME_PROCS"
for p in "${pids[@]}"; do wait "$p"; done
krig_phase flooded
sleep 2

# First inotify watch on the flooded directory walks its children.
krig_phase inotify
"$bin/inotify-lat" "$mnt/flood" > "$KRIG_OUT/inotify-us.txt"
krig_phase done
cat "$KRIG_OUT"/gen-*.txt
echo "inotify_add_watch: $(< "$KRIG_OUT/inotify-us.txt") us"
umount "$mnt"

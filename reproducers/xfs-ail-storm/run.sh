#!/bin/bash
# xfs-ail-storm: parallel create on XFS with a large log; see repro.toml.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
krig_require_scratch
mnt=$KRIG_SCRATCH_MNT

if ((XFSSYNCD_CENTISECS > 0)); then
    # Before mkfs/mount: the first log worker run is scheduled at mount.
    echo "$XFSSYNCD_CENTISECS" > /proc/sys/fs/xfs/xfssyncd_centisecs
fi
mkfs.xfs -f -q -l size="$LOG_SIZE" "$KRIG_SCRATCH_DEV"
mount -t xfs "$KRIG_SCRATCH_DEV" "$mnt"
xfs_info "$mnt" > "$KRIG_OUT/xfs_info.txt"

bg=
if ((BACKGROUND_IO)); then
    fio --output="$KRIG_OUT/bg-io.txt" "$KRIG_REPRO_DIR/bg-io.fio" &
    bg=$!
fi

krig_phase create
per=$((FILES / WRITERS))
pids=()
for ((w = 0; w < WRITERS; w++)); do
    /usr/bin/time -o "$KRIG_OUT/create-$w.time" \
        "$KRIG_LIB/bin/krig-mktree" -d "$mnt/dir$w" -n "$per" -D "$SUBDIRS" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
krig_phase sync
[[ -z $bg ]] || { kill "$bg"; wait "$bg" || true; }
sync
# A small closing checkpoint: its LSN marks where the last big one ended.
: > "$mnt/closing-checkpoint"
sync
krig_phase 'done'
umount "$mnt"
echo "created $((per * WRITERS)) files with $WRITERS writers"

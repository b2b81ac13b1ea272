#!/bin/bash
# unlink-dentry-growth: parallel rm -rf of an fs_mark-style tree; see repro.toml.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
krig_require_scratch
mnt=$KRIG_SCRATCH_MNT

mkfs.xfs -f -q "$KRIG_SCRATCH_DEV"
mount -t xfs "$KRIG_SCRATCH_DEV" "$mnt"

krig_phase create
pids=()
for ((d = 0; d < TOP_DIRS; d++)); do
    "$KRIG_LIB/bin/krig-mktree" -d "$mnt/$d" -n $((SUBDIRS * FILES_PER_DIR)) -D "$SUBDIRS" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

# Start from a cold cache, as after the report's mount of an existing fs.
umount "$mnt"
krig_drop_caches
mount -t xfs "$KRIG_SCRATCH_DEV" "$mnt"
sleep 2

# The unlink rate is counted at the source: every rm -v line "removed 'file'" is one
# unlink done, counted by krig-progress as it happens (progress.tsv, same clocks as
# samples.tsv), not inferred from free inodes, which XFS frees later in the background.
# Line-buffered (stdbuf -oL): each line is one atomic pipe write, so the 8 writers'
# lines never interleave (4 KiB block flushes split lines and lost ~0.3% of them).
krig_phase unlink
{
    pids=()
    for ((d = 0; d < TOP_DIRS; d++)); do
        /usr/bin/time -o "$KRIG_OUT/rm-$d.time" stdbuf -oL rm -rfv "$mnt/$d" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
} | "$KRIG_LIB/bin/krig-progress" -i "$SAMPLE_INTERVAL" -o "$KRIG_OUT/progress.tsv"
krig_phase unlinked
sleep 3    # let the sampler see the aftermath
krig_phase 'done'
cat "$KRIG_OUT"/rm-*.time
umount "$mnt"

#!/bin/bash
# selftest-pass: exercise the scratch disk and report metrics that pass.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
krig_require_scratch
mkfs.xfs -f -q "$KRIG_SCRATCH_DEV"
mount "$KRIG_SCRATCH_DEV" "$KRIG_SCRATCH_MNT"
krig_phase create
for ((i = 0; i < FILES; i++)); do : > "$KRIG_SCRATCH_MNT/f$i"; done
seen=$(find "$KRIG_SCRATCH_MNT" -type f | wc -l)
umount "$KRIG_SCRATCH_MNT"
echo "created $FILES files, found $seen"
krig_metric answer 42
krig_metric files_seen "$seen"

# shellcheck shell=bash
# Functions for reproducers' run.sh: `source "$KRIG_LIB/krig.sh"`.
# Only functions; no shell options or globals are changed by sourcing.

# krig_phase NAME: mark a phase in phases.tsv (same clock as samples.tsv).
krig_phase() {
    printf '%s\t%s\n' "$EPOCHREALTIME" "$1" >> "$KRIG_OUT/phases.tsv"
}

# krig_skip REASON: the machine cannot run this reproducer (exit code 4).
krig_skip() {
    echo "SKIP: $*" >&2
    exit 4
}

# krig_require_scratch: fail clearly when the rig gave no scratch disk.
krig_require_scratch() {
    [[ -n ${KRIG_SCRATCH_DEV:-} && -b $KRIG_SCRATCH_DEV ]] ||
        krig_skip "no scratch disk (KRIG_SCRATCH_DEV='${KRIG_SCRATCH_DEV:-}')"
}

# krig_drop_caches: write back and drop page cache, dentries and inodes.
krig_drop_caches() {
    sync
    echo 3 > /proc/sys/vm/drop_caches
}

# krig_metric NAME VALUE: report a metric measured by run.sh itself.
krig_metric() {
    printf '%s\t%s\n' "$1" "$2" >> "$KRIG_OUT/workload-metrics.tsv"
}

#!/bin/bash
# krig harness: runs one reproducer on the machine under test.
#
#   harness.sh REPRO_DIR OUT_DIR
#
# Starts the sampler and (if the reproducer lists events) trace-cmd record,
# runs REPRO_DIR/run.sh under /usr/bin/time, stops both, and leaves in OUT_DIR:
# samples.tsv, trace.dat, trace-cmd.log, time.txt, workload.rc, facts.txt,
# phases.tsv and whatever run.sh wrote. Exits with run.sh's exit code.
# Parameters arrive in the environment (upper-case names); KRIG_* are set by krig.
set -uo pipefail

repro=$1
out=$2
lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"

scratch_dev=${KRIG_SCRATCH_DEV:-}
if [[ -z $scratch_dev && -n ${KRIG_SCRATCH_SERIAL:-} ]]; then
    for ctrl in /sys/class/nvme/nvme*; do
        [[ -e $ctrl/serial ]] || continue
        read -r serial < "$ctrl/serial"
        if [[ $serial == "$KRIG_SCRATCH_SERIAL" ]]; then
            for ns in "$ctrl"/nvme*n1; do scratch_dev=/dev/${ns##*/}; done
        fi
    done
    [[ -n $scratch_dev ]] || echo "krig: no NVMe disk with serial $KRIG_SCRATCH_SERIAL" >&2
fi
export KRIG_SCRATCH_DEV=$scratch_dev
export KRIG_SCRATCH_MNT=${KRIG_SCRATCH_MNT:-/run/krig/scratch}
export KRIG_OUT=$out KRIG_LIB=$lib KRIG_REPRO_DIR=$repro KRIG_BIN=$repro/bin
mkdir -p "$KRIG_SCRATCH_MNT"

{
    echo "release=$(uname -r)"
    echo "cmdline=$(< /proc/cmdline)"
    echo "nproc=$(nproc)"
    echo "mem_total_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
    echo "scratch_dev=$scratch_dev"
    echo "trace_cmd=$(trace-cmd --version 2>/dev/null | awk 'NF {print; exit}')"
    echo "xfsprogs=$(mkfs.xfs -V 2>/dev/null)"
    echo "fio=$(fio --version 2>/dev/null)"
} > "$out/facts.txt"

# KRIG_COLLECT=0 runs the bare workload (benchmarks measure what collection costs).
sampler=
if [[ ${KRIG_COLLECT:-1} != 0 ]]; then
    "$lib/bin/krig-sampler" -i "${SAMPLE_INTERVAL:-1}" -o "$out/samples.tsv" -m "$KRIG_SCRATCH_MNT" &
    sampler=$!
fi

# Tracing. KRIG_TRACE_MODE=ring (the default): the events go into the kernel's ring buffer
# (KRIG_TRACE_BUFFER_KB per CPU of guest memory, the same buffer record uses) and nothing
# reads it while the workload runs; the buffer is extracted to trace.dat afterwards. The
# buffer does not overwrite: when it is full, newer events are dropped and counted, the
# trace keeps every event that fit, the harness says so in one line and the lost events
# make the run ERROR (instrument check). KRIG_TRACE_MODE=record streams the buffer to
# trace.dat while the workload runs (trace-cmd record: readers wake every -s usecs).
# KRIG_TRACEFS: where tracefs is mounted (older systems: /sys/kernel/debug/tracing).
tracefs=${KRIG_TRACEFS:-/sys/kernel/tracing}
tracer='' trace_mode=${KRIG_TRACE_MODE:-ring} trace_kb=${KRIG_TRACE_BUFFER_KB:-65536}
if [[ -n ${KRIG_TRACE_EVENTS:-} && ${KRIG_COLLECT:-1} != 0 ]]; then
    args=()
    for e in $KRIG_TRACE_EVENTS; do args+=(-e "$e"); done
    if [[ $trace_mode == ring ]]; then
        # -C mono: trace time stamps on the clock of samples.tsv's mono column
        if trace-cmd start -C mono -b "$trace_kb" -O nooverwrite "${args[@]}" \
                > "$out/trace-cmd.log" 2>&1; then
            tracer=ring
        else
            echo "krig: trace-cmd start failed:" >&2
            cat "$out/trace-cmd.log" >&2
        fi
    else
        trace-cmd record -q -C mono -b "$trace_kb" "${args[@]}" -o "$out/trace.dat" \
            > "$out/trace-cmd.log" 2>&1 &
        tracer=$!
        first=${KRIG_TRACE_EVENTS%% *}
        for _ in $(seq 600); do
            [[ $(< "$tracefs/events/${first/://}/enable") == 1* ]] 2>/dev/null && break
            kill -0 "$tracer" 2>/dev/null || break
            sleep 0.1
        done
        if ! kill -0 "$tracer" 2>/dev/null; then
            echo "krig: trace-cmd record failed to start:" >&2
            cat "$out/trace-cmd.log" >&2
            tracer=
        fi
    fi
fi

# Events the ring buffer dropped because it was full (nooverwrite) or overwrote.
ring_lost() {
    local n=0 f k v
    for f in "$tracefs"/per_cpu/cpu*/stats; do
        while IFS=: read -r k v; do
            [[ $k == "dropped events" || $k == overrun ]] && n=$((n + v))
        done < "$f"
    done
    echo "$n"
}

# Sends SIGNAL to PID and waits at most SECONDS for it to end, then SIGKILLs it.
# Returns 1 if it had to kill.
stop_within() {
    local pid=$1 sig=$2 secs=$3 i
    kill "-$sig" "$pid" 2>/dev/null
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return 1
    fi
    wait "$pid" 2>/dev/null
    return 0
}

stop_collectors() {
    # trace-cmd.log is also the lock reproducers/lib/salvage.sh takes: a salvage never
    # extracts or stops the trace while this does
    [[ -n $tracer ]] && exec 8>> "$out/trace-cmd.log" && flock 8
    if [[ $tracer == ring ]]; then
        trace-cmd stop >> "$out/trace-cmd.log" 2>&1
        local lost
        lost=$(ring_lost)
        trace-cmd extract -o "$out/trace.dat" >> "$out/trace-cmd.log" 2>&1 ||
            echo "krig: trace-cmd extract failed (trace-cmd.log)" >&2
        if ((lost > 0)); then
            echo "krig: the trace did not fit in trace.buffer_kb = $trace_kb KiB per CPU: $lost events dropped; trace.dat keeps the events that fit" |
                tee -a "$out/trace-cmd.log" >&2
        fi
        trace-cmd reset >> "$out/trace-cmd.log" 2>&1   # events off, the buffer's memory back
        tracer=
    elif [[ -n $tracer ]]; then
        # record flushes what the buffer still holds after SIGINT; bounded all the same
        local stop_s=${KRIG_TRACE_STOP_S:-300}
        stop_within "$tracer" INT "$stop_s" ||
            echo "krig: trace-cmd record did not end within ${stop_s}s of SIGINT and was killed; trace.dat may be cut short" |
                tee -a "$out/trace-cmd.log" >&2
        tracer=
    fi
    exec 8>&-
    if [[ -n $sampler ]]; then
        stop_within "$sampler" TERM 30 ||
            echo "krig: the sampler did not end within 30s of SIGTERM and was killed" >&2
        sampler=
    fi
}
trap stop_collectors EXIT

echo -e "$EPOCHREALTIME\tstart" > "$out/phases.tsv"
/usr/bin/time -o "$out/time.txt" bash "$repro/run.sh"
rc=$?
echo -e "$EPOCHREALTIME\tend" >> "$out/phases.tsv"
stop_collectors
echo "$rc" > "$out/workload.rc"
exit "$rc"

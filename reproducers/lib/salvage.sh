#!/bin/bash
# krig salvage: run on the machine under test next to a workload that overran its
# timeout, just before the host calls the run HUNG and powers the machine off.
#
#   salvage.sh OUT_DIR
#
# Keeps what only the machine still has, so a HUNG run comes back with its trace:
#   * ring mode (trace-cmd start): stops tracing and extracts the buffer to
#     OUT_DIR/trace.dat (what the harness would have done at the end);
#   * record mode: SIGINT to `trace-cmd record`, which flushes and closes trace.dat;
#   * sync, so the results share has every page the workload wrote.
# Bounded (the host waits at most its salvage timeout); what it did goes to
# OUT_DIR/salvage.log, one line per step. Never touches the workload itself.
set -u
out=$1
tracefs=/sys/kernel/tracing
[[ -d $tracefs/events ]] || tracefs=/sys/kernel/debug/tracing
log() { echo "$(date -u +%H:%M:%S) $*" >> "$out/salvage.log"; }

log "salvage: the host timed out waiting for the workload"
# the harness holds a lock on trace-cmd.log while it stops the trace itself (its
# workload ended after all, or was killed with the connection): wait for it, then
# find nothing left to do
if [[ -e $out/trace-cmd.log ]]; then
    exec 8>> "$out/trace-cmd.log"
    flock -w 40 8 || log "the harness held the trace lock for 40 s: going on without it"
fi
if pgrep -f '^trace-cmd record' > /dev/null; then
    pkill -INT -f '^trace-cmd record'
    for _ in $(seq 150); do pgrep -f '^trace-cmd record' > /dev/null || break; sleep 0.2; done
    if pgrep -f '^trace-cmd record' > /dev/null; then
        log "trace-cmd record did not stop within 30 s of SIGINT"
    else
        log "trace-cmd record stopped: trace.dat closed ($(stat -c %s "$out/trace.dat" 2>/dev/null || echo 0) bytes)"
    fi
elif [[ -n $(cat "$tracefs/set_event" 2> /dev/null) && ! -e $out/trace.dat ]]; then  # (tracefs files have size 0)
    trace-cmd stop >> "$out/salvage.log" 2>&1
    if trace-cmd extract -o "$out/trace.dat" >> "$out/salvage.log" 2>&1; then
        log "ring buffer extracted to trace.dat ($(stat -c %s "$out/trace.dat") bytes)"
    else
        log "trace-cmd extract failed"
    fi
elif [[ -e $out/trace.dat ]]; then
    log "trace.dat was written by the harness itself ($(stat -c %s "$out/trace.dat") bytes)"
else
    log "no trace in progress"
fi
sync
log "salvage done"

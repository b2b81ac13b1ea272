#!/bin/bash
# selftest-wedge: wedge the kernel with interrupts off on every CPU (test_lockup).
set -euo pipefail
if ! modprobe -n test_lockup 2>/dev/null; then
    echo "kernel $(uname -r) has no test_lockup module (CONFIG_TEST_LOCKUP=m)" >&2
    exit 4
fi
echo "wedging the kernel now: test_lockup, interrupts off on all CPUs"
sync
modprobe test_lockup time_secs=3600 state=R disable_irq=1 all_cpus=1
echo "test_lockup returned: the kernel was not wedged" >&2
exit 1

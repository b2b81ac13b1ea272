#!/bin/bash
# selftest-panic: crash the kernel on purpose.
set -euo pipefail
echo "crashing the kernel"
sync
echo 1 > /proc/sys/kernel/sysrq
echo c > /proc/sysrq-trigger
sleep 60

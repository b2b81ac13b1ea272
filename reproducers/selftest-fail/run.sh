#!/bin/bash
# selftest-fail: report a metric that crosses its threshold.
set -euo pipefail
source "$KRIG_LIB/krig.sh"
echo "reporting 42"
krig_metric answer 42

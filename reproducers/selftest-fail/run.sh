#!/bin/bash
# selftest-fail: report a metric that crosses its threshold.
set -euo pipefail
# shellcheck source=reproducers/lib/krig.sh
source "$KRIG_LIB/krig.sh"
echo "reporting 42"
krig_metric answer 42

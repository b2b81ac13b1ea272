#!/bin/bash
# selftest-hang: never finish (the rig must declare HUNG at the timeout).
set -euo pipefail
echo "hanging now"
exec sleep infinity

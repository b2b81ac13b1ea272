#!/usr/bin/env bash
# Rerun the reproducer of this krig bundle with the same parameters and print
# the new verdict next to the bundled one.
#   KRIG=/path/to/krig/checkout ./reproduce.sh [--rig NAME] [--kernel NAME]
# Without KRIG, the `krig` command on PATH is used. The rig defaults to
# qemu-default; the kernel to the one the bundle ran (same name in your
# checkout). Results go to ./rerun/ unless KRIG_RESULTS is set.
# Exit: 0 same verdict, 1 a different verdict, 2 bad input or no krig.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rig=qemu-default
kernel=
while [ $# -gt 0 ]; do
    case "$1" in
        --rig) rig=${2:?--rig needs a rig name}; shift 2 ;;
        --kernel) kernel=${2:?--kernel needs a kernel name}; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "reproduce.sh: unknown argument $1 (allowed: --rig NAME, --kernel NAME)" >&2; exit 2 ;;
    esac
done

if [ -n "${KRIG:-}" ]; then
    if [ -x "$KRIG/.venv/bin/krig" ]; then krig=("$KRIG/.venv/bin/krig")
    elif [ -f "$KRIG/workflows/cli.py" ]; then krig=(env "PYTHONPATH=$KRIG" python3 -m workflows.cli)
    else echo "reproduce.sh: KRIG=$KRIG is not a krig checkout (no .venv/bin/krig); run make setup there" >&2; exit 2
    fi
    checkout=$KRIG
elif command -v krig >/dev/null; then
    krig=(krig)
    checkout=$(cd "$(dirname "$(readlink -f "$(command -v krig)")")/../.." && pwd)
else
    echo "reproduce.sh: no krig: set KRIG to a krig checkout (after make setup) or put krig on PATH" >&2
    exit 2
fi

mapfile -t args < "$here/run-args"
name=${args[0]}
[ -n "$kernel" ] && args[2]=$kernel
# The checkout's reproducer runs; say so if its sources differ from the bundled ones.
if [ -d "$checkout/reproducers/$name" ] && ! diff -rq -x bin -x __pycache__ \
        "$here/reproducer/$name" "$checkout/reproducers/$name" >/dev/null 2>&1; then
    echo "reproduce.sh: note: reproducers/$name in $checkout differs from the bundled sources (reproducer/$name)" >&2
fi

bundled=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v["verdict"])' "$here/bundle.json")
export KRIG_RESULTS=${KRIG_RESULTS:-$here/rerun}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"${krig[@]}" run "${args[@]}" --rig "$rig" | tee "$out" || rc=$?
new=$(grep -Eo '^(PASS|FAIL|ERROR|SKIP|HUNG|CRASHED|INCOMPLETE|INTERRUPTED):' "$out" | tail -n1 | tr -d :)
if [ -z "$new" ]; then
    echo "reproduce.sh: krig run gave no verdict (exit $rc)" >&2
    exit 2
fi
echo "bundled: $bundled"
echo "rerun:   $new (rig $rig)"
[ "$new" = "$bundled" ]

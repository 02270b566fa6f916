#!/usr/bin/env bash
# Pause/resume and fork --memory (docs/sandboxes.md, "Pause and resume";
# docs/build.md, "Fork with memory"); run as root:
#
#   scripts/bench-pause.sh
#
# Measures, with a Python process holding a list of PAUSE_INTS ints
# (default 1M; ~100 MB at 3M) in each sandbox:
#   native  pause, resume (cgroup freeze/thaw), ROUNDS rounds
#   runsc   pause (checkpoint), resume (restore), ROUNDS rounds; image size
#   runsc   a cold `husk create` (for comparison with a restore)
#   runsc   fork --memory --count 1 and --count 10
# Medians are wall times of the husk CLI calls (each includes husk's own
# start and the supervisor round trip). Environment: HUSK (binary under
# test; default the release build, built if missing), ROUNDS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-pause: run as root" >&2; exit 1; }
ROUNDS=${ROUNDS:-5}
INTS=${PAUSE_INTS:-1000000}
if [ -z "${HUSK:-}" ]; then
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
    [ -x "$HUSK" ] || cargo build --release
fi
STATE=$(mktemp -d /tmp/bench-pause-state.XXXXXX)
export HUSK_STATE_DIR=$STATE
h() { "$HUSK" --state-dir "$STATE" "$@"; }
cleanup() {
    local rc=$?
    set +e
    h rm --all --force >/dev/null 2>&1
    rm -rf --one-file-system "$STATE"
    exit "$rc"
}
trap cleanup EXIT INT TERM

now_ms() { date +%s%3N; }
# Runs "$@" and prints its wall time in ms.
timed() {
    local t0 t1
    t0=$(now_ms)
    "$@" >/dev/null
    t1=$(now_ms)
    echo $((t1 - t0))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

HOLDER="import time, os
x = list(range($INTS))
open('/tmp/ready', 'w').write('1')
while True:
    time.sleep(1)"
start_holder() {
    h exec "$1" -- sh -c "python3 -c \"$HOLDER\" >/dev/null 2>&1 </dev/null & while [ ! -e /tmp/ready ]; do sleep 0.1; done"
}

echo "husk: $HUSK ($("$HUSK" --version 2>/dev/null | head -1)); $ROUNDS rounds; a Python list of $INTS ints"
for backend in native runsc; do
    id=$(h create --runtime "$backend" --ttl 30m)
    start_holder "$id"
    p=(); r=()
    for _ in $(seq "$ROUNDS"); do
        p+=("$(timed h pause "$id")")
        r+=("$(timed h resume "$id")")
    done
    extra=""
    if [ "$backend" = runsc ]; then
        bytes=$(h pause --json "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint"]["bytes"])')
        h resume "$id" >/dev/null
        extra=", image $((bytes / 1024 / 1024)) MiB"
    fi
    echo "$backend pause: median $(printf '%s\n' "${p[@]}" | median) ms; resume: median $(printf '%s\n' "${r[@]}" | median) ms$extra"
    [ "$backend" = runsc ] && SRC_ID=$id || h rm "$id" >/dev/null
done

c=()
for _ in $(seq "$ROUNDS"); do
    t0=$(now_ms); cid=$(h create --runtime runsc --ttl 5m); t1=$(now_ms)
    c+=($((t1 - t0)))
    h rm "$cid" >/dev/null
done
echo "runsc cold create: median $(printf '%s\n' "${c[@]}" | median) ms"

for n in 1 10; do
    t0=$(now_ms)
    forks=$(h fork --memory --count "$n" "$SRC_ID" 2>/dev/null)
    t1=$(now_ms)
    echo "runsc fork --memory --count $n: $((t1 - t0)) ms ($(( (t1 - t0) / n )) ms per fork)"
    for f in $forks; do h rm "$f" >/dev/null; done
done

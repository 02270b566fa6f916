#!/usr/bin/env bash
# Regenerates scripts/husk.order, the order the linker lays out the husk
# binary's code in (build.rs passes it to rust-lld as
# --symbol-ordering-file): every function a `husk run` executes, in the
# order it first runs, the parent's first, then the sandbox init's.
# Run as root on this machine's kind of host:
#
#   scripts/order.sh
#
# It builds husk --release, imports the busybox demo image into a private
# store under build/order, samples 300 runs with `perf record -e cycles:u`
# (package linux-perf), and writes the symbols it saw. Sampling every 1500
# user cycles over 300 runs catches functions down to a few hundred cycles
# per run; one it misses only costs a page fault. Symbol names carry a hash
# of the crate's version and toolchain, so regenerate after a version bump
# or toolchain update (scripts/bench.sh reports how many still match).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "order: run as root (husk run needs it for its defaults)" >&2; exit 1; }
command -v perf >/dev/null || { echo "order: perf is missing: apt-get install linux-perf" >&2; exit 1; }
WORK=$PWD/build/order
rm -rf --one-file-system "$WORK"
mkdir -p "$WORK"
trap 'rm -rf --one-file-system "$WORK"' EXIT
# Built without an order, so the profile does not depend on the old one.
HUSK_NO_LINK_ORDER=1 cargo build --release
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
install -m 0755 "$TARGET_DIR/x86_64-unknown-linux-gnu/release/husk" "$WORK/husk"
scripts/build-images.sh busybox
export HUSK_ROOT=$WORK/store HUSK_STATE_DIR=$WORK/state
"$WORK/husk" image import "${HUSK_IMAGES:-$PWD/build/images}/busybox" >/dev/null
cat >"$WORK/loop.sh" <<LOOP
#!/bin/sh
for i in \$(seq 150); do
    "$WORK/husk" run --image busybox -- /bin/true
    "$WORK/husk" run --image busybox --json -- /bin/echo hi >/dev/null
done
LOOP
chmod +x "$WORK/loop.sh"
perf record -q -o "$WORK/perf.data" -e cycles:u -c 1500 -- "$WORK/loop.sh"
perf script -i "$WORK/perf.data" --no-demangle -F comm,tid,time,ip,sym,dso 2>/dev/null |
    python3 -c '
import collections, statistics, sys
dso = "(" + sys.argv[1] + ")"
first, start, role = {}, {}, {}
for line in sys.stdin:
    f = line.split()
    if len(f) < 6 or f[-1] != dso or f[4].startswith("[unknown]"):
        continue
    comm, tid, t, sym = f[0], f[1], float(f[2].rstrip(":")), f[4]
    start.setdefault(tid, t)
    role[tid] = comm
    first.setdefault((tid, sym), t)
after = collections.defaultdict(list)
roles = collections.defaultdict(set)
for (tid, sym), t in first.items():
    after[sym].append(t - start[tid])
    roles[sym].add(role[tid])
rank = {"husk": 0, "husk:[init]": 1}
key = lambda s: (min(rank.get(r, 3) for r in roles[s]), statistics.median(after[s]))
syms = sorted(after, key=key)
sys.stdout.write("".join(s + "\n" for s in syms))
print(len(syms), "symbols", file=sys.stderr)
' "$WORK/husk" >scripts/husk.order.new
mv scripts/husk.order.new scripts/husk.order
echo "wrote scripts/husk.order; rebuild (cargo build --release) to use it"

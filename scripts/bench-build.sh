#!/usr/bin/env bash
# husk build vs docker build, and husk fork (docs/build.md, Numbers); run
# as root:
#
#   scripts/bench-build.sh
#
# The same Dockerfile (the busybox demo image + a RUN that writes 5000
# files + a COPY of a 50 MB random file) built by husk and by a private
# dockerd (its own data root and socket, legacy builder: Docker 20.10 here
# has no buildx; stopped by pid at exit), both from the same base (husk
# imports the layout, Docker loads the docker-archive scripts/build-images.sh
# writes beside it):
#   cold    husk: a fresh store with only the base (prepared, untimed);
#           docker: --no-cache, the previous result removed (untimed)
#   cached  the same build again with every step cached
# Then `husk fork --count 10` of a sandbox holding 100 MB of new files:
# wall time per fork, the snapshot's bytes and what the store grew by.
#
# Environment: HUSK (binary under test; default the release build),
# HUSK_IMAGES (default build/images), BENCH_WORK (default
# build/bench-build), BUILD_RUNS_COLD (3), BUILD_RUNS_CACHED (10),
# FORK_ROUNDS (3). Results: hyperfine JSON in $BENCH_WORK/results/ and a
# summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-build: run as root (dockerd, cgroups)" >&2; exit 1; }
RUNS_COLD=${BUILD_RUNS_COLD:-3}
RUNS_CACHED=${BUILD_RUNS_CACHED:-10}
FORK_ROUNDS=${FORK_ROUNDS:-3}
WORK=${BENCH_WORK:-$SRC/build/bench-build}
IMAGES=${HUSK_IMAGES:-$SRC/build/images}
RES=$WORK/results
for tool in hyperfine dockerd docker python3; do
    command -v "$tool" >/dev/null || { echo "bench-build: $tool is missing" >&2; exit 1; }
done
if [ -z "${HUSK:-}" ]; then
    cargo build --release
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
fi
[ -f "$IMAGES/busybox/index.json" ] || HUSK_IMAGES=$IMAGES scripts/build-images.sh busybox
rm -rf --one-file-system "${WORK:?}"
mkdir -p "$WORK/ctx" "$RES"

DOCKERD_PID=""
SRC_ID=""
cleanup() {
    local rc=$?
    set +e
    [ -n "$SRC_ID" ] && HUSK_ROOT=$WORK/fork-store HUSK_STATE_DIR=$WORK/fork-state "$HUSK" rm "$SRC_ID" >/dev/null 2>&1
    if [ -n "$DOCKERD_PID" ]; then
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        wait "$DOCKERD_PID" 2>/dev/null
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------- the build --
cat >"$WORK/ctx/Dockerfile" <<'EOF'
FROM busybox
RUN mkdir /d && i=0 && while [ $i -lt 5000 ]; do echo $i > /d/f$i; i=$((i+1)); done
COPY big /big
EOF
head -c $((50 << 20)) /dev/urandom >"$WORK/ctx/big"

# husk: the base imported into a fresh store before each cold run.
cat >"$WORK/husk-fresh.sh" <<EOF
#!/bin/sh
rm -rf --one-file-system "$WORK/husk-cold"
HUSK_ROOT="$WORK/husk-cold" "$HUSK" image import "$IMAGES/busybox" --name busybox >/dev/null
EOF
chmod +x "$WORK/husk-fresh.sh"
export HUSK_ROOT=$WORK/husk-warm
"$HUSK" image import "$IMAGES/busybox" --name busybox >/dev/null
"$HUSK" build -t bench:1 "$WORK/ctx" >/dev/null

# A private dockerd.
DOCK=$WORK/dockerd
mkdir -p "$DOCK"
dockerd --iptables=false --ip6tables=false --bridge=none --ip-masq=false \
    --data-root "$DOCK/data" --exec-root "$DOCK/exec" --pidfile "$DOCK/pid" \
    -H "unix://$DOCK/sock" >"$DOCK/log" 2>&1 &
DOCKERD_PID=$!
export DOCKER_HOST=unix://$DOCK/sock DOCKER_BUILDKIT=0
for _ in $(seq 300); do docker info >/dev/null 2>&1 && break; sleep 0.1; done
docker info >/dev/null || { echo "bench-build: dockerd did not start: $DOCK/log" >&2; exit 1; }
docker load -i "$IMAGES/busybox.docker.tar" >/dev/null
docker build --network none -t bench:1 "$WORK/ctx" >/dev/null

hyperfine -N --runs "$RUNS_COLD" --export-json "$RES/cold.json" \
    -n "husk build (cold)" --prepare "$WORK/husk-fresh.sh" \
    "env HUSK_ROOT=$WORK/husk-cold $HUSK build -t bench:1 $WORK/ctx" \
    -n "docker build (cold)" --prepare "docker rmi -f bench:1" \
    "docker build -q --no-cache --network none -t bench:1 $WORK/ctx"
hyperfine -N --runs "$RUNS_CACHED" --warmup 1 --export-json "$RES/cached.json" \
    -n "husk build (cached)" "$HUSK build -t bench:1 $WORK/ctx" \
    -n "docker build (cached)" "docker build -q --network none -t bench:1 $WORK/ctx"

# ------------------------------------------------------------------ fork --
export HUSK_ROOT=$WORK/fork-store HUSK_STATE_DIR=$WORK/fork-state
"$HUSK" image import "$IMAGES/busybox" --name busybox >/dev/null
SRC_ID=$("$HUSK" create --image busybox --workdir /work --workdir-size 512M --ttl 30m)
"$HUSK" exec "$SRC_ID" -- sh -c 'i=0; while [ $i -lt 100 ]; do head -c 1048576 /dev/urandom > f$i; i=$((i+1)); done'
python3 - "$HUSK" "$SRC_ID" "$WORK/fork-store" "$FORK_ROUNDS" "$RES/fork.json" <<'EOF'
import json, os, statistics, subprocess, sys, time
husk, src, store, rounds, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]

def du(path):
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])

runs = []
for _ in range(rounds):
    before = du(store)
    t = time.monotonic()
    r = subprocess.run([husk, "fork", src, "--count", "10", "--json"], capture_output=True, text=True, check=True)
    secs = time.monotonic() - t
    v = json.loads(r.stdout)
    grew = du(store) - before
    ids = [s["id"] for s in v["sandboxes"]]
    for i in ids:
        subprocess.run([husk, "rm", i], capture_output=True, check=True)
    subprocess.run([husk, "image", "rm", v["snapshot"]["name"]], capture_output=True, check=True)
    subprocess.run([husk, "image", "prune"], capture_output=True, check=True)
    runs.append({"seconds": secs, "snapshot_bytes": v["snapshot"]["changes"]["bytes"], "store_grew": grew})
json.dump(runs, open(out, "w"), indent=1)
med = statistics.median(r["seconds"] for r in runs)
every = ", ".join("%.2f" % r["seconds"] for r in runs)
print("husk fork --count 10 of 100 MiB of changes: median %.2f s over %d rounds (all: %s); "
      "snapshot %d bytes of files, store grew by %d bytes" % (med, rounds, every, runs[0]["snapshot_bytes"], runs[0]["store_grew"]))
EOF

python3 - "$RES" <<'EOF'
import json, sys
res = sys.argv[1]
for f in ("cold", "cached"):
    for r in json.load(open(f"{res}/{f}.json"))["results"]:
        print(f"{r['command']:<24} median {r['median']:.3f} s  (min {r['min']:.3f}, max {r['max']:.3f}, {len(r['times'])} runs)")
EOF

#!/usr/bin/env bash
# Warm starts (docs/warm.md), one section per mechanism; run as root:
#
#   scripts/bench-warm.sh            # every section
#   scripts/bench-warm.sh pools      # one section
#
# scripts/bench.sh calls it (BENCH_NO_WARM=1 skips it there) with its husk
# binary, image layouts and work dir; alone it builds what it needs.
# Results: JSON per section in $BENCH_WORK/warm/, and a summary on stdout.
#
# Environment: HUSK (binary under test; default the release build),
# HUSK_IMAGES (OCI layouts, default build/images; busybox is built if
# missing), BENCH_WORK (default build/bench-warm), WARM_ROUNDS (40).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-warm: run as root (cgroup limits need it)" >&2; exit 1; }
ROUNDS=${WARM_ROUNDS:-40}
WORK=${BENCH_WORK:-$SRC/build/bench-warm}
IMAGES=${HUSK_IMAGES:-$SRC/build/images}
RES=$WORK/warm
command -v python3 >/dev/null || { echo "bench-warm: python3 is required" >&2; exit 1; }
if [ -z "${HUSK:-}" ]; then
    cargo build --release
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
fi
[ -f "$IMAGES/busybox/index.json" ] || HUSK_IMAGES=$IMAGES scripts/build-images.sh busybox
mkdir -p "$RES"
SERVE_PID=""
cleanup() {
    local rc=$?
    set +e
    if [ -n "$SERVE_PID" ]; then
        kill -TERM "$SERVE_PID" 2>/dev/null
        wait "$SERVE_PID" 2>/dev/null
    fi
    rm -rf --one-file-system "${WORK:?}/pools"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SECTIONS=("$@")
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(pools)

# ------------------------------------------------------------------ pools --
# Claims from `husk serve --pool` against cold creates, all through the
# same serve (POST /v1/sandboxes over its unix socket, from one Python
# client): the claim's latency (as the client sees it, and the claim
# itself as serve measured it: "claim_ms"), and create + exec /bin/true +
# destroy with a claimed sandbox vs a cold one; `husk run` /bin/true for
# reference. Pooled and cold alternate within each round (which goes first
# alternates too); before each claim the pool is let refill (untimed), so
# every timed claim finds a READY member. Busybox image, --memory 256M
# --pids 256 for both.
bench_pools() {
    local T=$WORK/pools
    rm -rf --one-file-system "${T:?}"
    mkdir -p "$T"
    export HUSK_ROOT=$T/store HUSK_STATE_DIR=$T/state
    "$HUSK" image import "$IMAGES/busybox" >/dev/null
    "$HUSK" serve --pool "bb=busybox,memory=256M,pids=256:4" >"$T/serve.out" 2>"$T/serve.err" &
    SERVE_PID=$!
    python3 - "$T/state/api.sock" "$ROUNDS" "$HUSK" "$RES/pools.json" <<'EOF'
import json, socket, statistics as st, subprocess, sys, time
sock, rounds, husk, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def req(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    resp = b""
    while chunk := s.recv(65536):
        resp += chunk
    s.close()
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head[9:12])
    return status, json.loads(body)

for _ in range(1500):
    try:
        if req("GET", "/v1/pools/bb")[1]["ready"] == 4:
            break
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.02)
else:
    sys.exit("bench-warm: pool bb did not fill within 30 s")

def refilled():
    while True:
        p = req("GET", "/v1/pools/bb")[1]
        if p["ready"] == 4 and p["creating"] == 0:
            return
        time.sleep(0.01)

def cycle(body):
    t0 = time.perf_counter()
    status, rec = req("POST", "/v1/sandboxes", body)
    t1 = time.perf_counter()
    assert status == 201, rec
    status, v = req("POST", f"/v1/sandboxes/{rec['id']}/exec", {"argv": ["/bin/true"]})
    assert status == 200 and v["exit_code"] == 0, v
    status, _ = req("DELETE", f"/v1/sandboxes/{rec['id']}")
    t2 = time.perf_counter()
    assert status == 200
    return rec, (t1 - t0) * 1e3, (t2 - t0) * 1e3

cold_body = {"image": "busybox", "memory": "256M", "pids": 256}
r = {"claim_client_ms": [], "claim_serve_ms": [], "pooled_total_ms": [], "cold_create_ms": [], "cold_total_ms": [],
     "run_ms": [], "misses": 0}
for i in range(rounds + 2):
    warm = i < 2
    for which in (("pool", "cold") if i % 2 else ("cold", "pool")):
        if which == "pool":
            refilled()
            rec, c, t = cycle({"pool": "bb"})
            if warm:
                continue
            if not rec.get("pooled"):
                r["misses"] += 1
                continue
            r["claim_client_ms"].append(c)
            r["claim_serve_ms"].append(rec["claim_ms"])
            r["pooled_total_ms"].append(t)
        else:
            _, c, t = cycle(cold_body)
            if not warm:
                r["cold_create_ms"].append(c)
                r["cold_total_ms"].append(t)
    t0 = time.perf_counter()
    subprocess.run([husk, "run", "--image", "busybox", "--memory", "256M", "--pids", "256", "--", "/bin/true"],
                   check=True, stdout=subprocess.DEVNULL)
    if not warm:
        r["run_ms"].append((time.perf_counter() - t0) * 1e3)
summary = {k: {"median": st.median(v), "p90": sorted(v)[int(0.9 * (len(v) - 1))], "n": len(v)}
           for k, v in r.items() if isinstance(v, list) and v}
summary["misses"] = r["misses"]
summary["load"] = open("/proc/loadavg").read().split()[:3]
json.dump({"raw": r, "summary": summary}, open(out, "w"), indent=1)
names = {
    "claim_serve_ms": "claim, in serve (claim_ms)",
    "claim_client_ms": "claim, client round trip (POST /v1/sandboxes {pool})",
    "cold_create_ms": "cold create, client round trip (POST /v1/sandboxes {image})",
    "pooled_total_ms": "pooled: claim + exec /bin/true + DELETE",
    "cold_total_ms": "cold: create + exec /bin/true + DELETE",
    "run_ms": "husk run /bin/true (one cold sandbox, CLI)",
}
print(f"pools ({rounds} rounds, load {' '.join(summary['load'])}, misses {r['misses']}):")
for k, name in names.items():
    if k in summary:
        s = summary[k]
        print(f"  {name:62s} median {s['median']:8.3f} ms  p90 {s['p90']:8.3f} ms  (n={s['n']})")
if "pooled_total_ms" in summary and "cold_total_ms" in summary:
    print(f"  pooled / cold (create + exec + destroy, medians): "
          f"{summary['pooled_total_ms']['median'] / summary['cold_total_ms']['median']:.2f}x")
EOF
    # SIGTERM removes the unclaimed members; serve says how many.
    kill -TERM "$SERVE_PID"
    wait "$SERVE_PID" || true
    SERVE_PID=""
    grep -h "pool member" "$T/serve.err" || true
}

for s in "${SECTIONS[@]}"; do
    case "$s" in
        pools) bench_pools ;;
        *) echo "bench-warm: no section $s (sections: pools)" >&2; exit 2 ;;
    esac
done

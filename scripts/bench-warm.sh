#!/usr/bin/env bash
# Warm starts (docs/warm.md), one section per mechanism; run as root:
#
#   scripts/bench-warm.sh            # every section (pools, code)
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
. "$SRC/scripts/lib/dockerd.sh"
cleanup() {
    local rc=$?
    set +e
    if [ -n "$SERVE_PID" ]; then
        kill -TERM "$SERVE_PID" 2>/dev/null
        wait "$SERVE_PID" 2>/dev/null
    fi
    dockerd_stop
    rm -rf --one-file-system "${WORK:?}/pools" "${WORK:?}/code"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SECTIONS=("$@")
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(pools code)

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
    PYTHONPATH=$SRC/scripts python3 - "$T/state/api.sock" "$ROUNDS" "$HUSK" "$RES/pools.json" <<'EOF'
import json, socket, subprocess, sys, time
from benchstat import summarize, table
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
summary = summarize(r, out, misses=r["misses"])
names = {
    "claim_serve_ms": "claim, in serve (claim_ms)",
    "claim_client_ms": "claim, client round trip (POST /v1/sandboxes {pool})",
    "cold_create_ms": "cold create, client round trip (POST /v1/sandboxes {image})",
    "pooled_total_ms": "pooled: claim + exec /bin/true + DELETE",
    "cold_total_ms": "cold: create + exec /bin/true + DELETE",
    "run_ms": "husk run /bin/true (one cold sandbox, CLI)",
}
table(f"pools ({rounds} rounds, misses {r['misses']}", summary, names, 62)
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

# ------------------------------------------------------------------- code --
# run_code through the Python client (clients/python) and serve, as an
# agent's tool call makes it: `print(1)` in a sandbox claimed from a warm
# pool (--warm python: a fresh fork of a waiting interpreter per call)
# against `--code` in a live sandbox without one (a fresh python3 per call),
# a cold `husk run` (sandbox and interpreter made per call), the host's own
# `python3 -c`, and `docker run --rm` of the python image (a private
# dockerd, when the image and dockerd are there); then `import numpy;
# print(1)` with numpy preloaded vs cold vs host; and the claim from the
# warm pool. Every husk sandbox is the host's root read-only (Debian's
# python3 and python3-numpy, as tests/warm.rs uses it) with --memory 512M;
# the cases of a round run interleaved, their order rotating. The verdict's
# own duration and phases split serve's and the client's share from husk
# exec's. Last, one warm call under strace -f -T: the system calls over
# 1 ms, the profile of where the time goes.
bench_code() {
    local T=$WORK/code PY=/usr/bin/python3
    rm -rf --one-file-system "${T:?}"
    mkdir -p "$T"
    "$PY" -c 'import numpy' 2>/dev/null \
        || { echo "bench-warm: $PY has no numpy: apt-get install python3-numpy" >&2; exit 1; }
    export HUSK_ROOT=$T/store HUSK_STATE_DIR=$T/state
    "$HUSK" serve --pool "pyw=rootfs=/,memory=512M,warm=python:2" --pool "np=rootfs=/,memory=512M,warm=python:numpy:2" \
        >"$T/serve.out" 2>"$T/serve.err" &
    SERVE_PID=$!
    local docker_cmd=""
    if [ -f "$IMAGES/python.docker.tar" ] && command -v dockerd >/dev/null; then
        if dockerd_start "$T/docker" && $DOCKER load -i "$IMAGES/python.docker.tar" >/dev/null 2>&1; then
            docker_cmd="$DOCKER run --rm --network none --memory 512m python:latest"
        else
            echo "bench-warm: dockerd did not load $IMAGES/python.docker.tar; docker left out" >&2
        fi
    else
        echo "bench-warm: no $IMAGES/python.docker.tar (scripts/build-images.sh python) or no dockerd: docker left out" >&2
    fi
    PYTHONPATH=$SRC/clients/python:$SRC/scripts python3 - "$T/state" "$ROUNDS" "$HUSK" "$RES/code.json" "$docker_cmd" <<'EOF'
import json, shlex, subprocess, sys, time
from husk import Sandbox
from husk._http import HttpTransport
from benchstat import summarize, table
state, rounds, husk, out, docker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
t = HttpTransport(socket_path=f"{state}/api.sock")
for _ in range(3000):
    try:
        ready = {p["name"]: p["ready"] for p in t._json("GET", "/v1/pools")["pools"]}
        if ready == {"pyw": 2, "np": 2}:
            break
    except Exception:
        pass
    time.sleep(0.02)
else:
    sys.exit("bench-warm: the warm pools did not fill within 60 s")

def refilled(pool):
    while True:
        p = t._json("GET", f"/v1/pools/{pool}")
        if p["ready"] == p["size"] and p["creating"] == 0:
            return
        time.sleep(0.01)

warm = Sandbox.create(pool="pyw", transport=t, heartbeat=False)
numpy = Sandbox.create(pool="np", transport=t, heartbeat=False)
plain = Sandbox.create(rootfs="/", memory="512M", transport=t, heartbeat=False)
assert warm.info.pooled and numpy.info.pooled, (warm.info, numpy.info)

def code(sb, src, mode):
    def f():
        r = sb.run_code(src)
        assert r.ok and r.stdout.text == "1\n" and r.warm["mode"] == mode, r.raw
        return r.raw
    return f

def proc(argv):
    def f():
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 0 and p.stdout == b"1\n", (argv, p)
    return f

def claim():
    refilled("pyw")
    body = {"pool": "pyw"}
    t0 = time.perf_counter()
    rec = t._json("POST", "/v1/sandboxes", body)
    ms = (time.perf_counter() - t0) * 1e3
    assert rec["pooled"], rec
    t.destroy(rec["id"])
    return ms, rec["claim_ms"]

run = [husk, "run", "--rootfs", "/", "--memory", "512M", "--"]
cases = {
    "print1_warm_pool": code(warm, "print(1)", "fork"),
    "print1_code_cold_in_sandbox": code(plain, "print(1)", "cold"),
    "print1_husk_run": proc(run + ["python3", "-c", "print(1)"]),
    "print1_host_python": proc(["/usr/bin/python3", "-c", "print(1)"]),
    "numpy_warm_pool": code(numpy, "import numpy; print(1)", "fork"),
    "numpy_husk_run": proc(run + ["python3", "-c", "import numpy; print(1)"]),
    "numpy_host_python": proc(["/usr/bin/python3", "-c", "import numpy; print(1)"]),
}
if docker:
    cases["print1_docker_run"] = proc(shlex.split(docker) + ["python3", "-c", "print(1)"])
    cases["numpy_docker_run"] = proc(shlex.split(docker) + ["python3", "-c", "import numpy; print(1)"])
r = {k: [] for k in cases}
r.update({"print1_warm_husk_exec_ms": [], "print1_warm_plan_ms": [], "print1_warm_run_ms": [],
          "numpy_warm_husk_exec_ms": [], "claim_client_ms": [], "claim_serve_ms": []})
names = list(cases)
for i in range(rounds + 2):
    order = names[i % len(names):] + names[:i % len(names)]
    for k in order:
        t0 = time.perf_counter()
        v = cases[k]()
        ms = (time.perf_counter() - t0) * 1e3
        if i < 2:
            continue
        r[k].append(ms)
        if k == "print1_warm_pool":
            r["print1_warm_husk_exec_ms"].append(v["duration_ms"])
            r["print1_warm_plan_ms"].append(v["phases_ms"].get("plan", 0.0))
            r["print1_warm_run_ms"].append(v["phases_ms"].get("run", 0.0))
        if k == "numpy_warm_pool":
            r["numpy_warm_husk_exec_ms"].append(v["duration_ms"])
    if i >= 2:
        c, s = claim()
        r["claim_client_ms"].append(c)
        r["claim_serve_ms"].append(s)
for sb in (warm, numpy, plain):
    sb.close()
summary = summarize(r, out)
label = {
    "print1_warm_pool": "run_code('print(1)'), warm pool (client + serve)",
    "print1_warm_husk_exec_ms": "  of which husk exec (verdict duration_ms)",
    "print1_warm_plan_ms": "    phase plan (husk exec start to the call sent)",
    "print1_warm_run_ms": "    phase run (the child released, code, status)",
    "print1_code_cold_in_sandbox": "run_code('print(1)'), live sandbox, fresh python3",
    "print1_husk_run": "husk run python3 -c 'print(1)' (cold, CLI)",
    "print1_host_python": "host python3 -c 'print(1)'",
    "print1_docker_run": "docker run --rm python3 -c 'print(1)'",
    "numpy_warm_pool": "run_code('import numpy; print(1)'), numpy preloaded",
    "numpy_warm_husk_exec_ms": "  of which husk exec (verdict duration_ms)",
    "numpy_husk_run": "husk run python3 -c 'import numpy; print(1)' (cold)",
    "numpy_host_python": "host python3 -c 'import numpy; print(1)'",
    "numpy_docker_run": "docker run --rm python3 -c 'import numpy; print(1)'",
    "claim_client_ms": "claim from the warm pool (client round trip)",
    "claim_serve_ms": "claim from the warm pool (in serve: claim_ms)",
}
table(f"code ({rounds} rounds", summary, label, 58,
      ratios=(("print1_warm_pool", "print1_host_python"), ("print1_warm_pool", "print1_husk_run"),
              ("numpy_warm_pool", "numpy_husk_run"), ("print1_warm_pool", "print1_docker_run")))
EOF
    # Where a warm call's time goes: one `husk exec --code` under strace.
    if command -v strace >/dev/null; then
        local id
        id=$("$HUSK" create --rootfs / --memory 512M --warm python)
        echo 'print(1)' >"$T/p1.py"
        "$HUSK" exec --code "$T/p1.py" "$id" >/dev/null
        strace -f -T -o "$T/strace.txt" "$HUSK" exec --code "$T/p1.py" "$id" >/dev/null
        echo "  one warm call under strace -f -T: system calls that took over 1 ms"
        awk 'match($0, /<[0-9.]+>$/) { t = substr($0, RSTART + 1, RLENGTH - 2); if (t > 0.001) printf "    %7.2f ms  %s\n", t * 1000, substr($0, 1, 110) }' "$T/strace.txt"
        "$HUSK" rm "$id" >/dev/null
    fi
    kill -TERM "$SERVE_PID"
    wait "$SERVE_PID" || true
    SERVE_PID=""
}

for s in "${SECTIONS[@]}"; do
    case "$s" in
        pools) bench_pools ;;
        code) bench_code ;;
        *) echo "bench-warm: no section $s (sections: pools, code)" >&2; exit 2 ;;
    esac
done

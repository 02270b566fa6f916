#!/usr/bin/env bash
# Throughput: sandboxes per second with CLIENTS concurrent clients, each
# starting /bin/true in a fresh busybox sandbox one after another, for
# husk (cold `husk run`, with --memory and --pids limits), bwrap and crun
# (the same limits, husk's default seccomp profile). Run as root:
#
#   scripts/bench-throughput.sh
#
# scripts/bench.sh calls it (BENCH_NO_THROUGHPUT=1 skips it there) with its
# husk binary, image layouts and work dir; alone it builds what it needs.
# Writes docs/throughput.md (THROUGHPUT_MD overrides) and the raw numbers
# as throughput.json in its work dir.
#
# Every client loops `per client` runs; the rate is all runs divided by the
# wall time from the first start to the last end. CPU per sandbox is read
# from a cgroup v1 cpuacct group the driver and every process it starts
# run in (the whole tree, also what outlives a runtime's own process, such
# as bwrap's pid 1; not kernel work deferred to kworkers), when the host
# has one.
#
# Environment: HUSK (binary under test; default the release build),
# HUSK_IMAGES (OCI layouts, default build/images; busybox is built if
# missing), BENCH_WORK (default build/bench-throughput), THROUGHPUT_CLIENTS
# (8), THROUGHPUT_PER_CLIENT (25), THROUGHPUT_MEMORY (512M),
# THROUGHPUT_PIDS (256), THROUGHPUT_MD (default docs/throughput.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-throughput: run as root (crun and husk's limits need it)" >&2; exit 1; }
CLIENTS=${THROUGHPUT_CLIENTS:-8}
PER=${THROUGHPUT_PER_CLIENT:-25}
MEMORY=${THROUGHPUT_MEMORY:-512M}
PIDS=${THROUGHPUT_PIDS:-256}
MD=${THROUGHPUT_MD:-$SRC/docs/throughput.md}
WORK=${BENCH_WORK:-$SRC/build/bench-throughput}
IMAGES=${HUSK_IMAGES:-$SRC/build/images}
have() { command -v "$1" >/dev/null 2>&1; }
for t in python3 umoci bwrap; do
    have "$t" || { echo "bench-throughput: $t is required: apt-get install ${t/bwrap/bubblewrap}" >&2; exit 1; }
done
if [ -z "${HUSK:-}" ]; then
    cargo build --release
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
    [ -x "$HUSK" ] || HUSK=$SRC/target/release/husk
fi
[ -f "$IMAGES/busybox/index.json" ] || HUSK_IMAGES=$IMAGES scripts/build-images.sh busybox

T=$WORK/throughput
CRUN_ROOT=$T/crun
cleanup() {
    local rc=$?
    set +e
    if have crun; then
        for id in $(crun --root "$CRUN_ROOT" list -q 2>/dev/null); do crun --root "$CRUN_ROOT" delete -f "$id"; done
    fi
    stop_serve
    rm -rf --one-file-system "${T:?}"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf --one-file-system "${T:?}"
mkdir -p "$T/tmp"
export HUSK_ROOT=$T/store HUSK_STATE_DIR=$T/state
"$HUSK" image import "$IMAGES/busybox" >/dev/null
umoci unpack --image "$IMAGES/busybox:latest" "$T/bb" >/dev/null
mkdir -p "$T/bb/rootfs/proc" "$T/bb/rootfs/dev" "$T/bb/rootfs/sys" "$T/bb/rootfs/tmp"
MEM_BYTES=$("$HUSK" run --json --image busybox --memory "$MEMORY" --pids "$PIDS" -- /bin/true \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["limits"]["memory"]["applied"])')

# The peers' commands; {n} is each run's number (crun's container ids).
NAMES=() CMDS=() WRAPS=()
add() { NAMES+=("$1"); CMDS+=("$2"); WRAPS+=("${3:-}"); }
add "host /bin/true (no sandbox: the driver's own cost)" "/bin/true"
add "husk run (cold, --memory $MEMORY --pids $PIDS)" \
    "$HUSK run --image busybox --memory $MEMORY --pids $PIDS -- /bin/true"
add "bwrap (no limits: bwrap has none)" \
    "$(command -v bwrap) --unshare-all --die-with-parent --ro-bind $T/bb/rootfs / --proc /proc --dev /dev --tmpfs /tmp /bin/true"
SKIPPED=()
if have crun; then
    "$HUSK" seccomp show default >"$T/tmp/seccomp.json"
    (cd "$T/tmp" && crun spec)
    mkdir -p "$T/oci-true"
    scripts/oci-bundle.py "$T/tmp/config.json" "$T/tmp/seccomp.json" "$T/bb/rootfs" "$MEM_BYTES" "$PIDS" \
        "$T/oci-true/config.json" /bin/true
    # crun 1.8 refuses hybrid hosts whose v2 hierarchy has a controller; in
    # a private mount namespace (one for the whole crun measurement) that
    # file reads empty. The same as scripts/bench.sh does.
    WRAP=""
    if [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers)" ]; then
        WRAP=private-cgroup-controllers
    fi
    add "crun run (--memory, --pids, husk's seccomp profile)" \
        "$(command -v crun) --root $CRUN_ROOT run --bundle $T/oci-true husk-tp-{n}" "$WRAP"
else
    SKIPPED+=("crun run: crun is not installed (apt-get install crun)")
fi
# Pooled husk: a sandbox claimed from `husk serve --pool` (made ahead with
# the same limits), /bin/true exec'd in it, then released (destroyed, never
# reused): three husk commands per sandbox, while serve refills the pool in
# the background. serve and everything it starts are counted in the CPU.
POOL_SIZE=${THROUGHPUT_POOL_SIZE:-$CLIENTS}
SERVE_PID=""
CREATE_HELP=$("$HUSK" create --help 2>/dev/null || true)
if grep -q -- '--pool' <<<"$CREATE_HELP"; then
    add "husk pooled (claim + exec + rm; pool of $POOL_SIZE, same limits)" "$HUSK create --pool tp
$HUSK exec {id} -- /bin/true
$HUSK rm {id}" pool
else
    SKIPPED+=("husk pooled: this husk has no sandbox pools (\`create --pool\`, issue 21)")
fi
start_serve() {
    "$HUSK" serve --pool "tp=busybox,memory=$MEMORY,pids=$PIDS:$POOL_SIZE" >"$T/serve.log" 2>&1 &
    SERVE_PID=$!
    python3 - "$HUSK_STATE_DIR/api.sock" "$POOL_SIZE" <<'PY' || { cat "$T/serve.log" >&2; exit 1; }
import sys, time
sock, size = sys.argv[1], int(sys.argv[2])
exec(open(__import__("os").environ["TP_POOLS_PY"]).read())
for _ in range(600):
    try:
        p = pool(sock)
        if p and p["ready"] >= size:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit("bench-throughput: the pool did not fill in 60 s")
PY
}
stop_serve() {
    [ -n "$SERVE_PID" ] || return 0
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=""
}
# GET /v1/pools over serve's unix socket: the tp pool's counts.
export TP_POOLS_PY=$T/pools.py
cat >"$TP_POOLS_PY" <<'PY'
import json, socket
def pool(sock_path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(b"GET /v1/pools HTTP/1.1\r\nHost: husk\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    body = json.loads(data.split(b"\r\n\r\n", 1)[1])
    pools = body["pools"] if isinstance(body, dict) else body
    return next((p for p in pools if p.get("name") == "tp"), None)
PY

cat >"$T/driver.py" <<'EOF'
import json, os, shlex, sys, threading, time, statistics as st
out, name, clients, per, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
# One line per step; {id} is the first step's stdout (a sandbox id).
steps = [shlex.split(line) for line in cmd.splitlines() if line.strip()]
null = os.open("/dev/null", os.O_RDWR)
errors = []
def step(a, c):
    errf = f"{out}.stderr.{c}"
    err = os.open(errf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    r, w = os.pipe()
    pid = os.posix_spawn(a[0], a, os.environ, file_actions=[
        (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_DUP2, err, 2)])
    os.close(err)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        text = f.read().decode().strip()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        errors.append(f"{a}: wait status {status}: {open(errf).read()[-500:]}")
    return text
def run(n, c=0):
    t0 = time.perf_counter()
    first = None
    for argv in steps:
        text = step([w.replace("{n}", str(n)).replace("{id}", first or "") for w in argv], c)
        first = text if first is None else first
    return time.perf_counter() - t0
ACCT = "/sys/fs/cgroup/cpuacct"
acct = None
if os.path.exists(ACCT + "/cpuacct.usage"):
    home = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup")
                if "cpuacct" in l.split(":")[1].split(","))
    acct = f"{ACCT}/husk-throughput-{os.getpid()}"
def enter(d):
    with open(d + "/cgroup.procs", "w") as f: f.write(str(os.getpid()))
for i in range(3):
    run(1_000_000 + i)
if errors: sys.exit("\n".join(errors))
def tree(root):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    todo, seen = [root], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen
if acct:
    # Made only now: the warm-up's failure above must leave nothing behind.
    os.mkdir(acct)
    enter(acct)
    # A server the runs talk to (husk serve: its pool's refills) counts too.
    for p in tree(int(os.environ.get("TP_ACCOUNT_TREE", "0") or 0)) if os.environ.get("TP_ACCOUNT_TREE") else []:
        try:
            with open(acct + "/cgroup.procs", "w") as f: f.write(str(p))
        except OSError:
            pass
lat = [[] for _ in range(clients)]
def client(c):
    for i in range(per):
        lat[c].append(run(c * per + i, c))
threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
t0 = time.perf_counter()
for t in threads: t.start()
for t in threads: t.join()
wall = time.perf_counter() - t0
cpu = None
if acct:
    time.sleep(1)  # what outlived its runtime's process ends
    cpu = int(open(acct + "/cpuacct.usage").read()) / 1e9
    # Everything still in the group (a server) goes back with the driver.
    for p in open(acct + "/cgroup.procs").read().split():
        try:
            with open(ACCT + home + "/cgroup.procs", "w") as f: f.write(p)
        except OSError:
            pass
    os.rmdir(acct)
if errors: sys.exit(f"{len(errors)} runs failed; first: {errors[0]}")
all_lat = sorted(x for l in lat for x in l)
n = clients * per
r = {"name": name, "command": cmd, "clients": clients, "runs": n, "wall_s": wall, "per_s": n / wall,
     "median_ms": st.median(all_lat) * 1e3, "p90_ms": all_lat[int(0.9 * (n - 1))] * 1e3,
     "cpu_ms_per_run": cpu * 1e3 / n if cpu is not None else None}
with open(out, "a") as f: f.write(json.dumps(r) + "\n")
print(f"{name}: {r['per_s']:.1f}/s, median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms"
      + (f", cpu {r['cpu_ms_per_run']:.2f} ms per sandbox" if cpu is not None else ""))
EOF

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$T/throughput.jsonl"
for i in "${!NAMES[@]}"; do
    if [ "${WRAPS[$i]}" = pool ]; then
        start_serve
        TP_ACCOUNT_TREE=$SERVE_PID python3 "$T/driver.py" "$T/throughput.jsonl" "${NAMES[$i]}" "$CLIENTS" "$PER" "${CMDS[$i]}"
        python3 -c 'import json, os, sys; exec(open(os.environ["TP_POOLS_PY"]).read()); p = pool(sys.argv[1]); print(json.dumps({k: p.get(k) for k in ("claims", "misses", "replaced", "failures")}))' \
            "$HUSK_STATE_DIR/api.sock" >"$T/pool-counts.json"
        echo "pool counts: $(cat "$T/pool-counts.json")"
        stop_serve
    elif [ "${WRAPS[$i]}" = private-cgroup-controllers ]; then
        # shellcheck disable=SC2016 # $@ expands in the inner shell
        unshare -m --propagation private sh -c \
            'mount --bind /dev/null /sys/fs/cgroup/unified/cgroup.controllers && exec "$@"' sh \
            python3 "$T/driver.py" "$T/throughput.jsonl" "${NAMES[$i]}" "$CLIENTS" "$PER" "${CMDS[$i]}"
    else
        python3 "$T/driver.py" "$T/throughput.jsonl" "${NAMES[$i]}" "$CLIENTS" "$PER" "${CMDS[$i]}"
    fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$WORK"
cp "$T/throughput.jsonl" "$WORK/throughput.json"

export LOAD_BEFORE LOAD_AFTER CLIENTS PER MEMORY PIDS
export HUSK_VERSION="$("$HUSK" --version | head -1) ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?'))"
export CRUN_VERSION="$(crun --version 2>/dev/null | head -1 || true)" BWRAP_VERSION="$(bwrap --version | head -1)"
printf '%s\n' "${SKIPPED[@]}" >"$T/skipped.txt"
[ -f "$T/pool-counts.json" ] || echo null >"$T/pool-counts.json"
python3 - "$T/throughput.jsonl" "$T/skipped.txt" "$MD" "$T/pool-counts.json" <<'EOF'
import json, os, platform, sys, time
rows = [json.loads(l) for l in open(sys.argv[1])]
counts = json.load(open(sys.argv[4]))
pooled = next((r for r in rows if r["name"].startswith("husk pooled")), None)
skipped = [l.strip() for l in open(sys.argv[2]) if l.strip()]
e = os.environ
crun = next((r for r in rows if r["name"].startswith("crun")), None)
husk = next((r for r in rows if r["name"].startswith("husk run")), None)
bwrap = next((r for r in rows if r["name"].startswith("bwrap")), None)
s = ["# Throughput", "",
     "Generated by `scripts/bench-throughput.sh` (also run by `scripts/bench.sh`) on "
     + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()) + "; do not edit by hand, rerun the script.", "",
     f"{e['CLIENTS']} concurrent clients, each starting `/bin/true` in a fresh busybox sandbox {e['PER']} times "
     "one after another; sandboxes per second = all runs / wall time from the first start to the last end. "
     "CPU per sandbox: cgroup v1 cpuacct of the driver and everything it started, divided by the runs "
     "(the whole tree, also what outlives the runtime's own process; kernel work deferred to kworkers is not in it; "
     "the first row is the driver's own share).", "",
     f"Host: kernel {platform.release()}, {os.cpu_count()} cpus, load average {e['LOAD_BEFORE']} before, "
     f"{e['LOAD_AFTER']} after (a shared machine: other jobs ran too). husk: {e['HUSK_VERSION']}; "
     f"{e['BWRAP_VERSION']}; {e['CRUN_VERSION'] or 'crun not installed'}.", "",
     "| runtime | sandboxes/s | ÷ crun | latency median | p90 | CPU per sandbox |",
     "|---|---:|---:|---:|---:|---:|"]
for r in rows:
    ratio = f"{r['per_s'] / crun['per_s']:.2f}×" if crun else "—"
    cpu = f"{r['cpu_ms_per_run']:.2f} ms" if r["cpu_ms_per_run"] is not None else "—"
    s.append(f"| {r['name']} | {r['per_s']:.1f} | {ratio} | {r['median_ms']:.2f} ms | {r['p90_ms']:.2f} ms | {cpu} |")
s.append("")
for k in skipped:
    s.append(f"- **not measured**: {k}")
if skipped: s.append("")
if husk and crun:
    met = "met" if husk["per_s"] >= 2 * crun["per_s"] else "**not met**"
    s.append(f"Target (issue 21): husk cold ≥ 2× crun's sandboxes/s with limits on: "
             f"{husk['per_s'] / crun['per_s']:.2f}×: {met}.")
if husk and bwrap:
    s.append(f"husk cold vs bwrap: {husk['per_s'] / bwrap['per_s']:.2f}× the sandboxes/s"
             + (f", {husk['cpu_ms_per_run'] / bwrap['cpu_ms_per_run']:.2f}× the CPU per sandbox"
                if husk["cpu_ms_per_run"] and bwrap["cpu_ms_per_run"] else "") + ".")
if pooled and counts:
    s.append(f"The pool over the pooled run: {counts['claims']} claims, {counts['misses']} misses (claims that found "
             "no READY member and created the sandbox cold), "
             f"{counts['replaced']} replaced, {counts['failures']} refill failures. A pooled sandbox is three husk "
             "commands (claim, exec, rm) and serve's refill makes a new one behind it; its CPU per sandbox includes "
             "serve and the refills.")
if pooled and husk:
    s.append(f"husk pooled vs husk cold: {pooled['per_s'] / husk['per_s']:.2f}× the sandboxes/s, "
             f"median latency {pooled['median_ms']:.2f} vs {husk['median_ms']:.2f} ms.")
s.append("")
s.append("Commands:")
s.append("")
for r in rows:
    s.append(f"- {r['name']}: `{' && '.join(r['command'].splitlines())}`")
open(sys.argv[3], "w").write("\n".join(s) + "\n")
print(f"wrote {sys.argv[3]}")
EOF

#!/usr/bin/env bash
# The egress proxy's cost (docs/network.md, "What it costs"); run as root:
#
#   scripts/bench-network.sh [HUSK]
#
# One loopback server on the host (python3, sendfile), and curl or python3
# as the client inside host-mode sandboxes, through the proxy
# (`--network allow=bench.test:PORT --add-host bench.test:127.0.0.1`) and
# directly (`--network host`, same server, same client):
#
#   download  a 200 MB file, curl's own transfer time (sandbox start not
#             included), ROUNDS rounds interleaved; ratio = direct / proxy
#             time (the throughput fraction; target >= 0.8)
#   latency   one fresh connection per request (connect, GET of 16 bytes,
#             the answer to its end), 500 per round in one sandbox, timed
#             inside by python3; added = median(proxy) - median(direct)
#             (target < 1 ms)
#   rss       the egress-proxy process's VmRSS idle and with 200 tunnels
#             open at once (200 CONNECTs held by the server)
#   cold      `husk run -- /bin/true` with --network allow= vs none
#             (scripts/paired.py, interleaved; target < 1 ms more)
#
# scripts/bench.sh runs it with its husk (BENCH_NETWORK=0 leaves it out).
# Alone it builds the release husk. Environment: ROUNDS (5), COLD_RUNS (200),
# BENCH_WORK (default build/bench-network). Results: a summary on stdout
# and in $BENCH_WORK/network/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-network: run as root" >&2; exit 1; }
for t in curl python3; do
    command -v "$t" >/dev/null || { echo "bench-network: $t is required: apt-get install $t" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-5}
COLD_RUNS=${COLD_RUNS:-200}
HUSK=${1:-${HUSK:-}}
if [ -z "$HUSK" ]; then
    cargo build --release --bin husk
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
fi
[ -x "$HUSK" ] || { echo "bench-network: no husk binary at $HUSK" >&2; exit 1; }
WORK=${BENCH_WORK:-$SRC/build/bench-network}/network
rm -rf --one-file-system "${WORK:?}"
mkdir -p "$WORK/srv" "$WORK/t"
chmod 777 "$WORK/t"
SERVER_PID=""
RUN_PID=""
cleanup() {
    local rc=$?
    set +e
    [ -n "$RUN_PID" ] && kill -TERM "$RUN_PID" 2>/dev/null && wait "$RUN_PID" 2>/dev/null
    [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf --one-file-system "${WORK:?}/srv" "${WORK:?}/t"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
SUMMARY=$WORK/summary.txt
: >"$SUMMARY"
out() { echo "$*" | tee -a "$SUMMARY"; }

# ------------------------------------------------------------------ server --
# GET /blob: the 200 MB file by sendfile; /small: 16 bytes; /hold: a
# response head, then the connection is held until the client closes it.
head -c 200000000 /dev/urandom >"$WORK/srv/blob"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 - "$WORK/srv/blob" "$PORT" >"$WORK/server.log" 2>&1 <<'EOF' &
import os, socket, sys, threading
blob, port = sys.argv[1], int(sys.argv[2])
size = os.path.getsize(blob)
def serve(c):
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            d = c.recv(4096)
            if not d:
                return
            head += d
        path = head.split(b" ")[1]
        if path.endswith(b"/blob"):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
            with open(blob, "rb") as f:
                c.sendfile(f)
        elif path.endswith(b"/hold"):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nheld")
            while c.recv(4096):
                pass
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\nConnection: close\r\n\r\n0123456789abcdef")
    except OSError:
        pass
    finally:
        c.close()
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(1024)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
SERVER_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/small" && break; sleep 0.1; done
ALLOW=(--network "allow=bench.test:$PORT" --add-host bench.test:127.0.0.1)
DIRECT=(--network host)
run() { "$HUSK" run --timeout 600 --bind "$WORK/t:/t:rw" "$@"; }

out "husk: $HUSK ($("$HUSK" --version | head -1)); kernel $(uname -r); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- download --
say "download: 200 MB, $ROUNDS rounds (proxy and direct interleaved)"
CURL_W='%{time_total} %{size_download}\n'
: >"$WORK/download.tsv"
for r in $(seq "$ROUNDS"); do
    p=$(run "${ALLOW[@]}" -- curl -sS -o /dev/null -w "$CURL_W" "http://bench.test:$PORT/blob")
    d=$(run "${DIRECT[@]}" -- curl -sS -o /dev/null -w "$CURL_W" "http://127.0.0.1:$PORT/blob")
    printf '%s\t%s\t%s\n' "$r" "$p" "$d" >>"$WORK/download.tsv"
done
python3 - "$WORK/download.tsv" <<'EOF' | tee -a "$SUMMARY"
import statistics as st, sys
p, d = [], []
for line in open(sys.argv[1]):
    _, pr, dr = line.rstrip("\n").split("\t")
    (pt, pn), (dt, dn) = pr.split(), dr.split()
    assert int(pn) == int(dn) == 200000000, line
    p.append(float(pt)); d.append(float(dt))
mp, md = st.median(p), st.median(d)
print(f"download 200 MB: proxy {200/mp:.0f} MB/s (median {mp*1000:.0f} ms), direct {200/md:.0f} MB/s "
      f"(median {md*1000:.0f} ms): proxy/direct throughput {md/mp:.2f}x over {len(p)} rounds (target >= 0.8x)")
EOF

# ----------------------------------------------------------------- latency --
say "latency: a fresh connection per request, 500 per round, $ROUNDS rounds"
# The same python3 code for both: connect, send, read to EOF; through the
# proxy the request line names the absolute URL, as for any HTTP proxy.
cat >"$WORK/t/lat.py" <<'EOF'
import socket, sys, time
host, port, req, n = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode(), int(sys.argv[4])
for _ in range(20):
    s = socket.create_connection((host, port)); s.sendall(req)
    while s.recv(65536): pass
    s.close()
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((host, port)); s.sendall(req)
    while s.recv(65536): pass
    s.close()
    print((time.perf_counter() - t) * 1000)
EOF
: >"$WORK/lat-proxy.txt"
: >"$WORK/lat-direct.txt"
for _ in $(seq "$ROUNDS"); do
    run "${ALLOW[@]}" -- python3 /t/lat.py 127.0.0.1 3128 \
        "GET http://bench.test:$PORT/small HTTP/1.1\\r\\nHost: bench.test:$PORT\\r\\n\\r\\n" 500 >>"$WORK/lat-proxy.txt"
    run "${DIRECT[@]}" -- python3 /t/lat.py 127.0.0.1 "$PORT" \
        "GET /small HTTP/1.1\\r\\nHost: 127.0.0.1:$PORT\\r\\n\\r\\n" 500 >>"$WORK/lat-direct.txt"
done
python3 - "$WORK/lat-proxy.txt" "$WORK/lat-direct.txt" <<'EOF' | tee -a "$SUMMARY"
import statistics as st, sys
p = [float(x) for x in open(sys.argv[1])]; d = [float(x) for x in open(sys.argv[2])]
q = lambda v, f: sorted(v)[int(len(v) * f)]
print(f"per connection (connect + GET 16 B + EOF): proxy median {st.median(p):.3f} ms (p90 {q(p, .9):.3f}), "
      f"direct median {st.median(d):.3f} ms (p90 {q(d, .9):.3f}): added {st.median(p) - st.median(d):.3f} ms "
      f"median over {len(p)} connections each (target < 1 ms)")
EOF

# --------------------------------------------------------------------- rss --
say "rss: the proxy idle and with 200 tunnels open"
cat >"$WORK/t/hold.py" <<'EOF'
import os, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
open("/t/idle", "w").close()
while not os.path.exists("/t/go"):
    time.sleep(0.05)
held = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT bench.test:{port} HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n".encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 200"), "CONNECT refused"
    s.sendall(f"GET /hold HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n".encode())
    held.append(s)
for s in held:
    data = b""
    while not data.endswith(b"held"):
        data += s.recv(4096)
open("/t/ready", "w").close()
while not os.path.exists("/t/done"):
    time.sleep(0.05)
EOF
rm -f "$WORK/t/idle" "$WORK/t/go" "$WORK/t/ready" "$WORK/t/done"
# Not through run(): $! must be husk's own pid (the proxy is its child).
"$HUSK" run --timeout 600 --bind "$WORK/t:/t:rw" "${ALLOW[@]}" -- python3 /t/hold.py "$PORT" 200 >"$WORK/hold.out" 2>&1 &
RUN_PID=$!
wait_file() { for _ in $(seq 600); do [ -e "$1" ] && return 0; kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done; echo "bench-network: no $1" >&2; cat "$WORK/hold.out" >&2; exit 1; }
wait_file "$WORK/t/idle"
PROXY=""
for c in $(cat "/proc/$RUN_PID/task/"*/children 2>/dev/null); do
    grep -q egress-proxy "/proc/$c/cmdline" 2>/dev/null && PROXY=$c
done
[ -n "$PROXY" ] || { echo "bench-network: no egress-proxy under husk $RUN_PID" >&2; exit 1; }
rss() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$PROXY/status"; }
IDLE=$(rss VmRSS)
touch "$WORK/t/go"
wait_file "$WORK/t/ready"
BUSY=$(rss VmRSS)
THREADS=$(awk '$1 == "Threads:" { print $2 }' "/proc/$PROXY/status")
touch "$WORK/t/done"
wait "$RUN_PID"
RUN_PID=""
out "egress-proxy RSS: idle $((IDLE / 1024)) MiB ($IDLE kB), with 200 tunnels open $((BUSY / 1024)) MiB ($BUSY kB, $THREADS threads)"

# -------------------------------------------------------------------- cold --
say "cold start: --network allow= vs none, $COLD_RUNS rounds interleaved"
python3 scripts/paired.py "$COLD_RUNS" \
    "$HUSK run --network none -- /bin/true" \
    "$HUSK run --network allow=bench.test:$PORT --add-host bench.test:127.0.0.1 -- /bin/true" | tee "$WORK/cold.txt"
python3 - "$WORK/cold.txt" <<'EOF' | tee -a "$SUMMARY"
import re, sys
med = [float(m) for m in re.findall(r"^\s*([0-9.]+) med ", open(sys.argv[1]).read(), re.M)]
if len(med) >= 2:
    print(f"cold start /bin/true: none median {med[0]:.2f} ms, allow= median {med[1]:.2f} ms: {med[1] - med[0]:+.2f} ms (target < 1 ms)")
else:
    print("cold start: could not read scripts/paired.py's medians; see cold.txt")
EOF

say "summary ($SUMMARY)"
cat "$SUMMARY"

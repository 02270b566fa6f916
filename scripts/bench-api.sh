#!/usr/bin/env bash
# The API an agent harness holds (issue 19, docs/api.md "Speed"), as its
# calls see it; run as root:
#
#   scripts/bench-api.sh
#
# 1. exec round trip of `true` in a live sandbox: raw HTTP to `husk serve`,
#    the Python client through serve, `husk exec` (CLI), the Python client
#    through the CLI, and docker-py's `exec_run` in a running container;
# 2. create + exec `sh -c 'echo 1'` + destroy, the same ways (busybox image,
#    --memory 256M, no network, for husk and docker alike);
# 3. create + run_code("print(1)") + destroy through the Python client
#    (serve and CLI), in a sandbox whose root is the host's / (the busybox
#    image has no python), with docker-py against python.docker.tar when
#    scripts/build-images.sh python made it.
# The cases of a round run interleaved, their order rotating; medians and
# p90 of API_ROUNDS rounds (default 40) after 2 untimed ones.
#
# docker-py (the `docker` package) goes into a venv under the work dir; the
# dockerd is private (its own data root, socket and pidfile, no bridge,
# no iptables), started and stopped here by pid.
#
# Environment: HUSK (binary under test; default the release build),
# HUSK_IMAGES (default build/images; busybox is built if missing),
# BENCH_WORK (default build/bench-api), API_ROUNDS (40), API_DOCKER=0 to
# leave docker out.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench-api: run as root (cgroup limits, dockerd)" >&2; exit 1; }
ROUNDS=${API_ROUNDS:-40}
WORK=${BENCH_WORK:-$SRC/build/bench-api}
IMAGES=${HUSK_IMAGES:-$SRC/build/images}
if [ -z "${HUSK:-}" ]; then
    cargo build --release
    HUSK=$SRC/target/x86_64-unknown-linux-gnu/release/husk
fi
[ -f "$IMAGES/busybox/index.json" ] || HUSK_IMAGES=$IMAGES scripts/build-images.sh busybox
T=$WORK/run
SERVE_PID=""
. "$SRC/scripts/lib/dockerd.sh"
cleanup() {
    local rc=$?
    set +e
    if [ -n "$SERVE_PID" ]; then
        kill -TERM "$SERVE_PID" 2>/dev/null
        wait "$SERVE_PID" 2>/dev/null
    fi
    [ -x "$HUSK" ] && HUSK_STATE_DIR=$T/state "$HUSK" rm --all --force >/dev/null 2>&1
    dockerd_stop
    rm -rf --one-file-system "${T:?}"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf --one-file-system "${T:?}"
mkdir -p "$T"

# docker-py in a venv of its own (kept between runs).
VENV=$WORK/venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import docker' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q docker==7.1.0
fi

export HUSK_ROOT=$T/store HUSK_STATE_DIR=$T/state
"$HUSK" image import "$IMAGES/busybox" >/dev/null
"$HUSK" serve >"$T/serve.out" 2>"$T/serve.err" &
SERVE_PID=$!

DOCKER_SOCK=""
if [ "${API_DOCKER:-1}" != 0 ] && command -v dockerd >/dev/null; then
    dockerd_start "$T/docker" || { echo "bench-api: dockerd did not start" >&2; exit 1; }
    $DOCKER load -i "$IMAGES/busybox.docker.tar" >/dev/null
    [ -f "$IMAGES/python.docker.tar" ] && $DOCKER load -i "$IMAGES/python.docker.tar" >/dev/null
    DOCKER_SOCK=$T/docker/docker.sock
fi

PYTHONPATH=$SRC/clients/python:$SRC/scripts "$VENV/bin/python" - "$T/state" "$ROUNDS" "$HUSK" "$WORK/api.json" "$DOCKER_SOCK" <<'EOF'
import json, os, socket, subprocess, sys, time
from husk import Sandbox, connect
from benchstat import summarize, table
state, rounds, husk, out, dsock = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
sock = f"{state}/api.sock"
for _ in range(500):
    if os.path.exists(sock):
        try:
            serve = connect("serve", socket=sock)
            break
        except Exception:
            pass
    time.sleep(0.02)
else:
    sys.exit("bench-api: husk serve did not answer within 10 s")
cli = connect("cli", husk_bin=husk, state_dir=state)

def http(method, path, body):
    data = json.dumps(body).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    resp = b""
    while chunk := s.recv(65536):
        resp += chunk
    s.close()
    head, _, body = resp.partition(b"\r\n\r\n")
    return int(head[9:12]), json.loads(body)

bb = dict(image="busybox", memory="256M", heartbeat=False)
live_serve = Sandbox.create(transport=serve, **bb)
live_cli = Sandbox.attach(live_serve.id, transport=cli)

def raw_exec():
    status, v = http("POST", f"/v1/sandboxes/{live_serve.id}/exec", {"argv": ["true"]})
    assert status == 200 and v["exit_code"] == 0, v

def client_exec(sb):
    def f():
        r = sb.exec(["true"])
        assert r.exit_code == 0, r.raw
    return f

def cli_exec():
    subprocess.run([husk, "exec", live_serve.id, "--", "true"], check=True)

def husk_cycle(t):
    def f():
        with Sandbox.create(transport=t, **bb) as sb:
            assert sb.exec(["sh", "-c", "echo 1"]).stdout.text == "1\n"
    return f

def husk_code(t):
    def f():
        with Sandbox.create(rootfs="/", memory="256M", heartbeat=False, transport=t) as sb:
            r = sb.run_code("print(1)")
            assert r.stdout.text == "1\n", r.raw
    return f

cases = {
    "exec_true_serve_http": raw_exec,
    "exec_true_client_serve": client_exec(live_serve),
    "exec_true_cli": cli_exec,
    "exec_true_client_cli": client_exec(live_cli),
    "cycle_client_serve": husk_cycle(serve),
    "cycle_client_cli": husk_cycle(cli),
    "code_client_serve": husk_code(serve),
    "code_client_cli": husk_code(cli),
}
box = None
if dsock:
    import docker
    dk = docker.DockerClient(base_url=f"unix://{dsock}")
    run_kw = dict(detach=True, network_mode="none", mem_limit="256m")
    box = dk.containers.run("busybox", ["sleep", "3600"], **run_kw)

    def docker_exec():
        assert box.exec_run(["true"]).exit_code == 0

    def docker_cycle():
        c = dk.containers.run("busybox", ["sleep", "3600"], **run_kw)
        r = c.exec_run(["sh", "-c", "echo 1"])
        assert r.exit_code == 0 and r.output == b"1\n", r
        c.remove(force=True)

    cases["exec_true_docker_py"] = docker_exec
    cases["cycle_docker_py"] = docker_cycle
    if any("python:latest" in t for i in dk.images.list() for t in i.tags):
        def docker_code():
            c = dk.containers.run("python:latest", ["sleep", "3600"], **run_kw)
            r = c.exec_run(["python3", "-c", "print(1)"])
            assert r.exit_code == 0 and r.output == b"1\n", r
            c.remove(force=True)
        cases["code_docker_py"] = docker_code

r = {k: [] for k in cases}
names = list(cases)
for i in range(rounds + 2):
    order = names[i % len(names):] + names[:i % len(names)]
    for k in order:
        t0 = time.perf_counter()
        cases[k]()
        if i >= 2:
            r[k].append((time.perf_counter() - t0) * 1e3)
live_serve.close()
if box is not None:
    box.remove(force=True)
summary = summarize(r, out)
label = {
    "exec_true_serve_http": "exec true: raw HTTP to husk serve",
    "exec_true_client_serve": "exec true: Python client, serve",
    "exec_true_cli": "exec true: husk exec (CLI)",
    "exec_true_client_cli": "exec true: Python client, CLI",
    "exec_true_docker_py": "exec true: docker-py exec_run",
    "cycle_client_serve": "create + exec echo + destroy: Python client, serve",
    "cycle_client_cli": "create + exec echo + destroy: Python client, CLI",
    "cycle_docker_py": "create + exec echo + destroy: docker-py",
    "code_client_serve": "create + run_code(print(1)) + destroy: client, serve",
    "code_client_cli": "create + run_code(print(1)) + destroy: client, CLI",
    "code_docker_py": "create + exec python3 print(1) + destroy: docker-py",
}
table(f"api ({rounds} rounds", summary, label, 56, digits=2, ratio_digits=1,
      ratios=(("exec_true_docker_py", "exec_true_serve_http"), ("exec_true_docker_py", "exec_true_client_serve"),
              ("cycle_docker_py", "cycle_client_serve"), ("code_docker_py", "code_client_serve")))
EOF

#!/usr/bin/env bash
# husk as an OCI runtime against runc, driven by the real engines (issue 22):
#
#   scripts/bench-oci.sh [HUSK_BINARY]      (root; RUNS=30 by default)
#
# 1. `docker run --rm --runtime husk --network none IMAGE true` vs the same
#    with `--runtime runc`: one private dockerd (own socket, data-root,
#    exec-root, cgroup parent; --iptables=false --bridge=none) with husk
#    registered by --add-runtime;
# 2. `ctr run --rm --runc-binary husk IMAGE ID true` vs `--runc-binary
#    runc`: one private containerd (own root, state, socket), the runc shim
#    (io.containerd.runc.v2), the path Kubernetes' CRI takes.
#
# Each pair is timed twice: hyperfine -N (its runs of one command back to
# back, then the other's) and scripts/paired.py (the two interleaved round
# by round, so load drifting on a shared host hits both alike). The image is
# a busybox rootfs (scripts/build-busybox-rootfs.sh), imported into both.
# crun is left out: 1.8 refuses this hybrid cgroup host, and the mount
# namespace bench.sh wraps it in would cost it a namespace per container
# here, which is not crun's own time.
# Everything started here is stopped by pid on exit; scripts/bench.sh runs
# this at its end unless BENCH_OCI=0.
set -euo pipefail
cd "$(dirname "$0")/.."
HUSK=${1:-target/x86_64-unknown-linux-gnu/release/husk}
[ -x "$HUSK" ] || { echo "build husk first: cargo build --release" >&2; exit 1; }
HUSK=$(readlink -f "$HUSK")
RUNS=${RUNS:-30}
RUNC=/usr/sbin/runc
for t in dockerd containerd ctr hyperfine python3 "$RUNC"; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install docker.io containerd runc hyperfine)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (it starts dockerd and containerd)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/husk-bench-oci.XXXXXX)
chmod 700 "$WORK"
TAG=husk-bench-oci-$$
DOCKERD_PID=
CTD_PID=
cleanup() {
    set +e
    if [ -n "$DOCKERD_PID" ]; then
        ids=$($DOCKER ps -aq 2>/dev/null)
        [ -n "$ids" ] && $DOCKER rm -f $ids >/dev/null 2>&1
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID"
        wait "$DOCKERD_PID" 2>/dev/null
    fi
    if [ -n "$CTD_PID" ]; then
        for id in $($CTR task ls -q 2>/dev/null); do $CTR task kill -s SIGKILL "$id"; $CTR task delete -f "$id"; done >/dev/null 2>&1
        for id in $($CTR container ls -q 2>/dev/null); do $CTR container rm "$id"; done >/dev/null 2>&1
        kill -TERM "$CTD_PID" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$CTD_PID" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$CTD_PID" 2>/dev/null && kill -KILL "$CTD_PID"
        wait "$CTD_PID" 2>/dev/null
    fi
    # Shims outlive their daemon (they are reparented to init): ours name
    # our sockets on their command line.
    for pid in $(grep -lsF "$WORK/" /proc/[0-9]*/cmdline | cut -d/ -f3); do
        [ "$pid" != $$ ] && kill -KILL "$pid" 2>/dev/null
    done
    for m in $(awk -v w="$WORK/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null
    done
    for root in /sys/fs/cgroup/*/; do
        for cg in "$root$TAG" "$root$TAG-ctr"; do
            [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
        done
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "husk: $HUSK ($("$HUSK" --version | head -1)); runc: $($RUNC --version | head -1)"
echo "host: $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"

# ------------------------------------------------------------------ image --
scripts/build-busybox-rootfs.sh "$WORK/rootfs" >/dev/null
tar -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .

# ----------------------------------------------------------------- dockerd --
mkdir -p "$WORK/docker/data" "$WORK/docker/exec"
dockerd --data-root "$WORK/docker/data" --exec-root "$WORK/docker/exec" --pidfile "$WORK/docker/dockerd.pid" \
    -H "unix://$WORK/docker/docker.sock" --iptables=false --ip6tables=false --bridge=none --ip-masq=false \
    --cgroup-parent "/$TAG" --add-runtime "husk=$HUSK" >"$WORK/docker/dockerd.log" 2>&1 &
DOCKERD_PID=$!
DOCKER="/usr/bin/docker -H unix://$WORK/docker/docker.sock"
export DOCKER_CONFIG=$WORK/docker/client
for _ in $(seq 240); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.5; done
$DOCKER info >/dev/null 2>&1 || { tail -20 "$WORK/docker/dockerd.log" >&2; echo "dockerd did not start" >&2; exit 1; }
$DOCKER import "$WORK/rootfs.tar" husk-bench/busybox:latest >/dev/null
for rt in husk runc; do
    out=$($DOCKER run --rm --runtime "$rt" --network none husk-bench/busybox:latest echo ok 2>&1) \
        || { echo "docker run --runtime $rt failed: $out" >&2; exit 1; }
done

# -------------------------------------------------------------- containerd --
mkdir -p "$WORK/ctd"
cat >"$WORK/ctd/config.toml" <<EOF
version = 2
root = "$WORK/ctd/root"
state = "$WORK/ctd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$WORK/ctd/c.sock"
[ttrpc]
  address = "$WORK/ctd/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
containerd --config "$WORK/ctd/config.toml" >"$WORK/ctd/containerd.log" 2>&1 &
CTD_PID=$!
CTR="/usr/bin/ctr --address $WORK/ctd/c.sock --namespace $TAG-ctr"
for _ in $(seq 240); do $CTR version >/dev/null 2>&1 && break; sleep 0.5; done
$CTR version >/dev/null 2>&1 || { tail -20 "$WORK/ctd/containerd.log" >&2; echo "containerd did not start" >&2; exit 1; }
$DOCKER save husk-bench/busybox:latest | $CTR image import - >/dev/null
IMG=docker.io/husk-bench/busybox:latest
ctr_run() { # RUNTIME ID
    echo "$CTR run --rm --runtime io.containerd.runc.v2 --runc-binary $1 --runc-root $WORK/ctd/runtime-$2 $IMG $2 true"
}
for rt in "$HUSK" "$RUNC"; do
    out=$($(ctr_run "$rt" check) 2>&1) || { echo "ctr run --runc-binary $rt failed: $out" >&2; exit 1; }
done

# ---------------------------------------------------------------- measure --
D_HUSK="$DOCKER run --rm --runtime husk --network none husk-bench/busybox:latest true"
D_RUNC="$DOCKER run --rm --runtime runc --network none husk-bench/busybox:latest true"
C_HUSK=$(ctr_run "$HUSK" husk)
C_RUNC=$(ctr_run "$RUNC" runc)
echo
echo "=== docker run --rm ... true: husk vs runc (hyperfine -N, $RUNS runs each)"
hyperfine --style basic -N --warmup 3 --runs "$RUNS" --export-json "$WORK/docker.json" \
    -n "docker run --runtime husk" "$D_HUSK" -n "docker run --runtime runc" "$D_RUNC"
echo
echo "=== the same, interleaved (scripts/paired.py $RUNS)"
python3 scripts/paired.py "$RUNS" "$D_HUSK" "$D_RUNC"
echo
echo "=== ctr run --rm --runc-binary ... true: husk vs runc (hyperfine -N, $RUNS runs each)"
hyperfine --style basic -N --warmup 3 --runs "$RUNS" --export-json "$WORK/ctr.json" \
    -n "ctr run --runc-binary husk" "$C_HUSK" -n "ctr run --runc-binary runc" "$C_RUNC"
echo
echo "=== the same, interleaved (scripts/paired.py $RUNS)"
python3 scripts/paired.py "$RUNS" "$C_HUSK" "$C_RUNC"
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

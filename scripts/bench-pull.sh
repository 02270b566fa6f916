#!/usr/bin/env bash
# `husk pull` against `docker pull` and `skopeo copy` + `husk image import`,
# same loopback registry, same image, cold store each run (hyperfine,
# paired); `husk run --image REF` on a cold store against `husk pull` + a
# warm run; `husk image import` of a docker-save tarball against `docker
# load` of the same file. Also the peak RSS of one pull (/usr/bin/time -v).
# Run as root:
#
#   scripts/bench-pull.sh [HUSK_BINARY]
#
# The image: build/images/python's OCI layout when scripts/build-images.sh
# made it, else a stand-in built here (two gzip layers: the host's busybox,
# and /usr/lib/python3.11 or /usr/lib/x86_64-linux-gnu, tens of MB). The
# registry is Debian's docker-registry on 127.0.0.1:<free port> with a
# private config and root under a temp dir (never the packaged service);
# it is stopped by pid on exit. dockerd (when installed) is started here
# with a private socket, data-root and exec-root, `--insecure-registry`
# for the loopback registry, and stopped by pid on exit; NO_DOCKER=1
# leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
HUSK=${1:-target/x86_64-unknown-linux-gnu/release/husk}
[ -x "$HUSK" ] || { echo "build husk first: cargo build --release" >&2; exit 1; }
HUSK=$(readlink -f "$HUSK")
for t in docker-registry skopeo hyperfine python3; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install docker-registry skopeo hyperfine)" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/husk-bench-pull.XXXXXX)
REG_PID=
DOCKERD_PID=
cleanup() {
    # Not under errexit: `wait` of a killed server returns its signal
    # status, which must not end the cleanup before dockerd is stopped.
    set +e
    if [ -n "$REG_PID" ]; then
        kill "$REG_PID" 2>/dev/null
        wait "$REG_PID" 2>/dev/null
    fi
    if [ -n "$DOCKERD_PID" ]; then
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
        umount -R "$WORK/docker" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

LAYOUT=build/images/python
RUNCMD=true
if [ ! -f "$LAYOUT/oci-layout" ]; then
    RUNCMD="/bin/busybox true"
    LAYOUT=$WORK/layout
    SRC=/usr/lib/python3.11
    [ -d "$SRC" ] || SRC=/usr/lib/x86_64-linux-gnu
    python3 - "$LAYOUT" "$SRC" <<'EOF'
import gzip, hashlib, io, json, os, sys, tarfile
out, src = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/blobs/sha256")
def put(data):
    d = hashlib.sha256(data).hexdigest()
    open(f"{out}/blobs/sha256/{d}", "wb").write(data)
    return "sha256:" + d, len(data)
layers, diffs = [], []
for root, arcname in (("/bin/busybox", "bin/busybox"), (src, src.lstrip("/"))):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        t.add(root, arcname=arcname)
    raw = buf.getvalue()
    diffs.append("sha256:" + hashlib.sha256(raw).hexdigest())
    d, n = put(gzip.compress(raw, 6, mtime=0))
    layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n})
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                  "rootfs": {"type": "layers", "diff_ids": diffs}}).encode()
cd, cn = put(cfg)
m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
                "layers": layers}).encode()
md, mn = put(m)
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
           "digest": md, "size": mn}]}, open(f"{out}/index.json", "w"))
open(f"{out}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
EOF
fi
du -sh "$LAYOUT/blobs" | awk '{print "image blobs: " $1}'

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $WORK/registry
http:
  addr: 127.0.0.1:$PORT
EOF
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
REF=127.0.0.1:$PORT/bench/python:1
skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$LAYOUT" "docker://$REF"

DOCKER=""
if [ "${NO_DOCKER:-0}" != 1 ] && command -v dockerd >/dev/null && command -v docker >/dev/null; then
    mkdir -p "$WORK/docker"
    sock=$WORK/docker/docker.sock
    dockerd --iptables=false --ip6tables=false --bridge=none --data-root "$WORK/docker/data" \
        --exec-root "$WORK/docker/exec" --pidfile "$WORK/docker/dockerd.pid" -H "unix://$sock" \
        --insecure-registry "127.0.0.1:$PORT" >"$WORK/docker/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    DOCKER="docker -H unix://$sock"
    for _ in $(seq 200); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.1; done
    $DOCKER info >/dev/null 2>&1 || { tail -20 "$WORK/docker/dockerd.log" >&2; echo "bench-pull: dockerd did not start" >&2; exit 1; }
    echo "dockerd: $($DOCKER version --format '{{.Server.Version}}') (pid $DOCKERD_PID, started here)"
fi

export HUSK_ROOT=$WORK/store
echo "== pull, cold store each run"
set -- "$HUSK pull --quiet $REF" \
    "skopeo --insecure-policy copy --quiet --src-tls-verify=false docker://$REF oci:$WORK/copy && $HUSK image import --json $WORK/copy >/dev/null"
if [ -n "$DOCKER" ]; then
    set -- "$@" "$DOCKER pull -q $REF >/dev/null"
fi
hyperfine --runs "${RUNS:-5}" --export-json "$WORK/pull.json" \
    --prepare "rm -rf $WORK/store $WORK/copy; ${DOCKER:+$DOCKER rmi -f $REF >/dev/null 2>&1; $DOCKER image prune -f >/dev/null 2>&1;} sync" \
    "$@"

echo "== husk run --image on a cold store vs husk pull + a warm run"
hyperfine --runs "${RUNS:-5}" --prepare "rm -rf $WORK/store; sync" \
    "$HUSK run --image $REF -- $RUNCMD" \
    "$HUSK pull --quiet $REF && $HUSK run --image $REF -- $RUNCMD"

if [ -n "$DOCKER" ]; then
    # Every image removed before each load: the pulls above left theirs,
    # whose layers docker load would otherwise reuse.
    echo "== husk image import vs docker load, the same docker-save tarball"
    skopeo --insecure-policy copy --quiet --src-tls-verify=false "docker://$REF" "docker-archive:$WORK/image.docker.tar:bench/python:1"
    ls -la "$WORK/image.docker.tar" | awk '{print "tarball bytes: " $5}'
    hyperfine --runs "${RUNS:-5}" \
        --prepare "rm -rf $WORK/store; $DOCKER rmi -f bench/python:1 $REF >/dev/null 2>&1; $DOCKER image prune -af >/dev/null 2>&1; sync" \
        "$HUSK image import --json $WORK/image.docker.tar >/dev/null" \
        "$DOCKER load -q -i $WORK/image.docker.tar >/dev/null"
fi

echo "== peak RSS of one pull"
rm -rf "$WORK/store"
/usr/bin/time -v "$HUSK" pull --quiet "$REF" 2>"$WORK/time.txt" >/dev/null
grep -E "Maximum resident|Elapsed" "$WORK/time.txt"

#!/usr/bin/env bash
# The benchmark: husk against Docker, runc, crun, bubblewrap and gVisor on
# the same images, in one run, on this machine. Run as root on Debian 12:
#
#   scripts/bench.sh
#
# 1. installs what it needs from Debian's packages, if missing (hyperfine,
#    docker.io, runc, crun, bubblewrap, runsc, umoci, skopeo, debootstrap...)
# 2. builds husk --release and the report program (benches/report), and the
#    demo images (scripts/build-images.sh: busybox, python)
# 3. starts its own dockerd (own socket, data-root and exec-root under the
#    work dir, no iptables, no bridge) when docker.io is installed and no
#    daemon answers; stops it by pid at the end, failures included. A daemon
#    it did not start is only used: its images and containers are left alone
#    except the husk-bench/* ones this script adds and removes again.
# 4. measures with hyperfine (one --export-json per invocation):
#      cold   /bin/true in the busybox image: husk native (defaults: cgroup
#             limits + seccomp), husk native --no-cgroup --seccomp unconfined,
#             bwrap --unshare-all, runc run, crun run, husk --runtime runsc,
#             runsc run, docker run --rm --network none
#      python python3 -c 'print(1)' in the python image: husk, bwrap, docker
#      exec   /bin/true into a live sandbox: husk exec (when this husk has
#             `create`), runc exec, crun exec, docker exec
#      import the python image: husk image import (fresh store each time),
#             umoci unpack, sequential tar -xzf of its layers, docker load
#    runc, crun, runsc and bwrap use one umoci-unpacked copy of each image;
#    docker loads the same image (skopeo -> docker-archive); husk imports it.
#    throughput  8 concurrent clients: scripts/bench-throughput.sh writes
#             docs/throughput.md (BENCH_NO_THROUGHPUT=1 skips it)
#    warm   scripts/bench-warm.sh: pool claims vs cold creates through husk
#             serve (BENCH_NO_WARM=1 skips it); numbers in docs/warm.md
#    network  scripts/bench-network.sh: the egress proxy vs --network host
#             (BENCH_NETWORK=0 skips it); numbers in docs/network.md
#    api      scripts/bench-api.sh: exec round trips and create+exec+destroy
#             through serve, the CLI and the Python client vs docker-py
#             (BENCH_API=0 skips it); numbers in docs/api.md
#    build  scripts/bench-build.sh: husk build vs docker build (cold and
#             cached) and husk fork --count 10 (BENCH_NO_BUILD=1 skips it);
#             numbers in docs/build.md
# 5. writes docs/benchmarks.md, docs/benchmarks.svg and the README's
#    Benchmarks block (benches/report), and keeps the raw hyperfine JSON in
#    build/bench/results.
# 6. checks that the host's /dev/null, /dev/zero, /dev/full, /dev/random,
#    /dev/urandom and /dev/tty are still the root-owned character devices
#    they were at the start, on every exit path; exits 1 if not.
#
# Environment: HUSK=path (binary under test, timed as given; default: an
# installed copy of the release build, see "page-cache state" below),
# BENCH_WORK (default build/bench), RUNSC_PLATFORM (default ptrace),
# BENCH_RUNS_FAST / BENCH_RUNS_SLOW / BENCH_RUNS_IMPORT (run counts),
# BENCH_ROUNDS (rounds the fast benchmarks are split into, default 4),
# BENCH_NO_INSTALL=1 (never call apt-get), BENCH_NO_THROUGHPUT=1 (skip the
# throughput step).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
[ "$(id -u)" = 0 ] || { echo "bench: run as root (runc, docker and husk's privileged mode need it)" >&2; exit 1; }

RUNS_FAST=${BENCH_RUNS_FAST:-100}
RUNS_SLOW=${BENCH_RUNS_SLOW:-20}
RUNS_IMPORT=${BENCH_RUNS_IMPORT:-5}
ROUNDS=${BENCH_ROUNDS:-4}
RUNSC_PLATFORM=${RUNSC_PLATFORM:-ptrace}
WORK=${BENCH_WORK:-$SRC/build/bench}
RES=$WORK/results
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# ---------------------------------------------------------------- packages --
say "packages"
PACKAGES=(hyperfine docker.io runc crun bubblewrap runsc umoci skopeo debootstrap busybox-static file python3
    util-linux tar gzip)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] && [ -z "${BENCH_NO_INSTALL:-}" ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "present: ${PACKAGES[*]}${missing[*]:+ (missing, not installed: ${missing[*]})}"
fi
for t in hyperfine umoci skopeo python3 bwrap runc; do
    command -v "$t" >/dev/null || { echo "bench: $t is required: apt-get install $t" >&2; exit 1; }
done
have() { command -v "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------------- build --
say "build"
command -v cargo >/dev/null || { echo "bench: cargo is missing (install Rust: https://rustup.rs)" >&2; exit 1; }
cargo build --release
cargo build --release -p husk-bench-report
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
REL=$TARGET_DIR/x86_64-unknown-linux-gnu/release
[ -x "$REL/husk" ] || REL=$TARGET_DIR/release
HUSK_GIVEN=${HUSK:+1}
HUSK=${HUSK:-$REL/husk}
REPORT=$REL/husk-bench-report
[ -x "$HUSK" ] || { echo "bench: no husk binary at $HUSK" >&2; exit 1; }
scripts/build-images.sh busybox python
IMAGES=${HUSK_IMAGES:-$SRC/build/images}

# -------------------------------------------------------------- work, cleanup --
# Everything lives under $WORK (on the source tree's disk: /tmp may be a
# tmpfs without user xattrs on older kernels, which husk's layers need).
DOCKERD_PID=""
DOCKER_OURS=0
RUNC_ROOT=$WORK/runc
CRUN_ROOT=$WORK/crun
RUNSC_ROOT=$WORK/runsc-root
# The host's shared device nodes: root-owned character devices, and the
# same as when the script started (see "stdio" below for why it checks).
HOST_DEVS=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty)
dev_state() { stat -c '%n: %F, owner %U:%G (%u:%g), mode %a, device %t:%T' "${HOST_DEVS[@]}" 2>&1; }
DEVS_BEFORE=$(dev_state)
check_host_devices() { # non-zero (and says why) if a host device node was changed
    local dev bad=0 now
    for dev in "${HOST_DEVS[@]}"; do
        if [ ! -c "$dev" ] || [ "$(stat -c %u:%g "$dev")" != 0:0 ]; then
            echo "bench: the host's $dev is no longer a root-owned character device: $(stat -c '%F, owner %U:%G' "$dev" 2>&1)" >&2
            bad=1
        fi
    done
    now=$(dev_state)
    if [ "$now" != "$DEVS_BEFORE" ]; then
        echo "bench: host device nodes changed during the benchmark:" >&2
        diff <(echo "$DEVS_BEFORE") <(echo "$now") | sed 's/^/  /' >&2
        bad=1
    fi
    return "$bad"
}
for dev in "${HOST_DEVS[@]}"; do
    [ -c "$dev" ] && [ "$(stat -c %u:%g "$dev")" = 0:0 ] || {
        echo "bench: the host's $dev is not a root-owned character device before the benchmark ($(stat -c '%F, owner %U:%G' "$dev" 2>&1)); repair it first (e.g. chown root:root $dev), or the check at the end means nothing" >&2
        exit 1
    }
done
cleanup() {
    local rc=$?
    set +e
    [ -n "${EXEC_HUSK_ID:-}" ] && "$HUSK" rm "$EXEC_HUSK_ID" >/dev/null 2>&1
    for id in $(runc --root "$RUNC_ROOT" list -q 2>/dev/null); do runc --root "$RUNC_ROOT" delete -f "$id"; done
    if have crun; then
        for id in $(crun --root "$CRUN_ROOT" list -q 2>/dev/null); do crun --root "$CRUN_ROOT" delete -f "$id"; done
    fi
    if [ -n "${DOCKER:-}" ]; then
        $DOCKER rm -f husk-bench-exec >/dev/null 2>&1
        [ "$DOCKER_OURS" = 1 ] || $DOCKER rmi -f husk-bench/busybox:latest husk-bench/python:latest >/dev/null 2>&1
    fi
    if [ -n "$DOCKERD_PID" ]; then
        echo "stopping the dockerd this script started (pid $DOCKERD_PID)"
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID"
        wait "$DOCKERD_PID" 2>/dev/null
    fi
    # Only our own trees; --one-file-system never follows a mount left behind.
    for d in store import-store state runc crun runsc-root bundles docker tmp bin dev; do
        [ -e "$WORK/$d" ] && rm -rf --one-file-system "${WORK:?}/$d"
    done
    if check_host_devices; then
        echo "host device nodes unchanged: ${HOST_DEVS[*]}"
    else
        exit 1
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for d in store import-store state runc crun runsc-root bundles docker tmp bin dev results; do
    rm -rf --one-file-system "${WORK:?}/$d"
done
mkdir -p "$WORK/bundles" "$WORK/tmp" "$WORK/dev" "$RES"
export HUSK_ROOT=$WORK/store HUSK_STATE_DIR=$WORK/state

# stdio. runsc run as root (without --rootless) fchowns its stdio to its
# sandbox user, and hyperfine gives every timed command /dev/null: the
# host's /dev/null would end up nobody:nogroup. So every peer's command,
# timed or probed, gets a private null device (the same c 1:3, its own
# inode under $WORK/dev) instead: hyperfine runs in a private mount
# namespace where that node is bound over /dev/null (made once per
# hyperfine invocation, not per run, and the same for every peer), and the
# probes read it directly. Whatever runsc does to it stays in $WORK.
NULLDEV=$WORK/dev/null
mknod -m 666 "$NULLDEV" c 1 3
if ! : <"$NULLDEV" 2>/dev/null; then
    echo "bench: cannot open the device node $NULLDEV ($(findmnt -no OPTIONS -T "$WORK")): put BENCH_WORK on a filesystem mounted without nodev" >&2
    exit 1
fi
# shellcheck disable=SC2016 # $0 and $@ expand in the inner shell
PRIVATE_NULL=(unshare -m --propagation private sh -c 'mount --bind "$0" /dev/null && exec "$@"' "$NULLDEV")

# Tab-separated records the report's meta.json is made from.
: >"$RES/runtimes.tsv"
: >"$RES/skipped.tsv"
: >"$RES/notes.txt"
note "Every runtime's command got stdio from a private null device (c 1:3 at \$WORK/dev/null, bound over /dev/null in hyperfine's own mount namespace), never the host's /dev/null: runsc run as root fchowns its stdio to its sandbox user."
skip() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RES/skipped.tsv"; echo "SKIPPED $2: $3"; }
note() { echo "$*" >>"$RES/notes.txt"; }
# husk is timed in the page-cache state a long-lived install is in: its
# pages read in by exec, as after a boot (bwrap, runc... are in that state
# too). How the cache was filled matters for a 5.8 MB static binary: pages
# that write(2) or read(2) brought in (right after cp, install or dpkg) ran
# 0.4-0.6 ms faster per `husk run` than the same file after eviction and one
# exec (scripts/paired.py, 400 rounds, kernel 6.18, ext4), and the file the
# linker wrote through mmap is in the slow state from the start. Why
# (scripts/folios.py on a running husk): after cp, its mapped text is large
# folios (53 heads, 806 tails); after eviction and one exec, 827 order-0
# pages, each mapped, counted and unmapped on its own in every husk
# process. madvise(MADV_HUGEPAGE) on the text from main() did not change
# that: the exec's first faults read the whole file before main runs. So:
# an installed copy, flushed, evicted and executed once. HUSK=path is timed
# as given.
if [ -z "$HUSK_GIVEN" ]; then
    install -D -m 0755 "$HUSK" "$WORK/bin/husk"
    HUSK=$WORK/bin/husk
    python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)' "$HUSK"
    "$HUSK" --version >/dev/null
    note "husk ran from an installed copy of the release build ($WORK/bin/husk) whose page cache was flushed, dropped and refilled by one exec: the state a long-lived install is in after a boot. Right after cp/install (pages filled by write), the same binary ran 0.4-0.6 ms faster per husk run on the reference VM (2026-12-02, kernel 6.18, ext4, scripts/paired.py, 400 rounds), so this is the conservative state."
fi
# The code layout (build.rs, scripts/husk.order): a stale order file costs
# speed without failing the build, so say how much of it this binary holds.
if have nm; then
    ORDER_MATCH=$(scripts/order-check.py "$HUSK" 2>&1 | tr '\n' ' ' || true)
    note "husk's code is laid out in first-run order (build.rs passes scripts/husk.order to rust-lld); scripts/order-check.py on the timed binary: $ORDER_MATCH"
fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# ------------------------------------------------------------------ docker --
say "docker"
DOCKER=""
if have docker && have dockerd; then
    if [ -z "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
        DOCKER="docker"
        echo "using the running docker daemon (not started by this script)"
    else
        mkdir -p "$WORK/docker"
        sock=$WORK/docker/docker.sock
        dockerd --iptables=false --ip6tables=false --bridge=none --data-root "$WORK/docker/data" \
            --exec-root "$WORK/docker/exec" --pidfile "$WORK/docker/dockerd.pid" -H "unix://$sock" \
            >"$WORK/docker/dockerd.log" 2>&1 &
        DOCKERD_PID=$!
        DOCKER_OURS=1
        DOCKER="docker -H unix://$sock"
        for _ in $(seq 120); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.5; done
        $DOCKER info >/dev/null 2>&1 || { tail -20 "$WORK/docker/dockerd.log" >&2; echo "bench: dockerd did not start" >&2; exit 1; }
        echo "started dockerd (pid $DOCKERD_PID, socket $sock)"
    fi
else
    echo "docker.io is not installed: docker rows are skipped"
fi

# ------------------------------------------------------------------ images --
say "images"
"$HUSK" image import "$IMAGES/busybox"
"$HUSK" image import "$IMAGES/python"
# How many pages of husk's text one run maps, husk and its sandbox init
# (scripts/folios.py): what the code layout saves, and what a stale
# scripts/husk.order gives back, in numbers.
"$HUSK" run --image busybox -- sleep 1 >/dev/null &
RUN_PID=$!
INIT_PID=""
for _ in $(seq 100); do
    INIT_PID=$(pgrep -P "$RUN_PID" | head -1 || true)
    [ -n "$INIT_PID" ] && grep -q '^Name:.husk:\[init\]' "/proc/$INIT_PID/status" 2>/dev/null && break
    sleep 0.02
done
mapped() { python3 scripts/folios.py --mapped "$1" "$HUSK" 2>/dev/null || echo "?"; }
TEXT_RUN=$(mapped "$RUN_PID")
TEXT_INIT=$([ -n "$INIT_PID" ] && mapped "$INIT_PID" || echo "?")
wait "$RUN_PID" || true
note "One husk run mapped $TEXT_RUN pages of husk's text in husk and $TEXT_INIT in the sandbox init (scripts/folios.py, busybox image, the page-cache state above); with the code in no order it was 842 and 318 on the reference VM (2026-12-03), with a current scripts/husk.order 330-360 and 250."
unpack() { # IMAGE DIR: one umoci-unpacked bundle, mount points added
    umoci unpack --image "$IMAGES/$1:latest" "$2" >/dev/null
    mkdir -p "$2/rootfs/proc" "$2/rootfs/dev" "$2/rootfs/sys" "$2/rootfs/tmp"
}
BB=$WORK/bundles/busybox
PY=$WORK/bundles/python
unpack busybox "$BB"
unpack python "$PY"
if [ -n "$DOCKER" ]; then
    for img in busybox python; do
        skopeo copy -q "oci:$IMAGES/$img:latest" "docker-archive:$WORK/tmp/$img.docker.tar:husk-bench/$img:latest"
        $DOCKER load -q -i "$WORK/tmp/$img.docker.tar"
    done
fi

# husk's own view of its defaults (limits, namespaces) from a verdict.
husk_verdict() { "$HUSK" run --json "$@" -- /bin/true; }
verdict_field() { python3 -c '
import json, sys
v = json.load(sys.stdin)
which = sys.argv[1]
if which == "limits":
    l = v.get("limits")
    if not isinstance(l, dict) or not l.get("memory"):
        print("none (--no-cgroup)")
    else:
        mem = l["memory"]["applied"]; pids = l["pids"]["applied"]
        print("memory %s, pids %s (cgroup %s)" % ("%.1f GiB" % (mem / 2**30) if mem else "unlimited", pids or "unlimited", l["cgroup"]["mode"]))
elif which == "namespaces":
    print(" ".join(v["isolation"].get("namespaces", [])) or "(gVisor sandbox)")
elif which == "memory":
    print(v["limits"]["memory"]["applied"])
elif which == "pids":
    print(v["limits"]["pids"]["applied"])
' "$1"; }
V_NATIVE=$(husk_verdict --image busybox)
V_BARE=$(husk_verdict --image busybox --no-cgroup --seccomp unconfined)
V_RUNSC=$(husk_verdict --image busybox --runtime runsc --runsc-platform "$RUNSC_PLATFORM" || true)
LIMITS_NATIVE=$(verdict_field limits <<<"$V_NATIVE")
MEM=$(verdict_field memory <<<"$V_NATIVE")
PIDS=$(verdict_field pids <<<"$V_NATIVE")

# What each runtime applied, seen from inside (the report parses it).
PROBE='echo "uid_map=$(head -n1 /proc/self/uid_map)"
grep -E "^(CapEff|Seccomp|Seccomp_filters|NoNewPrivs):" /proc/self/status | sed "s/:[[:space:]]*/=/"
printf "ifaces="; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" ","; echo
echo "pid=$$"
if touch /.husk-bench-probe 2>/dev/null; then rm -f /.husk-bench-probe; echo root=rw; else echo root=ro; fi'

# OCI bundles for runc/crun/runsc: `runc spec`'s defaults (read-only root,
# masked paths, pid/net/ipc/uts/mount namespaces) plus a cgroup namespace,
# husk's default seccomp profile (in OCI form) and husk's default memory and
# pids limits, so they apply what husk applies except the user namespace.
"$HUSK" seccomp show default >"$WORK/tmp/seccomp.json"
(cd "$WORK/tmp" && rm -f config.json && runc spec)
mkbundle() { # NAME ROOTFS ARGS...: a bundle dir at $WORK/bundles/oci-NAME
    local dir=$WORK/bundles/oci-$1 rootfs=$2
    shift 2
    mkdir -p "$dir"
    scripts/oci-bundle.py "$WORK/tmp/config.json" "$WORK/tmp/seccomp.json" "$rootfs" "$MEM" "$PIDS" "$dir/config.json" "$@"
    echo "$dir"
}
OCI_TRUE=$(mkbundle true "$BB/rootfs" /bin/true)
OCI_SLEEP=$(mkbundle sleep "$BB/rootfs" sleep 1000000)
PB=$(mkbundle probe "$BB/rootfs" sh -c "$PROBE")

# crun 1.8 refuses hybrid hosts whose v2 hierarchy has any controller
# ("cgroups in hybrid mode not supported"). In a private mount namespace the
# v2 root's cgroup.controllers is shadowed by an empty file; the host's
# mounts are untouched and crun uses the v1 controllers as usual.
CRUN_WRAP=()
if have crun && [ -f /sys/fs/cgroup/unified/cgroup.controllers ] \
    && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers)" ]; then
    # shellcheck disable=SC2016 # $@ expands in the inner shell
    CRUN_WRAP=(unshare -m --propagation private sh -c
        'mount --bind /dev/null /sys/fs/cgroup/unified/cgroup.controllers && exec "$@"' sh)
    CRUN_NOTE="run in a private mount namespace where /sys/fs/cgroup/unified/cgroup.controllers reads empty (crun 1.8 refuses hybrid hosts whose v2 hierarchy has a controller: here $(cat /sys/fs/cgroup/unified/cgroup.controllers)); the namespace is made once per hyperfine invocation, not per run"
    note "crun: $CRUN_NOTE."
fi

# ------------------------------------------------------------------ probes --
runtime() { # NAME KERNEL NAMESPACES LIMITS NOTES -- probe command...
    local name=$1 kernel=$2 nss=$3 limits=$4 notes=$5 file
    shift 6
    file=$RES/probe-$(echo "$name" | tr -c 'a-z0-9\n' '-').txt
    if ! "$@" <"$NULLDEV" >"$file" 2>"$file.err"; then
        echo "probe of $name failed: $(head -3 "$file.err")" >&2
        : >"$file"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kernel" "$nss" "$limits" "$(basename "$file")" "$notes" >>"$RES/runtimes.tsv"
}
BWRAP=(bwrap --unshare-all --die-with-parent --ro-bind "$BB/rootfs" / --proc /proc --dev /dev --tmpfs /tmp)
BWRAP_PY=(bwrap --unshare-all --die-with-parent --ro-bind "$PY/rootfs" / --proc /proc --dev /dev --tmpfs /tmp --chdir /)
SAME_AS_HUSK="config from \`runc spec\` + cgroup ns, read-only root, husk's default seccomp profile and limits"
OCI_NS="pid net ipc uts mount cgroup (no user ns)"
RUNSC_FLAGS=(--root "$RUNSC_ROOT" --platform="$RUNSC_PLATFORM" --network=none --oci-seccomp)
runtime "husk native" host "$(verdict_field namespaces <<<"$V_NATIVE")" "$LIMITS_NATIVE" "husk's defaults" -- \
    "$HUSK" run --image busybox -- sh -c "$PROBE"
runtime "husk native --no-cgroup --seccomp unconfined" host "$(verdict_field namespaces <<<"$V_BARE")" \
    "$(verdict_field limits <<<"$V_BARE")" "the defaults' cost: no cgroup, no seccomp filter" -- \
    "$HUSK" run --image busybox --no-cgroup --seccomp unconfined -- sh -c "$PROBE"
runtime bwrap host "user pid net ipc uts cgroup mount (--unshare-all)" "none (bwrap has no resource limits)" \
    "read-only bind of the unpacked rootfs, --proc, --dev, --tmpfs /tmp" -- "${BWRAP[@]}" sh -c "$PROBE"
runtime "runc run" host "$OCI_NS" "$LIMITS_NATIVE" "$SAME_AS_HUSK" -- \
    runc --root "$RUNC_ROOT" run --bundle "$PB" husk-bench-probe
if have crun; then
    runtime "crun run" host "$OCI_NS" "$LIMITS_NATIVE" "$SAME_AS_HUSK${CRUN_NOTE:+; $CRUN_NOTE}" -- \
        "${CRUN_WRAP[@]}" crun --root "$CRUN_ROOT" run --bundle "$PB" husk-bench-probe
fi
if have runsc; then
    runtime "husk --runtime runsc" "gVisor ($RUNSC_PLATFORM)" "$(verdict_field namespaces <<<"$V_RUNSC")" \
        "$(verdict_field limits <<<"$V_RUNSC")" "husk's plan under runsc; runsc itself runs in a user namespace with husk's id map, in husk's cgroup" -- \
        "$HUSK" run --image busybox --runtime runsc --runsc-platform "$RUNSC_PLATFORM" -- sh -c "$PROBE"
    runtime "runsc run" "gVisor ($RUNSC_PLATFORM)" "$OCI_NS" "$LIMITS_NATIVE" \
        "the runc bundle; --network=none --oci-seccomp; runsc's sandbox and gofer run as host root (in their own namespaces, with gVisor's host seccomp filter)" -- runsc "${RUNSC_FLAGS[@]}" run --bundle "$PB" husk-bench-probe
fi
if [ -n "$DOCKER" ]; then
    runtime "docker run" host "pid net ipc uts mount (cgroup ns: docker's default for this cgroup version)" \
        "none set (no --memory/--pids-limit)" "docker's default seccomp profile and capabilities; writable overlay root" -- \
        $DOCKER run --rm --network none husk-bench/busybox:latest sh -c "$PROBE"
fi

# -------------------------------------------------------------- benchmarks --
HF=("${PRIVATE_NULL[@]}" hyperfine --style basic -N)
FILES_COLD=() FILES_PY=() FILES_EXEC=() FILES_IMPORT=()
# The fast benchmarks run in $ROUNDS rounds of RUNS/ROUNDS runs each, the
# order rotated every round (round 1 in the listed order), so load that
# drifts during the run (this is a shared machine) is spread over all of
# them; the report pools each benchmark's times over the rounds.
hf_round() { # FILE ROUND WARMUP RUNS NAME CMD [NAME CMD]...; HF_WRAP: prefix command
    local file=$1 r=$2 warm=$3 runs=$4 n i args=()
    shift 4
    local -a names=() cmds=()
    while [ $# -gt 0 ]; do names+=("$1"); cmds+=("$2"); shift 2; done
    n=${#names[@]}
    for ((i = 0; i < n; i++)); do args+=(-n "${names[(i + r) % n]}" "${cmds[(i + r) % n]}"); done
    "${HF_WRAP[@]}" "${HF[@]}" --warmup "$warm" --runs "$runs" --export-json "$RES/$file" "${args[@]}"
}
PER_ROUND=$(((RUNS_FAST + ROUNDS - 1) / ROUNDS))
HF_WRAP=()

say "cold start: /bin/true in busybox"
have crun || skip cold "crun run" "crun is not installed"
for ((r = 0; r < ROUNDS; r++)); do
    echo "-- round $((r + 1))/$ROUNDS"
    HF_WRAP=()
    hf_round "cold-fast-$r.json" "$r" 2 "$PER_ROUND" \
        "husk native" "$HUSK run --image busybox -- /bin/true" \
        "husk native --no-cgroup --seccomp unconfined" "$HUSK run --image busybox --no-cgroup --seccomp unconfined -- /bin/true" \
        "bwrap" "${BWRAP[*]} /bin/true" \
        "runc run" "runc --root $RUNC_ROOT run --bundle $OCI_TRUE husk-bench-true"
    FILES_COLD+=("cold-fast-$r.json")
    if have crun; then
        HF_WRAP=("${CRUN_WRAP[@]}")
        hf_round "cold-crun-$r.json" 0 2 "$PER_ROUND" "crun run" "crun --root $CRUN_ROOT run --bundle $OCI_TRUE husk-bench-true"
        FILES_COLD+=("cold-crun-$r.json")
    fi
done
HF_WRAP=()
set --
if have runsc; then
    set -- "$@" -n "husk --runtime runsc" "$HUSK run --image busybox --runtime runsc --runsc-platform $RUNSC_PLATFORM -- /bin/true" \
        -n "runsc run" "runsc ${RUNSC_FLAGS[*]} run --bundle $OCI_TRUE husk-bench-true"
else
    skip cold "runsc" "runsc is not installed"
fi
[ -n "$DOCKER" ] && set -- "$@" -n "docker run" "$DOCKER run --rm --network none husk-bench/busybox:latest /bin/true"
[ -n "$DOCKER" ] || skip cold "docker run" "docker.io is not installed"
if [ $# -gt 0 ]; then
    "${HF[@]}" --warmup 3 --runs "$RUNS_SLOW" --export-json "$RES/cold-slow.json" "$@"
    FILES_COLD+=(cold-slow.json)
fi

say "python3 -c 'print(1)' in the python image"
for ((r = 0; r < ROUNDS; r++)); do
    hf_round "python-fast-$r.json" "$r" 2 "$(((PER_ROUND + 1) / 2))" \
        "husk" "$HUSK run --image python -- python3 -c 'print(1)'" \
        "bwrap" "${BWRAP_PY[*]} /usr/bin/python3 -c 'print(1)'"
    FILES_PY+=("python-fast-$r.json")
done
if [ -n "$DOCKER" ]; then
    "${HF[@]}" --warmup 3 --runs "$RUNS_SLOW" --export-json "$RES/python-slow.json" \
        -n "docker run" "$DOCKER run --rm --network none husk-bench/python:latest python3 -c 'print(1)'"
    FILES_PY+=(python-slow.json)
fi

say "exec: /bin/true into a live sandbox"
stop_oci() { # RUNTIME ROOT ID: kill, wait until stopped (so its cgroups are empty), delete
    "$1" --root "$2" kill "$3" KILL 2>/dev/null || true
    for _ in $(seq 50); do
        "$1" --root "$2" state "$3" 2>/dev/null | grep -q '"status": *"stopped"' && break
        sleep 0.1
    done
    # runc logs (and retries) while the kernel still empties the cgroups.
    "$1" --root "$2" delete -f "$3" 2>/dev/null || true
    if "$1" --root "$2" state "$3" >/dev/null 2>&1; then
        echo "bench: $1 container $3 is still there after delete" >&2
        return 1
    fi
}
set --
EXEC_HUSK_ID=""
if "$HUSK" create --help >/dev/null 2>&1; then
    EXEC_HUSK_ID=$("$HUSK" create --image busybox --json | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])')
    set -- "$@" "husk exec" "$HUSK exec $EXEC_HUSK_ID -- /bin/true"
else
    skip exec "husk exec" "this husk binary has no \`create\` subcommand yet; rerun scripts/bench.sh once it has"
fi
runc --root "$RUNC_ROOT" run -d --bundle "$OCI_SLEEP" husk-bench-exec <"$NULLDEV" >"$NULLDEV" 2>&1
set -- "$@" "runc exec" "runc --root $RUNC_ROOT exec husk-bench-exec /bin/true"
if have crun; then
    "${CRUN_WRAP[@]}" crun --root "$CRUN_ROOT" run -d --bundle "$OCI_SLEEP" husk-bench-exec <"$NULLDEV" >"$NULLDEV" 2>&1
    set -- "$@" "crun exec" "crun --root $CRUN_ROOT exec husk-bench-exec /bin/true"
fi
for ((r = 0; r < ROUNDS; r++)); do
    hf_round "exec-fast-$r.json" "$r" 2 "$PER_ROUND" "$@"
    FILES_EXEC+=("exec-fast-$r.json")
done
if [ -n "$DOCKER" ]; then
    $DOCKER run -d --network none --name husk-bench-exec husk-bench/busybox:latest sleep 1000000 >/dev/null
    "${HF[@]}" --warmup 3 --runs "$RUNS_SLOW" --export-json "$RES/exec-slow.json" \
        -n "docker exec" "$DOCKER exec husk-bench-exec /bin/true"
    FILES_EXEC+=(exec-slow.json)
    $DOCKER rm -f husk-bench-exec >/dev/null
fi
[ -n "$EXEC_HUSK_ID" ] && "$HUSK" rm "$EXEC_HUSK_ID" >/dev/null && EXEC_HUSK_ID=""
stop_oci runc "$RUNC_ROOT" husk-bench-exec
have crun && stop_oci crun "$CRUN_ROOT" husk-bench-exec

say "import: the python image"
LAYOUT=$IMAGES/python
manifest=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$LAYOUT/index.json")
untar="true"
for l in $(python3 -c 'import json,sys;[print(l["digest"][7:]) for l in json.load(open(sys.argv[1]))["layers"]]' \
    "$LAYOUT/blobs/sha256/$manifest"); do
    untar="$untar && tar -xzf $LAYOUT/blobs/sha256/$l -C $WORK/tmp/tar"
done
[ -f "$WORK/tmp/python.docker.tar" ] || skopeo copy -q "oci:$LAYOUT:latest" "docker-archive:$WORK/tmp/python.docker.tar:husk-bench/python:latest"
IS=$WORK/import-store
set -- -n "husk image import (OCI layout)" --prepare "rm -rf $IS" "$HUSK --root $IS image import $LAYOUT" \
    -n "husk image import (docker-save tar)" --prepare "rm -rf $IS" "$HUSK --root $IS image import $WORK/tmp/python.docker.tar" \
    -n "umoci unpack" --prepare "rm -rf $WORK/tmp/umoci" "umoci unpack --image $LAYOUT:latest $WORK/tmp/umoci" \
    -n "tar -xzf (sequential)" --prepare "rm -rf $WORK/tmp/tar && mkdir -p $WORK/tmp/tar" "$untar"
if [ -n "$DOCKER" ]; then
    set -- "$@" -n "docker load" --prepare "$DOCKER rmi -f husk-bench/python:latest >/dev/null || true" "$DOCKER load -q -i $WORK/tmp/python.docker.tar"
fi
# Default shell mode: the tar pipeline needs one, and a shell's ~1 ms is
# noise against seconds (hyperfine subtracts it anyway).
"${PRIVATE_NULL[@]}" hyperfine --style basic --warmup 1 --runs "$RUNS_IMPORT" --export-json "$RES/import.json" "$@"
FILES_IMPORT+=(import.json)
rm -rf "$IS" "$WORK/tmp/umoci" "$WORK/tmp/tar"

# -------------------------------------------------------------- throughput --
# Sandboxes per second with 8 concurrent clients (husk cold with limits,
# bwrap, crun): its own page, docs/throughput.md.
say "throughput: 8 concurrent clients"
if [ -z "${BENCH_NO_THROUGHPUT:-}" ]; then
    HUSK=$HUSK HUSK_IMAGES=$IMAGES BENCH_WORK=$WORK scripts/bench-throughput.sh
else
    echo "BENCH_NO_THROUGHPUT is set: docs/throughput.md is left as it is"
fi

# ------------------------------------------------------------- warm starts --
# Pools (claims vs cold creates through husk serve) and the other warm
# mechanisms: scripts/bench-warm.sh, its sections' numbers in docs/warm.md.
say "warm starts"
if [ -z "${BENCH_NO_WARM:-}" ]; then
    HUSK=$HUSK HUSK_IMAGES=$IMAGES BENCH_WORK=$WORK scripts/bench-warm.sh
else
    echo "BENCH_NO_WARM is set: scripts/bench-warm.sh is left out"
fi

# -------------------------------------------------------------------- api --
# The API's round trips (serve, CLI, Python client) against docker-py on a
# private dockerd: scripts/bench-api.sh, numbers in docs/api.md.
# BENCH_API=0 leaves it out.
say "api: serve, CLI and the Python client vs docker-py"
if [ "${BENCH_API:-1}" = 1 ]; then
    HUSK=$HUSK HUSK_IMAGES=$IMAGES BENCH_WORK=$WORK/api scripts/bench-api.sh || echo "bench: scripts/bench-api.sh failed" >&2
else
    echo "BENCH_API=0: scripts/bench-api.sh is left out"
fi

# ---------------------------------------------------------------- network --
# The egress proxy against --network host (download, per-connection
# latency, the proxy's RSS, cold start): scripts/bench-network.sh, numbers
# in docs/network.md. BENCH_NETWORK=0 leaves it out.
say "network: the egress proxy"
if [ "${BENCH_NETWORK:-1}" = 1 ]; then
    BENCH_WORK=$WORK scripts/bench-network.sh "$HUSK" || echo "bench: scripts/bench-network.sh failed" >&2
else
    echo "BENCH_NETWORK=0: scripts/bench-network.sh is left out"
fi

# ------------------------------------------------------------------ build --
# husk build vs docker build (its own private dockerd), cold and cached, and
# husk fork: scripts/bench-build.sh, numbers in docs/build.md.
say "build and fork"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    HUSK=$HUSK HUSK_IMAGES=$IMAGES BENCH_WORK=$WORK/build scripts/bench-build.sh \
        || echo "bench: scripts/bench-build.sh failed" >&2
else
    echo "BENCH_NO_BUILD is set: scripts/bench-build.sh is left out"
fi

# ------------------------------------------------------------------ report --
say "report"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
note "Run counts: husk native, bwrap, runc, crun and the fast exec paths: $ROUNDS rounds of $PER_ROUND runs (2 warmups each round, the order rotated every round, times pooled); python, husk and bwrap: $ROUNDS rounds of $(((PER_ROUND + 1) / 2)); runsc, husk --runtime runsc, docker run and docker exec, which take 100+ ms each: $RUNS_SLOW runs after 3 warmups, in one round; import: $RUNS_IMPORT runs after 1 warmup."
note "Cold start and exec use hyperfine -N (no shell between hyperfine and the runtime); import uses hyperfine's default shell (the tar pipeline needs one), whose spawn time hyperfine subtracts."
note "hyperfine runs one benchmark's runs back to back, then the next: load that changes during the run biases later benchmarks. This VM is shared with other jobs: load average $LOAD_BEFORE before, $LOAD_AFTER after."
if [ "$DOCKER_OURS" = 1 ]; then
    note "dockerd was started by the script (--iptables=false --bridge=none, own data-root on $(findmnt -no FSTYPE -T "$WORK")) and stopped at the end."
fi
cgmode=v1
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then cgmode="v2 (unified)"
elif [ -d /sys/fs/cgroup/unified ]; then cgmode="hybrid (v1 controllers + v2 at /sys/fs/cgroup/unified)"; fi
ver() { "$@" 2>/dev/null | head -1 || true; }
export DATE LOAD_BEFORE LOAD_AFTER cgmode RES WORK
export HUSK_VERSION="$("$HUSK" --version | head -1)"
HUSK_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# Only what the binary is built from (the report itself rewrites README.md).
[ -n "$(git status --porcelain --untracked-files=no -- src build.rs Cargo.toml Cargo.lock seccomp rootfs .cargo 2>/dev/null)" ] \
    && HUSK_COMMIT="$HUSK_COMMIT with uncommitted changes to husk's sources"
[ "$HUSK" = "$REL/husk" ] || HUSK_COMMIT="binary $HUSK (source tree at $HUSK_COMMIT)"
export HUSK_COMMIT
export T_HYPERFINE="$(ver hyperfine --version)" T_RUNC="$(ver runc --version)" T_CRUN="$(ver crun --version)"
export T_BWRAP="$(ver bwrap --version)" T_RUNSC="$(ver runsc --version)" T_UMOCI="$(ver umoci --version)"
export T_SKOPEO="$(ver skopeo --version)" T_TAR="$(ver tar --version)"
export T_DOCKER="$([ -n "$DOCKER" ] && $DOCKER version --format 'client {{.Client.Version}}, daemon {{.Server.Version}}' 2>/dev/null || true)"
export F_COLD="${FILES_COLD[*]}" F_PY="${FILES_PY[*]}" F_EXEC="${FILES_EXEC[*]}" F_IMPORT="${FILES_IMPORT[*]}"
export RUNS_FAST RUNS_SLOW RUNSC_PLATFORM
export IMPORT_DESC="$(du -sh --apparent-size "$LAYOUT/blobs" | cut -f1) of blobs, $(python3 -c 'import json,sys;print(len(json.load(open(sys.argv[1]))["layers"]))' "$LAYOUT/blobs/sha256/$manifest") gzip layers"
python3 - <<'EOF'
import json, os, platform
e = os.environ
def cpu():
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            return l.split(":", 1)[1].strip()
    return platform.processor() or "?"
def os_name():
    for l in open("/etc/os-release"):
        if l.startswith("PRETTY_NAME="):
            return l.split("=", 1)[1].strip().strip('"')
    return "?"
mem = next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))
host = [
    ["OS", os_name()],
    ["kernel", platform.release()],
    ["CPU", cpu()],
    ["cores", str(os.cpu_count())],
    ["memory", "%.1f GiB" % (int(mem) / 2**20)],
    ["cgroups", e["cgmode"]],
    ["load average before", e["LOAD_BEFORE"]],
    ["load average after", e["LOAD_AFTER"]],
]
tools = [[k, e[v]] for k, v in [("hyperfine", "T_HYPERFINE"), ("docker", "T_DOCKER"), ("runc", "T_RUNC"),
    ("crun", "T_CRUN"), ("bwrap", "T_BWRAP"), ("runsc", "T_RUNSC"), ("umoci", "T_UMOCI"), ("skopeo", "T_SKOPEO"),
    ("tar", "T_TAR")] if e.get(v)]
res = e["RES"]
def files(k):
    return e[k].split()
groups = [
    {"id": "cold", "title": "Cold start: /bin/true in the busybox image", "baseline": "husk native", "files": files("F_COLD"),
     "notes": ["Each run creates, runs and removes a sandbox; husk native runs husk's defaults (all namespaces, "
               "read-only root, cgroup limits, seccomp). The second husk row turns the limits and the filter off to show "
               "what they cost. runsc uses platform %s." % e["RUNSC_PLATFORM"]]},
    {"id": "python", "title": "python3 -c 'print(1)' in the python image", "baseline": "husk", "files": files("F_PY"),
     "notes": ["The Debian bookworm python3 image from scripts/build-images.sh; bwrap runs on a umoci-unpacked copy."]},
    {"id": "exec", "title": "exec /bin/true into a live sandbox", "baseline": "husk exec", "files": files("F_EXEC"),
     "notes": ["A long-lived sandbox (busybox, `sleep`) per runtime, then only the exec is timed."]},
    {"id": "import", "title": "Import of the python image (%s)" % e["IMPORT_DESC"], "baseline": "husk image import (OCI layout)",
     "files": files("F_IMPORT"),
     "notes": ["Fresh destination every run (husk: an empty store; docker: the image removed first). "
               "The docker-save tar holds uncompressed layers; the OCI layout gzip ones."]},
]
runtimes = []
for line in open(os.path.join(res, "runtimes.tsv")):
    name, kernel, nss, limits, probe, notes = line.rstrip("\n").split("\t")
    text = open(os.path.join(res, probe)).read()
    runtimes.append({"name": name, "kernel": kernel, "namespaces": nss, "limits": limits, "probe": text or None, "notes": notes})
skipped = [dict(zip(["group", "name", "why"], l.rstrip("\n").split("\t"))) for l in open(os.path.join(res, "skipped.tsv"))]
notes = [l.strip() for l in open(os.path.join(res, "notes.txt")) if l.strip()]
targets = [
    {"kind": "faster", "label": "husk native cold start below bwrap's", "a": "cold/husk native", "b": "cold/bwrap"},
    {"kind": "faster", "label": "the same, with bwrap's isolation (husk --no-cgroup --seccomp unconfined: no limits, no filter, like bwrap)",
     "a": "cold/husk native --no-cgroup --seccomp unconfined", "b": "cold/bwrap"},
    {"kind": "ratio_at_least", "label": "husk native ≥ 50× faster than docker run", "a": "cold/husk native", "b": "cold/docker run", "ratio": 50},
    {"kind": "within_ms", "label": "python hello within 3 ms of bwrap's", "a": "python/husk", "b": "python/bwrap", "ms": 3},
]
meta = {"date": e["DATE"], "command": "scripts/bench.sh", "host": host,
        "husk": {"version": e["HUSK_VERSION"], "commit": e["HUSK_COMMIT"]}, "tools": tools, "groups": groups,
        "runtimes": runtimes, "skipped": skipped, "targets": targets, "notes": notes}
json.dump(meta, open(os.path.join(res, "meta.json"), "w"), indent=1, ensure_ascii=False)
EOF
"$REPORT" --results "$RES" --md docs/benchmarks.md --svg docs/benchmarks.svg --readme README.md
echo "results: $RES; report: docs/benchmarks.md, docs/benchmarks.svg, README.md (Benchmarks)"

# Pulls from a loopback registry: husk pull vs docker pull vs skopeo copy +
# husk image import, a cold `husk run --image REF` vs pull + a warm run,
# import vs docker load, peak RSS (scripts/bench-pull.sh; printed, not in
# the report). BENCH_PULL=0 leaves it out.
if [ "${BENCH_PULL:-1}" = 1 ]; then
    scripts/bench-pull.sh "$HUSK" || echo "bench: scripts/bench-pull.sh failed" >&2
fi

# husk as an OCI runtime: `docker run --rm --runtime husk` vs `--runtime
# runc`, `ctr run --runc-binary` husk vs runc (scripts/bench-oci.sh; printed,
# numbers copied into docs/oci-runtime.md). BENCH_OCI=0 leaves it out.
if [ "${BENCH_OCI:-1}" = 1 ]; then
    scripts/bench-oci.sh "$HUSK" || echo "bench: scripts/bench-oci.sh failed" >&2
fi

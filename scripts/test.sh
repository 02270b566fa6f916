#!/usr/bin/env bash
# The test command (README, .ci/run). Run as root on a Debian host:
#
#   scripts/test.sh
#
# 1. installs the Debian packages the tests use, if missing
# 2. cargo fmt --check, cargo clippy -D warnings
# 3. builds husk, the tests and the static husk-probe; builds a busybox rootfs
# 4. runs every test as root, then the rootless subset (tests in a
#    `mod rootless`) as the unprivileged user `tester` (created if missing)
# 5. prints a summary; exits non-zero if anything failed, or if any line of
#    test output starts with `SKIP:` (CI runs everything or fails).
#
# Other features hook in at the sections marked `HOOK:` below.
set -uo pipefail

cd "$(dirname "$0")/.."
SRC=$PWD
TESTER=${HUSK_TEST_USER:-tester}
FAILED_STEPS=()
step() { printf '\n\033[1m=== %s\033[0m\n' "$*"; }
fail_step() { FAILED_STEPS+=("$1"); printf '\033[31m!!! %s failed\033[0m\n' "$1"; }

if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh runs the suite as root and then as '$TESTER'; run it as root (e.g. sudo)." >&2
    echo "As an ordinary user, 'cargo test rootless::' runs the rootless subset." >&2
    exit 1
fi

# ---------------------------------------------------------------- packages --
step "packages"
# busybox-static: the busybox rootfs; util-linux: setsid -c, ipcmk, runuser.
PACKAGES=(busybox-static util-linux passwd)
# HOOK: packages — append what your tests need, e.g. PACKAGES+=(qemu-system-x86).
# qemu + Debian's kernel: the pure cgroup v2 VM test (scripts/vm-test.sh).
PACKAGES+=(qemu-system-x86 linux-image-amd64 file cpio)
# runsc: gVisor, for the runsc backend and tests/parity.rs.
PACKAGES+=(runsc)
# Podman's seccomp profile (/usr/share/containers/seccomp.json): tests/seccomp.rs
# compiles and runs it as a user profile.
PACKAGES+=(golang-github-containers-common)
# husk pull: a real registry (started privately by tests/image_pull.rs,
# never the packaged service), skopeo to fill it, htpasswd for Basic auth,
# openssl to sign the Bearer tokens of the test's token issuer.
PACKAGES+=(docker-registry skopeo apache2-utils openssl)
# The Python client's and husk mcp's tests (tests/python): a venv with
# pytest and the official MCP SDK from PyPI.
PACKAGES+=(python3-venv)
# tests/tty.rs: tiocsti_cannot_reach_host_terminal runs python3 (TIOCSTI
# through fcntl.ioctl) in a host-mode sandbox; setsid and stty (util-linux,
# coreutils) drive husk on a pty.
PACKAGES+=(python3)
# tests/warm_results.rs: a matplotlib figure comes back from a warm call as a PNG.
PACKAGES+=(python3-matplotlib)
# --network allow= (tests/network.rs): curl and python3 (above) as the sandbox's
# clients (host mode), openssl for the test CA and TLS server.
PACKAGES+=(curl)
# tests/network_clients.rs: real clients behind the proxy with only its
# environment: pip (python3-pip), git (dumb HTTP clone), node and npm.
# nodesource's nodejs bundles npm and conflicts with Debian's, so npm is
# asked for only when no npm is installed.
PACKAGES+=(python3-pip git nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)
# tests/image_out.rs and build_docker.rs: a private dockerd (tests/dockerkit) that
# loads, pulls and builds images to compare with husk's.
PACKAGES+=(docker.io)
# husk as an OCI runtime (tests/oci_docker.rs, tests/oci_cli.rs): dockerd and
# containerd (started privately by tests/ocikit, never the packaged
# services), ctr, and real runc, whose state and spec the tests compare
# husk's with.
PACKAGES+=(docker.io containerd runc)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
        || { echo "apt-get install ${missing[*]} failed" >&2; exit 1; }
else
    echo "all present: ${PACKAGES[*]}"
fi
if ! id "$TESTER" >/dev/null 2>&1; then
    echo "creating user $TESTER"
    useradd --create-home --shell /bin/bash "$TESTER" || { echo "useradd $TESTER failed" >&2; exit 1; }
fi

# The host's device nodes as they are before any test: the summary checks
# that no test (and no husk or runsc run) changed one. runsc without
# --rootless fchowns its stdio to its sandbox user, which turned the host's
# /dev/null into nobody:nogroup once (issue 15 item 23).
HOST_DEVS=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty)
dev_state() { stat -c '%n: %F, owner %U:%G (%u:%g), mode %a, device %t:%T' "${HOST_DEVS[@]}" 2>&1; }
DEVS_BEFORE=$(dev_state)
# The host's static busybox: fixture roots hold absolute symlinks to
# /bin/busybox (one per applet), so a host-side write through one of them
# would replace the host's binary. It happened once during development
# (2026-12-06, overwritten by a husk-probe; cause not found): the summary
# now fails if the file changed.
BUSYBOX_BEFORE=$(sha256sum /bin/busybox 2>&1)

# -------------------------------------------------------------------- lint --
step "cargo fmt --check"
cargo fmt --all --check || fail_step "cargo fmt --check"
step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings || fail_step "cargo clippy"
step "import graph"
# src/'s files import downward only: no circle, nothing reaching up into
# cmd/, sandbox/ or backend/ (docs/architecture.md, "Layers").
python3 scripts/import-graph.py || fail_step "import graph (scripts/import-graph.py)"

# ------------------------------------------------------------------- build --
step "build"
cargo build || { echo "cargo build failed" >&2; exit 1; }
TEST_EXES=$(cargo test --workspace --no-run --message-format=json 2>/dev/null \
    | grep '"reason":"compiler-artifact"' | grep '"kind":\["test"\]' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
[ -n "$TEST_EXES" ] || { echo "cargo test --no-run built no integration tests" >&2; exit 1; }
# Static by .cargo/config.toml (crt-static on the gnu target).
cargo build --release -p husk-probe \
    || { echo "building the static husk-probe failed" >&2; exit 1; }

# Fixtures in a directory the unprivileged user can read (the source tree
# may not be traversable for it).
WORK=$(mktemp -d /tmp/husk-test.XXXXXX)
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
chmod 755 "$WORK"
mkdir -p "$WORK/bin" "$WORK/tests" "$WORK/home"
cp target/x86_64-unknown-linux-gnu/debug/husk target/x86_64-unknown-linux-gnu/release/husk-probe "$WORK/bin/"
for exe in $TEST_EXES; do cp "$exe" "$WORK/tests/"; done
scripts/build-busybox-rootfs.sh "$WORK/rootfs" "$WORK/bin/husk-probe" >/dev/null \
    || { echo "building the busybox rootfs failed" >&2; exit 1; }
chmod -R a+rX "$WORK/bin" "$WORK/tests" "$WORK/rootfs"
chown "$TESTER" "$WORK/home"
# A rootless user runs a husk binary it owns: the case where file
# permissions alone would let sandbox root (= that user) overwrite it.
chown "$TESTER" "$WORK/bin/husk"
export HUSK_PROBE=$WORK/bin/husk-probe
export HUSK_BUSYBOX_ROOTFS=$WORK/rootfs

# ---------------------------------------------------------- tests as root --
step "cargo test (root)"
cargo test --workspace --no-fail-fast -- --nocapture 2>&1 | tee "$WORK/root.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail_step "cargo test (root)"

# ----------------------------------------------- python client + MCP tests --
# tests/python: the Python client (clients/python) through the CLI and
# through husk serve, and husk mcp driven by the official MCP Python SDK,
# against the built binary. Debian's python3 (the venv module is packaged).
step "python client and MCP (pytest)"
if /usr/bin/python3 -m venv "$WORK/venv" >"$WORK/venv.log" 2>&1 \
    && "$WORK/venv/bin/pip" install -q pytest==9.2.0 mcp==2.3.0 ./clients/python >>"$WORK/venv.log" 2>&1; then
    HUSK_BIN="$WORK/bin/husk" "$WORK/venv/bin/pytest" -q -rs -p no:cacheprovider tests/python 2>&1 \
        | tee "$WORK/python.log"
    [ "${PIPESTATUS[0]}" = 0 ] || fail_step "python client and MCP (pytest tests/python)"
    # pytest's own skips count as skips (CI runs everything).
    if grep -qE '^SKIPPED|[0-9]+ skipped' "$WORK/python.log"; then
        fail_step "python tests skipped (CI must run every test)"
    fi
else
    cat "$WORK/venv.log"
    fail_step "python venv for tests/python (python3 -m venv; pip install pytest==9.2.0 mcp==2.3.0 ./clients/python)"
fi

# --------------------------------------------------------- docs as written --
# scripts/doc-run.sh: every ```sh block of README.md, docs/*.md and
# clients/python/README.md, as written, against the built binary in a fresh
# store and state dir per file (blocks marked `<!-- doc-run: skip ... -->`
# are listed as not run). The `needs python` blocks run with the image
# scripts/host-python-image.sh builds from Debian's python3 (seconds,
# offline; the demo image's debootstrap takes minutes and a mirror).
step "docs run as written (scripts/doc-run.sh)"
if scripts/host-python-image.sh "$WORK/images/python"; then
    HUSK_BIN="$WORK/bin/husk" HUSK_DOC_PYTHON="$WORK/images/python" scripts/doc-run.sh \
        || fail_step "docs examples (scripts/doc-run.sh)"
else
    fail_step "python image for the docs (scripts/host-python-image.sh)"
fi

# ------------------------------------------------------ tests as rootless --
step "rootless subset as $TESTER"
: >"$WORK/rootless.log"
chmod 666 "$WORK/rootless.log"
for exe in "$WORK"/tests/*; do
    name=$(basename "$exe")
    echo "--- $name rootless::" | tee -a "$WORK/rootless.log"
    # HUSK_NO_CGROUP=1: this host delegates no cgroup to ordinary users, so a
    # rootless run with limits refuses (fail closed, tested by the cgroup
    # suite's rootless test, which clears it); the other rootless tests check
    # everything else.
    runuser -u "$TESTER" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$WORK/home" HUSK_NO_CGROUP=1 \
        HUSK_BIN="$WORK/bin/husk" HUSK_PROBE="$HUSK_PROBE" HUSK_BUSYBOX_ROOTFS="$HUSK_BUSYBOX_ROOTFS" \
        sh -c 'cd "$1" && exec "$2" rootless:: --nocapture' sh "$WORK/home" "$exe" 2>&1 | tee -a "$WORK/rootless.log"
    [ "${PIPESTATUS[0]}" = 0 ] || fail_step "rootless: $name"
done

# -------------------------------------------------------- HOOK: fuzz smoke --
# Every fuzz harness already ran in the root pass above: tests/fuzz_smoke.rs
# replays fuzz/corpus/* plus bounded mutations with stable Rust. Where
# cargo-fuzz is installed, also a few seconds of libFuzzer per target (the
# first build of the sanitizer crate takes minutes; later ones are cached).
step "fuzz smoke"
if command -v cargo-fuzz >/dev/null 2>&1; then
    scripts/fuzz.sh 3 || fail_step "fuzz smoke (cargo-fuzz, scripts/fuzz.sh 3)"
else
    echo "cargo-fuzz not installed: the stable replay (tests/fuzz_smoke.rs) was the fuzz smoke"
fi

# ---------------------------------------------------------- HOOK: VM test --
# cgroup v2 scenarios in a qemu/TCG VM (issue 4): this host is hybrid, so the
# pure v2 path runs on Debian's kernel under qemu.
step "cgroup v2 VM test"
scripts/vm-test.sh || fail_step "scripts/vm-test.sh (cgroup v2 in a VM)"

# ----------------------------------------------------------------- summary --
step "summary"
# A test that replaces or chowns a host device node must never go unnoticed.
for dev in "${HOST_DEVS[@]}"; do
    [ -c "$dev" ] || fail_step "host $dev is no longer a character device (a test or husk replaced it)"
done
if [ "$(sha256sum /bin/busybox 2>&1)" != "$BUSYBOX_BEFORE" ]; then
    fail_step "the host's /bin/busybox changed during the tests (a write through a fixture's /bin/busybox symlink?): apt-get install --reinstall busybox-static"
fi
if [ "$(dev_state)" != "$DEVS_BEFORE" ]; then
    diff <(echo "$DEVS_BEFORE") <(dev_state) | sed 's/^/  /'
    fail_step "a host device node changed during the tests (owner, mode or device numbers; see the diff above)"
fi
count() { # LOG FIELD
    grep -hoE "[0-9]+ $2" "$1" | awk '{s += $1} END {print s + 0}'
}
for pass in root rootless; do
    log=$WORK/$pass.log
    printf '%-9s %4d passed, %d failed\n' "$pass" "$(count "$log" passed)" "$(count "$log" failed)"
    grep -E '^test .* FAILED$' "$log" | sed "s/^/  [$pass] /"
done
[ "$(count "$WORK/rootless.log" passed)" -gt 0 ] || fail_step "the rootless pass ran no tests"
if grep -hE '^SKIP:' "$WORK/root.log" "$WORK/rootless.log" | sort -u | sed 's/^/  /' | grep .; then
    fail_step "tests skipped (CI must run every test)"
fi
if [ ${#FAILED_STEPS[@]} -gt 0 ]; then
    printf '\033[31mFAILED:\033[0m\n'
    printf '  - %s\n' "${FAILED_STEPS[@]}"
    exit 1
fi
printf '\033[32mOK: all tests passed as root and rootless, no skips\033[0m\n'

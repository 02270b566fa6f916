#!/usr/bin/env bash
# Pure cgroup v2 tests in a VM. This host is hybrid (v1 controllers), so the
# v2 code path is exercised by booting Debian's kernel under qemu (TCG only:
# /dev/kvm hangs here) with an initramfs holding busybox, a static husk, the
# overlay module, a busybox rootfs and the test driver
# (scripts/vm/cgroup-tests.sh). The VM mounts only cgroup2 and prints
# `PASS name` / `FAIL name: why` lines; this script turns them into its exit
# code (0: all passed; 1: a FAIL or no completion marker).
#
# Env: KERNEL=/boot/vmlinuz-X (default: newest), HUSK_VM_BIN=path to a
# static husk (default: built here), VM_TIMEOUT=seconds (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."

KERNEL=${KERNEL:-$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)}
[ -n "$KERNEL" ] && [ -r "$KERNEL" ] || { echo "vm-test: no readable kernel in /boot (apt-get install linux-image-amd64)" >&2; exit 1; }
KVER=${KERNEL#/boot/vmlinuz-}
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] && file -L "$BUSYBOX" | grep -q 'statically linked' \
    || { echo "vm-test: need a static busybox (apt-get install busybox-static)" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "vm-test: need qemu-system-x86_64" >&2; exit 1; }

if [ -z "${HUSK_VM_BIN:-}" ]; then
    echo "vm-test: building a static husk" >&2
    # Static via .cargo/config.toml (crt-static on the gnu target).
    nice -n 10 cargo build --release >&2
    HUSK_VM_BIN=target/x86_64-unknown-linux-gnu/release/husk
fi
file -L "$HUSK_VM_BIN" | grep -q 'static' || { echo "vm-test: $HUSK_VM_BIN is not statically linked" >&2; exit 1; }

WORK=$(mktemp -d /tmp/husk-vm.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,lib,etc,proc,sys,dev,tmp,rootfs/bin,rootfs/etc}

applets() { # DIR: busybox and one symlink per applet
    cp "$BUSYBOX" "$1/busybox"
    for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -sf busybox "$1/$a"; done
}
applets "$ROOT/bin"
applets "$ROOT/rootfs/bin"
cp "$HUSK_VM_BIN" "$ROOT/husk"
cp scripts/vm/cgroup-tests.sh "$ROOT/init"
chmod 755 "$ROOT/init" "$ROOT/husk"

# overlay is a module in Debian's kernel (compressed in some releases).
MOD=$(find "/lib/modules/$KVER/kernel/fs/overlayfs" -name 'overlay.ko*' | head -n 1)
[ -n "$MOD" ] || { echo "vm-test: overlay module for $KVER not found" >&2; exit 1; }
case "$MOD" in
    *.xz) xz -dc "$MOD" > "$ROOT/lib/overlay.ko" ;;
    *.zst) zstd -dcq "$MOD" > "$ROOT/lib/overlay.ko" ;;
    *.gz) gzip -dc "$MOD" > "$ROOT/lib/overlay.ko" ;;
    *) cp "$MOD" "$ROOT/lib/overlay.ko" ;;
esac

# A second rootfs with the host's python3 and its standard library, for
# the warm-interpreter scenario (docs/warm.md: a spare moved into its exec
# leaf ahead of the call, here on pure v2).
PYROOT=$ROOT/pyroot
mkdir -p "$PYROOT"/{bin,etc,tmp,proc,dev}
applets "$PYROOT/bin"
. scripts/lib/host-python.sh
host_python_into "$PYROOT" || exit 1

for etc in "$ROOT/etc" "$ROOT/rootfs/etc" "$PYROOT/etc"; do
    printf 'root:x:0:0:root:/root:/bin/sh\ntester:x:1000:1000:tester:/tmp:/bin/sh\n' > "$etc/passwd"
    printf 'root:x:0:\ntester:x:1000:\n' > "$etc/group"
done

(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initramfs.gz"

echo "vm-test: booting $KERNEL under TCG" >&2
set +e
timeout "${VM_TIMEOUT:-300}" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 1024 -nographic -no-reboot \
    -kernel "$KERNEL" -initrd "$WORK/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3" </dev/null 2>&1 | tr -d '\r' | tee "$WORK/log"
set -e

passes=$(grep -c '^PASS ' "$WORK/log" || true)
fails=$(grep -c '^FAIL ' "$WORK/log" || true)
if ! grep -q '^HUSK-VM-DONE' "$WORK/log"; then
    echo "vm-test: the VM did not finish (no HUSK-VM-DONE marker; timeout ${VM_TIMEOUT:-300}s?)" >&2
    exit 1
fi
echo "vm-test: $passes passed, $fails failed" >&2
[ "$fails" = 0 ] && [ "$passes" -gt 0 ]

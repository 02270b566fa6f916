#!/bin/sh
# Recipe layer 2 (python): python3, python3-numpy, python3-pip and python3-matplotlib
# (figures come back from run_code as PNG results: docs/warm.md) from Debian, installed
# with apt in a chroot of the base (numpy: what warm interpreters preload in
# scripts/bench-warm.sh and docs/warm.md's examples). The resulting diff is
# cached in $CACHE, by package list.
set -eu
: "${ROOTFS:?}" "${CACHE:?}"
packages="python3 python3-numpy python3-pip python3-matplotlib"
cached="$CACHE/python-layer-$(echo "$packages" | sha256sum | cut -c1-12).tar"
if [ -s "$cached" ]; then
    # The cache holds the whole tree after installation.
    rm -rf "${ROOTFS:?}"/*
    tar -C "$ROOTFS" --numeric-owner -xpf "$cached"
    exit 0
fi
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$ROOTFS/usr/sbin/policy-rc.d"
chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
mount -t proc proc "$ROOTFS/proc"
trap 'umount "$ROOTFS/proc" 2>/dev/null || true' EXIT
chroot "$ROOTFS" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends '"$packages"' >/dev/null && apt-get clean'
umount "$ROOTFS/proc"
trap - EXIT
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS/usr/sbin/policy-rc.d" "$ROOTFS"/var/log/apt/* "$ROOTFS"/var/cache/debconf/*-old
: > "$ROOTFS/etc/resolv.conf"
tar -C "$ROOTFS" --numeric-owner -cf "$cached.tmp" .
mv "$cached.tmp" "$cached"

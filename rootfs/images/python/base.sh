#!/bin/sh
# Recipe layer 1 (base): Debian bookworm, debootstrap --variant=minbase.
# The debootstrap tree is cached in $CACHE/bookworm-minbase.tar (a mirror
# run takes minutes); reruns unpack the cache.
set -eu
: "${ROOTFS:?}" "${CACHE:?}"
tarball="$CACHE/bookworm-minbase.tar"
if [ ! -s "$tarball" ]; then
    tmp="$CACHE/minbase.tmp"
    rm -rf "$tmp"
    # Mirror: HUSK_DEBIAN_MIRROR, else debootstrap's default.
    debootstrap --variant=minbase bookworm "$tmp" ${HUSK_DEBIAN_MIRROR:-} >"$CACHE/debootstrap.log" 2>&1 || {
        tail -20 "$CACHE/debootstrap.log" >&2
        exit 1
    }
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    tar -C "$tmp" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$tmp"
fi
tar -C "$ROOTFS" --numeric-owner -xpf "$tarball"

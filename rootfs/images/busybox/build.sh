#!/bin/sh
# Recipe: the `busybox` demo/test image, one layer: the static busybox from
# Debian's busybox-static package, its applet links, a minimal /etc.
# Called by scripts/build-images.sh with ROOTFS (an empty tree to fill).
set -eu
: "${ROOTFS:?}"
BUSYBOX=${BUSYBOX:-/bin/busybox}
if ! file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked'; then
    echo "busybox recipe: $BUSYBOX is not a static busybox; apt-get install busybox-static" >&2
    exit 1
fi
mkdir -p "$ROOTFS/bin" "$ROOTFS/etc" "$ROOTFS/root" "$ROOTFS/tmp" "$ROOTFS/home/user" \
    "$ROOTFS/usr/bin" "$ROOTFS/usr/sbin" "$ROOTFS/sbin" "$ROOTFS/var/tmp"
chmod 1777 "$ROOTFS/tmp" "$ROOTFS/var/tmp"
chmod 0700 "$ROOTFS/root"
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
chmod 0755 "$ROOTFS/bin/busybox"
for applet in $("$BUSYBOX" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$ROOTFS/bin/$applet"
done
cat > "$ROOTFS/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PW
cat > "$ROOTFS/etc/group" <<'GR'
root:x:0:
tty:x:5:
staff:x:50:user
user:x:1000:
nogroup:x:65534:
GR
chown 1000:1000 "$ROOTFS/home/user"
echo "busybox image built by husk's scripts/build-images.sh" > "$ROOTFS/etc/motd"

#!/bin/sh
# Recipe layer 3 (app): a small program (in /opt/app: the WorkingDir,
# /srv/work, gets the sandbox's fresh tmpfs) and a user for it, and a file
# removed from the base (/etc/issue.net), which the layer records as a
# whiteout (.wh.issue.net).
set -eu
: "${ROOTFS:?}"
mkdir -p "$ROOTFS/opt/app" "$ROOTFS/srv/work"
cat > "$ROOTFS/opt/app/main.py" <<'PY'
import os, sys
print(f"hello from python {sys.version.split()[0]} as uid {os.getuid()} in {os.getcwd()}")
PY
echo 'app:x:1000:1000:app:/home/app:/bin/sh' >> "$ROOTFS/etc/passwd"
echo 'app:x:1000:' >> "$ROOTFS/etc/group"
sed -i 's/^\(users:x:100:\)$/\1app/' "$ROOTFS/etc/group"
mkdir -p "$ROOTFS/home/app"
chown 1000:1000 "$ROOTFS/home/app"
rm -f "$ROOTFS/etc/issue.net"

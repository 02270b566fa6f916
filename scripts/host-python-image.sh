#!/bin/sh
# Builds a small OCI image layout named like the demo `python` image from
# the host's own python3, in seconds and offline:
#
#   scripts/host-python-image.sh LAYOUT
#
# Why: the demo image (scripts/build-images.sh python) is Debian bookworm
# from debootstrap and apt, minutes and a mirror; the docs' examples that
# name `--image python` (scripts/doc-run.sh, `needs python`) only need a
# python3, a shell and the demo's config. So this one has: Debian's
# busybox-static and its applets (scripts/build-busybox-rootfs.sh), the
# host's python3 (/usr/bin/python3 -> python3.X), the libraries `ldd` names
# for it and its extension modules, its standard library without test,
# idlelib, tkinter, ensurepip, lib2to3, site/dist-packages and the static
# libpython, and the demo's app layer (/opt/app/main.py, the user `app`,
# /srv/work). Its config is the demo's (rootfs/images/python/config: Env,
# WorkingDir /srv/work, Cmd python3 /opt/app/main.py), so what the docs say
# of the demo image holds for it. No numpy or pip: examples that need them
# are not run with it.
#
# One uncompressed layer (the layout never leaves this host: gzip would
# only add time), tagged `latest`. LAYOUT is rebuilt only when this script,
# the python binary or busybox changed (a stamp in LAYOUT/.host-python).
# Needs root (the app user's home is owned by uid 1000, as in the demo).
set -eu
[ $# -eq 1 ] || { echo "usage: $0 LAYOUT" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
out=$1
[ "$(id -u)" = 0 ] || { echo "host-python-image: run as root (real owners in the layer)" >&2; exit 1; }
pybin=$(readlink -f /usr/bin/python3 2>/dev/null || true)
[ -x "$pybin" ] || { echo "host-python-image: no /usr/bin/python3 (apt-get install python3)" >&2; exit 1; }
pyname=$(basename "$pybin")
pylib=/usr/lib/$pyname
[ -f "$pylib/os.py" ] || { echo "host-python-image: no standard library at $pylib" >&2; exit 1; }

# LAYOUT is replaced whole when stale: never a directory that holds
# something other than an image layout (a mistyped path).
if [ -d "$out" ] && [ ! -f "$out/oci-layout" ] && [ -n "$(ls -A "$out")" ]; then
    echo "host-python-image: $out is not empty and not an OCI layout; not replacing it" >&2
    exit 1
fi
stamp=$( (cat "$0" "$here/scripts/lib/host-python.sh"; ls -lL "$pybin" /bin/busybox) | sha256sum | cut -c1-16)
if [ -f "$out/index.json" ] && [ "$(cat "$out/.host-python" 2>/dev/null)" = "$stamp" ]; then
    echo "host-python-image: up to date ($out)"
    exit 0
fi

tmp=$(mktemp -d /tmp/husk-host-python.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/rootfs
"$here/scripts/build-busybox-rootfs.sh" "$root" >/dev/null

# python3 and what it loads (scripts/lib/host-python.sh).
. "$here/scripts/lib/host-python.sh"
host_python_into "$root"

# The demo's app layer (rootfs/images/python/app.sh): its program, its
# user and the workdir.
mkdir -p "$root/opt/app" "$root/srv/work" "$root/home/app"
cat > "$root/opt/app/main.py" <<'PY'
import os, sys
print(f"hello from python {sys.version.split()[0]} as uid {os.getuid()} in {os.getcwd()}")
PY
echo 'app:x:1000:1000:app:/home/app:/bin/sh' >> "$root/etc/passwd"
echo 'app:x:1000:' >> "$root/etc/group"
chown 1000:1000 "$root/home/app"

rm -rf "$out"
mkdir -p "$out"
python3 - "$root" "$out" "$pyname" <<'PY'
import hashlib, json, os, sys, tarfile
root, out, pyname = sys.argv[1:]
blobs = os.path.join(out, "blobs", "sha256")
os.makedirs(blobs)

def blob(data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)

layer_path = os.path.join(blobs, "layer.tmp")
with tarfile.open(layer_path, "w", format=tarfile.PAX_FORMAT) as t:
    for name in sorted(os.listdir(root)):
        t.add(os.path.join(root, name), arcname=name)
h = hashlib.sha256()
with open(layer_path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
layer_digest, layer_size = "sha256:" + h.hexdigest(), os.path.getsize(layer_path)
os.rename(layer_path, os.path.join(blobs, h.hexdigest()))

# The demo image's config (rootfs/images/python/config).
config = {
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
        "WorkingDir": "/srv/work",
        "Cmd": ["python3", "/opt/app/main.py"],
    },
    "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    "history": [{"created_by": f"scripts/host-python-image.sh: busybox and the host's {pyname}"}],
}
cfg_digest, cfg_size = blob(json.dumps(config).encode())
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
}
man_digest, man_size = blob(json.dumps(manifest).encode())
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": man_digest,
        "size": man_size,
        "annotations": {"org.opencontainers.image.ref.name": "latest"},
    }],
}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(index, f)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
PY
echo "$stamp" > "$out/.host-python"
echo "host-python-image: $out ($(du -sh "$out" | cut -f1))"

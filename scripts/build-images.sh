#!/bin/sh
# Builds the demo/test OCI image layouts from the recipes in
# rootfs/images/<name>/ (one shell script per layer, listed in `layers`,
# run against the image's tree in order; `config` holds umoci config flags)
# into build/images/<name>. Also writes <name>.oci.tar (oci-archive) and
# <name>.docker.tar (`docker save` format) beside each layout.
#
#   scripts/build-images.sh [busybox] [python]
#
# Needs root (chown, chroot), umoci and skopeo; python needs debootstrap and
# a Debian mirror the first time (HUSK_DEBIAN_MIRROR overrides debootstrap's
# default); the debootstrap tree and the python layer are cached in
# build/cache, so reruns take seconds. An image whose recipe did not change
# is not rebuilt.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
out=${HUSK_IMAGES:-$here/build/images}
cache=${HUSK_IMAGE_CACHE:-$here/build/cache}
[ "$#" -gt 0 ] || set -- busybox python
[ "$(id -u)" = 0 ] || { echo "build-images: run as root (layers need real owners)" >&2; exit 1; }
for tool in umoci skopeo; do
    command -v "$tool" >/dev/null || { echo "build-images: $tool is missing: apt-get install $tool" >&2; exit 1; }
done
mkdir -p "$out" "$cache"

for name in "$@"; do
    recipe=$here/rootfs/images/$name
    [ -f "$recipe/layers" ] || { echo "build-images: no recipe $recipe/layers" >&2; exit 1; }
    stamp=$(cat "$recipe"/* | sha256sum | cut -c1-16)
    if [ -f "$out/.$name.recipe" ] && [ "$(cat "$out/.$name.recipe")" = "$stamp" ] && [ -f "$out/$name/index.json" ]; then
        echo "$name: up to date ($out/$name)"
        continue
    fi
    echo "$name: building"
    layout=$out/$name
    work=$cache/$name.bundle
    rm -rf "$layout" "$work" "$out/.$name.recipe"
    umoci init --layout "$layout"
    umoci new --image "$layout:latest"
    umoci unpack --image "$layout:latest" "$work" >/dev/null
    while read -r step; do
        [ -n "$step" ] || continue
        echo "$name: layer $step"
        ROOTFS=$work/rootfs CACHE=$cache sh "$recipe/$step"
        umoci repack --refresh-bundle --history.created_by "husk recipe $name/$step" --image "$layout:latest" "$work"
    done < "$recipe/layers"
    # shellcheck disable=SC2046 # one flag per line, no spaces inside
    umoci config --image "$layout:latest" $(cat "$recipe/config")
    umoci gc --layout "$layout"
    rm -rf "$work"
    rm -f "$out/$name.oci.tar" "$out/$name.docker.tar"
    skopeo copy -q "oci:$layout:latest" "oci-archive:$out/$name.oci.tar:latest"
    skopeo copy -q "oci:$layout:latest" "docker-archive:$out/$name.docker.tar:$name:latest"
    echo "$stamp" > "$out/.$name.recipe"
    echo "$name: $layout ($(du -sh "$layout" | cut -f1))"
done

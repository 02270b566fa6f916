#!/bin/sh
# Image benchmarks (hyperfine), on the python demo image from
# scripts/build-images.sh. Run as root from the repo root after
# `cargo build --release`. Results are ratios within one hyperfine run.
#
#   1. import of the python image (fresh store) vs `umoci unpack` vs a
#      sequential `tar -xzf` of its layers
#   2. re-import of an already stored image
#   3. `husk run --image python` vs `husk run --rootfs` of an unpacked copy
#      (and vs `docker run --rm --network none` when dockerd is running)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
husk=${HUSK:-$here/target/x86_64-unknown-linux-gnu/release/husk}
[ -x "$husk" ] || husk=$here/target/release/husk
layout=${LAYOUT:-$here/build/images/python}
work=${BENCH_DIR:-/tmp/husk-bench}
runs=${RUNS:-10}
mkdir -p "$work"
export HUSK_ROOT="$work/store"
[ -x "$husk" ] || { echo "bench-image: build first: cargo build --release" >&2; exit 1; }
[ -f "$layout/index.json" ] || { echo "bench-image: build the image first: scripts/build-images.sh python" >&2; exit 1; }

manifest=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['manifests'][0]['digest'][7:])" "$layout/index.json")
layers=$(python3 -c "import json,sys;[print(l['digest'][7:]) for l in json.load(open(sys.argv[1]))['layers']]" "$layout/blobs/sha256/$manifest")
untar=""
for l in $layers; do untar="$untar tar -xzf $layout/blobs/sha256/$l -C $work/tar &&"; done
untar="${untar} true"

hyperfine --runs "$runs" --warmup 1 --export-json "$work/import.json" \
    -n "husk image import" --prepare "rm -rf $work/store" "$husk image import $layout" \
    -n "umoci unpack" --prepare "rm -rf $work/umoci" "umoci unpack --image $layout:latest $work/umoci" \
    -n "tar -xzf (sequential)" --prepare "rm -rf $work/tar && mkdir -p $work/tar" "sh -c '$untar'"

"$husk" image import "$layout" >/dev/null
hyperfine --runs "$runs" --warmup 1 --export-json "$work/reimport.json" \
    -n "husk image import (stored)" "$husk image import $layout"

rm -rf "$work/rootfs" && umoci unpack --image "$layout:latest" "$work/rootfs" >/dev/null
set -- -n "husk run --image python" "$husk run --image python -- python3 -c 'print(1)'" \
    -n "husk run --rootfs (unpacked copy)" "$husk run --rootfs $work/rootfs/rootfs -- python3 -c 'print(1)'"
if docker info >/dev/null 2>&1; then
    set -- "$@" -n "docker run --rm --network none" "docker run --rm --network none husk-bench-python python3 -c 'print(1)'"
fi
hyperfine --runs "$((runs * 3))" --warmup 3 --export-json "$work/run.json" "$@"

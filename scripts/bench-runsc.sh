#!/usr/bin/env bash
# husk under gVisor against runsc alone and husk native, one hyperfine run:
#
#   scripts/bench-runsc.sh [HUSK_BINARY]     (as root; default: the release build)
#
# The runsc-alone bundle is husk's own config.json for the same command
# (captured from a live run), with the root and the /usr and /etc binds
# pointed at plain host paths, run by rootful `runsc run` with the flags
# husk uses (--network=none --ignore-cgroups, same platform).
set -euo pipefail
cd "$(dirname "$0")/.."
HUSK=${1:-target/x86_64-unknown-linux-gnu/release/husk}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine is not installed" >&2; exit 1; }
[ -x "$HUSK" ] || cargo build --release
CMD=(echo hi)
WORK=$(mktemp -d /tmp/husk-bench-runsc.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
STATE=$WORK/state

# husk's config.json for the same command: read it while a run is alive.
"$HUSK" --state-dir "$STATE" run --runtime runsc -- sleep 3 >/dev/null &
for _ in $(seq 100); do
    cfg=$(ls "$STATE"/runsc-runs/*/config.json 2>/dev/null | head -1 || true)
    [ -n "$cfg" ] && break
    sleep 0.05
done
cp "$cfg" "$WORK/husk-config.json"
wait
PLATFORM=$("$HUSK" --state-dir "$STATE" run --json --runtime runsc -- true | python3 -c 'import json,sys; print(json.load(sys.stdin)["isolation"]["runsc"]["platform"])')

mkdir -p "$WORK/bundle/root"/{usr,etc,proc,dev,sys,tmp,workspace}
for l in bin sbin lib lib64; do [ -L /$l ] && ln -s "$(readlink /$l)" "$WORK/bundle/root/$l"; done
python3 - "$WORK" "${CMD[@]}" <<'EOF'
import json, sys
work, cmd = sys.argv[1], sys.argv[2:]
c = json.load(open(f"{work}/husk-config.json"))
c["root"]["path"] = f"{work}/bundle/root"
c["process"]["args"] = cmd
for m in c["mounts"]:
    if m["type"] == "bind":
        m["source"] = {"/usr": "/usr", "/etc": "/etc"}[m["destination"]]
json.dump(c, open(f"{work}/bundle/config.json", "w"), indent=1)
EOF

echo "platform: $PLATFORM"
hyperfine -N --warmup 3 --runs 30 \
    -n "husk --runtime runsc" "$HUSK --state-dir $STATE run --runtime runsc -- ${CMD[*]}" \
    -n "runsc run" "sh -c 'exec runsc --root $WORK/runsc-root --platform=$PLATFORM --network=none --ignore-cgroups run --bundle $WORK/bundle b\$\$'" \
    -n "husk native" "$HUSK run -- ${CMD[*]}"

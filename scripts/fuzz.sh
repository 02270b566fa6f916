#!/usr/bin/env bash
# Long fuzz runs with cargo-fuzz (libFuzzer + AddressSanitizer), one target
# at a time under `nice`:
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # default: 600 s, every target
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`); builds with the stable
# toolchain through RUSTC_BOOTSTRAP=1. New inputs go to a scratch corpus
# (target/fuzz-corpus/<target>, seeded from fuzz/corpus/<target>); the seed
# sets in the repository stay small. Crashes land in fuzz/artifacts/<target>/.
# Prints one line per target: runs, seconds, exec/s, corpus size, crashes.
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-600}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^husk-fuzz$')
fi
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 1; }
export RUSTC_BOOTSTRAP=1
# The sanitizer build must not inherit the repository's crt-static rustflags
# (cargo-fuzz sets RUSTFLAGS, which overrides them) and needs an explicit target.
TRIPLE=x86_64-unknown-linux-gnu
(cd fuzz && nice -n 10 cargo fuzz build --target "$TRIPLE") || exit 1
status=0
for t in "${TARGETS[@]}"; do
    scratch=target/fuzz-corpus/$t
    mkdir -p "$scratch" fuzz/artifacts/"$t"
    log=target/fuzz-corpus/$t.log
    before=$(ls fuzz/artifacts/"$t" | wc -l)
    (cd fuzz && nice -n 10 cargo fuzz run --target "$TRIPLE" "$t" "../$scratch" "corpus/$t" -- \
        -max_total_time="$SECS" -print_final_stats=1) >"$log" 2>&1
    rc=$?
    after=$(ls fuzz/artifacts/"$t" | wc -l)
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    secs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE 'in [0-9]+' | grep -oE '[0-9]+' | tail -1)
    printf '%-16s runs %-10s seconds %-5s exec/s %-7s corpus %-5s crashes %s (rc %s, log %s)\n' "$t" "${runs:-?}" \
        "${secs:-?}" "$(( ${runs:-0} / ${secs:-1} ))" "$(ls "$scratch" | wc -l)" "$((after - before))" "$rc" "$log"
    [ "$rc" = 0 ] || status=1
done
exit $status

#!/usr/bin/env bash
# A short fuzz run (scripts/fuzz.sh): every cargo-fuzz target of fuzz/ and crates/nbd/fuzz/ (the
# decoders of bytes from the object store, the log and cache devices, and the NBD wire) for a few
# seconds each, starting from seeds made by the real encoders. Passes when the targets build, none
# crashes, and each one ran inputs.
# Env: E2E55_FUZZ_S, seconds per target (default 3: with the 22 targets of today, about a minute
# of fuzzing; the build is incremental in the tools cache, see scripts/fuzz.sh).
E2E_NAME=55_fuzz_short
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT" || exit 1

secs="${E2E55_FUZZ_S:-3}"
log="$FARDISK_RUN_DIR/fuzz.log"
require "cargo-fuzz on the nightly toolchain (scripts/install-deps.sh)" cargo +nightly fuzz --version

targets=0
for crate in fuzz crates/nbd/fuzz; do
    n="$(cd "$crate" && cargo +nightly fuzz list | wc -l)"
    targets=$((targets + n))
done
check "there are fuzz targets to run ($targets)" test "$targets" -gt 0

t0=$SECONDS
scripts/fuzz.sh "$secs" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
check "scripts/fuzz.sh $secs exits 0 (exit $rc after $((SECONDS - t0)) s)" test "$rc" -eq 0
passed="$(grep -c '^PASS ' "$log")"
check "all $targets targets passed ($passed)" test "$passed" -eq "$targets"
# A target that ran nothing (a seed directory it could not read, a broken harness) fuzzed nothing.
check "every target ran inputs" bash -c '! grep -E "^PASS .* (0|\?) execs" "$1"' _ "$log"
e2e_finish

#!/usr/bin/env bash
# Runs every cargo-fuzz target of fardisk-nbd for SECONDS seconds each.
# Usage: crates/nbd/fuzz/run.sh SECONDS
# Needs a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz).
# Exits non-zero if any target finds a crash (libFuzzer leaves it in artifacts/).
# scripts/fuzz.sh runs these together with every other fuzz target of the project (CI does).
set -euo pipefail

seconds="${1:?usage: run.sh SECONDS}"
cd "$(dirname "$0")"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz or the nightly toolchain is missing: rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
fi

targets=$(cargo +nightly fuzz list)
status=0
for target in $targets; do
    echo "== fuzzing $target for ${seconds}s"
    mkdir -p "corpus/$target"
    # -rss_limit_mb bounds memory; -max_len keeps inputs near real message sizes.
    if ! cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1; then
        echo "!! $target failed" >&2
        status=1
    fi
done
exit $status

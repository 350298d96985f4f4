#!/usr/bin/env bash
# about: seed 004: the first minute after a restart, store 40 ms away: cold cache vs persistent L2ARC + hot-set warm-up (reads/s and p99 per second)
# Builds crates/bench in release mode and runs `fardisk-bench restart-warmup` in one process (see
# crates/bench/src/restart_warmup.rs): a 256 MiB volume, 90 % of 16 readers' 4 KiB reads on a
# 48 MiB hot set, a 64 MiB ARC and a 512 MiB L2ARC file; 60 s of warming, 60 s measured before the restart,
# then 60 s after a cold restart and 60 s after a warm one. Every configuration becomes one
# result file.
#
# Env: FARDISK_RESTART_BEFORE_S (60: warming, then the same again measured), FARDISK_RESTART_AFTER_S
#      (60), FARDISK_SEED.
set -euo pipefail
FD_NAME=restart-warmup
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/restart-warmup"
RESULTS="$FARDISK_BENCH_RESULTS"
rm -rf "$WORK"
mkdir -p "$WORK/series"
trap 'rm -rf "$WORK/scratch"' EXIT

fd_log "building fardisk-bench (release)"
(cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk-bench) || fd_die "cargo build failed"
BIN="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk-bench"

started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
fs_type="$(df --output=fstype "$FARDISK_RUN_DIR" | tail -n 1 | tr -d ' ')"
"$BIN" restart-warmup --dir "$WORK/scratch" --seconds "${FARDISK_RESTART_BEFORE_S:-60}" --after-seconds "${FARDISK_RESTART_AFTER_S:-60}" --seed "${FARDISK_SEED:-1}" \
    --out "$WORK/rows.json" \
    --note "scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start" 2>&1 | tee "$WORK/bench.log" \
    || fd_die "fardisk-bench failed (log: $WORK/bench.log)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" restart-warmup \
    "load average $load_after at the end"
fd_log "done: $(ls "$RESULTS"/restart-warmup-* 2>/dev/null | wc -l) restart-warmup result files in $RESULTS"

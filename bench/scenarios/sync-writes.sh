#!/usr/bin/env bash
# about: 4 KiB sync write latency and rate: raw fdatasync vs fardisk with a log vs without (40 ms store)
# Builds crates/bench in release mode and runs `fardisk-bench sync-writes` in one process: for 1,
# 8 and 64 concurrent writers, each configuration writes 4 KiB at random offsets and syncs
# (fdatasync / Pool::sync_request) for FARDISK_SYNC_SECONDS (default 10) seconds. The 1-writer
# runs give p50/p99/p99.9 and the latency over time (seed 002); the others the rate. Every
# configuration becomes one result file (bench/lib/result.py).
#
# Env: FARDISK_SYNC_SECONDS, FARDISK_SYNC_WRITERS (default 1,8,64), FARDISK_SYNC_LATENCY_MS
#      (store round trip, default 40), FARDISK_SEED.
set -euo pipefail
FD_NAME=sync-writes
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/sync-writes"
SECONDS_PER_RUN="${FARDISK_SYNC_SECONDS:-10}"
WRITERS="${FARDISK_SYNC_WRITERS:-1,8,64}"
LATENCY_MS="${FARDISK_SYNC_LATENCY_MS:-40}"
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
note="scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start"
fd_log "sync-writes: $SECONDS_PER_RUN s per run, writers $WRITERS, store round trip $LATENCY_MS ms"
"$BIN" sync-writes --dir "$WORK/scratch" --seconds "$SECONDS_PER_RUN" --writers "$WRITERS" \
    --latency-ms "$LATENCY_MS" --seed "${FARDISK_SEED:-1}" --out "$WORK/rows.json" --note "$note" 2>&1 | tee "$WORK/bench.log" \
    || fd_die "fardisk-bench failed (log: $WORK/bench.log)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" sync-writes \
    "load average $load_after at the end"
fd_log "done: $(ls "$RESULTS"/sync-writes-* 2>/dev/null | wc -l) sync-writes result files in $RESULTS"

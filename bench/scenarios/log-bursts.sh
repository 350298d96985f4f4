#!/usr/bin/env bash
# about: seed 003: sync-write bursts of 60/95/270 % of a 64 MiB log: local fdatasync vs log on tmpfs vs log on disk (store 40 ms, 32 MiB/s away)
# Builds crates/bench in release mode and runs `fardisk-bench log-bursts` in one process (see
# crates/bench/src/log_bursts.rs): 128 KiB writes, each followed by a sync request, streamed until
# the burst is written; the store is a local directory made 40 ms and 32 MiB/s away, so once the
# log is full commits wait for txgs to drain. Every configuration becomes one result file.
#
# Env: FARDISK_BURST_LOG_MIB (64), FARDISK_BURST_BANDWIDTH_MIB_S (32), FARDISK_BURST_RAM_DIR
#      (/dev/shm/fardisk-bench: must be tmpfs), FARDISK_SEED.
set -euo pipefail
FD_NAME=log-bursts
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/log-bursts"
RAM="${FARDISK_BURST_RAM_DIR:-/dev/shm/fardisk-bench}"
RESULTS="$FARDISK_BENCH_RESULTS"
rm -rf "$WORK" "$RAM"
mkdir -p "$WORK/series" "$RAM"
[ "$(df --output=fstype "$RAM" | tail -n 1 | tr -d ' ')" = tmpfs ] || fd_die "$RAM is not on tmpfs (set FARDISK_BURST_RAM_DIR)"
trap 'rm -rf "$WORK/scratch" "$RAM"' EXIT

fd_log "building fardisk-bench (release)"
(cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk-bench) || fd_die "cargo build failed"
BIN="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk-bench"

started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
fs_type="$(df --output=fstype "$FARDISK_RUN_DIR" | tail -n 1 | tr -d ' ')"
"$BIN" log-bursts --dir "$WORK/scratch" --ram-dir "$RAM" --log-mib "${FARDISK_BURST_LOG_MIB:-64}" \
    --bandwidth-mib-s "${FARDISK_BURST_BANDWIDTH_MIB_S:-32}" --seed "${FARDISK_SEED:-1}" --out "$WORK/rows.json" \
    --note "scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start" 2>&1 | tee "$WORK/bench.log" \
    || fd_die "fardisk-bench failed (log: $WORK/bench.log)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" log-bursts \
    "load average $load_after at the end"
fd_log "done: $(ls "$RESULTS"/log-bursts-* 2>/dev/null | wc -l) log-bursts result files in $RESULTS"

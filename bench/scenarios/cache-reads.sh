#!/usr/bin/env bash
# about: random 4 KiB reads: local O_DIRECT vs fardisk ARC + L2ARC (store 40 ms away); first pass after re-import; ARC vs LRU under a 4x scan
# Builds crates/bench in release mode and runs `fardisk-bench cache-reads` in one process (see
# crates/bench/src/cache_reads.rs): a 192 MiB working set, a 64 MiB ARC, a 512 MiB L2ARC file,
# 16 readers, FARDISK_CACHE_SECONDS (default 20) per timed run. Every configuration becomes one
# result file (bench/lib/rows_to_results.py).
#
# Env: FARDISK_CACHE_SECONDS, FARDISK_CACHE_ARC_MIB, FARDISK_CACHE_WORKING_SET_MIB, FARDISK_SEED.
set -euo pipefail
FD_NAME=cache-reads
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/cache-reads"
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
"$BIN" cache-reads --dir "$WORK/scratch" --seconds "${FARDISK_CACHE_SECONDS:-20}" \
    --arc-mib "${FARDISK_CACHE_ARC_MIB:-64}" --working-set-mib "${FARDISK_CACHE_WORKING_SET_MIB:-192}" \
    --seed "${FARDISK_SEED:-1}" --out "$WORK/rows.json" \
    --note "scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start" 2>&1 | tee "$WORK/bench.log" \
    || fd_die "fardisk-bench failed (log: $WORK/bench.log)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" cache-reads \
    "load average $load_after at the end"
fd_log "done: $(ls "$RESULTS"/cache-reads-* 2>/dev/null | wc -l) cache-reads result files in $RESULTS"

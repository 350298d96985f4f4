#!/usr/bin/env bash
# about: snapshots and clones: time to snapshot and to clone a 1 GiB and a 10 GiB volume full of data (store 40 ms round trip), objects and bytes each snapshot adds
# Builds crates/bench in release mode and runs `fardisk-bench snapshots` in one process (see
# crates/bench/src/snapshots.rs): for each size a volume is filled with incompressible data, then
# 5 times: a snapshot of the clean volume, a snapshot right after 16 MiB of new writes, a clone.
# The goal (issue: snapshots and clones): under a second, independent of the volume's size.
#
# Env: FARDISK_SNAPSHOT_SIZES_GIB ("1,10"), FARDISK_SNAPSHOT_ROUNDS (5), FARDISK_SEED.
set -euo pipefail
FD_NAME=snapshots
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/snapshots"
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
"$BIN" snapshots --dir "$WORK/scratch" --sizes-gib "${FARDISK_SNAPSHOT_SIZES_GIB:-1,10}" --rounds "${FARDISK_SNAPSHOT_ROUNDS:-5}" \
    --seed "${FARDISK_SEED:-1}" --out "$WORK/rows.json" \
    --note "scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start" 2>&1 | tee "$WORK/bench.log" \
    || fd_die "fardisk-bench failed (log: $WORK/bench.log)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" snapshots \
    "load average $load_after at the end"
fd_log "done: $(ls "$RESULTS"/snapshots-* 2>/dev/null | wc -l) snapshots result files in $RESULTS"

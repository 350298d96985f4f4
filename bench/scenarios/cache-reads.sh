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
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK/scratch"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows cache-reads "$WORK" --seconds "${FARDISK_CACHE_SECONDS:-20}" \
    --arc-mib "${FARDISK_CACHE_ARC_MIB:-64}" --working-set-mib "${FARDISK_CACHE_WORKING_SET_MIB:-192}" --seed "${FARDISK_SEED:-1}"

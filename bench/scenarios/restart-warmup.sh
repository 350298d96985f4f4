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
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK/scratch"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows restart-warmup "$WORK" --seconds "${FARDISK_RESTART_BEFORE_S:-60}" --after-seconds "${FARDISK_RESTART_AFTER_S:-60}" --seed "${FARDISK_SEED:-1}"

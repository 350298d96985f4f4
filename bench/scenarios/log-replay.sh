#!/usr/bin/env bash
# about: restart after a long log: import (log scan, replay, sync) of 20,000 and 80,000 4 KiB sync writes vs reading the log's bytes (store 10 ms away)
# Builds crates/bench in release mode and runs `fardisk-bench log-replay` in one process (see
# crates/bench/src/log_replay.rs): the log of a pool whose txgs stopped (as in a store outage) is
# filled with 4 KiB writes and sync requests, the pool is dropped without an export (a crash)
# and imported again; beside it, the time to read the same log bytes sequentially with O_DIRECT.
# Every configuration becomes one result file.
#
# Env: FARDISK_REPLAY_RECORDS (20000,80000), FARDISK_SEED.
set -euo pipefail
FD_NAME=log-replay
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/log-replay"
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK/scratch"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows log-replay "$WORK" --records "${FARDISK_REPLAY_RECORDS:-20000,80000}" --seed "${FARDISK_SEED:-1}"

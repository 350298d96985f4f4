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
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK/scratch"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows snapshots "$WORK" --sizes-gib "${FARDISK_SNAPSHOT_SIZES_GIB:-1,10}" --rounds "${FARDISK_SNAPSHOT_ROUNDS:-5}" --seed "${FARDISK_SEED:-1}"

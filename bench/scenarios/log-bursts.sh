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
rm -rf "$WORK" "$RAM"
mkdir -p "$WORK" "$RAM"
[ "$(df --output=fstype "$RAM" | tail -n 1 | tr -d ' ')" = tmpfs ] || fd_die "$RAM is not on tmpfs (set FARDISK_BURST_RAM_DIR)"
trap 'rm -rf "$WORK/scratch" "$RAM"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows log-bursts "$WORK" --ram-dir "$RAM" --log-mib "${FARDISK_BURST_LOG_MIB:-64}" \
    --bandwidth-mib-s "${FARDISK_BURST_BANDWIDTH_MIB_S:-32}" --seed "${FARDISK_SEED:-1}"

#!/usr/bin/env bash
# about: L2ARC index memory per byte of cache device: devices filled past capacity with 4 KiB blocks, a large sparse device partly written (index bytes, RssAnon)
# Builds crates/bench in release mode and runs `fardisk-bench l2arc-memory` (see
# crates/bench/src/l2arc_memory.rs): cache devices on sparse files in the run directory, filled
# through the real L2ARC writer. Writes about 1.25x the small devices plus the large device's fill
# to disk (default ~5.6 GiB), deleted afterwards.
#
# Env: FARDISK_L2MEM_FULL_MIB (comma list, default 256,1024,2048), FARDISK_L2MEM_LARGE_GIB (256),
#      FARDISK_L2MEM_LARGE_FILL_MIB (1024), FARDISK_SEED.
set -euo pipefail
FD_NAME=l2arc-memory
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/l2arc-memory"
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK/scratch"' EXIT

. "$FARDISK_ROOT/bench/lib/rows_scenario.sh"
fd_bench_rows l2arc-memory "$WORK" --full-mib "${FARDISK_L2MEM_FULL_MIB:-256,1024,2048}" \
    --large-gib "${FARDISK_L2MEM_LARGE_GIB:-256}" --large-fill-mib "${FARDISK_L2MEM_LARGE_FILL_MIB:-1024}" \
    --seed "${FARDISK_SEED:-1}"

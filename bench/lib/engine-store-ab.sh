#!/usr/bin/env bash
# Alternates fardisk-bench builds on one MinIO (and toxiproxy), one engine-store round each, and
# prints each build's read lines: the A/B behind BENCHMARKS.md's "sliding readahead" table.
#   bench/lib/engine-store-ab.sh LATENCY_MS MIB BIN [BIN...]   e.g. 20 1024 new old old new
# LATENCY_MS 0 reads MinIO on loopback. A MinIO that has served several runs reads the engine's
# rows slower (bench/notes/engine-store.md): to compare builds, call this once per binary.
# Results are printed, not stored (rows are published by `bench/run.sh engine-store`). Starts
# MinIO and toxiproxy in FARDISK_RUN_DIR and stops them.
set -euo pipefail
FD_NAME=engine-store-ab
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
[ $# -ge 3 ] || fd_die "usage: $0 LATENCY_MS MIB BIN [BIN...]"
LAT="$1" MIB="$2"
shift 2
case "$LAT$MIB" in *[!0-9]*) fd_die "LATENCY_MS and MIB must be whole numbers" ;; esac
for b in "$@"; do [ -x "$b" ] || fd_die "no fardisk-bench binary at $b"; done
MINIO="$FARDISK_ROOT/scripts/minio.sh" TOXI="$FARDISK_ROOT/scripts/toxiproxy.sh"
"$MINIO" start >/dev/null
trap '[ "$LAT" -gt 0 ] && "$TOXI" stop >/dev/null; "$MINIO" stop >/dev/null' EXIT
eval "$("$MINIO" env)"
if [ "$LAT" -gt 0 ]; then
    "$TOXI" start >/dev/null
    eval "$("$TOXI" env)"
    "$TOXI" latency "$LAT" >/dev/null
fi
LOG="$FARDISK_RUN_DIR/bench/engine-store-ab.log"
mkdir -p "$(dirname "$LOG")"
for b in "$@"; do
    echo "== $b"
    "$b" engine-store --bucket "$FARDISK_BUCKET" --prefix "ab-$$" --total-mib "$MIB" --rounds 1 \
        --writers 4 --seed 1 --out "$FARDISK_RUN_DIR/bench/engine-store-ab.json" --note ab \
        --setup-suffix "" --compressible-zero-percent 0 >"$LOG" 2>&1 || fd_die "$b failed (log: $LOG)"
    grep " read" "$LOG"
done

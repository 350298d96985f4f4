#!/usr/bin/env bash
# The reader's CPU (all, user and system), page faults and context switches per GiB during
# engine-store's raw read and its engine read with an empty ARC: the figures behind bench/notes/engine-store.md, "Where the reader's time
# goes". One round of MIB on a MinIO of its own (loopback), `perf stat -p` started and stopped
# on the bench's own phase lines.
#   bench/lib/engine-store-cpu.sh MIB BIN      e.g. 2048 target/release/fardisk-bench
# The engine window starts when the read without a cache ends, so it also holds the fresh
# import before the empty-ARC read (a few requests). Needs perf (Debian linux-perf).
# FARDISK_PROFILE_OUT=FILE also records a 2 s call-graph profile of the reader from 2.5 s into
# the engine window (`perf report -i FILE --no-children --sort sym`); it slows that run.
set -euo pipefail
FD_NAME=engine-store-cpu
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
[ $# -eq 2 ] || fd_die "usage: $0 MIB BIN"
MIB="$1" BIN="$2"
case "$MIB" in '' | *[!0-9]*) fd_die "MIB must be a whole number, got '$MIB'" ;; esac
[ -x "$BIN" ] || fd_die "no fardisk-bench binary at $BIN"
command -v perf >/dev/null || fd_die "perf not found: apt-get install linux-perf"
MINIO="$FARDISK_ROOT/scripts/minio.sh"
OUT="$FARDISK_RUN_DIR/bench/engine-store-cpu"
mkdir -p "$OUT"
"$MINIO" start >/dev/null
trap '"$MINIO" stop >/dev/null' EXIT
eval "$("$MINIO" env)"
rm -f "$OUT/lines"
mkfifo "$OUT/lines"
"$BIN" engine-store --bucket "$FARDISK_BUCKET" --prefix "cpu-$$" --total-mib "$MIB" --rounds 1 \
    --writers 4 --seed 1 --out "$OUT/rows.json" --note cpu --setup-suffix "" \
    --compressible-zero-percent 0 >"$OUT/lines" 2>&1 &
bench=$!
perf_pid="" profile_pid=""
# utime and stime (clock ticks) of the whole process, from /proc: perf counts neither with -p.
ticks() { awk '{ print $14, $15 }' "/proc/$bench/stat" >"$OUT/$1"; }
profile() {
    sleep 2.5
    perf record -F 499 -e cpu-clock --call-graph dwarf,16384 -p "$bench" -o "$FARDISK_PROFILE_OUT" -- sleep 2
}
start_stat() {
    ticks "$1.ticks0"
    if [ "$1" = engine ] && [ -n "${FARDISK_PROFILE_OUT:-}" ]; then
        profile &
        profile_pid=$!
    fi
    perf stat -x, -e page-faults,task-clock,context-switches -p "$bench" -o "$OUT/$1.stat" &
    perf_pid=$!
}
stop_stat() { ticks "$1.ticks1"; kill -INT "$perf_pid"; wait "$perf_pid" || true; }
while IFS= read -r line; do
    case "$line" in
        *"raw write:"*) start_stat raw ;;
        *"raw read:"*) stop_stat raw; echo "$line" ;;
        *"no cache): ranged"*) start_stat engine ;;
        *"empty ARC): $MIB MiB"*) stop_stat engine; echo "$line" ;;
    esac
done <"$OUT/lines"
wait "$bench" || fd_die "$BIN failed"
[ -z "$profile_pid" ] || wait "$profile_pid" || true
for phase in raw engine; do
    read -r u0 s0 <"$OUT/$phase.ticks0"
    read -r u1 s1 <"$OUT/$phase.ticks1"
    awk -F, -v phase="$phase" -v mib="$MIB" -v hz="$(getconf CLK_TCK)" \
        -v user=$((u1 - u0)) -v sys=$((s1 - s0)) '
        $3 == "page-faults" { faults = $1 }
        $3 == "task-clock" { ms = $1 }
        $3 == "context-switches" { cs = $1 }
        END {
            g = 1024 / mib
            printf "%s read: %.0f page faults, %.0f context switches and %.2f CPU-s per GiB (user %.2f, system %.2f)\n", phase, faults * g, cs * g, ms / 1000 * g, user / hz * g, sys / hz * g
        }
    ' "$OUT/$phase.stat"
done

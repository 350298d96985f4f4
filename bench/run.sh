#!/usr/bin/env bash
# One command per benchmark scenario; each writes one result JSON (schema in
# bench/README.md) into $FARDISK_BENCH_RESULTS (default bench/results).
#
#   bench/run.sh list                  scenarios and what they measure
#   bench/run.sh SCENARIO              run bench/scenarios/SCENARIO.sh
#   bench/run.sh report [ARGS]         regenerate BENCHMARKS.md and bench/plots/
#                                      (bench/report.py in the tools venv)
#
# Env: FARDISK_BENCH_SECONDS (measured run length, default 60),
#      FARDISK_RUN_DIR (scratch space and services, default /tmp/fardisk-run).
set -euo pipefail
FD_NAME=bench
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

BENCH="$FARDISK_ROOT/bench"
export FARDISK_BENCH_RESULTS="${FARDISK_BENCH_RESULTS:-$BENCH/results}"
export FARDISK_BENCH_SECONDS="${FARDISK_BENCH_SECONDS:-60}"

cmd_list() {
    local f
    for f in "$BENCH"/scenarios/*.sh; do
        printf '%-24s %s\n' "$(basename "$f" .sh)" "$(sed -n 's/^# about: //p' "$f")"
    done
}

cmd_report() {
    local py
    py="$(fd_tools_dir)/venv/bin/python"
    [ -x "$py" ] || fd_die "no venv at $py; run scripts/install-deps.sh"
    "$py" "$BENCH/report.py" "$@"
}

case "${1:-}" in
    "" | -h | --help) sed -n '2,13p' "$0"; echo; cmd_list ;;
    list) cmd_list ;;
    report) shift; cmd_report "$@" ;;
    *)
        script="$BENCH/scenarios/$1.sh"
        [ -f "$script" ] || fd_die "unknown scenario '$1' (bench/run.sh list)"
        shift
        fd_log "scenario $(basename "$script" .sh): ${FARDISK_BENCH_SECONDS} s runs, results in $FARDISK_BENCH_RESULTS"
        exec bash "$script" "$@"
        ;;
esac

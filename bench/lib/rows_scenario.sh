# shellcheck shell=bash
# The common part of scenarios measured by one `fardisk-bench SUBCOMMAND` process: build it
# (release), run it with a scratch dir and a note on the machine's state, turn its rows into one
# result file per configuration (bench/lib/rows_to_results.py). Source after scripts/lib.sh.
#
#   fd_bench_rows SCENARIO WORK [ARG...]
#     runs `fardisk-bench SCENARIO --dir WORK/scratch ARG... --out WORK/rows.json --note ...`,
#     its output teed to WORK/bench.log, results into $FARDISK_BENCH_RESULTS.

fd_bench_rows() {
    local scenario="$1" work="$2"
    shift 2
    local results="$FARDISK_BENCH_RESULTS" bin started_at load_before load_after fs_type
    mkdir -p "$work/series"
    fd_log "building fardisk-bench (release)"
    (cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk-bench) || fd_die "cargo build failed"
    bin="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk-bench"
    started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    fs_type="$(df --output=fstype "$FARDISK_RUN_DIR" | tail -n 1 | tr -d ' ')"
    "$bin" "$scenario" --dir "$work/scratch" "$@" --out "$work/rows.json" \
        --note "scratch dir on $fs_type; shared 2-core machine, load average $load_before at the start" 2>&1 | tee "$work/bench.log" \
        || fd_die "fardisk-bench failed (log: $work/bench.log)"
    load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
    FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$work/rows.json" "$work/series" "$results" "$scenario" \
        "load average $load_after at the end"
    fd_log "done: $(ls "$results"/"$scenario"-* 2>/dev/null | wc -l) $scenario result files in $results"
}

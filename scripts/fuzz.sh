#!/usr/bin/env bash
# Runs every cargo-fuzz target of every fuzz crate (fuzz/: engine, slog, L2ARC decoders;
# crates/nbd/fuzz/: the NBD wire codec) for SECONDS seconds each, one after the other.
# Usage: scripts/fuzz.sh SECONDS [TARGET...]    (no TARGET: all of them)
#
# Exits non-zero if any target fails to build, crashes (panic, abort, timeout, out of memory),
# and then prints the crash artifact and the command that replays it. Prints one summary line
# per target with the executions it ran (libFuzzer's stat::number_of_executed_units).
#
# Env:
#   FARDISK_FUZZ_SEED        libFuzzer -seed (default 20261123), printed so a run can be repeated
#   FARDISK_FUZZ_TARGET_DIR  cargo target dir of fuzz builds, kept between runs so they are
#                            incremental (default <tools cache>/fuzz-target)
#   FARDISK_FUZZ_WORK        corpora (kept: coverage accumulates), seeds, artifacts, logs
#                            (default <tools cache>/fuzz-work)
#   FARDISK_FUZZ_SANITIZER   none (default) or address (fuzz/README.md says why none)
#   FARDISK_FUZZ_MAX_LEN     -max_len in bytes (default 16384: the largest structure, a map page,
#                            is 10272; seeds longer than this would be cut)
#   FARDISK_FUZZ_RSS_MB      -rss_limit_mb (default 1024; the decoders allocate what the input
#                            holds, so more means a bug)
#   FARDISK_FUZZ_CORPUS_MAX  files a target's kept corpus may hold (default 2000): above it the
#                            corpus is minimised with libFuzzer's -merge=1 (inputs that add no
#                            coverage go), then the oldest beyond it are dropped
set -uo pipefail
FD_NAME=fuzz
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

seconds="${1:-}"
case "$seconds" in
    '' | *[!0-9]*) fd_die "usage: scripts/fuzz.sh SECONDS [TARGET...] (SECONDS: a whole number)" ;;
esac
shift
only=("$@")

FUZZ_CRATES=(fuzz crates/nbd/fuzz)
SEED="${FARDISK_FUZZ_SEED:-20261123}"
SANITIZER="${FARDISK_FUZZ_SANITIZER:-none}"
MAX_LEN="${FARDISK_FUZZ_MAX_LEN:-16384}"
RSS_MB="${FARDISK_FUZZ_RSS_MB:-1024}"
CORPUS_MAX="${FARDISK_FUZZ_CORPUS_MAX:-2000}"
case "$CORPUS_MAX" in '' | *[!0-9]*) fd_die "FARDISK_FUZZ_CORPUS_MAX=$CORPUS_MAX: not a whole number of files" ;; esac
TARGET_DIR="${FARDISK_FUZZ_TARGET_DIR:-$(fd_tools_dir)/fuzz-target}"
WORK="${FARDISK_FUZZ_WORK:-$(fd_tools_dir)/fuzz-work}"
# A single input of these decoders takes microseconds: one that takes this long is a hang.
INPUT_TIMEOUT_S=25

cargo +nightly fuzz --version >/dev/null 2>&1 \
    || fd_die "cargo-fuzz or the nightly toolchain is missing: run scripts/install-deps.sh"
triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
[ -n "$triple" ] || fd_die "cannot tell the nightly toolchain's host triple"
mkdir -p "$TARGET_DIR" "$WORK/logs" || fd_die "cannot create $TARGET_DIR or $WORK"

fd_log "libFuzzer seed $SEED (FARDISK_FUZZ_SEED), ${seconds}s per target, sanitizer $SANITIZER," \
    "max_len $MAX_LEN, rss limit $RSS_MB MB"
fd_log "builds in $TARGET_DIR, corpora and artifacts in $WORK"

wanted() { # wanted TARGET: true when no TARGET was named or this one was
    local t
    [ "${#only[@]}" -eq 0 ] && return 0
    for t in "${only[@]}"; do [ "$t" = "$1" ] && return 0; done
    return 1
}

# One line per target for the summary at the end, and whether anything failed.
summary=()
failed=0

# bound_corpus BIN DIR: keeps a kept corpus from growing without limit between runs.
bound_corpus() {
    local bin="$1" dir="$2" n min
    n="$(find "$dir" -maxdepth 1 -type f | wc -l)"
    [ "$n" -le "$CORPUS_MAX" ] && return 0
    min="$dir.min"
    rm -rf "$min"
    mkdir -p "$min"
    if timeout --kill-after=10 300 "$bin" -merge=1 -max_len="$MAX_LEN" -rss_limit_mb="$RSS_MB" \
        -timeout="$INPUT_TIMEOUT_S" "$min" "$dir" >"$WORK/logs/$(basename "$dir")-merge.log" 2>&1; then
        rm -rf "$dir" && mv "$min" "$dir"
    else
        rm -rf "$min"
        fd_log "corpus merge of $dir failed (see $WORK/logs/$(basename "$dir")-merge.log); dropping its oldest inputs instead"
    fi
    # Still too many (or the merge failed): the oldest go.
    find "$dir" -maxdepth 1 -type f -printf '%T@ %p\n' | sort -rn | tail -n +$((CORPUS_MAX + 1)) \
        | cut -d' ' -f2- | xargs -r rm -f
    fd_log "corpus $(basename "$dir"): $n inputs, $(find "$dir" -maxdepth 1 -type f | wc -l) kept (FARDISK_FUZZ_CORPUS_MAX=$CORPUS_MAX)"
}

# fuzz_one CRATE_DIR TARGET: run the built binary of TARGET; record a summary line.
fuzz_one() {
    local crate="$1" target="$2" bin log artifact execs rss rc t0
    bin="$TARGET_DIR/$triple/release/$target"
    log="$WORK/logs/$target.log"
    mkdir -p "$WORK/corpus/$target" "$WORK/artifacts/$target"
    # Seeds are rewritten by the target itself at start-up (fuzz/src/lib.rs: write_seeds), so
    # they always match today's encoders; stale ones would only slow the first pass.
    rm -rf "${WORK:?}/seeds/$target"
    mkdir -p "$WORK/seeds/$target"
    bound_corpus "$bin" "$WORK/corpus/$target"
    t0=$SECONDS
    # The first corpus directory receives what libFuzzer finds; the seeds are only read.
    FARDISK_FUZZ_SEEDS_DIR="$WORK/seeds" timeout --kill-after=10 $((seconds * 2 + 120)) \
        "$bin" -seed="$SEED" -max_total_time="$seconds" -max_len="$MAX_LEN" \
        -rss_limit_mb="$RSS_MB" -timeout="$INPUT_TIMEOUT_S" -print_final_stats=1 \
        -artifact_prefix="$WORK/artifacts/$target/" \
        "$WORK/corpus/$target" "$WORK/seeds/$target" >"$log" 2>&1
    rc=$?
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    rss="$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)"
    if [ "$rc" -eq 0 ]; then
        summary+=("$(printf 'PASS %-18s %10s execs in %3d s, peak rss %s MB' "$target" "${execs:-?}" $((SECONDS - t0)) "${rss:-?}")")
        return 0
    fi
    failed=1
    artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
    summary+=("$(printf 'FAIL %-18s exit %d after %d s, %s execs' "$target" "$rc" $((SECONDS - t0)) "${execs:-?}")")
    fd_log "!! $target failed (exit $rc); what it said (whole log: $log):"
    # The panic message, then libFuzzer's verdict; progress lines and stack frames left out.
    grep -m 1 -A 1 'panicked at' "$log" | sed 's/^/    /'
    grep -v -e '^#[0-9]' -e '^ *[0-9]*: ' -e '^ *at ' "$log" | tail -n 12 | sed 's/^/    /'
    if [ -n "$artifact" ]; then
        fd_log "!! crash artifact: $artifact"
        fd_log "!! reproduce: (cd $FARDISK_ROOT/$crate && cargo +nightly fuzz run --sanitizer $SANITIZER" \
            "--target-dir $TARGET_DIR $target $artifact)"
        fd_log "!!   or, with the binary already built: $bin $artifact"
    else
        fd_log "!! no artifact written (exit $rc: killed, or the build/run itself failed)"
    fi
}

for crate in "${FUZZ_CRATES[@]}"; do
    dir="$FARDISK_ROOT/$crate"
    [ -f "$dir/Cargo.toml" ] || fd_die "fuzz crate $crate not found"
    targets="$(cd "$dir" && cargo +nightly fuzz list 2>/dev/null)" || fd_die "cargo fuzz list failed in $crate"
    run=()
    for t in $targets; do wanted "$t" && run+=("$t"); done
    [ "${#run[@]}" -gt 0 ] || continue
    t0=$SECONDS
    blog="$WORK/logs/build-$(basename "$(dirname "$dir")")-$(basename "$dir").log"
    fd_log "building ${#run[@]} targets of $crate (log: $blog)"
    # Default cargo-fuzz profile: optimised, with debug assertions and overflow checks.
    if ! (cd "$dir" && cargo +nightly fuzz build --sanitizer "$SANITIZER" --target-dir "$TARGET_DIR") >"$blog" 2>&1; then
        tail -n 30 "$blog" >&2
        summary+=("FAIL build of $crate (see $blog)")
        failed=1
        continue
    fi
    fd_log "built $crate in $((SECONDS - t0)) s"
    for t in "${run[@]}"; do
        fd_log "== $t (${seconds}s)"
        fuzz_one "$crate" "$t"
    done
done

[ "${#summary[@]}" -gt 0 ] || fd_die "no target matched: ${only[*]}"
fd_log "== summary (seed $SEED)"
printf '%s\n' "${summary[@]}"
exit "$failed"

#!/usr/bin/env bash
# fardisk's whole test suite: install what is missing, run the Rust tests, then every
# executable tests/e2e/*.sh in name order, then the store matrix (the engine's store tests, the
# SIGKILL loop and PostgreSQL end to end on MinIO, Versity and Azurite). Ends with one line "N
# passed, M failed" (the fmt, clippy and module-cycle gates, the cargo run and each e2e script
# count as one each) and exits non-zero if anything failed.
#
# Env: FARDISK_E2E_TIMEOUT_S (default 1200) bounds each e2e script.
set -uo pipefail
FD_NAME="test"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FARDISK_ROOT" || exit 1

E2E_TIMEOUT_S="${FARDISK_E2E_TIMEOUT_S:-1200}"
# Each e2e script's output is also kept here, so the end of the run can say why one failed (a
# CI log is often cut in the middle, where the failing script printed it).
E2E_LOGS="$(mktemp -d /tmp/fardisk-test-logs.XXXXXX)"
why_failed=()
passed=0
failed=0
results=()

record() { # record NAME RC SECONDS
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
        results+=("PASS $1 ($3 s)")
    else
        failed=$((failed + 1))
        results+=("FAIL $1 (exit $2, $3 s)")
    fi
    fd_log "${results[-1]}"
}

# run_e2e NAME SCRIPT: runs SCRIPT (bounded), its output to the terminal and to $E2E_LOGS;
# records it, and when it failed keeps its FAIL lines and last lines for the end of the run.
run_e2e() {
    local log rc
    log="$E2E_LOGS/$(basename "$2" .sh).${#results[@]}.log"
    timeout --kill-after=30 "$E2E_TIMEOUT_S" "$2" </dev/null 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    record "$1" "$rc" $((SECONDS - t0))
    [ "$rc" -eq 0 ] && return 0
    why_failed+=("-- $1 (whole output: $log)")
    mapfile -t -O "${#why_failed[@]}" why_failed < <(grep -E '^(FAIL|ERROR|fatal|panicked)|FAIL ' "$log" | head -n 8)
    mapfile -t -O "${#why_failed[@]}" why_failed < <(tail -n 6 "$log" | sed 's/^/   | /')
}

fd_log "== scripts/install-deps.sh"
if ! scripts/install-deps.sh; then
    fd_log "install-deps failed; nothing else can run"
    echo "0 passed, 1 failed"
    exit 1
fi

# The Rust build. A fresh clone (CI's) has no target/: it links one kept in the tools cache, so
# the registry crates are not compiled again for every clone (on this 2-core machine clippy and
# the test build took 16 minutes from nothing, 8 with them kept). Cargo rebuilds whatever its
# fingerprints say changed, and always the clone's own crates (their files are new). One run at a
# time uses it (a lock; another run at the same time builds in its own target/), and past
# FARDISK_BUILD_CACHE_GIB (default 8) it starts empty. FARDISK_BUILD_CACHE=0: no shared build.
if [ ! -e target ] && [ -z "${CARGO_TARGET_DIR:-}" ] && [ "${FARDISK_BUILD_CACHE:-1}" != 0 ]; then
    build_cache="$(fd_tools_dir)/cargo-target"
    mkdir -p "$build_cache"
    exec 9>"$build_cache.lock"
    if flock -n 9; then
        cache_gib="$(du -s --block-size=1G "$build_cache" 2>/dev/null | cut -f1)"
        if [ "${cache_gib:-0}" -gt "${FARDISK_BUILD_CACHE_GIB:-8}" ]; then
            fd_log "build cache $build_cache: ${cache_gib} GiB, over ${FARDISK_BUILD_CACHE_GIB:-8}: emptied"
            rm -rf "$build_cache" && mkdir -p "$build_cache"
        fi
        ln -s "$build_cache" target && fd_log "target/ -> $build_cache (the build cache; FARDISK_BUILD_CACHE=0 for none)"
    else
        fd_log "build cache $build_cache in use by another run: building in this clone's target/"
        exec 9>&-
    fi
fi

# Gates: formatting and lints (Cargo.toml [workspace.lints], clippy.toml) fail the run like a test.
fd_log "== cargo fmt --check"
t0=$SECONDS
cargo fmt --all --check 2>&1
record "cargo fmt --check" $? $((SECONDS - t0))

fd_log "== cargo clippy --workspace --all-targets -- -D warnings"
t0=$SECONDS
cargo clippy --workspace --all-targets -- -D warnings 2>&1
record "cargo clippy -D warnings" $? $((SECONDS - t0))

# Gate: no module cycle in the trees scripts/check-module-cycles.py lists (--list shows them).
fd_log "== scripts/check-module-cycles.py"
t0=$SECONDS
python3 scripts/check-module-cycles.py 2>&1
record "module cycles" $? $((SECONDS - t0))

# FUSE over io_uring is tested when the kernel has it: its module switch is machine-wide and
# off by default, so the test run (not the tests, not fardisk) turns it on, as an operator would.
URING_SWITCH=/sys/module/fuse/parameters/enable_uring
# The switch is the machine's, not ours: it is put back as found when the run ends, however it ends.
URING_WAS="$(cat "$URING_SWITCH" 2>/dev/null || true)"
restore_uring() {
    [ -n "$URING_WAS" ] && [ -w "$URING_SWITCH" ] && echo "$URING_WAS" >"$URING_SWITCH" 2>/dev/null
    return 0
}
trap restore_uring EXIT
if [ -w "$URING_SWITCH" ]; then
    echo Y >"$URING_SWITCH" && fd_log "FUSE over io_uring on ($URING_SWITCH) for the tests (put back to '$URING_WAS' at the end)"
else
    fd_log "FUSE over io_uring not tested: $URING_SWITCH is missing or not writable (kernel before 6.14 or without CONFIG_FUSE_IO_URING); /dev/fuse is"
fi

fd_log "== cargo test --workspace --no-fail-fast"
t0=$SECONDS
# The build first, on its own: when it succeeds, target/debug/fardisk is the binary the e2e tests
# run (tests/e2e/lib/common.sh build_fardisk), and they need not build it again.
if cargo test --workspace --no-run 2>&1; then
    export FARDISK_E2E_BUILT=1
    cargo test --workspace --no-fail-fast 2>&1
fi
record "cargo test --workspace" $? $((SECONDS - t0))

if [ "$(cat "$URING_SWITCH" 2>/dev/null)" = Y ]; then
    fd_log "== the FUSE tests again, every mount over io_uring"
    t0=$SECONDS
    # --workspace, not -p fardisk: the same features as the build above, so nothing is rebuilt.
    FARDISK_FUSE_TEST_TRANSPORT=uring cargo test --workspace --no-fail-fast \
        --test fuse_io --test fuse_mount --test fuse_fallocate --test fuse_ext4 2>&1
    record "FUSE tests over io_uring" $? $((SECONDS - t0))
fi

# Three long runs are shorter here than their defaults (CI time; run alone they take the default):
# 56's mixed load 60 s instead of 120 (its ARC still turns over dozens of times, each third of the
# run is 20 s of samples), and 62's pgbench 100 s instead of 150 (its 20 kills and 5 upgrades
# took 52 s of it in the fresh-clone run of ed9564e; it fails, saying so, if they do not fit);
# 55's short fuzz 2 s per target instead of 3 (22 targets; scripts/fuzz.sh N for a longer run).
export E2E56_DURATION_S="${E2E56_DURATION_S:-60}" E2E62_LOAD_S="${E2E62_LOAD_S:-100}"
export E2E55_FUZZ_S="${E2E55_FUZZ_S:-2}"
for script in tests/e2e/*.sh; do
    [ -x "$script" ] || { fd_log "skip $script (not executable)"; continue; }
    fd_log "== $script"
    t0=$SECONDS
    run_e2e "$script" "$script"
done

# The store matrix: the short store tests again on the other servers (the loop above ran them on
# MinIO, and 45 on a directory). The long ones (54 chaos, soaks) stay on MinIO alone: CI time.
MATRIX_SCRIPTS=(tests/e2e/30_engine_minio.sh tests/e2e/45_sigkill_loop.sh tests/e2e/50_postgres_minio.sh)
for store in minio versity azurite; do
    for script in "${MATRIX_SCRIPTS[@]}"; do
        # MinIO ran 30 and 50 in the loop above; 45 ran there on a directory.
        [ "$store" = minio ] && [ "$script" != tests/e2e/45_sigkill_loop.sh ] && continue
        fd_log "== $script on $store"
        t0=$SECONDS
        # 45's kill rounds: 2 plain rounds per server here (4 in the loop above), the leg-loss and
        # lost-log rounds as always.
        FARDISK_E2E_STORE="$store" E2E45_ROUNDS="${E2E45_ROUNDS:-2}" run_e2e "$script [$store]" "$script"
    done
done

fd_log "== summary"
printf '%s\n' "${results[@]}"
if [ "${#why_failed[@]}" -gt 0 ]; then
    fd_log "== why they failed (FAIL lines and last lines of each)"
    printf '%s\n' "${why_failed[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

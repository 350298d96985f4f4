# shellcheck shell=bash
# Helpers for tests/e2e/*.sh. Source after setting E2E_NAME. Gives each test its own
# FARDISK_RUN_DIR, runs registered cleanups on exit (also on TERM/INT, e.g. from the
# timeout in scripts/test.sh), and counts checks that print PASS/FAIL lines.
set -uo pipefail

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
SCRIPTS="$E2E_ROOT/scripts"
export FARDISK_RUN_DIR
FARDISK_RUN_DIR="$(mktemp -d "/tmp/fardisk-e2e-${E2E_NAME}.XXXXXX")"
# Some tests point FARDISK_RUN_DIR elsewhere; the directory made here is removed at exit anyway.
E2E_RUN_DIR_MADE="$FARDISK_RUN_DIR"
# mktemp makes it 0700; the postgres user must reach socket dirs inside it.
chmod 755 "$FARDISK_RUN_DIR"

e2e_passed=0
e2e_failed=0
e2e_cleanups=()

# on_exit CMD...: run CMD (as one string) at exit, last registered first.
on_exit() { e2e_cleanups+=("$*"); }

e2e_cleanup() {
    local i
    for ((i = ${#e2e_cleanups[@]} - 1; i >= 0; i--)); do
        eval "${e2e_cleanups[$i]}" || echo "$E2E_NAME: cleanup failed: ${e2e_cleanups[$i]}"
    done
    e2e_cleanups=()
    if [ "$e2e_failed" -eq 0 ] && [ -z "${FARDISK_KEEP_RUN_DIR:-}" ]; then
        rm -rf "$FARDISK_RUN_DIR"
    else
        echo "$E2E_NAME: run dir kept for inspection: $FARDISK_RUN_DIR"
    fi
    rmdir "$E2E_RUN_DIR_MADE" 2>/dev/null || true
}
trap e2e_cleanup EXIT
# `timeout` signals the script and then its whole process group: the second TERM must not cut the
# cleanups short (they would leave daemons and mounts behind).
trap 'trap "" TERM INT; echo "$E2E_NAME: interrupted"; e2e_failed=$((e2e_failed + 1)); exit 143' TERM INT

pass() { e2e_passed=$((e2e_passed + 1)); echo "PASS $E2E_NAME: $*"; }
fail() { e2e_failed=$((e2e_failed + 1)); echo "FAIL $E2E_NAME: $*"; }

# check DESCRIPTION CMD...: PASS when CMD exits 0.
check() {
    local what="$1"
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

# require DESCRIPTION CMD...: like check, but stop the test at the first failure
# (later steps would only fail for the same reason).
require() {
    local what="$1"
    shift
    if "$@"; then pass "$what"; else fail "$what"; e2e_finish; fi
}

e2e_finish() {
    echo "$E2E_NAME: $e2e_passed checks passed, $e2e_failed checks failed"
    [ "$e2e_failed" -eq 0 ] && exit 0
    exit 1
}

# use_fardisk_bin: B is $FARDISK_BIN when set (a binary to test: a release build, another commit's),
# else the debug build (build_fardisk below; a required check).
use_fardisk_bin() {
    if [ -n "${FARDISK_BIN:-}" ]; then
        B="$FARDISK_BIN"
        return 0
    fi
    require "the debug build of fardisk" build_fardisk
    B="$E2E_ROOT/target/debug/fardisk"
}

# build_fardisk: target/debug/fardisk, the debug build. scripts/test.sh has built it already, with
# `cargo test --workspace`, and says so with FARDISK_E2E_BUILT=1: a `cargo build -p fardisk` after
# that resolves the dependencies' features for one package instead of the workspace (other crates'
# dev-dependencies turn on more of them), so it would rebuild every workspace crate (a minute or
# more of a CI run) only to make the same binary. Run alone, a test builds it.
build_fardisk() {
    [ "${FARDISK_E2E_BUILT:-}" = 1 ] && [ -x "$E2E_ROOT/target/debug/fardisk" ] && return 0
    (cd "$E2E_ROOT" && cargo build -q -p fardisk)
}

# json_field JSON KEY: one value from a flat JSON object.
json_field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# float_ge A B: A >= B for decimal numbers.
float_ge() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }

# expect_error WHAT PATTERN CMD...: PASS when CMD fails with exactly one line of output that
# matches PATTERN (the project's rule for bad input).
expect_error() {
    local what="$1" pattern="$2"; shift 2
    local out rc
    out="$("$@" 2>&1)"; rc=$?
    if [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -q -- "$pattern" <<<"$out"; then
        pass "$what: $out"
    else
        fail "$what (exit $rc): $out"
    fi
}

# fardisk_pool_json POOL EXPR: the Python expression EXPR on POOL's entry of `status --json`
# (named `p`; the binary is $B), printed, or nothing when the daemon does not answer.
# Bounded: a daemon that does not answer its control socket must not hang the test.
fardisk_pool_json() {
    timeout 30 "$B" status "$1" --json 2>/dev/null | python3 -c 'import json, sys; p = json.load(sys.stdin)["pools"][0]; print(eval(sys.argv[1]))' "$2" 2>/dev/null
}

# fardisk_daemon_pid POOL: the pid of the daemon serving POOL, or nothing.
fardisk_daemon_pid() {
    fardisk_pool_json "$1" 'p.get("pid", "")'
}

# fardisk_kill POOL: SIGKILL the pool's daemon, as a crash would, and wait (10 s at most) until
# it is gone.
fardisk_kill() {
    local pid
    pid="$(fardisk_daemon_pid "$1")"
    [ -n "$pid" ] || return 1
    kill -9 "$pid" || return 1
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}

# is_ours PID WORD: PID runs and its command line contains WORD (guards against recycled pids
# before a test signals a process it started).
is_ours() {
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"
}

# wait_gone TRIES PID...: true once none of the PIDs runs (zombies count as gone); polls every
# 0.1 s, TRIES times at most.
wait_gone() {
    local tries="$1" i p alive
    shift
    for ((i = 0; i < tries; i++)); do
        alive=0
        for p in "$@"; do
            if [ -e "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then alive=1; fi
        done
        [ "$alive" -eq 0 ] && return 0
        sleep 0.1
    done
    return 1
}

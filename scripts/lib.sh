# shellcheck shell=bash
# Shared helpers for fardisk's scripts. Source it; it defines functions and a few
# variables and has no side effects beyond that.
#
#   FARDISK_ROOT      repository root (derived from this file's location)
#   FARDISK_RUN_DIR   where running services keep state, data and logs
#                     (default /tmp/fardisk-run); tests point it at a fresh temp dir
#   FARDISK_TOOLS     cache of built tools that survives between runs
#                     (default /var/cache/fardisk-tools, else ~/.cache/fardisk-tools)

# CI runs with a minimal environment; Go and Rust live in their usual install dirs.
for _fd_dir in /usr/local/go/bin "${HOME:-/root}/.cargo/bin"; do
    case ":$PATH:" in
        *":$_fd_dir:"*) ;;
        *) [ -d "$_fd_dir" ] && PATH="$PATH:$_fd_dir" ;;
    esac
done
unset _fd_dir
export PATH

FARDISK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FARDISK_RUN_DIR="${FARDISK_RUN_DIR:-/tmp/fardisk-run}"
# shellcheck source=versions.env
. "$FARDISK_ROOT/scripts/versions.env"

fd_log() { printf '%s: %s\n' "${FD_NAME:-fardisk}" "$*"; }
fd_die() { printf '%s: ERROR: %s\n' "${FD_NAME:-fardisk}" "$*" >&2; exit 1; }

# The tools cache must be the same directory for install-deps.sh and for the
# scripts that run the tools, so the choice lives here only.
fd_tools_dir() {
    if [ -n "${FARDISK_TOOLS:-}" ]; then
        printf '%s\n' "$FARDISK_TOOLS"
    elif mkdir -p /var/cache/fardisk-tools 2>/dev/null && [ -w /var/cache/fardisk-tools ]; then
        printf '%s\n' /var/cache/fardisk-tools
    else
        printf '%s\n' "${XDG_CACHE_HOME:-$HOME/.cache}/fardisk-tools"
    fi
}

# Path of a built tool, or a clear error telling how to get it.
fd_tool() {
    local bin
    bin="$(fd_tools_dir)/bin/$1"
    [ -x "$bin" ] || fd_die "$1 not found at $bin; run scripts/install-deps.sh first"
    printf '%s\n' "$bin"
}

# A TCP port that was free on 127.0.0.1 a moment ago. Another process may take it
# before we bind it; callers fail loudly in that case rather than retry silently.
fd_free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# fd_wait_http URL TRIES: poll until URL answers 2xx, TRIES times 0.25 s apart.
# Optional 3rd arg: a PID that must stay alive while we wait.
fd_wait_http() {
    local url="$1" tries="$2" pid="${3:-}" i
    for ((i = 0; i < tries; i++)); do
        if curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null; then
            return 0
        fi
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.25
    done
    return 1
}

# fd_wait_answer URL TRIES [PID]: like fd_wait_http, but any HTTP status counts (servers that
# answer an unsigned request 403 are up all the same).
fd_wait_answer() {
    local url="$1" tries="$2" pid="${3:-}" i code
    for ((i = 0; i < tries; i++)); do
        code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 2 "$url" 2>/dev/null)" || code=000
        [ "$code" != 000 ] && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.25
    done
    return 1
}

# fd_pid_alive PIDFILE NAME: true when the PID in PIDFILE runs a command whose
# argv[0] ends in NAME, so a recycled PID is never mistaken for our daemon.
fd_pid_alive() {
    local pidfile="$1" name="$2" pid exe
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    exe="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)"
    case "$exe" in *"$name") return 0 ;; *) return 1 ;; esac
}

# fd_start_daemon PIDFILE LOGFILE CMD...: start CMD in the background, detached
# from our stdin, and record its PID. No setsid: it may fork, and then $! would not
# be the daemon. Non-interactive bash already makes background jobs ignore SIGINT.
# fd_fardisk_bin: prints the fardisk binary a benchmark measures: $FARDISK_BIN when set, else a
# fresh release build (its messages on stderr). Use as B="$(fd_fardisk_bin)" under `set -e`.
fd_fardisk_bin() {
    if [ -n "${FARDISK_BIN:-}" ]; then
        fd_log "using $FARDISK_BIN (FARDISK_BIN), not a fresh build" >&2
        echo "$FARDISK_BIN"
        return
    fi
    fd_log "building fardisk (release)" >&2
    (cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk) >&2 || fd_die "cargo build failed"
    echo "${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk"
}

fd_start_daemon() {
    local pidfile="$1" logfile="$2"
    shift 2
    "$@" </dev/null >>"$logfile" 2>&1 &
    echo $! >"$pidfile"
}

# fd_stop_pid PIDFILE NAME: stop only the process recorded in PIDFILE (TERM, then
# KILL after 10 s) and remove the pid file. Silent success when it is not running.
fd_stop_pid() {
    local pidfile="$1" name="$2" pid i
    if ! fd_pid_alive "$pidfile" "$name"; then
        rm -f "$pidfile"
        return 0
    fi
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
        fd_log "pid $pid ($name) ignored TERM for 10 s; sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

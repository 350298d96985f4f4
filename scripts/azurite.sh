#!/usr/bin/env bash
# Run Azurite (the Azure Blob emulator) on 127.0.0.1 as fardisk's far object store for az:// URLs
# (create-only PUTs, If-None-Match: *, answer 409).
#
#   azurite.sh start    start the blob service on a free port, wait until it answers, create the
#                       container
#   azurite.sh stop     stop the Azurite this run dir started (by its recorded PID only)
#   azurite.sh env      print `export AZURE_...` lines for the engine and scripts/az.py
#   azurite.sh status   say whether it runs and where
#
# State lives in $FARDISK_RUN_DIR/azurite/ (pid, port, data/, azurite.log). Container:
# $FARDISK_BUCKET (default "fardisk"). The account is Azurite's built-in development account.
set -euo pipefail
FD_NAME=azurite
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/azurite"
PIDFILE="$STATE/pid"
CONTAINER="${FARDISK_BUCKET:-fardisk}"
# Azurite's well-known development account (public, documented; loopback only).
ACCOUNT=devstoreaccount1
ACCOUNT_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
READY_TRIES=120 # x 0.25 s = 30 s

# Azurite runs under node: the pid must run node with azurite in its command line.
alive() { fd_pid_alive "$PIDFILE" node && tr '\0' ' ' <"/proc/$(cat "$PIDFILE")/cmdline" | grep -q azurite; }

print_env() {
    local port="$1"
    cat <<EOT
export AZURE_STORAGE_USE_EMULATOR=true
export AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:$port
export AZURE_STORAGE_ACCOUNT_NAME=$ACCOUNT
export AZURE_STORAGE_ACCOUNT_KEY=$ACCOUNT_KEY
export FARDISK_BUCKET=$CONTAINER
EOT
}

cmd_start() {
    local bin port
    if alive; then
        fd_log "already running: pid $(cat "$PIDFILE") on 127.0.0.1:$(cat "$STATE/port")"
        return
    fi
    bin="$(fd_tool azurite-blob)"
    command -v node >/dev/null || fd_die "node not found; Azurite needs Node.js (20 here)"
    mkdir -p "$STATE/data"
    port="$(fd_free_port)"
    # --skipApiVersionCheck: object_store may send a newer x-ms-version than this release knows.
    fd_start_daemon "$PIDFILE" "$STATE/azurite.log" \
        "$bin" --blobHost 127.0.0.1 --blobPort "$port" --location "$STATE/data" \
        --disableTelemetry --silent --skipApiVersionCheck
    # An unsigned request is answered 403: any HTTP answer means it is up.
    if ! fd_wait_answer "http://127.0.0.1:$port/$ACCOUNT?comp=list" "$READY_TRIES" "$(cat "$PIDFILE")"; then
        tail -n 20 "$STATE/azurite.log" >&2 || true
        fd_stop_pid "$PIDFILE" node
        fd_die "Azurite did not answer on 127.0.0.1:$port (log: $STATE/azurite.log)"
    fi
    echo "$port" >"$STATE/port"
    print_env "$port" >"$STATE/env"
    (
        # shellcheck disable=SC1091
        . "$STATE/env"
        python3 "$FARDISK_ROOT/scripts/az.py" mb "$CONTAINER" >/dev/null
    ) || { fd_stop_pid "$PIDFILE" node; fd_die "could not create container $CONTAINER"; }
    fd_log "started pid $(cat "$PIDFILE") on 127.0.0.1:$port, container $CONTAINER, data $STATE/data"
}

cmd_stop() {
    if alive; then
        fd_log "stopping pid $(cat "$PIDFILE")"
        fd_stop_pid "$PIDFILE" node
    else
        fd_log "not running"
        rm -f "$PIDFILE"
    fi
}

cmd_env() {
    alive || fd_die "not running (scripts/azurite.sh start)"
    cat "$STATE/env"
}

cmd_status() {
    if alive; then
        fd_log "running: pid $(cat "$PIDFILE") on 127.0.0.1:$(cat "$STATE/port")"
    else
        fd_log "not running"
        return 1
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) cmd_env ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|env|status" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Run a single-drive MinIO on 127.0.0.1 as fardisk's far object store.
#
#   minio.sh start    start on a free port, wait for /minio/health/live, create the bucket
#   minio.sh stop     stop the MinIO this run dir started (by its recorded PID only)
#   minio.sh env      print `export AWS_...` lines for the engine and scripts/s3.py
#   minio.sh status   say whether it runs and where
#
# State lives in $FARDISK_RUN_DIR/minio/ (pid, port, data/, minio.log), so several
# run dirs give independent servers. Bucket: $FARDISK_BUCKET (default "fardisk").
set -euo pipefail
FD_NAME=minio
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/minio"
PIDFILE="$STATE/pid"
BUCKET="${FARDISK_BUCKET:-fardisk}"
# Fixed test credentials: the server listens on loopback only.
ACCESS_KEY="${FARDISK_MINIO_USER:-fardisk}"
SECRET_KEY="${FARDISK_MINIO_PASSWORD:-fardisk-secret}"
READY_TRIES=240 # x 0.25 s = 60 s; a cold start on a busy 2-core machine takes a few s

print_env() {
    local port="$1"
    cat <<EOF
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_ENDPOINT=http://127.0.0.1:$port
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export AWS_BUCKET=$BUCKET
export FARDISK_BUCKET=$BUCKET
EOF
}

cmd_start() {
    local minio port console_port
    if fd_pid_alive "$PIDFILE" minio; then
        fd_log "already running: pid $(cat "$PIDFILE") on 127.0.0.1:$(cat "$STATE/port")"
        return
    fi
    minio="$(fd_tool minio)"
    mkdir -p "$STATE/data"
    port="$(fd_free_port)"
    console_port="$(fd_free_port)"
    # Browser, update checks and call-home off: a test server talks to nobody.
    MINIO_ROOT_USER="$ACCESS_KEY" MINIO_ROOT_PASSWORD="$SECRET_KEY" \
        MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
        fd_start_daemon "$PIDFILE" "$STATE/minio.log" \
        "$minio" server --quiet --address "127.0.0.1:$port" \
        --console-address "127.0.0.1:$console_port" "$STATE/data"
    if ! fd_wait_http "http://127.0.0.1:$port/minio/health/live" "$READY_TRIES" "$(cat "$PIDFILE")"; then
        tail -n 20 "$STATE/minio.log" >&2 || true
        fd_stop_pid "$PIDFILE" minio
        fd_die "MinIO did not become ready on 127.0.0.1:$port (log: $STATE/minio.log)"
    fi
    echo "$port" >"$STATE/port"
    print_env "$port" >"$STATE/env"
    (
        # shellcheck disable=SC1091
        . "$STATE/env"
        python3 "$FARDISK_ROOT/scripts/s3.py" mb "$BUCKET" >/dev/null
    ) || { fd_stop_pid "$PIDFILE" minio; fd_die "could not create bucket $BUCKET"; }
    fd_log "started pid $(cat "$PIDFILE") on 127.0.0.1:$port, bucket $BUCKET, data $STATE/data"
}

cmd_stop() {
    if fd_pid_alive "$PIDFILE" minio; then
        fd_log "stopping pid $(cat "$PIDFILE")"
    else
        fd_log "not running"
    fi
    fd_stop_pid "$PIDFILE" minio
}

cmd_env() {
    fd_pid_alive "$PIDFILE" minio || fd_die "not running (scripts/minio.sh start)"
    cat "$STATE/env"
}

cmd_status() {
    if fd_pid_alive "$PIDFILE" minio; then
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

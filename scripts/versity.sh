#!/usr/bin/env bash
# Run the Versity S3 gateway (posix backend) on 127.0.0.1 as fardisk's far object store: a second,
# independent S3 implementation beside MinIO (create-only PUTs answer 412).
#
#   versity.sh start    start on a free port, wait until it answers, create the bucket
#   versity.sh stop     stop the gateway this run dir started (by its recorded PID only)
#   versity.sh env      print `export AWS_...` lines for the engine and scripts/s3.py
#   versity.sh status   say whether it runs and where
#
# State lives in $FARDISK_RUN_DIR/versity/ (pid, port, data/, versity.log). Bucket:
# $FARDISK_BUCKET (default "fardisk").
set -euo pipefail
FD_NAME=versity
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/versity"
PIDFILE="$STATE/pid"
BUCKET="${FARDISK_BUCKET:-fardisk}"
# Fixed test credentials: the gateway listens on loopback only.
ACCESS_KEY=fardisk
SECRET_KEY=fardisk-secret
READY_TRIES=120 # x 0.25 s = 30 s

print_env() {
    local port="$1"
    cat <<EOT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_ENDPOINT=http://127.0.0.1:$port
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export AWS_BUCKET=$BUCKET
export FARDISK_BUCKET=$BUCKET
EOT
}

cmd_start() {
    local gw port
    if fd_pid_alive "$PIDFILE" versitygw; then
        fd_log "already running: pid $(cat "$PIDFILE") on 127.0.0.1:$(cat "$STATE/port")"
        return
    fi
    gw="$(fd_tool versitygw)"
    mkdir -p "$STATE/data"
    port="$(fd_free_port)"
    # No IAM service, no admin port, no WebUI: one root account on loopback.
    fd_start_daemon "$PIDFILE" "$STATE/versity.log" \
        "$gw" --access "$ACCESS_KEY" --secret "$SECRET_KEY" --port "127.0.0.1:$port" --quiet \
        posix "$STATE/data"
    # Unsigned requests are answered 403: any HTTP answer means it is up.
    if ! fd_wait_answer "http://127.0.0.1:$port/" "$READY_TRIES" "$(cat "$PIDFILE")"; then
        tail -n 20 "$STATE/versity.log" >&2 || true
        fd_stop_pid "$PIDFILE" versitygw
        fd_die "the Versity gateway did not answer on 127.0.0.1:$port (log: $STATE/versity.log)"
    fi
    echo "$port" >"$STATE/port"
    print_env "$port" >"$STATE/env"
    (
        # shellcheck disable=SC1091
        . "$STATE/env"
        python3 "$FARDISK_ROOT/scripts/s3.py" mb "$BUCKET" >/dev/null
    ) || { fd_stop_pid "$PIDFILE" versitygw; fd_die "could not create bucket $BUCKET"; }
    fd_log "started pid $(cat "$PIDFILE") on 127.0.0.1:$port, bucket $BUCKET, data $STATE/data"
}

cmd_stop() {
    if fd_pid_alive "$PIDFILE" versitygw; then fd_log "stopping pid $(cat "$PIDFILE")"; else fd_log "not running"; fi
    fd_stop_pid "$PIDFILE" versitygw
}

cmd_env() {
    fd_pid_alive "$PIDFILE" versitygw || fd_die "not running (scripts/versity.sh start)"
    cat "$STATE/env"
}

cmd_status() {
    if fd_pid_alive "$PIDFILE" versitygw; then
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

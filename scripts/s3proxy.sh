#!/usr/bin/env bash
# Run an s3proxy release that ignores If-None-Match (its create-only PUTs overwrite) on
# 127.0.0.1, with its in-memory "transient" blob store: a real S3 server that lacks the one
# capability fardisk rests on, for tests/e2e/31_store_capability.sh.
#
#   s3proxy.sh start|stop|env|status   as scripts/minio.sh (state in $FARDISK_RUN_DIR/s3proxy/)
set -euo pipefail
FD_NAME=s3proxy
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/s3proxy"
PIDFILE="$STATE/pid"
BUCKET="${FARDISK_BUCKET:-fardisk}"
ACCESS_KEY=fardisk
SECRET_KEY=fardisk-secret
READY_TRIES=240 # x 0.25 s = 60 s: the JVM starts slowly on a busy machine

alive() { fd_pid_alive "$PIDFILE" java; }

print_env() {
    cat <<EOT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_ENDPOINT=http://127.0.0.1:$1
export AWS_ENDPOINT_URL=http://127.0.0.1:$1
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export FARDISK_BUCKET=$BUCKET
EOT
}

cmd_start() {
    local bin port
    if alive; then
        fd_log "already running: pid $(cat "$PIDFILE") on 127.0.0.1:$(cat "$STATE/port")"
        return
    fi
    bin="$(fd_tool s3proxy)"
    mkdir -p "$STATE"
    port="$(fd_free_port)"
    cat >"$STATE/s3proxy.conf" <<EOT
s3proxy.endpoint=http://127.0.0.1:$port
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$ACCESS_KEY
s3proxy.credential=$SECRET_KEY
jclouds.provider=transient
jclouds.identity=unused
jclouds.credential=unused
EOT
    # The launcher execs java: the recorded pid is the JVM.
    fd_start_daemon "$PIDFILE" "$STATE/s3proxy.log" "$bin" --properties "$STATE/s3proxy.conf"
    if ! fd_wait_answer "http://127.0.0.1:$port/" "$READY_TRIES" "$(cat "$PIDFILE")"; then
        tail -n 20 "$STATE/s3proxy.log" >&2 || true
        fd_stop_pid "$PIDFILE" java
        fd_die "s3proxy did not answer on 127.0.0.1:$port (log: $STATE/s3proxy.log)"
    fi
    echo "$port" >"$STATE/port"
    print_env "$port" >"$STATE/env"
    (
        # shellcheck disable=SC1091
        . "$STATE/env"
        python3 "$FARDISK_ROOT/scripts/s3.py" mb "$BUCKET" >/dev/null
    ) || { fd_stop_pid "$PIDFILE" java; fd_die "could not create bucket $BUCKET"; }
    fd_log "started pid $(cat "$PIDFILE") on 127.0.0.1:$port, bucket $BUCKET (in memory)"
}

cmd_stop() {
    if alive; then fd_log "stopping pid $(cat "$PIDFILE")"; else fd_log "not running"; fi
    fd_stop_pid "$PIDFILE" java
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) alive || fd_die "not running (scripts/s3proxy.sh start)"; cat "$STATE/env" ;;
    status) if alive; then fd_log "running: pid $(cat "$PIDFILE")"; else fd_log "not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|env|status" >&2; exit 2 ;;
esac

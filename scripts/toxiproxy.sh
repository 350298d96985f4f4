#!/usr/bin/env bash
# Put toxiproxy between fardisk and its object store (MinIO, Versity or Azurite) so tests can
# make the store far, slow or gone.
#
#   toxiproxy.sh start [UPSTREAM]  server + proxy "minio" from a free local port to
#                                  UPSTREAM (default: the MinIO, Versity or Azurite of this
#                                  run dir, started by scripts/<server>.sh)
#   toxiproxy.sh stop              stop the server this run dir started (by PID)
#   toxiproxy.sh latency MS [JITTER_MS]
#                                  add MS on each direction, so a request/response
#                                  round trip costs 2 x MS; MS=0 removes the latency
#   toxiproxy.sh outage on|off     disable / re-enable the proxy (connections refused)
#   toxiproxy.sh toxic add NAME TYPE [TOXICITY] [ATTRIBUTES_JSON]
#                                  add toxic NAME of TYPE (reset_peer, timeout, latency, ...)
#                                  to both directions (NAME_up, NAME_down); TOXICITY 0..1
#                                  (default 1.0), ATTRIBUTES_JSON e.g. '{"timeout":500}'
#   toxiproxy.sh toxic remove NAME remove what `toxic add NAME` added
#   toxiproxy.sh reset             remove all toxics and re-enable the proxy
#   toxiproxy.sh env               the proxied server's `export ...` lines (scripts/<server>.sh
#                                  env), its endpoint replaced by the proxy's
#   toxiproxy.sh status
#
# State lives in $FARDISK_RUN_DIR/toxiproxy/ (pid, api_port, listen_port, log).
# Jitter is drawn from toxiproxy's generator seeded with $FARDISK_SEED (default 1).
set -euo pipefail
FD_NAME=toxiproxy
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/toxiproxy"
PIDFILE="$STATE/pid"
PROXY=minio
READY_TRIES=120 # x 0.25 s = 30 s

api_url() {
    [ -f "$STATE/api_port" ] || fd_die "not running (scripts/toxiproxy.sh start)"
    printf 'http://127.0.0.1:%s%s\n' "$(cat "$STATE/api_port")" "$1"
}

# api METHOD PATH [JSON]: call the HTTP API; fail loudly with its answer.
api() {
    local method="$1" path="$2" body="${3:-}" out
    if ! out="$(curl -sS --max-time 10 -X "$method" -H 'Content-Type: application/json' \
        ${body:+--data "$body"} -w '\n%{http_code}' "$(api_url "$path")")"; then
        fd_die "API $method $path: no answer"
    fi
    case "${out##*$'\n'}" in
        2??) ;;
        *) fd_die "API $method $path: HTTP ${out##*$'\n'}: ${out%$'\n'*}" ;;
    esac
}

# The state dir of the store server running in this run dir whose port is $1 (any, without $1).
store_dir() {
    local s
    for s in minio versity azurite; do
        [ -f "$FARDISK_RUN_DIR/$s/port" ] || continue
        if [ -z "${1:-}" ] || [ "$(cat "$FARDISK_RUN_DIR/$s/port")" = "$1" ]; then
            printf '%s\n' "$FARDISK_RUN_DIR/$s"
            return 0
        fi
    done
    return 1
}

cmd_start() {
    local server upstream="${1:-}" api_port listen_port
    if fd_pid_alive "$PIDFILE" toxiproxy-server; then
        fd_log "already running: pid $(cat "$PIDFILE"), proxy on 127.0.0.1:$(cat "$STATE/listen_port")"
        return
    fi
    if [ -z "$upstream" ]; then
        local dir
        dir="$(store_dir)" || fd_die "no UPSTREAM given and no MinIO, Versity or Azurite in $FARDISK_RUN_DIR"
        upstream="127.0.0.1:$(cat "$dir/port")"
    fi
    server="$(fd_tool toxiproxy-server)"
    mkdir -p "$STATE"
    api_port="$(fd_free_port)"
    fd_start_daemon "$PIDFILE" "$STATE/toxiproxy.log" \
        "$server" -host 127.0.0.1 -port "$api_port" -seed "${FARDISK_SEED:-1}"
    if ! fd_wait_http "http://127.0.0.1:$api_port/version" "$READY_TRIES" "$(cat "$PIDFILE")"; then
        tail -n 20 "$STATE/toxiproxy.log" >&2 || true
        fd_stop_pid "$PIDFILE" toxiproxy-server
        fd_die "toxiproxy API did not answer on 127.0.0.1:$api_port"
    fi
    echo "$api_port" >"$STATE/api_port"
    listen_port="$(fd_free_port)"
    api POST /proxies "{\"name\":\"$PROXY\",\"listen\":\"127.0.0.1:$listen_port\",\"upstream\":\"$upstream\",\"enabled\":true}"
    echo "$listen_port" >"$STATE/listen_port"
    echo "$upstream" >"$STATE/upstream"
    fd_log "started pid $(cat "$PIDFILE"), api 127.0.0.1:$api_port, proxy $PROXY 127.0.0.1:$listen_port -> $upstream"
}

cmd_stop() {
    if fd_pid_alive "$PIDFILE" toxiproxy-server; then
        fd_log "stopping pid $(cat "$PIDFILE")"
    else
        fd_log "not running"
    fi
    fd_stop_pid "$PIDFILE" toxiproxy-server
    rm -f "$STATE/api_port" "$STATE/listen_port" "$STATE/upstream"
}

remove_toxic() {
    # 404 means it was not there, which is the state we want.
    curl -sS --max-time 10 -o /dev/null -X DELETE "$(api_url "/proxies/$PROXY/toxics/$1")" || true
}

cmd_latency() {
    local ms="${1:-}" jitter="${2:-0}" stream
    [[ "$ms" =~ ^[0-9]+$ && "$jitter" =~ ^[0-9]+$ ]] || fd_die "usage: latency MS [JITTER_MS] (integers)"
    for stream in upstream downstream; do
        remove_toxic "latency_$stream"
        if [ "$ms" -gt 0 ]; then
            api POST "/proxies/$PROXY/toxics" \
                "{\"name\":\"latency_$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"toxicity\":1.0,\"attributes\":{\"latency\":$ms,\"jitter\":$jitter}}"
        fi
    done
    if [ "$ms" -gt 0 ]; then
        fd_log "latency ${ms} ms (jitter ${jitter} ms) each way: round trip +$((2 * ms)) ms"
    else
        fd_log "latency removed"
    fi
}

cmd_outage() {
    case "${1:-}" in
        on) api POST "/proxies/$PROXY" '{"enabled":false}'; fd_log "outage on: proxy $PROXY disabled" ;;
        off) api POST "/proxies/$PROXY" '{"enabled":true}'; fd_log "outage off: proxy $PROXY enabled" ;;
        *) fd_die "usage: outage on|off" ;;
    esac
}

cmd_toxic() {
    local op="${1:-}" name="${2:-}" type="${3:-}" toxicity="${4:-1.0}" attrs="${5:-"{}"}"
    [[ "$name" =~ ^[A-Za-z0-9_]+$ ]] || fd_die "usage: toxic add NAME TYPE [TOXICITY] [ATTRIBUTES_JSON] | toxic remove NAME"
    case "$op" in
        add)
            [[ "$type" =~ ^[a-z_]+$ && "$toxicity" =~ ^[0-9.]+$ ]] || fd_die "usage: toxic add NAME TYPE [TOXICITY] [ATTRIBUTES_JSON]"
            api POST "/proxies/$PROXY/toxics" \
                "{\"name\":\"${name}_up\",\"type\":\"$type\",\"stream\":\"upstream\",\"toxicity\":$toxicity,\"attributes\":$attrs}"
            api POST "/proxies/$PROXY/toxics" \
                "{\"name\":\"${name}_down\",\"type\":\"$type\",\"stream\":\"downstream\",\"toxicity\":$toxicity,\"attributes\":$attrs}"
            fd_log "toxic $name: $type (toxicity $toxicity, attributes $attrs) on both directions"
            ;;
        remove)
            remove_toxic "${name}_up"
            remove_toxic "${name}_down"
            fd_log "toxic $name removed"
            ;;
        *) fd_die "usage: toxic add NAME TYPE [TOXICITY] [ATTRIBUTES_JSON] | toxic remove NAME" ;;
    esac
}

cmd_reset() {
    api POST /reset
    fd_log "reset: toxics removed, proxies enabled"
}

cmd_env() {
    fd_pid_alive "$PIDFILE" toxiproxy-server || fd_die "not running (scripts/toxiproxy.sh start)"
    local url dir upstream
    upstream="$(cat "$STATE/upstream" 2>/dev/null)"
    dir="$(store_dir "${upstream##*:}")" || fd_die "no store server of $FARDISK_RUN_DIR listens on $upstream"
    url="http://127.0.0.1:$(cat "$STATE/listen_port")"
    sed -e "s#^export AWS_ENDPOINT=.*#export AWS_ENDPOINT=$url#" \
        -e "s#^export AWS_ENDPOINT_URL=.*#export AWS_ENDPOINT_URL=$url#" \
        -e "s#^export AZURITE_BLOB_STORAGE_URL=.*#export AZURITE_BLOB_STORAGE_URL=$url#" \
        "$dir/env"
}

cmd_status() {
    if fd_pid_alive "$PIDFILE" toxiproxy-server; then
        fd_log "running: pid $(cat "$PIDFILE"), proxy on 127.0.0.1:$(cat "$STATE/listen_port")"
        curl -sS --max-time 5 "$(api_url /proxies)"
        echo
    else
        fd_log "not running"
        return 1
    fi
}

case "${1:-}" in
    start) cmd_start "${2:-}" ;;
    stop) cmd_stop ;;
    latency) cmd_latency "${2:-}" "${3:-0}" ;;
    outage) cmd_outage "${2:-}" ;;
    toxic) shift; cmd_toxic "$@" ;;
    reset) cmd_reset ;;
    env) cmd_env ;;
    status) cmd_status ;;
    *) echo "usage: $0 start [UPSTREAM]|stop|latency MS [JITTER]|outage on|off|toxic add|remove ...|reset|env|status" >&2; exit 2 ;;
esac

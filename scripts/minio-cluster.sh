#!/usr/bin/env bash
# A 4-node erasure-coded MinIO cluster on 127.0.0.1: four server processes on their own ports,
# each with its own two drives (8 drives, one erasure set, MinIO's default parity EC:4 for 8
# drives), so the store survives a node going away. The distributed store users outgrow into.
#
#   minio-cluster.sh start          start the four nodes, wait for write quorum, create the bucket
#   minio-cluster.sh stop           stop the nodes this run dir started (by recorded PIDs only)
#   minio-cluster.sh kill-node N    SIGKILL node N (1-4), as a crashed host
#   minio-cluster.sh start-node N   start node N again with the same drives
#   minio-cluster.sh env            `export AWS_...` lines: the endpoint is node 1
#   minio-cluster.sh status         which nodes run; whether the cluster has write quorum
#
# State lives in $FARDISK_RUN_DIR/minio-cluster/ (node<N>/{pid,port,d1,d2,minio.log}, env).
# FARDISK_MINIO_CLUSTER_CRASH_NODE=N: `start` SIGKILLs node N a second after starting it, as
# MinIO's own bootstrap race does now and then; the start must still reach write quorum.
set -euo pipefail
FD_NAME=minio-cluster
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$FARDISK_RUN_DIR/minio-cluster"
NODES=4
BUCKET="${FARDISK_BUCKET:-fardisk}"
ACCESS_KEY="${FARDISK_MINIO_USER:-fardisk}"
SECRET_KEY="${FARDISK_MINIO_PASSWORD:-fardisk-secret}"
READY_TRIES=480 # x 0.25 s = 120 s: four nodes find each other and format the drives
# While four fresh nodes format their drives together, one of them now and then exits on a race in
# MinIO's own bootstrap ("FATAL Unable to initialize backend: .minio.sys/pool.bin has incomplete
# body", seen once in CI). A node's supervisor would start it again, and so does the wait below, at
# most this many times in all before it gives up.
BOOTSTRAP_RESTARTS_MAX=3

node_dir() { printf '%s/node%s\n' "$STATE" "$1"; }
port_of() { cat "$(node_dir "$1")/port"; }

# Every node gets the same list of all nodes' drives (MinIO's distributed syntax).
endpoints() {
    local n
    for n in $(seq 1 "$NODES"); do
        printf 'http://127.0.0.1:%s%s/d{1...2} ' "$(port_of "$n")" "$(node_dir "$n")"
    done
}

start_node() {
    local n="$1" dir console
    dir="$(node_dir "$n")"
    if fd_pid_alive "$dir/pid" minio; then
        fd_log "node $n already running: pid $(cat "$dir/pid")"
        return
    fi
    console="$(fd_free_port)"
    # In a container (/.dockerenv) MinIO waits forever for endpoints on loopback to "resolve to a
    # valid IP"; _MINIO_SERVER_LOCAL names the node's own endpoint so it knows which one is local.
    # MINIO_CI_CD: a distributed node refuses drives on the root file system otherwise (here every
    # drive is a directory on it).
    # shellcheck disable=SC2046 # one endpoint per word
    _MINIO_SERVER_LOCAL="127.0.0.1:$(port_of "$n")" MINIO_CI_CD=1 \
        MINIO_ROOT_USER="$ACCESS_KEY" MINIO_ROOT_PASSWORD="$SECRET_KEY" \
        MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
        fd_start_daemon "$dir/pid" "$dir/minio.log" \
        "$(fd_tool minio)" server --quiet --address "127.0.0.1:$(port_of "$n")" \
        --console-address "127.0.0.1:$console" $(endpoints)
    fd_log "node $n: pid $(cat "$dir/pid") on 127.0.0.1:$(port_of "$n")"
}

# has_quorum: node 1 answers MinIO's cluster health check (the cluster has write quorum).
has_quorum() {
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$(port_of 1)/minio/health/cluster" 2>/dev/null
}

# wait_quorum: poll node 1's cluster health until it answers (write quorum), starting again a node
# that exited meanwhile (up to BOOTSTRAP_RESTARTS_MAX in all). False when the time or the restarts
# run out.
wait_quorum() {
    local i n why restarts=0
    for ((i = 0; i < READY_TRIES; i++)); do
        if has_quorum; then
            return 0
        fi
        for n in $(seq 1 "$NODES"); do
            fd_pid_alive "$(node_dir "$n")/pid" minio && continue
            restarts=$((restarts + 1))
            if [ "$restarts" -gt "$BOOTSTRAP_RESTARTS_MAX" ]; then
                fd_log "node $n exited while the cluster formed, and $BOOTSTRAP_RESTARTS_MAX restarts are used up"
                return 1
            fi
            why="$(grep FATAL "$(node_dir "$n")/minio.log" | tail -n 1 || true)"
            fd_log "node $n exited while the cluster formed (${why:-no FATAL line in its log}); starting it again ($restarts of $BOOTSTRAP_RESTARTS_MAX)"
            rm -f "$(node_dir "$n")/pid"
            start_node "$n"
        done
        sleep 0.25
    done
    return 1
}

cmd_start() {
    local n
    for n in $(seq 1 "$NODES"); do
        mkdir -p "$(node_dir "$n")/d1" "$(node_dir "$n")/d2"
        [ -f "$(node_dir "$n")/port" ] || fd_free_port >"$(node_dir "$n")/port"
    done
    for n in $(seq 1 "$NODES"); do start_node "$n"; done
    # A test's way to have MinIO's bootstrap race happen on demand (tests/e2e/60_minio_cluster.sh).
    if [ -n "${FARDISK_MINIO_CLUSTER_CRASH_NODE:-}" ]; then
        check_node "$FARDISK_MINIO_CLUSTER_CRASH_NODE"
        sleep 1
        cmd_kill_node "$FARDISK_MINIO_CLUSTER_CRASH_NODE"
    fi
    if ! wait_quorum; then
        tail -n 20 "$(node_dir 1)/minio.log" >&2 || true
        cmd_stop
        fd_die "the cluster did not reach write quorum (logs: $STATE/node*/minio.log)"
    fi
    cat >"$STATE/env" <<EOT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_ENDPOINT=http://127.0.0.1:$(port_of 1)
export AWS_ENDPOINT_URL=http://127.0.0.1:$(port_of 1)
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_ALLOW_HTTP=true
export AWS_BUCKET=$BUCKET
export FARDISK_BUCKET=$BUCKET
EOT
    ( . "$STATE/env"; python3 "$FARDISK_ROOT/scripts/s3.py" mb "$BUCKET" >/dev/null ) \
        || { cmd_stop; fd_die "could not create bucket $BUCKET"; }
    fd_log "cluster of $NODES nodes up (write quorum), bucket $BUCKET, endpoint node 1"
}

cmd_stop() {
    local n
    for n in $(seq 1 "$NODES"); do fd_stop_pid "$(node_dir "$n")/pid" minio; done
    fd_log "stopped"
}

check_node() { [[ "${1:-}" =~ ^[1-4]$ ]] || fd_die "node number 1-4 expected, got '${1:-}'"; }

cmd_kill_node() {
    local dir pid
    check_node "$1"
    dir="$(node_dir "$1")"
    fd_pid_alive "$dir/pid" minio || fd_die "node $1 is not running"
    pid="$(cat "$dir/pid")"
    kill -KILL "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/pid"
    fd_log "node $1 (pid $pid) killed"
}

cmd_status() {
    local n up=0
    for n in $(seq 1 "$NODES"); do
        if fd_pid_alive "$(node_dir "$n")/pid" minio; then up=$((up + 1)); fd_log "node $n: running"; else fd_log "node $n: down"; fi
    done
    if has_quorum; then
        fd_log "$up of $NODES nodes running; write quorum"
    else
        fd_log "$up of $NODES nodes running; no write quorum (via node 1)"
        return 1
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    kill-node) cmd_kill_node "${2:-}" ;;
    start-node) check_node "${2:-}"; start_node "$2" ;;
    env) [ -f "$STATE/env" ] || fd_die "not started (scripts/minio-cluster.sh start)"; cat "$STATE/env" ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|kill-node N|start-node N|env|status" >&2; exit 2 ;;
esac

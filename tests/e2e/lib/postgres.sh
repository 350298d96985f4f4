# shellcheck shell=bash
# Helpers for the e2e tests that run PostgreSQL on ext4 on a fardisk FUSE image (50, 54): the
# pool's daemon, the loop device and file system over the image, PostgreSQL and the clients that
# record every commit they saw acknowledged, and the cleanup after a crash. Source after
# lib/common.sh, once the test has set:
#   B (the fardisk binary, may come later), POOL, W (the run dir), FARDISK_HOME, MNT (the FUSE
#   mount), FS (where ext4 is mounted), DATA (PostgreSQL's data dir), PG (scripts/postgres.sh).
# Optional: PG_BIN, GONE_TRIES, CLIENT_EXIT_TRIES, IMPORT_WAIT_S (defaults below).
# State it keeps: LOOP, PM_PID (the postmaster), DAEMON_PIDS, CLIENT_PIDS.

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
GONE_TRIES="${GONE_TRIES:-100}"               # x 0.1 s: a killed process disappears
CLIENT_EXIT_TRIES="${CLIENT_EXIT_TRIES:-300}" # x 0.1 s: clients notice the end of their server
IMPORT_WAIT_S="${IMPORT_WAIT_S:-180}"         # import --wait (a replay under load takes a while)
LOOP=""
PM_PID=""
DAEMON_PIDS=()
CLIENT_PIDS=()

info() { echo "INFO $E2E_NAME: $*"; }

# ---- processes (is_ours, wait_gone, fardisk_daemon_pid, fardisk_kill: lib/common.sh) --------

daemon_pid() { fardisk_daemon_pid "$POOL"; }

# holder_field FIELD: a field of the pool's `engine_holder` in `status --json` (pid, generation,
# restarts, ...), or nothing; bounded by CMD_TIMEOUT_S (30 s by default).
holder_field() {
    timeout "${CMD_TIMEOUT_S:-30}" "$B" status "$POOL" --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0].get("engine_holder", {}).get(sys.argv[1], ""))' "$1" 2>/dev/null
}

# wait_new_engine OLD_PID: true once an engine other than OLD_PID (and not the holder, $HOLDER_PID)
# answers `status`; polls every 0.1 s, WAIT_TRIES (300) times at most.
wait_new_engine() {
    local i pid
    for ((i = 0; i < ${WAIT_TRIES:-300}; i++)); do
        pid="$(daemon_pid)"
        [ -n "$pid" ] && [ "$pid" != "$1" ] && [ "$pid" != "${HOLDER_PID:-}" ] && return 0
        sleep 0.1
    done
    return 1
}

# kill_daemon: SIGKILL the pool's daemon, as a crash of the host would (only if the pid in status
# is a live fardisk process: never a recycled pid), and wait until it is gone.
kill_daemon() {
    local pid
    pid="$(daemon_pid)"
    is_ours "$pid" fardisk || { echo "no live daemon (pid '$pid')" >&2; return 1; }
    fardisk_kill "$POOL"
}

# kill_postgres: SIGKILL the postmaster and all its children at once (no shutdown checkpoint; it
# has usually PANICked already on the I/O errors of the dead device, but nobody can count on it).
kill_postgres() {
    [ -n "$PM_PID" ] || return 0
    if is_ours "$PM_PID" postgres; then
        local kids
        kids="$(ps -o pid= --ppid "$PM_PID" | tr -s ' \n' ' ')"
        # shellcheck disable=SC2086 # one pid per word
        kill -KILL "$PM_PID" $kids 2>/dev/null
        # shellcheck disable=SC2086
        wait_gone "$GONE_TRIES" "$PM_PID" $kids || echo "postgres processes still there after SIGKILL" >&2
    fi
    PM_PID=""
}

# wait_clients: bounded wait for the background clients (CLIENT_PIDS) to end by themselves, then
# SIGKILL the ones still there.
wait_clients() {
    local p
    [ "${#CLIENT_PIDS[@]}" -gt 0 ] || return 0
    wait_gone "$CLIENT_EXIT_TRIES" "${CLIENT_PIDS[@]}" || echo "clients did not exit by themselves" >&2
    for p in "${CLIENT_PIDS[@]}"; do
        if is_ours "$p" psql || is_ours "$p" pgbench; then kill -KILL "$p" 2>/dev/null; fi
        wait "$p" 2>/dev/null
    done
    CLIENT_PIDS=()
}

# ---- pool, block device, file system ---------------------------------------------------------

# import_pool [ARGS]: import with the FUSE mount (bounded), remember the daemon's pid for cleanup.
import_pool() {
    local pid
    # E2E_FUSE_URING (default off: /dev/fuse) is import's --fuse-uring (on, auto: io_uring).
    timeout $((IMPORT_WAIT_S + 20)) "$B" import "$POOL" --mount "$MNT" --fuse-uring "${E2E_FUSE_URING:-off}" \
        --wait "$IMPORT_WAIT_S" "$@" || return 1
    pid="$(daemon_pid)"
    [ -n "$pid" ] || { echo "import: no daemon pid in status" >&2; return 1; }
    DAEMON_PIDS+=("$pid")
}

attach_loop() { LOOP="$(losetup --direct-io=on -f --show "$MNT/pg")"; }

detach_loop() {
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    LOOP=""
    return 0
}

# teardown_crashed: what an operator (or a reboot) does to the mounts of a crashed storage stack.
teardown_crashed() {
    mountpoint -q "$FS" && umount -l "$FS"
    detach_loop
    if grep -q " $MNT " /proc/mounts; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    return 0
}

# fsck_clean: e2fsck -fn exits 0 and has nothing to fix; prints its report when it does.
fsck_clean() {
    local out rc
    out="$(e2fsck -fn "$LOOP" 2>&1)"
    rc=$?
    if [ "$rc" -eq 0 ] && ! grep -q '? no$' <<<"$out"; then return 0; fi
    printf 'e2fsck -fn %s exited %s:\n%s\n' "$LOOP" "$rc" "$out" >&2
    return 1
}

# replay_then_fsck: mount (the ext4 journal replays), unmount, then e2fsck -fn must be clean.
replay_then_fsck() { mount "$LOOP" "$FS" && umount "$FS" && fsck_clean; }

# The daemon log (colour codes removed) from line FIRST on; log_lines tells where it ends now.
daemon_log_from() { tail -n +"$1" "$FARDISK_HOME/log/$POOL.log" | sed 's/\x1b\[[0-9;]*m//g'; }
log_lines() { wc -l <"$FARDISK_HOME/log/$POOL.log"; }

# ---- PostgreSQL ------------------------------------------------------------------------------

# postgres_pid_alive PID: PID is a postgres process, also while it exits or waits to be reaped.
# Its cmdline is empty then, so `is_ours PID postgres` misses it; its comm stays, and PostgreSQL's
# own lock-file check (kill(pid, 0)) still counts it (e2e 54 failed so once in CI, 93f2943).
postgres_pid_alive() { [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = postgres ]; }

pg_start() {
    # A killed postmaster may still be finishing its exit on the dead device (it PANICked and
    # began a crash restart there); its pid in the lock file makes a new one refuse to start.
    local old i
    old="$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null)"
    if postgres_pid_alive "$old"; then
        kill -KILL "$old" 2>/dev/null
        for ((i = 0; i < GONE_TRIES; i++)); do
            postgres_pid_alive "$old" || break
            sleep 0.1
        done
        postgres_pid_alive "$old" && echo "the old postmaster $old is still there" >&2
    fi
    "$PG" start "$DATA" || return 1
    PM_PID="$(head -n 1 "$DATA/postmaster.pid")"
    eval "$("$PG" env "$DATA")" # PGHOST/PGPORT/PGUSER for the clients started directly
}

pg_stop() { "$PG" stop "$DATA" && PM_PID=""; }

sql() { "$PG" psql "$DATA" -X -At -v ON_ERROR_STOP=1 -c "$1"; }

history_rows() { sql 'SELECT count(*) FROM pgbench_history'; }

# tx_processed FILE...: the transactions pgbench reported as processed, summed over its outputs.
tx_processed() {
    local f n sum=0
    for f in "$@"; do
        n="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$f" | head -n 1)"
        sum=$((sum + ${n:-0}))
    done
    echo "$sum"
}

# ---- the acked clients: one numbered row per transaction, its id written after the COMMIT ----

# acked_sql FIRST LAST: one autocommit INSERT per id, each followed by an echo of that id, which
# psql prints only after the COMMIT returned. Generated as psql reads it.
acked_sql() {
    echo 'SET synchronous_commit = on;'
    seq "$1" "$2" | awk '{ printf "INSERT INTO acked(id) VALUES (%d);\n\\echo acked %d\n", $1, $1 }'
}

# acked_client FIRST LAST OUT: appends "acked N" to OUT for every committed id; stops at the
# first error (ON_ERROR_STOP). Line-buffered so a crash loses no acknowledged id.
acked_client() {
    stdbuf -oL "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        < <(acked_sql "$1" "$2") >>"$3" 2>>"$W/acked.err"
}

# acked_client_bg FIRST LAST OUT: the same in the background; ACKED_PID is psql itself (stdbuf
# execs it) and is in CLIENT_PIDS.
acked_client_bg() {
    stdbuf -oL "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
        < <(acked_sql "$1" "$2") >>"$3" 2>>"$W/acked.err" &
    ACKED_PID=$!
    CLIENT_PIDS+=("$ACKED_PID")
}

# acked_ids FILE...: the ids the clients saw committed.
acked_ids() { cat "$@" 2>/dev/null | sed -n 's/^acked \([0-9]*\)$/\1/p'; }

# missing_acked FILE...: how many acknowledged ids are not in the table (prints the number).
missing_acked() {
    local in_table
    in_table="$(sql 'SELECT id FROM acked')" || { echo "query failed"; return 1; }
    comm -23 <(acked_ids "$@" | sort -u) <(sort -u <<<"$in_table") | wc -l
}

# all_acked_present FILE...: every id the clients saw committed is in the table.
all_acked_present() {
    local m
    m="$(missing_acked "$@")"
    [ "$m" = 0 ] || { echo "$m acknowledged ids are missing" >&2; return 1; }
}

# ---- cleanup ---------------------------------------------------------------------------------

# cleanup_all: clients, PostgreSQL, ext4 and the loop device, the store back (a failure may have
# left an outage or a toxic on), a bounded export, then any daemon left and the FUSE mount.
cleanup_all() {
    local p
    for p in "${CLIENT_PIDS[@]}"; do
        if is_ours "$p" psql || is_ours "$p" pgbench; then kill -KILL "$p" 2>/dev/null; fi
    done
    kill_postgres
    mountpoint -q "$FS" && umount -l "$FS"
    detach_loop
    "$SCRIPTS/toxiproxy.sh" reset >/dev/null 2>&1
    [ -n "${B:-}" ] && timeout 120 "$B" export "$POOL" >/dev/null 2>&1
    for p in "${DAEMON_PIDS[@]}"; do
        is_ours "$p" fardisk && kill -KILL "$p" 2>/dev/null
    done
    if grep -q " $MNT " /proc/mounts; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; fi
    return 0
}

#!/usr/bin/env bash
# The database never goes down (#20): PostgreSQL 15 on ext4 on a loop device over a fardisk FUSE
# image, the pool imported with --holder (a holder process owns the FUSE mount and restarts the
# engine). Under TPC-B (pgbench) and a recorder client (one numbered row per transaction; an id
# is written to a file only after its COMMIT returned):
#   1. the ENGINE (never the holder) is SIGKILLed E2E62_KILLS times (default 20) at seeded random
#      moments; each time the holder starts a new engine, which replays the log, takes the FUSE
#      connection over and gets the requests in flight resent;
#   2. `fardisk upgrade` hands over to a new engine E2E62_UPGRADES times (default 5).
# PostgreSQL must never restart (same postmaster, no PANIC in its log), pgbench must end with no
# error, the recorder must never see an error; then the TPC-B invariant holds, pg_amcheck is
# clean, every acknowledged id is in the table, and e2fsck -fn is clean. status and history
# count the restarts and say why.
# Bad cases: a second holder for the pool is refused with one line; a crash loop (more kills
# than --restart-max within the window) stops the holder and `status` says so.
# The last lines give the pause per kill and per upgrade (p50, max, seconds until the new
# engine answers) and pgbench's worst transaction latency.
#
# Env: E2E62_SEED (default random, printed), E2E62_KILLS (default 20), E2E62_UPGRADES
#      (default 5), E2E62_LOAD_S (default 150: pgbench's -T; kills and upgrades must fit in it),
#      FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=62_engine_restart_pg
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1

SEED="${E2E62_SEED:-$((RANDOM * 32768 + RANDOM))}"
KILLS="${E2E62_KILLS:-20}"
UPGRADES="${E2E62_UPGRADES:-5}"
LOAD_S="${E2E62_LOAD_S:-150}"
CLIENTS=3                # pgbench TPC-B clients (plus the recorder)
ACKED_MAX=10000000       # the recorder runs until it is stopped
ENGINE_WAIT_TRIES=600    # x 0.1 s: bound on waiting for a new engine to answer
GONE_TRIES=100
CLIENT_EXIT_TRIES=300
POOL=hold
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
DATA="$FS/data"
LOGDEV="$W/log0"
PG="$SCRIPTS/postgres.sh"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
HOLDER_PID=""
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

now() { date +%s.%N; }
secs_since() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$1"; }
status_json() { timeout 30 "$B" status "$POOL" --json 2>/dev/null; }

# engine_other_than PID: waits (bounded) until an engine with another pid answers; prints it.
engine_other_than() {
    local i pid
    for ((i = 0; i < ENGINE_WAIT_TRIES; i++)); do
        pid="$(daemon_pid)"
        if [ -n "$pid" ] && [ "$pid" != "$1" ]; then echo "$pid"; return 0; fi
        sleep 0.1
    done
    return 1
}

postgres_never_restarted() {
    [ "$(head -n 1 "$DATA/postmaster.pid")" = "$PM_PID" ] && kill -0 "$PM_PID" 2>/dev/null
}

# stats FILE: "p50 X s, max Y s over N" of the numbers in FILE.
stats() {
    python3 - "$1" <<'EOF'
import statistics, sys
v = sorted(float(x) for x in open(sys.argv[1]).read().split())
print(f"p50 {statistics.median(v):.2f} s, max {v[-1]:.2f} s over {len(v)}" if v else "none")
EOF
}

info "seed $SEED: $KILLS engine kills, $UPGRADES upgrades, under ${LOAD_S} s of TPC-B (E2E62_SEED=$SEED reproduces the moments)"
RANDOM=$SEED

use_fardisk_bin
# The "installed" binary: upgrades start whatever file is at this path when they run.
mkdir -p "$W/bin"
require "install the binary under test as $W/bin/fardisk" cp "$B" "$W/bin/fardisk"
B="$W/bin/fardisk"
on_exit cleanup_all
mkdir -p "$FS"

# ---- setup -----------------------------------------------------------------------------------

require "create on file:// with a log file" "$B" create "$POOL" "file://$W/store" log "$LOGDEV"
# The kills here come faster than any real crash loop: the budget is raised for them.
require "import --holder --mount --nbd" import_pool --holder --restart-max 1000 --restart-window 60 --nbd "unix:$W/nbd.sock"
HOLDER_PID="$(holder_field pid)"
require "status names the holder (pid ${HOLDER_PID:-none})" is_ours "$HOLDER_PID" fardisk
DAEMON_PIDS+=("$HOLDER_PID")
require "volume create 2G" "$B" volume create "$POOL/pg" 2G
# The kernel resends what a killed engine had read only if the copy into its buffer finished; a
# copy that faults in an untouched page while the engine is being killed fails the request (EIO).
# So each /dev/fuse worker's 1 MiB + 4 KiB buffer is written and locked before its first read
# (crates/fuse/src/transport/resident.rs): two workers, at least 2 MiB locked (we run as root).
locked_kib="$(awk '/^VmLck:/ {print $2}' "/proc/$(daemon_pid)/status" 2>/dev/null)"
check "the engine's FUSE receive buffers are locked in RAM (VmLck ${locked_kib:-?} kB >= 2056)" test "${locked_kib:-0}" -ge 2056
require "losetup --direct-io=on over the image" attach_loop
require "mkfs.ext4" mkfs.ext4 -q "$LOOP"
require "mount ext4" mount "$LOOP" "$FS"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$DATA"
require "start PostgreSQL" pg_start
require "pgbench -i -s 1" "$PG" pgbench "$DATA" -i -q -s 1 postgres
require "create table acked" sql 'CREATE TABLE acked(id int PRIMARY KEY)'
PG_LOG="$PGHOST/postgres.log"
pg_log_from="$(($(wc -l <"$PG_LOG") + 1))"

# ---- kills and upgrades under load -----------------------------------------------------------

acked_client_bg 1 "$ACKED_MAX" "$W/acked.out"
RECORDER_PID="$ACKED_PID"
# -n: no vacuum, no TRUNCATE of pgbench_history (the row count is checked against pgbench's).
(cd "$W" && exec "$PG_BIN/pgbench" -n -c "$CLIENTS" -j 2 -T "$LOAD_S" -l --log-prefix="$W/pgbench_log" postgres) >"$W/tpcb.out" 2>&1 &
PGBENCH_PID=$!
CLIENT_PIDS+=("$PGBENCH_PID")
sleep 3
t_load=$SECONDS
: >"$W/kill_pauses"
: >"$W/upgrade_pauses"
engine="$(daemon_pid)"
kills_done=0
for ((k = 1; k <= KILLS; k++)); do
    # 0.3 .. 2.8 s between a new engine answering and the next kill.
    sleep "$(printf '0.%d' $((RANDOM % 10)))"
    sleep $((RANDOM % 3))
    kill -0 "$PGBENCH_PID" 2>/dev/null || { fail "pgbench ended before kill $k (raise E2E62_LOAD_S)"; break; }
    is_ours "$engine" fardisk || { fail "kill $k: engine pid '$engine' is not a live fardisk"; break; }
    [ "$engine" != "$HOLDER_PID" ] || { fail "kill $k: the engine pid is the holder's"; break; }
    t0="$(now)"
    kill -KILL "$engine"
    next="$(engine_other_than "$engine")" || { fail "kill $k: no new engine answered within $((ENGINE_WAIT_TRIES / 10)) s"; break; }
    secs_since "$t0" >>"$W/kill_pauses"
    engine="$next"
    kills_done=$k
done
check "$kills_done of $KILLS engine SIGKILLs, each followed by a new engine" test "$kills_done" -eq "$KILLS"
# A new release installed over the running one (a new file at the same path, as a package
# manager does it); the engines that run keep the old one open.
cp "$B" "$W/bin/fardisk.new" && mv -f "$W/bin/fardisk.new" "$B"
installed_inode="$(stat -c %i "$B")"
# runs_installed PID: the process runs the file now at $B (not the replaced one).
runs_installed() { [ "$(stat -L -c %i "/proc/$1/exe" 2>/dev/null)" = "$installed_inode" ]; }
check "before the upgrades the engine runs the replaced binary" bash -c "readlink /proc/$(daemon_pid)/exe | grep -q deleted"
upgrades_done=0
for ((u = 1; u <= UPGRADES; u++)); do
    sleep $((1 + RANDOM % 2))
    kill -0 "$PGBENCH_PID" 2>/dev/null || { fail "pgbench ended before upgrade $u (raise E2E62_LOAD_S)"; break; }
    t0="$(now)"
    out="$(timeout 300 "$B" upgrade "$POOL" --wait 240 2>&1)" || { fail "upgrade $u: $out"; break; }
    secs_since "$t0" >>"$W/upgrade_pauses"
    info "upgrade $u: $out"
    engine="$(daemon_pid)"
    runs_installed "$engine" || { fail "upgrade $u: engine $engine does not run the installed binary ($(readlink "/proc/$engine/exe"))"; break; }
    upgrades_done=$u
done
check "$upgrades_done of $UPGRADES upgrades under load, each new engine running the installed binary" test "$upgrades_done" -eq "$UPGRADES"
info "kills and upgrades took $((SECONDS - t_load)) s of the ${LOAD_S} s load"
check "the holder is the same process throughout (pid $HOLDER_PID)" is_ours "$HOLDER_PID" fardisk
check "PostgreSQL never restarted (postmaster $PM_PID)" postgres_never_restarted
wait_gone $((LOAD_S * 10 + 600)) "$PGBENCH_PID"
wait "$PGBENCH_PID"
pgbench_rc=$?
check "pgbench exited 0" test "$pgbench_rc" -eq 0
check "pgbench reported no error" bash -c "! grep -iE 'error|abort' '$W/tpcb.out'"
info "pgbench: $(grep -E '^(number of transactions actually processed|latency average|tps)' "$W/tpcb.out" | tr '\n' ' ')"
check "the recorder is still committing (no error ended it)" kill -0 "$RECORDER_PID"
kill -TERM "$RECORDER_PID" 2>/dev/null
wait_clients
check "the recorder saw no error" test ! -s "$W/acked.err"
check "PostgreSQL never restarted, after the load too" postgres_never_restarted
pg_errors="$(tail -n +"$pg_log_from" "$PG_LOG" | grep -E 'PANIC|terminated by signal|was interrupted|could not (write|read|fsync)|I/O error' | head -n 5)"
check "PostgreSQL's log has no PANIC, crash or I/O error" test -z "$pg_errors"
[ -n "$pg_errors" ] && printf '%s\n' "$pg_errors"

# ---- what the holder says --------------------------------------------------------------------

check "status counts $KILLS restarts" test "$(holder_field restarts)" = "$KILLS"
check "status counts $UPGRADES upgrades" test "$(holder_field upgrades)" = "$UPGRADES"
status_out="$("$B" status "$POOL" 2>&1)"
check "status shows the holder line with the last exit" grep -q "holder: pid $HOLDER_PID.*upgrade" <<<"$status_out"
grep '^holder:' <<<"$status_out"
history_out="$("$B" history "$POOL" -n 1000 2>&1)"
check "history has one 'killed by signal 9' start per kill" \
    test "$(grep -c 'went (killed by signal 9 (SIGKILL))' <<<"$history_out")" -eq "$KILLS"
check "history has one hand-over per upgrade" \
    test "$(grep -c 'handed over (upgrade)' <<<"$history_out")" -eq "$UPGRADES"
check "status --json matches docs/json/status.schema.json" bash -c \
    "'$B' status '$POOL' --json | python3 '$E2E_ROOT/tests/e2e/lib/json_schema.py' '$E2E_ROOT/docs/json/status.schema.json'"

# ---- the data --------------------------------------------------------------------------------

check "TPC-B invariant" "$PG" check "$DATA" postgres
tx="$(tx_processed "$W/tpcb.out")"
check "history rows $(history_rows) >= pgbench's processed ${tx:-?}" test "$(history_rows)" -ge "${tx:-1}"
acked="$(acked_ids "$W/acked.out" | wc -l)"
check "every acknowledged id is there ($acked)" all_acked_present "$W/acked.out"
amcheck_out="$("$PG_BIN/pg_amcheck" --all --install-missing --heapallindexed 2>&1)"
amcheck_rc=$?
[ -n "$amcheck_out" ] && printf '%s\n' "$amcheck_out" | head -n 20
check "pg_amcheck --all --heapallindexed is clean" test "$amcheck_rc" -eq 0 -a -z "$amcheck_out"
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
check "e2fsck -fn clean" fsck_clean
detach_loop

# ---- an NBD client reconnects by itself -------------------------------------------------------

# nbd_client_rides_a_restart: qemu-io with reconnect-delay writes a pattern, the engine is
# SIGKILLed while the client is connected, and the same client (no new command) reads the pattern
# back and writes and reads more: qemu's NBD driver reconnects to the socket the new engine serves.
nbd_client_rides_a_restart() {
    local engine="$1"
    {
        echo "write -P 0x5c 0 1M"
        sleep 2
        kill -KILL "$engine"
        sleep 1
        echo "read -P 0x5c 0 1M"
        echo "write -P 0x5d 1M 1M"
        echo "read -P 0x5d 1M 1M"
        echo "quit"
    } | timeout 120 qemu-io --image-opts "driver=nbd,server.type=unix,server.path=$W/nbd.sock,export=nbdv,reconnect-delay=60" >"$W/qemu-io.out" 2>&1
    local reads
    reads="$(grep -c 'read 1048576/1048576 bytes' "$W/qemu-io.out")"
    if [ "$reads" = 2 ] && ! grep -qiE 'fail|error' "$W/qemu-io.out"; then return 0; fi
    cat "$W/qemu-io.out" >&2
    return 1
}
require "volume create nbdv 64M" "$B" volume create "$POOL/nbdv" 64M
engine="$(daemon_pid)"
check "qemu-io (reconnect-delay=60) rides an engine SIGKILL on one connection" nbd_client_rides_a_restart "$engine"
check "a new engine serves after the NBD case" engine_other_than "$engine"

# ---- bad cases -------------------------------------------------------------------------------

expect_error "a second holder for the pool is refused" "already has a holder" \
    "$B" import "$POOL" --mount "$W/mnt2" --holder --wait 30
expect_error "upgrade of a pool that is not imported" "not imported" "$B" upgrade nosuchpool
require "export stops the holder" "$B" export "$POOL"
check "the holder has exited" wait_gone 100 "$HOLDER_PID"
check "the FUSE mount is gone" bash -c "! grep -q ' $MNT ' /proc/mounts"

require "import --holder --restart-max 2" import_pool --holder --restart-max 2 --restart-window 600
HOLDER_PID="$(holder_field pid)"
DAEMON_PIDS+=("$HOLDER_PID")
engine="$(daemon_pid)"
for k in 1 2; do
    kill -KILL "$engine"
    engine="$(engine_other_than "$engine")" || { fail "crash loop: restart $k did not come"; break; }
done
kill -KILL "$engine"
check "the third kill within the window stops the holder" wait_gone 100 "$HOLDER_PID"
status_out="$("$B" status "$POOL" 2>&1)"
check "status says the holder stopped and why" grep -q "STOPPED: the engine exited 3 times within 600 s" <<<"$status_out"
grep 'STOPPED' <<<"$status_out"
check "status --json of the stopped holder matches its schema" bash -c \
    "'$B' status '$POOL' --json | python3 '$E2E_ROOT/tests/e2e/lib/json_schema.py' '$E2E_ROOT/docs/json/status.schema.json'"
check "the FUSE mount is gone with the holder" bash -c "! grep -q ' $MNT ' /proc/mounts"
require "a plain import recovers the pool (README, Restarts)" import_pool
require "export" "$B" export "$POOL"

# The holder itself killed: its engine has the connection too and serves on, without restarts;
# export then unmounts without the holder.
require "import --holder again" import_pool --holder
HOLDER_PID="$(holder_field pid)"
DAEMON_PIDS+=("$HOLDER_PID")
engine="$(daemon_pid)"
kill -KILL "$HOLDER_PID"
check "SIGKILL of the holder" wait_gone 100 "$HOLDER_PID"
# engine_serves_alone PID: the image reads through the mount and PID still answers as the engine.
engine_serves_alone() {
    dd if="$MNT/nbdv" of=/dev/null bs=1M count=4 iflag=direct status=none && [ "$(daemon_pid)" = "$1" ]
}
check "its engine still serves the mount" engine_serves_alone "$engine"
require "export without the holder" "$B" export "$POOL"
check "the FUSE mount is gone after that export" bash -c "! grep -q ' $MNT ' /proc/mounts"

echo "RESULT $E2E_NAME: seed $SEED; engine back after a SIGKILL (seconds until the new engine answers): $(stats "$W/kill_pauses"); upgrade hand-over (until the new engine answers): $(stats "$W/upgrade_pauses"); pgbench's slowest transaction: $(cat "$W"/pgbench_log* 2>/dev/null | awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { printf "%.2f s", m / 1e6 }') (measured on this machine, under load)"
e2e_finish

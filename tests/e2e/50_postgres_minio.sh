#!/usr/bin/env bash
# PostgreSQL 15 on ext4 on a fardisk volume whose durable home is MinIO behind toxiproxy (20 ms
# each way), with the intent log and the cache on local files:
#   1. setup: create, import --mount, volume, loop device, mkfs.ext4, initdb, pgbench -i, TPC-B.
#   2. crash: SIGKILL the daemon in the middle of a TPC-B run and a client that records every
#      INSERT whose COMMIT returned, then SIGKILL PostgreSQL. Import again (no --force), the ext4
#      journal replays, e2fsck -fn is clean, WAL recovery runs, the TPC-B invariant holds and
#      every acknowledged transaction (acked ids, pgbench's processed count) is there.
#   3. export, replace the cache file with a new blank one, import: the data is intact.
#   4. commits, SIGKILL, the log file deleted: import refuses and names the recovery point;
#      --missing-log imports there and the database is consistent (commits after the recovery
#      point may be lost; nothing from before the last export may be).
#
# Env: FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk;
#      E2E50_TPCB_S (default 20) is the length of the first TPC-B run;
#      E2E_FUSE_URING (default off: /dev/fuse) is import's --fuse-uring (on, auto: io_uring).
#      FARDISK_E2E_STORE=versity|azurite runs it on that server instead of MinIO (lib/stores.sh).
E2E_NAME=50_postgres_minio
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib/stores.sh"
[ "$E2E_STORE" = minio ] || E2E_NAME="50_postgres_$E2E_STORE"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1

LATENCY_MS=20          # each way: a 40 ms round trip to the store
TPCB_S="${E2E50_TPCB_S:-20}"
CRASH_AFTER_S=8        # how long the crash-phase clients run before the daemon is killed
CRASH_RUN_MAX_S=60     # the crash-phase pgbench would stop by itself after this
ACKED_MAX=20000        # the acked client stops by itself after this many rows
LATE_ROWS=50           # committed rows written just before the log is lost (phase 4)
GONE_TRIES=100         # x 0.1 s: bound on waiting for a killed process to disappear
CLIENT_EXIT_TRIES=300  # x 0.1 s: bound on waiting for clients to notice the crash
POOL=pgtank
W="$FARDISK_RUN_DIR" # 0755, removed by common.sh on success, kept on failure
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
DATA="$FS/data"
LOGDEV="$W/log0"
CACHEDEV="$W/cache0"
PG="$SCRIPTS/postgres.sh"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
# The pool, loop device, PostgreSQL and acked-client helpers shared with 54.
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

# ---- 0. services and binary ------------------------------------------------------------------

t_start=$SECONDS
use_fardisk_bin
require "$E2E_STORE start" store_start
require "toxiproxy.sh start" "$SCRIPTS/toxiproxy.sh" start
on_exit '"$SCRIPTS/toxiproxy.sh" stop'
on_exit cleanup_all
require "store ${LATENCY_MS} ms away each way" "$SCRIPTS/toxiproxy.sh" latency "$LATENCY_MS"
eval "$("$SCRIPTS/toxiproxy.sh" env)"
mkdir -p "$FS"

# ---- 1. setup and a first TPC-B run ----------------------------------------------------------

t=$SECONDS
require "create on $(store_url e2e50) with a log and a cache file" \
    "$B" create "$POOL" "$(store_url e2e50)" log "$LOGDEV" cache "$CACHEDEV"
require "import --mount" import_pool
require "volume create 4G" "$B" volume create "$POOL/pg" 4G
require "losetup --direct-io=on over the image" attach_loop
require "mkfs.ext4" mkfs.ext4 -q "$LOOP"
require "mount ext4" mount "$LOOP" "$FS"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$DATA"
require "start PostgreSQL" pg_start
t0="$(date +%s.%N)"
require "pgbench -i -s 1" "$PG" pgbench "$DATA" -i -q -s 1 postgres
info "pgbench -i -s 1 took $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)") s"
"$PG" pgbench "$DATA" -c4 -j2 -T "$TPCB_S" postgres >"$W/tpcb1.out" 2>&1
tx1="$(tx_processed "$W/tpcb1.out")"
info "TPC-B ${TPCB_S} s: $(grep -E '^(tps|latency average)' "$W/tpcb1.out" | tr '\n' ' ')"
require "TPC-B run committed transactions (${tx1:-none})" test "${tx1:-0}" -gt 0
require "TPC-B invariant after the first run" "$PG" check "$DATA" postgres
check "history rows = transactions processed ($tx1)" test "$(history_rows)" = "$tx1"
info "phase 1 (setup + TPC-B) took $((SECONDS - t)) s"

# ---- 2. crash of the whole storage stack in the middle of a run -------------------------------

t=$SECONDS
require "create table acked" sql 'CREATE TABLE acked(id int PRIMARY KEY)'
acked_client_bg 1 "$ACKED_MAX" "$W/acked2.out"
# -n: no vacuum and, above all, no TRUNCATE of pgbench_history, so the invariant spans both runs.
"$PG_BIN/pgbench" -n -c4 -j2 -T "$CRASH_RUN_MAX_S" postgres >"$W/tpcb2.out" 2>&1 &
CLIENT_PIDS+=("$!")
sleep "$CRASH_AFTER_S"
acked_before="$(acked_ids "$W/acked2.out" | wc -l)"
require "the acked client commits before the crash ($acked_before rows)" test "$acked_before" -gt 0
require "SIGKILL the fardisk daemon" kill_daemon
sleep 2 # PostgreSQL meets the I/O errors (its WAL fsync PANICs) before it is killed too
kill_postgres
wait_clients
teardown_crashed
tx2="$(tx_processed "$W/tpcb2.out")"
acked2="$(acked_ids "$W/acked2.out" | wc -l)"
info "before the crash: pgbench processed ${tx2:-?} transactions, the acked client saw $acked2 commits"
info "pgbench: $(grep -m1 -E 'error|abort' "$W/tpcb2.out")"
from="$(($(log_lines) + 1))"
require "import after SIGKILL needs no --force" import_pool
replayed="$(daemon_log_from "$from" | sed -n 's/.*intent log replayed records=\([0-9]*\).*/\1/p' | head -n 1)"
check "the intent log replayed records (${replayed:-none})" test "${replayed:-0}" -gt 0
require "losetup after the crash" attach_loop
check "mount (journal replay), umount, e2fsck -fn clean" replay_then_fsck
require "mount ext4 after the crash" mount "$LOOP" "$FS"
require "PostgreSQL starts (WAL crash recovery)" pg_start
check "TPC-B invariant after the crash" "$PG" check "$DATA" postgres
check "every acknowledged acked id is there ($acked2)" all_acked_present "$W/acked2.out"
rows2="$(history_rows)"
check "history rows $rows2 >= pgbench's committed transactions $tx1 + ${tx2:-?}" \
    test "$rows2" -ge $((tx1 + ${tx2:-0}))
info "phase 2 (crash and recovery) took $((SECONDS - t)) s"

# ---- 3. export, a new blank cache device, import ---------------------------------------------

t=$SECONDS
rows3_before="$(history_rows)"
acked3_before="$(sql 'SELECT count(*) FROM acked')"
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
require "export" "$B" export "$POOL"
# Whole output first: `fardisk status | grep -q` makes the CLI panic on EPIPE (reported).
status_out="$("$B" status "$POOL" 2>&1)"
check "status shows EXPORTED" grep -q EXPORTED <<<"$status_out"
check "the FUSE mount is gone after export" bash -c "! grep -q ' $MNT ' /proc/mounts"
rm -f "$CACHEDEV"
truncate -s 1G "$CACHEDEV" # a new, blank device in place of the old one
from="$(($(log_lines) + 1))"
require "import with a blank cache file" import_pool
info "daemon log about the cache: $(daemon_log_from "$from" | grep -i 'cache device' | head -n 2)"
info "cache devices in service: $("$B" status "$POOL" --json | python3 -c 'import json, sys; c = json.load(sys.stdin)["pools"][0]["cache"]; print([(d["path"], d["state"]) for d in c["devices"]])')"
require "losetup" attach_loop
check "e2fsck -fn clean after export/import" fsck_clean
require "mount ext4" mount "$LOOP" "$FS"
require "start PostgreSQL" pg_start
check "TPC-B invariant after export/import" "$PG" check "$DATA" postgres
check "history rows unchanged ($rows3_before)" test "$(history_rows)" = "$rows3_before"
check "acked rows unchanged ($acked3_before)" test "$(sql 'SELECT count(*) FROM acked')" = "$acked3_before"
check "every acknowledged acked id is there" all_acked_present "$W/acked2.out"
info "phase 3 (export, blank cache, import) took $((SECONDS - t)) s"

# ---- 4. the log device is lost after a crash -------------------------------------------------

t=$SECONDS
acked_client 100001 $((100000 + LATE_ROWS)) "$W/acked4.out"
late="$(acked_ids "$W/acked4.out" | wc -l)"
check "the late client committed $late of $LATE_ROWS rows" test "$late" -eq "$LATE_ROWS"
require "SIGKILL the fardisk daemon" kill_daemon
kill_postgres
teardown_crashed
rm -f "$LOGDEV"
out="$("$B" import "$POOL" --mount "$MNT" --fuse-uring "${E2E_FUSE_URING:-off}" --wait 120 2>&1)"
rc=$?
echo "$out"
check "import without the log file is refused" test "$rc" -ne 0
check "the refusal names the recovery point and --missing-log" \
    bash -c 'grep -q "recovery point" <<<"$1" && grep -q -- "--missing-log" <<<"$1"' _ "$out"
require "import --missing-log" import_pool --missing-log
"$B" status "$POOL" -v
require "losetup at the recovery point" attach_loop
check "mount (journal replay), umount, e2fsck -fn clean at the recovery point" replay_then_fsck
require "mount ext4 at the recovery point" mount "$LOOP" "$FS"
require "PostgreSQL starts at the recovery point" pg_start
check "TPC-B invariant at the recovery point" "$PG" check "$DATA" postgres
check "every id acknowledged before the export is there" all_acked_present "$W/acked2.out"
kept="$(sql "SELECT count(*) FROM acked WHERE id > 100000")"
info "of the $late rows committed just before the crash, $kept survived without the log (the rest were only in it)"
check "history rows $(history_rows) >= before the export ($rows3_before)" test "$(history_rows)" -ge "$rows3_before"
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
check "export without the log device" "$B" export "$POOL"
info "phase 4 (lost log) took $((SECONDS - t)) s; whole test $((SECONDS - t_start)) s"
e2e_finish

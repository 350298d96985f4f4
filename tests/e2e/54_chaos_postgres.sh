#!/usr/bin/env bash
# Chaos on the real stack: PostgreSQL 15 on ext4 on a fardisk FUSE image whose store is MinIO
# behind toxiproxy, with a mirrored intent log (two legs) and a cache device, the pool imported
# with --holder (a holder process owns the FUSE mount and restarts the engine). TPC-B clients
# (pgbench -T, per-transaction log) and a recorder client (one numbered row per transaction; an
# id is written to a file only after its COMMIT returned) run for the whole chaos phase while a
# seeded timeline injects:
#   - SIGKILL of the ENGINE (the holder's child, never the holder) E2E54_KILLS times (default 22,
#     at least 20 made: a kill that waits for a serving engine pushed into the load's last 2 s is
#     skipped and counted, as it could pause no transaction) at seeded moments: most of them anywhere in the load (also inside latency
#     spikes and connection resets), one while a log leg is gone (the new engine imports with
#     one leg and `replace` then runs against it), one inside the store outage, and twice the
#     new engine is killed again 0.05-0.5 s after the holder started it (mostly during its import
#     and log replay: the holder's log says whether it had begun to serve).
#     The holder starts a new engine each time; it replays the log, takes the FUSE connection
#     over and gets the requests in flight resent;
#   - latency spikes of 50-200 ms each way for a few seconds (toxiproxy latency toxic);
#   - connection resets (reset_peer or timeout toxics) for a few seconds;
#   - one store outage of E2E54_OUTAGE_S (default 60) s, the proxy disabled, under load: sync
#     writes must keep being acknowledged (from the log) until the kill inside it, `fardisk
#     status` must say SUSPENDED or DEGRADED during it and ONLINE again afterwards with no command;
#   - one log leg deleted under load: status DEGRADED, commits still acknowledged (across the
#     kill), then `fardisk replace` brings it back and the pool is ONLINE.
# A new engine cannot import while the store is unreachable (import reads the newest root and
# publishes a claim root): a kill inside the outage leaves the mount without an engine until the
# store is back, the holder starting engines again with its backoff (0.5 s doubling to 10 s;
# such failed starts do not spend --restart-max, they are bounded by --reimport-wait, 300 s by
# default, far longer than the outage) while requests wait in the kernel; --restart-max is raised
# because the kills come faster than a real crash loop. PostgreSQL has no I/O timeout and waits it out (it sees a pause of up to the rest
# of the outage, never an error), so the kill inside the outage lands in its last 40 % and its
# pause is reported apart from the others. The same holds while a reset toxic is on (every
# connection is reset, so a new engine cannot read the store's head either): a kill waiting for
# the new engine never holds up the end of a spike, a reset or the outage, which run on time.
# Checks of the chaos phase: PostgreSQL never restarts (same postmaster, no PANIC, crash or I/O
# error in its log), pgbench exits 0 with no error in its output, the recorder never fails, the
# holder is the same process throughout, history has one SIGKILL restart per kill.
# Then the holder itself is killed under load (its engine serves on alone), then its engine: with
# no holder left the mount is gone, and the operator's recovery follows (README, Restarts):
# PostgreSQL killed, ext4 unmounted, the loop device detached, the pool imported again (the log
# replays), ext4 mounted (its journal replays), PostgreSQL started (WAL recovery); the TPC-B
# invariant and every acked id are checked. Afterwards PostgreSQL and fardisk shut down cleanly,
# the pool is imported again, e2fsck -fn is clean, and on a restarted PostgreSQL the TPC-B
# invariant holds, pg_amcheck finds nothing and every acknowledged id is in the table. The last
# line gives the figures (the pause per kill is the longest transaction pgbench had in flight
# across it).
#
# Env: E2E54_SEED (default random, printed; the same seed gives the same timeline of faults and
#      kill moments), E2E54_DURATION_S (default 220: pgbench's -T and the length of the timeline;
#      longer runs add spikes and resets), E2E54_KILLS (default 22, at least 20), E2E54_OUTAGE_S
#      (default 60), FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=54_chaos_postgres
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1

SEED="${E2E54_SEED:-$((RANDOM * 32768 + RANDOM))}"
DURATION_S="${E2E54_DURATION_S:-220}"
KILLS="${E2E54_KILLS:-22}"
OUTAGE_S="${E2E54_OUTAGE_S:-60}"
BASE_LATENCY_MS=5       # each way, outside the spikes
CLIENTS=3               # pgbench TPC-B clients (plus the recorder)
PGBENCH_T_MAX=100000    # the holder case's pgbench runs until the crash ends it
IDS_PER_SEGMENT=10000000 # recorder ids: segment S uses S*10^7+1 ..
GONE_TRIES=100          # x 0.1 s: bound on waiting for a killed process to disappear
CLIENT_EXIT_TRIES=300   # x 0.1 s: bound on waiting for clients to notice the end of their server
ENGINE_WAIT_S=180       # bound on waiting for a new engine to answer (an outage kill waits for the store)
SUCCESSOR_TRIES=100     # x 0.05 s: bound on waiting for the holder to start the next engine
STATE_WAIT_S=60         # bound on waiting for a pool state (DEGRADED after a leg loss, ONLINE after replace)
HEAL_WAIT_S=180         # bound on waiting for ONLINE after the outage
CMD_TIMEOUT_S=30        # bound on one `fardisk status`
# The kills come far faster than any real crash loop: the holder's budget is raised for them.
RESTART_MAX=200
POOL=chaos
W="$FARDISK_RUN_DIR" # 0755, removed by common.sh on success, kept on failure
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
DATA="$FS/data"
LEGS=("$W/log0" "$W/log1")
CACHEDEV="$W/cache0"
PG="$SCRIPTS/postgres.sh"
TOXI="$SCRIPTS/toxiproxy.sh"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
RECORDER_PID=""
SEGMENT=0
HOLDER_PID=""
# The pool, loop device, PostgreSQL and acked-client helpers shared with 50.
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

now() { date +%s.%N; }
# secs_since T0: seconds (two decimals) from T0 (a `now` value) to now.
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# ---- the pool's state -----------------------------------------------------------------------

# status_json: the pool's status from its engine, or from the holder's state file while none
# answers (bounded: a hang is a finding, not a stuck test).
status_json() { timeout "$CMD_TIMEOUT_S" "$B" status "$POOL" --json 2>/dev/null; }
status_text() { timeout "$CMD_TIMEOUT_S" "$B" status "$POOL" 2>&1; }

# pool_state: ONLINE, DEGRADED, SUSPENDED, RESTARTING, ... (or NOANSWER when status did not answer).
pool_state() {
    status_json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0]["health"]["state"].upper())' 2>/dev/null \
        || echo NOANSWER
}

# holder_field NAME: a field of the status's engine_holder object.

# leg_states: "PATH=STATE ..." for the log legs.
leg_states() {
    status_json | python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
print(" ".join(l["path"] + "=" + l["state"] for v in (p.get("log") or {}).get("vdevs", []) for l in v["legs"]))' 2>/dev/null
}

# wait_state STATE SECONDS: poll until the pool is in STATE; true when it got there in time. A
# new engine answering meanwhile is noted (its time is a figure).
wait_state() {
    local want="$1" deadline=$((SECONDS + $2))
    while [ "$SECONDS" -lt "$deadline" ]; do
        [ -n "$RESTART_PENDING" ] && note_engine_back
        [ "$(pool_state)" = "$want" ] && return 0
        sleep 0.5
    done
    return 1
}

# ---- PostgreSQL and the clients --------------------------------------------------------------

acked_count() { acked_ids "$W"/acked.*.out | wc -l; }
segment_acked() { acked_ids "$W/acked.$SEGMENT.out" | wc -l; }

# start_load SECONDS: a new segment of load against the current server: pgbench TPC-B for
# SECONDS (with a per-transaction log) and the recorder.
start_load() {
    SEGMENT=$((SEGMENT + 1))
    local first=$((SEGMENT * IDS_PER_SEGMENT + 1))
    # -n: no vacuum and, above all, no TRUNCATE of pgbench_history, so the invariant spans all runs.
    (cd "$W" && exec "$PG_BIN/pgbench" -n -c "$CLIENTS" -j 2 -T "$1" -l --log-prefix="$W/txlog.$SEGMENT" postgres) \
        >"$W/tpcb.$SEGMENT.out" 2>&1 &
    PGBENCH_PID=$!
    CLIENT_PIDS+=("$PGBENCH_PID")
    acked_client_bg "$first" $((first + IDS_PER_SEGMENT - 2)) "$W/acked.$SEGMENT.out"
    RECORDER_PID=$ACKED_PID
}

postgres_never_restarted() {
    [ "$(head -n 1 "$DATA/postmaster.pid")" = "$PM_PID" ] && kill -0 "$PM_PID" 2>/dev/null
}

# ---- the engine under the holder, the timeline (lib/engine_kills.sh) --------------------------

. "$E2E_ROOT/tests/e2e/lib/engine_kills.sh"

# ---- 0. services, binary, pool, PostgreSQL ---------------------------------------------------

t_start=$SECONDS
echo "$E2E_NAME: seed $SEED (E2E54_SEED=$SEED reproduces the timeline), ${DURATION_S} s of load, $KILLS engine kills, outage ${OUTAGE_S} s"
make_schedule >"$W/schedule" || { fail "timeline from the seed"; e2e_finish; }
info "timeline: $(tr '\n' ';' <"$W/schedule")"
use_fardisk_bin
require "minio.sh start" "$SCRIPTS/minio.sh" start
on_exit '"$SCRIPTS/minio.sh" stop'
require "toxiproxy.sh start" "$TOXI" start
on_exit '"$TOXI" stop'
on_exit cleanup_all
require "store ${BASE_LATENCY_MS} ms away each way" "$TOXI" latency "$BASE_LATENCY_MS"
eval "$("$TOXI" env)"
mkdir -p "$FS"

require "create on s3:// with a log mirror and a cache file" \
    "$B" create "$POOL" "s3://$FARDISK_BUCKET/e2e54" log mirror "${LEGS[0]}" "${LEGS[1]}" cache "$CACHEDEV"
require "import --holder --mount" import_pool --holder --restart-max "$RESTART_MAX" --restart-window 60
HOLDER_PID="$(holder_field pid)"
require "status names the holder (pid ${HOLDER_PID:-none})" is_ours "$HOLDER_PID" fardisk
DAEMON_PIDS+=("$HOLDER_PID")
ENGINE="$(daemon_pid)"
require "the engine ($ENGINE) is the holder's child" is_engine "$ENGINE"
require "volume create 4G" "$B" volume create "$POOL/pg" 4G
require "losetup --direct-io=on over the image" attach_loop
require "mkfs.ext4" mkfs.ext4 -q "$LOOP"
require "mount ext4" mount "$LOOP" "$FS"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$DATA"
require "start PostgreSQL" pg_start
require "pgbench -i -s 1" "$PG" pgbench "$DATA" -i -q -s 1 postgres
require "create table acked" sql 'CREATE TABLE acked(id bigint PRIMARY KEY)'
check "the pool is ONLINE before the chaos" test "$(pool_state)" = ONLINE
PG_LOG="$PGHOST/postgres.log"
pg_log_from="$(($(wc -l <"$PG_LOG") + 1))"
log_from="$(($(log_lines) + 1))"
info "setup took $((SECONDS - t_start)) s"

# ---- 1. the chaos ----------------------------------------------------------------------------

spikes=0 resets=0 outages=0 legs_failed=0 outage_acked=0
IMPORT_KILLS=0 LEG_KILLED="" OUTAGE_KILL_ACKED=""
OUTAGE_ON="" OUTAGE_T0=0 OUTAGE_SEEN="" OUTAGE_FIRST_BAD="" OUTAGE_ACKED0=0 OUTAGE_ACKED_HALF="" NEXT_POLL=0
OUTAGE_FIGS0="" OUTAGE_FIGS="" OUTAGE_FIGS_HALF="" OUTAGE_POLL_MAX_S=0 OUTAGE_HALF_EPOCH="" OUTAGE_KILL_EPOCH=""
: >"$W/kill_times"
: >"$W/engine_back"
run0="$(now)"
start_load "$DURATION_S"
info "postmaster $PM_PID, holder $HOLDER_PID, engine $ENGINE, pgbench $PGBENCH_PID, recorder $RECORDER_PID"

# outage_figures: from status JSON on stdin, "STATE LOG_USED LOG_TOTAL LOG_FULL_EVENTS
# TXG_FALLBACKS DIRTY DIRTY_MAX THROTTLE_STALLS LOG_COMMITS GETS_IN_FLIGHT READS_WAITING" (bytes
# and counts: GETs in flight are store attempts under way; reads waiting are the front ends'
# reads of blocks no cache holds, waiting for the store with failmode=wait), or just STATE
# when no engine answered (the holder's state file), or NOANSWER.
outage_figures() {
    python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
st = p["health"]["state"].upper()
log = p.get("log") or {}
if "dirty_bytes" not in p or "space_used_bytes" not in log:
    print(st)
else:
    print(st, log["space_used_bytes"], log["space_total_bytes"], log["log_full_events"], log["txg_fallbacks"],
          p["dirty_bytes"], p["dirty_bytes_max"], p["throttle_stalls"], log["commits"],
          p["store_requests"]["get"]["in_flight"], p.get("reads_waiting_for_store", 0))
' 2>/dev/null || echo NOANSWER
}

# tick: what goes on between actions: a new engine answering is noted; during the outage the
# status is polled every 2 s and the acked count taken at its half.
tick() {
    [ -n "$RESTART_PENDING" ] && note_engine_back
    [ -n "$OUTAGE_ON" ] || return 0
    [ -z "$OUTAGE_ACKED_HALF" ] && [ "$SECONDS" -ge $((OUTAGE_T0 + OUTAGE_S / 2)) ] && OUTAGE_ACKED_HALF="$(segment_acked)"
    [ "$SECONDS" -ge "$NEXT_POLL" ] || return 0
    NEXT_POLL=$((SECONDS + 2))
    local st figs t0=$SECONDS
    figs="$(status_json | outage_figures)"
    st="${figs%% *}"
    [ "$((SECONDS - t0))" -gt "$OUTAGE_POLL_MAX_S" ] && OUTAGE_POLL_MAX_S=$((SECONDS - t0))
    # The engine's figures (the holder's state file, while no engine answers, has none).
    if [ "${figs#* }" != "$figs" ]; then
        [ -z "$OUTAGE_FIGS0" ] && OUTAGE_FIGS0="$figs"
        OUTAGE_FIGS="$figs"
        [ -z "$OUTAGE_FIGS_HALF" ] && [ -n "$OUTAGE_ACKED_HALF" ] && OUTAGE_FIGS_HALF="$figs" OUTAGE_HALF_EPOCH="$(now)"
    fi
    case " $OUTAGE_SEEN " in *" $st "*) ;; *) OUTAGE_SEEN="$OUTAGE_SEEN $st"; info "outage: status says $st after $((SECONDS - OUTAGE_T0)) s";; esac
    if [ -z "$OUTAGE_FIRST_BAD" ] && [ "$st" != ONLINE ]; then
        OUTAGE_FIRST_BAD=$((SECONDS - OUTAGE_T0))
        status_text >"$W/status.outage"
    fi
    [ "$st" = SUSPENDED ] && [ ! -s "$W/status.suspended" ] && status_text >"$W/status.suspended"
}

# wait_until T: tick until T seconds after the load began (bounded by the timeline's length).
wait_until() {
    local i
    for ((i = 0; i < (DURATION_S + 60) * 10; i++)); do
        awk -v t="$1" -v a="$run0" -v b="$(now)" 'BEGIN { exit !(b - a < t) }' || return 0
        tick
        sleep 0.1
    done
}

spike_on() {
    spikes=$((spikes + 1))
    SPIKE_MS="$1" SPIKE_T0=$SECONDS SPIKE_ACKED="$(segment_acked)"
    require "spike $spikes: store $1 ms away each way" "$TOXI" latency "$1"
}
spike_off() {
    require "spike $spikes: back to ${BASE_LATENCY_MS} ms" "$TOXI" latency "$BASE_LATENCY_MS"
    info "spike $spikes: $(($(segment_acked) - SPIKE_ACKED)) acked commits during the $((SECONDS - SPIKE_T0)) s at ${SPIKE_MS} ms, pool $(pool_state)"
}

reset_on() {
    resets=$((resets + 1))
    RESET_KIND="$1" RESET_T0=$SECONDS RESET_ACKED="$(segment_acked)"
    require "reset $resets: $1 toxic (timeout $2 ms) on the store's connections" \
        "$TOXI" toxic add chaos "$1" 1.0 "{\"timeout\":$2}"
}
reset_off() {
    require "reset $resets: toxic removed" "$TOXI" toxic remove chaos
    info "reset $resets: $(($(segment_acked) - RESET_ACKED)) acked commits during the $((SECONDS - RESET_T0)) s of $RESET_KIND, pool $(pool_state)"
}

# The store is gone for OUTAGE_S seconds under load (an engine kill inside it); then it heals
# by itself. It begins once an engine serves: the checks are about an engine that loses its
# store, and one still importing at that moment cannot import until the store is back (CI of
# 77ae70a, seed 181512870: a kill 3.3 s before the outage, the new engine answered 67 s later,
# after it, and the outage's checks found no engine to ask).
outage_on() {
    local t0=$SECONDS
    wait_serving || fail "outage: no engine answered within ${ENGINE_WAIT_S} s before it"
    [ "$SECONDS" -gt "$t0" ] && info "outage: begins $((SECONDS - t0)) s late, once the engine after kill $KILL_NO serves"
    outages=$((outages + 1))
    OUTAGE_ACKED0="$(segment_acked)"
    require "outage: proxy disabled (store unreachable) for ${OUTAGE_S} s" "$TOXI" outage on
    OUTAGE_ON=1 OUTAGE_T0=$SECONDS NEXT_POLL=0
}
# outage_bound FIGS0 FIGS: which bound on acknowledging from the log the engine had reached by
# FIGS (from outage_figures), counting from FIGS0: "log full", "dirty limit", "reads wait for
# the store" (the database needs blocks no cache holds: nothing but the store can give them),
# or nothing.
outage_bound() {
    python3 - "$1" "$2" <<'EOF'
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
if len(a) < 11 or len(b) < 11:
    sys.exit(0)
a, b = [int(x) for x in a[1:]], [int(x) for x in b[1:]]
used, total, full, fallbacks, dirty, dirty_max, stalls, _, _, reads_waiting = b
why = []
if full > a[2] or fallbacks > a[3] or used * 100 >= total * 95:
    why.append("log full (%d of %d MiB used, %d log-full events)" % (used >> 20, total >> 20, full - a[2]))
if stalls > a[6] or dirty * 100 >= dirty_max * 90:
    why.append("dirty limit (%d of %d MiB dirty, %d throttle stalls)" % (dirty >> 20, dirty_max >> 20, stalls - a[6]))
if reads_waiting > 0:
    why.append("reads wait for the store (%d waiting for blocks no cache holds)" % reads_waiting)
print(", ".join(why))
EOF
}
outage_off() {
    local until_kill late heal_s t0
    until_kill="${OUTAGE_KILL_ACKED:-$(segment_acked)}"
    outage_acked=$((until_kill - OUTAGE_ACKED0))
    late=$((until_kill - ${OUTAGE_ACKED_HALF:-$OUTAGE_ACKED0}))
    require "outage: proxy enabled again after $((SECONDS - OUTAGE_T0)) s" "$TOXI" outage off
    OUTAGE_ON=""
    info "outage: states seen:${OUTAGE_SEEN}; $outage_acked commits acknowledged before the engine kill inside it ($late in its second half)"
    [ -f "$W/status.outage" ] && info "outage: status said: $(grep -E '^ *state:' "$W/status.outage")"
    check "outage: status answered every poll within ${CMD_TIMEOUT_S} s" bash -c "! grep -q NOANSWER <<<'$OUTAGE_SEEN'"
    check "outage: status reported SUSPENDED or DEGRADED during it (first after ${OUTAGE_FIRST_BAD:-never} s)" \
        grep -qE 'SUSPENDED|DEGRADED' <<<"$OUTAGE_SEEN"
    check "outage: status said how far the log and dirty bounds were" \
        grep -qE 'acknowledged from the log until it is full \([0-9]+ % of [0-9]+ MiB used.*dirty data reaches its limit \([0-9]+ of [0-9]+ MiB\)' "$W/status.suspended"
    check "outage: commits kept being acknowledged while the store was away ($outage_acked)" test "$outage_acked" -gt 0
    # With a log, sync writes are acknowledged from it until one of two bounds: the log is full
    # (it cannot be released while no txg can be published) or the dirty data reaches
    # dirty_bytes_max; the engine's status says which. The claim is the engine's: it kept
    # acknowledging log commits in the outage's second half (between the poll at its half and
    # the last before the kill), or had reached a bound. A third thing stops a database that no
    # log can help: a read of a block no cache holds waits for the store (failmode=wait; a new
    # engine, started just before the outage, has an empty ARC), and status counts such reads.
    # (CI of 3fdac70: an engine started 2 s before the outage made 35 log commits in its first
    # half and none after, with neither bound near, and pgbench exited non-zero: most likely a
    # client's read spent its 30 s retry budget and got EIO, which reads did before failmode;
    # the CI log was cut where pgbench's error was printed.) The recorder's and
    # pgbench's counts are reported beside it.
    local bound log_late
    bound="$(outage_bound "$OUTAGE_FIGS0" "${OUTAGE_FIGS_HALF:-$OUTAGE_FIGS}")"
    [ -z "$bound" ] && bound="$(outage_bound "$OUTAGE_FIGS0" "$OUTAGE_FIGS")"
    log_late="$(awk -v a="${OUTAGE_FIGS_HALF:-x}" -v b="$OUTAGE_FIGS" 'BEGIN { n = split(a, x, " "); split(b, y, " "); print (n >= 10 ? y[9] - x[9] : 0) }')"
    info "outage: engine figures (state, log used/total, log-full events, txg fallbacks, dirty/max, throttle stalls, log commits, store GETs in flight, reads waiting for the store): start [$OUTAGE_FIGS0], half [${OUTAGE_FIGS_HALF:-none}], last before the kill [$OUTAGE_FIGS]; slowest status ${OUTAGE_POLL_MAX_S} s; bound: ${bound:-none reached by the half or the last poll}"
    info "outage: second half: $log_late log commits by the engine, $late by the recorder (pgbench's count follows at the end)"
    if [ "$log_late" -gt 0 ]; then
        pass "outage: the engine still acknowledged log commits in its second half ($log_late; the recorder $late)"
    else
        check "outage: no log commit in its second half, and the engine named the bound that stopped them, at the half or the last poll (${bound:-none})" test -n "$bound"
    fi
    t0=$SECONDS
    wait_state ONLINE "$HEAL_WAIT_S"
    heal_s=$((SECONDS - t0))
    check "outage: ONLINE again with no command (after ${heal_s} s; a new engine since the kill inside it)" test "$(pool_state)" = ONLINE
    info "outage: status after: $(status_text | grep -E '^ *state:')"
}

# leg_rm N: log leg N is deleted under load (an engine kill follows while it is gone).
leg_rm() {
    LEG="${LEGS[$1]}"
    legs_failed=$((legs_failed + 1))
    rm -f "$LEG"
    check "log leg $LEG deleted: status DEGRADED" wait_state DEGRADED "$STATE_WAIT_S"
    info "failed leg: $(status_text | grep -E '^ *state:'); legs: $(leg_states)"
    status_text >"$W/status.leg"
    LEG_ACKED="$(segment_acked)"
}
# leg_replace N: `fardisk replace` under load, as an operator would run it.
leg_replace() {
    local out rc t0
    wait_serving || fail "replace: no engine answered within ${ENGINE_WAIT_S} s"
    check "commits still acknowledged with one leg ($(($(segment_acked) - LEG_ACKED)); the engine killed meanwhile: ${LEG_KILLED:-no})" \
        test "$(segment_acked)" -gt "$LEG_ACKED"
    info "before replace: $(status_text | grep -E '^ *state:'); legs: $(leg_states)"
    t0=$SECONDS
    out="$(timeout 120 "$B" replace "$POOL" "$LEG" 2>&1)"
    rc=$?
    check "fardisk replace $POOL $LEG under load exits 0 after $((SECONDS - t0)) s: $out" test "$rc" -eq 0
    check "after replace: ONLINE" wait_state ONLINE "$STATE_WAIT_S"
    check "after replace: both legs ONLINE ($(leg_states))" \
        test "$(leg_states)" = "${LEGS[0]}=ONLINE ${LEGS[1]}=ONLINE"
}

# run_action ACTION ARGS...
run_action() {
    case "$1" in
        kill) kill_engine "$2" "${3:-}" ;;
        spike_on) spike_on "$2" ;;
        spike_off) spike_off ;;
        reset_on) reset_on "$2" "$3" ;;
        reset_off) reset_off ;;
        outage_on) outage_on ;;
        outage_off) outage_off ;;
        leg_rm) leg_rm "$2" ;;
        leg_replace) leg_replace ;;
    esac
}

mapfile -t ACTIONS <"$W/schedule"
ACT_DONE=()
NEXT_ACT=0
# run_due_ends: while a kill or a replace waits for a new engine, the ends of faults that are due
# (a spike, a reset, the outage) run on time: the new engine may need them over to import. Only
# ends whose beginning has run: when the timeline is late, a fault's start and end may both be
# due, and ending it first left the fault on for good (seed 948701727: reset_off ran ahead of its
# reset_on, and no engine could reach the store again).
run_due_ends() {
    local j at what
    for ((j = NEXT_ACT; j < ${#ACTIONS[@]}; j++)); do
        read -r at what _ <<<"${ACTIONS[$j]}"
        awk -v t="$at" -v a="$run0" -v b="$(now)" 'BEGIN { exit !(b - a >= t) }' || return 0
        case "$what" in
            spike_on | reset_on | outage_on) return 0 ;;
            spike_off | reset_off | outage_off)
                # outage_on waits for a serving engine first, which may call here.
                [ "$what" = outage_off ] && [ -z "$OUTAGE_ON" ] && return 0
                if [ -z "${ACT_DONE[$j]:-}" ]; then
                    ACT_DONE[$j]=1
                    info "($what runs on time while an engine restart is awaited)"
                    run_action "$what"
                fi
                ;;
        esac
    done
}

while [ "$NEXT_ACT" -lt "${#ACTIONS[@]}" ]; do
    read -r at what a1 a2 <<<"${ACTIONS[$NEXT_ACT]}"
    done_early="${ACT_DONE[$NEXT_ACT]:-}"
    NEXT_ACT=$((NEXT_ACT + 1))
    [ -n "$done_early" ] && continue
    wait_until "$at"
    run_action "$what" "$a1" "$a2"
done
check "a new engine answers after the last kill" wait_serving
timeline_s="$(secs_since "$run0")"
info "the timeline took ${timeline_s} s of the ${DURATION_S} s load"

# The load ends by itself (pgbench -T); then the recorder is stopped.
wait_gone $(((DURATION_S + 300) * 10)) "$PGBENCH_PID"
wait "$PGBENCH_PID"
pgbench_rc=$?
load_s="$(secs_since "$run0")"
# When each client's last transaction ended (s after the load began), from pgbench's log: a
# client that saw an error is aborted, and this says at which point of the timeline.
pgbench_last="$(cat "$W"/txlog."$SEGMENT".* 2>/dev/null | awk -v a="$run0" \
    '{ t = $5 + $6 / 1e6 - a; if (!($1 in m) || t > m[$1]) m[$1] = t } END { for (c in m) printf "client %s %.1f s; ", c, m[c] }')"
check "pgbench exited 0 after ${load_s} s (rc $pgbench_rc; last transaction per client: ${pgbench_last:-none})" test "$pgbench_rc" -eq 0
pgbench_errors="$(grep -iE 'error|fatal|could not|abort' "$W/tpcb.$SEGMENT.out" | head -n 5)"
check "pgbench's output has no ERROR, FATAL, 'could not' or abort (first: $(head -n 1 <<<"$pgbench_errors"))" test -z "$pgbench_errors"
[ -n "$pgbench_errors" ] && printf '%s\n' "$pgbench_errors"
info "pgbench: $(grep -E '^(number of transactions actually processed|latency average|tps)' "$W/tpcb.$SEGMENT.out" | tr '\n' ' ')"
check "the recorder was still committing at the end (segment $SEGMENT: $(segment_acked))" kill -0 "$RECORDER_PID"
kill -TERM "$RECORDER_PID" 2>/dev/null
wait_clients
check "the recorder saw no error" test ! -s "$W/acked.err"
[ -s "$W/acked.err" ] && head -n 5 "$W/acked.err"
check "PostgreSQL never restarted (postmaster $PM_PID)" postgres_never_restarted
pg_errors="$(tail -n +"$pg_log_from" "$PG_LOG" | grep -E 'PANIC|terminated by signal|was interrupted|could not (write|read|fsync|open)|I/O error' | head -n 5)"
check "PostgreSQL's log has no PANIC, crash or I/O error" test -z "$pg_errors"
[ -n "$pg_errors" ] && printf '%s\n' "$pg_errors"
check "the holder is the same process throughout (pid $HOLDER_PID)" is_ours "$HOLDER_PID" fardisk
check "status names the same holder ($(holder_field pid))" test "$(holder_field pid)" = "$HOLDER_PID"
check "$kills engine kills, at least 20, and the $KILLS planned all made or skipped at the load's end ($SKIPPED_KILLS skipped)" \
    test "$kills" -ge 20 -a $((kills + SKIPPED_KILLS)) -eq "$KILLS"
# What the holder logged of each engine's end: every kill, and nothing else but engines that
# could not import while the store was away (the history names only the exit just before each
# engine that served, so it is not the place to count them).
holder_exits="$(daemon_log_from "$log_from" | grep -E 'holder: the engine went')"
sigkill_exits="$(grep -c 'reason=killed by signal 9 (SIGKILL)' <<<"$holder_exits")"
killed_unserved="$(grep 'went before it served' <<<"$holder_exits" | grep -c 'reason=killed by signal 9')"
other_exits="$(grep -v 'reason=killed by signal 9 (SIGKILL)' <<<"$holder_exits" | grep -c .)"
other_served="$(grep -v 'reason=killed by signal 9 (SIGKILL)' <<<"$holder_exits" | grep -v 'went before it served' | grep -c .)"
check "the holder logged one SIGKILL exit per kill ($sigkill_exits of $kills)" test "$sigkill_exits" -eq "$kills"
check "no serving engine ended any other way ($other_served)" test "$other_served" -eq 0
[ "$other_served" -eq 0 ] || grep -v 'reason=killed by signal 9 (SIGKILL)' <<<"$holder_exits" | grep -v 'went before it served' | head -n 5
restarts="$(holder_field restarts)"
check "status counts every engine exit as a restart ($restarts = $sigkill_exits + $other_exits)" \
    test "$restarts" = $((sigkill_exits + other_exits))
info "holder: $(status_text | grep '^holder:'); $other_exits engines could not import (store away) and went before serving: $(grep -v 'reason=killed by signal 9 (SIGKILL)' <<<"$holder_exits" | sed -n 's/.*\(reason=[^=]*\) delay_ms.*/\1/p' | sort | uniq -c | tr -s ' \n' ' ')"
check "a spike, a reset, the outage and a failed leg" \
    test "$spikes" -ge 1 -a "$resets" -ge 1 -a "$outages" -eq 1 -a "$legs_failed" -eq 1
check "TPC-B invariant after the chaos" "$PG" check "$DATA" postgres
# As the live PostgreSQL sees it: a block lost underneath it shows only once it restarts (the
# holder case below and the final import), when its WAL recovery stops at the hole.
check "every acknowledged id so far is there, as the live PostgreSQL sees it ($(acked_count))" all_acked_present "$W"/acked.*.out
replayed_total="$(daemon_log_from "$log_from" | sed -n 's/.*intent log replayed records=\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')"
# The pause a client saw per kill: the longest pgbench transaction in flight across it (for a kill
# whose successor was killed too, across the pair).
python3 - "$W/kill_times" "$W"/txlog."$SEGMENT".* >"$W/pauses" <<'EOF'
import sys
kills = {}
for line in open(sys.argv[1]):
    no, kind, t = line.split()
    kills.setdefault(int(no), (kind, float(t)))
tx = []
for path in sys.argv[2:]:
    for line in open(path):
        p = line.split()
        try:
            lat, end = int(p[2]) / 1e6, int(p[4]) + int(p[5]) / 1e6
        except (IndexError, ValueError):
            continue
        tx.append((end - lat, end, lat))
for no, (kind, t) in sorted(kills.items()):
    spanning = [lat for s, e, lat in tx if s <= t <= e]
    print(no, kind, "%.2f" % max(spanning) if spanning else "none")
EOF
# stats KIND: "p50 X s, max Y s over N" of the pauses of the kills of KIND ("other": not outage).
stats() {
    python3 - "$1" "$W/pauses" <<'EOF'
import statistics, sys
want, v = sys.argv[1], []
for line in open(sys.argv[2]):
    no, kind, p = line.split()
    if p != "none" and ((kind == "outage") == (want == "outage")):
        v.append(float(p))
v.sort()
print(f"p50 {statistics.median(v):.2f} s, max {v[-1]:.2f} s over {len(v)}" if v else "none")
EOF
}
no_pause="$(grep -c ' none$' "$W/pauses")"
check "pgbench had a transaction in flight across every kill ($no_pause without)" test "$no_pause" -eq 0
pause_stats="$(stats other)"
outage_pause="$(stats outage)"
back_stats="$(python3 -c '
import statistics, sys
v = sorted(float(l.split()[1]) for l in open(sys.argv[1]))
print(f"p50 {statistics.median(v):.2f} s, max {v[-1]:.2f} s" if v else "none")' "$W/engine_back")"
slowest="$(cat "$W"/txlog."$SEGMENT".* 2>/dev/null | awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { printf "%.2f s", m / 1e6 }')"
info "client pause per kill (longest transaction across it): $pause_stats; the kill inside the outage: $outage_pause; new engine answering after a kill: $back_stats; slowest transaction $slowest"
info "chaos phase took ${load_s} s"
if [ -n "$OUTAGE_HALF_EPOCH" ] && [ -n "$OUTAGE_KILL_EPOCH" ]; then
    # pgbench's log line per transaction: client, number, latency (us), script, end (s, us).
    info "outage: second half: $(cat "$W"/txlog."$SEGMENT".* 2>/dev/null | awk -v a="$OUTAGE_HALF_EPOCH" -v b="$OUTAGE_KILL_EPOCH" \
        '{ t = $5 + $6 / 1e6 } t >= a && t < b { n++ } END { print n + 0 }') pgbench transactions ended between the poll at its half and the kill"
fi

# ---- 2. the holder killed too: operator recovery ----------------------------------------------

t=$SECONDS
start_load "$PGBENCH_T_MAX"
sleep 3
holder_engine="$ENGINE"
acked_before="$(segment_acked)"
require "SIGKILL of the holder $HOLDER_PID" kill -KILL "$HOLDER_PID"
check "the holder is gone" wait_gone "$GONE_TRIES" "$HOLDER_PID"
sleep 2
check "its engine serves on alone ($(($(segment_acked) - acked_before)) commits acknowledged in 2 s)" \
    bash -c "[ '$(daemon_pid)' = '$holder_engine' ] && [ $(segment_acked) -gt $acked_before ]"
require "then SIGKILL of its engine $holder_engine" is_ours "$holder_engine" fardisk
t_kill="$(now)"
kill -KILL "$holder_engine"
pg_died=no
for _ in $(seq 30); do is_ours "$PM_PID" postgres || { pg_died=yes; break; }; sleep 0.1; done
kill_postgres
wait_clients
RECORDER_PID=""
mv "$W/acked.err" "$W/acked.holder-case.err" 2>/dev/null
teardown_crashed
from="$(($(log_lines) + 1))"
t0="$(now)"
require "holder case: import --holder after both SIGKILLs (no --force)" import_pool --holder --restart-max "$RESTART_MAX" --restart-window 60
import_s="$(secs_since "$t0")"
HOLDER_PID="$(holder_field pid)"
DAEMON_PIDS+=("$HOLDER_PID")
holder_replayed="$(daemon_log_from "$from" | sed -n 's/.*intent log replayed records=\([0-9]*\).*/\1/p' | head -n 1)"
t0="$(now)"
require "holder case: losetup" attach_loop
require "holder case: mount ext4 (journal replay)" mount "$LOOP" "$FS"
require "holder case: PostgreSQL starts (WAL recovery)" pg_start
pg_s="$(secs_since "$t0")"
down_s="$(secs_since "$t_kill")"
check "holder case: TPC-B invariant after recovery" "$PG" check "$DATA" postgres
check "holder case: every acknowledged id so far is there ($(acked_count))" all_acked_present "$W"/acked.*.out
holder_report="postgres had exited by itself: $pg_died; import ${import_s} s (${holder_replayed:-0} log records replayed), mount + PostgreSQL recovery ${pg_s} s, up again ${down_s} s after the engine's kill"
info "holder case: $holder_report; took $((SECONDS - t)) s"

# ---- 3. clean shutdown, fresh import, verification -------------------------------------------

t=$SECONDS
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
require "export" timeout 300 "$B" export "$POOL"
check "the holder has exited with the export" wait_gone "$GONE_TRIES" "$HOLDER_PID"
require "import again" import_pool
require "losetup" attach_loop
check "e2fsck -fn clean" fsck_clean
require "mount ext4" mount "$LOOP" "$FS"
require "PostgreSQL starts" pg_start
check "TPC-B invariant" "$PG" check "$DATA" postgres
amcheck_out="$("$PG_BIN/pg_amcheck" --all --install-missing --heapallindexed 2>&1)"
amcheck_rc=$?
[ -n "$amcheck_out" ] && printf '%s\n' "$amcheck_out" | head -n 20
check "pg_amcheck --all --heapallindexed is clean" test "$amcheck_rc" -eq 0 -a -z "$amcheck_out"
acked="$(acked_count)"
lost="$(missing_acked "$W"/acked.*.out)"
check "every acknowledged id is in the table ($acked acked, ${lost} missing)" test "$lost" = 0
rows="$(history_rows)"
processed="$(tx_processed "$W"/tpcb.*.out)"
check "TPC-B history rows $rows >= transactions pgbench saw committed $processed" test "$rows" -ge "$processed"
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
check "export" timeout 300 "$B" export "$POOL"
check "the FUSE mount is gone after export" bash -c "! grep -q ' $MNT ' /proc/mounts"
info "verification took $((SECONDS - t)) s; whole test $((SECONDS - t_start)) s"

echo "$E2E_NAME: pause per kill (longest pgbench transaction across it): $(tr '\n' ';' <"$W/pauses")"
echo "E2E54 figures: seed $SEED, $kills engine kills under the holder ($SKIPPED_KILLS skipped at the load's end; $IMPORT_KILLS of a new engine 0.05-0.5 s after it started, $killed_unserved of them before it served; 1 in the outage, 1 with a log leg gone; $replayed_total log records replayed), PostgreSQL never restarted; client pause per kill $pause_stats, the kill inside the outage $outage_pause; new engine answering $back_stats; slowest transaction $slowest; $spikes latency spikes, $resets resets, $outages outage of ${OUTAGE_S} s (acked commits during it before the kill: $outage_acked), $legs_failed failed log leg; holder + engine killed: operator recovery, up again after ${down_s} s (${holder_replayed:-0} records replayed); $rows TPC-B transactions ($processed acknowledged to pgbench), $acked acked commits verified, $lost lost; $((SECONDS - t_start)) s"
e2e_finish

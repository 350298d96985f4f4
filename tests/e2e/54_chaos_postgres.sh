#!/usr/bin/env bash
# Chaos on the real stack: PostgreSQL 15 on ext4 on a fardisk FUSE image whose store is MinIO
# behind toxiproxy, with a mirrored intent log (two legs) and a cache device. TPC-B clients and a
# recorder client (one numbered row per transaction; an id is written to a file only after its
# COMMIT returned) run for the whole test while a seeded schedule injects, one at a time:
#   - SIGKILL of the fardisk daemon (at least 3). Each time the operator's recovery follows:
#     PostgreSQL is killed (-9, postmaster and children), ext4 unmounted, the loop device
#     detached, the pool imported again (the log replays), ext4 mounted (its journal replays),
#     PostgreSQL started (WAL recovery); the TPC-B invariant and every acked id are checked, and
#     the load resumes;
#   - latency spikes of 50-200 ms each way for a few seconds (toxiproxy latency toxic);
#   - connection resets (reset_peer or timeout toxics) for a few seconds;
#   - one store outage of E2E54_OUTAGE_S (default 60) s, the proxy disabled, under load: sync
#     writes must keep being acknowledged (from the log), `fardisk status` must say SUSPENDED or
#     DEGRADED during it and ONLINE again afterwards with no restart and no command;
#   - one log leg deleted under load: status DEGRADED, commits still acknowledged, then
#     `fardisk replace` brings it back and the pool is ONLINE.
# Afterwards PostgreSQL and fardisk shut down cleanly, the pool is imported again, e2fsck -fn is
# clean, and on a restarted PostgreSQL the TPC-B invariant holds, pg_amcheck finds nothing and
# every acknowledged id is in the table. The last line gives the figures.
#
# Env: E2E54_SEED (default random, printed; the same seed gives the same schedule of faults and
#      kill moments), E2E54_DURATION_S (default 190: planned seconds of load, restarts not
#      counted; longer runs add more kills, spikes and resets), E2E54_OUTAGE_S (default 60),
#      FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=54_chaos_postgres
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1

SEED="${E2E54_SEED:-$((RANDOM * 32768 + RANDOM))}"
DURATION_S="${E2E54_DURATION_S:-190}"
OUTAGE_S="${E2E54_OUTAGE_S:-60}"
BASE_LATENCY_MS=5       # each way, outside the spikes
CLIENTS=3               # pgbench TPC-B clients (plus the recorder)
PGBENCH_T_MAX=100000    # pgbench runs until a crash or the end of the run ends it
IDS_PER_SEGMENT=10000000 # recorder ids: segment S uses S*10^7+1 ..
GONE_TRIES=100          # x 0.1 s: bound on waiting for a killed process to disappear
CLIENT_EXIT_TRIES=300   # x 0.1 s: bound on waiting for clients to notice the end of their server
STATE_WAIT_S=60         # bound on waiting for a pool state (DEGRADED after a leg loss, ONLINE after replace)
HEAL_WAIT_S=180         # bound on waiting for ONLINE after the outage
CMD_TIMEOUT_S=30        # bound on one `fardisk status`
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
# The pool, loop device, PostgreSQL and acked-client helpers shared with 50.
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

now() { date +%s.%N; }
# secs_since T0: seconds (one decimal) from T0 (a `now` value) to now.
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- the pool's state -----------------------------------------------------------------------

# status_json: the pool's status from its daemon (bounded: a hang is a finding, not a stuck test).
status_json() { timeout "$CMD_TIMEOUT_S" "$B" status "$POOL" --json 2>/dev/null; }
status_text() { timeout "$CMD_TIMEOUT_S" "$B" status "$POOL" 2>&1; }

# pool_state: ONLINE, DEGRADED, SUSPENDED, ... (or NOANSWER when status did not answer).
pool_state() {
    status_json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0]["health"]["state"].upper())' 2>/dev/null \
        || echo NOANSWER
}

# leg_states: "PATH=STATE ..." for the log legs.
leg_states() {
    status_json | python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
print(" ".join(l["path"] + "=" + l["state"] for v in (p.get("log") or {}).get("vdevs", []) for l in v["legs"]))' 2>/dev/null
}

# wait_state STATE SECONDS: poll until the pool is in STATE; true when it got there in time.
wait_state() {
    local want="$1" deadline=$((SECONDS + $2))
    while [ "$SECONDS" -lt "$deadline" ]; do
        [ "$(pool_state)" = "$want" ] && return 0
        sleep 0.5
    done
    return 1
}

# ---- PostgreSQL and the clients --------------------------------------------------------------

acked_count() { acked_ids "$W"/acked.*.out | wc -l; }
segment_acked() { acked_ids "$W/acked.$SEGMENT.out" | wc -l; }

# start_load: a new segment of load: pgbench TPC-B and the recorder, against the current server.
start_load() {
    SEGMENT=$((SEGMENT + 1))
    local first=$((SEGMENT * IDS_PER_SEGMENT + 1))
    # -n: no vacuum and, above all, no TRUNCATE of pgbench_history, so the invariant spans all runs.
    "$PG_BIN/pgbench" -n -c "$CLIENTS" -j 2 -T "$PGBENCH_T_MAX" postgres >"$W/tpcb.$SEGMENT.out" 2>&1 &
    CLIENT_PIDS+=("$!")
    acked_client_bg "$first" $((first + IDS_PER_SEGMENT - 2)) "$W/acked.$SEGMENT.out"
    RECORDER_PID=$ACKED_PID
}

# stop_load: end the last segment: pgbench's connections are terminated (it then prints its
# summary, as after a crash), the recorder is stopped.
stop_load() {
    sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pgbench'" >/dev/null
    [ -n "$RECORDER_PID" ] && is_ours "$RECORDER_PID" psql && kill -TERM "$RECORDER_PID"
    wait_clients
    RECORDER_PID=""
}

# ---- the schedule ----------------------------------------------------------------------------

# One line per step, all drawn from the seed: "gap S" (load only), "kill", "spike MS S",
# "reset reset_peer|timeout MS S", "outage S", "leg N". At least 3 kills, 2 spikes, 2 resets,
# one outage and one failed leg; longer durations add kills, spikes and resets.
make_schedule() {
    python3 - "$SEED" "$DURATION_S" "$OUTAGE_S" <<'EOF'
import random, sys
seed, duration, outage = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
GAP_MIN = 4.0
def spike(): return ("spike", r.randint(50, 200), r.randint(3, 8))
def reset():
    kind = r.choice(["reset_peer", "timeout"])
    ms = r.randint(0, 1000) if kind == "reset_peer" else r.randint(500, 3000)
    return ("reset", kind, ms, r.randint(2, 6))
def planned(e):  # seconds of load the step takes (a kill's restart is not counted)
    if e[0] in ("spike", "reset"):
        return e[-1]
    if e[0] == "outage":
        return e[1] + 10
    return 12 if e[0] == "leg" else 0
events = [("kill",)] * 3 + [spike(), spike(), reset(), reset(), ("outage", outage), ("leg", r.randint(0, 1))]
# Longer runs: one more kill, spike or reset per 25 s of extra load.
while sum(planned(e) for e in events) + 25 * (len(events) + 1) <= duration:
    events.append(r.choice([("kill",), spike(), reset()]))
r.shuffle(events)
spare = max(0.0, duration - sum(planned(e) for e in events) - GAP_MIN * (len(events) + 1))
weights = [r.random() + 0.2 for _ in range(len(events) + 1)]
gaps = [GAP_MIN + spare * w / sum(weights) for w in weights]
for g, e in zip(gaps, events + [None]):
    print("gap %.1f" % g)
    if e:
        print(" ".join(str(x) for x in e))
EOF
}

# ---- 0. services, binary, pool, PostgreSQL ---------------------------------------------------

t_start=$SECONDS
echo "$E2E_NAME: seed $SEED (E2E54_SEED=$SEED reproduces the schedule), load ${DURATION_S} s planned, outage ${OUTAGE_S} s"
make_schedule >"$W/schedule" || { fail "schedule from the seed"; e2e_finish; }
info "schedule: $(tr '\n' ';' <"$W/schedule")"
if [ -n "${FARDISK_BIN:-}" ]; then
    B="$FARDISK_BIN"
else
    require "cargo build -p fardisk" cargo build -q -p fardisk
    B="$E2E_ROOT/target/debug/fardisk"
fi
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
require "import --mount" import_pool
require "volume create 4G" "$B" volume create "$POOL/pg" 4G
require "losetup --direct-io=on over the image" attach_loop
require "mkfs.ext4" mkfs.ext4 -q "$LOOP"
require "mount ext4" mount "$LOOP" "$FS"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$DATA"
require "start PostgreSQL" pg_start
require "pgbench -i -s 1" "$PG" pgbench "$DATA" -i -q -s 1 postgres
require "create table acked" sql 'CREATE TABLE acked(id bigint PRIMARY KEY)'
check "the pool is ONLINE before the chaos" test "$(pool_state)" = ONLINE
info "setup took $((SECONDS - t_start)) s"

# ---- 1. the chaos ----------------------------------------------------------------------------

kills=0 spikes=0 resets=0 outages=0 legs_failed=0 outage_acked=0 replayed_total=0
kill_report=()
run0="$(now)"
start_load

# ev_kill: SIGKILL the daemon under load, then recover as an operator would.
ev_kill() {
    local t_kill at seg_acked from import_s pg_s down_s replayed pg_died=no
    kills=$((kills + 1))
    at="$(secs_since "$run0")"
    seg_acked="$(segment_acked)"
    t_kill="$(now)"
    require "kill $kills: SIGKILL the fardisk daemon ($at s into the load, $seg_acked acked commits in this segment)" \
        kill_daemon
    # PostgreSQL meets the I/O errors of the dead device (its WAL fsync PANICs) before it is killed.
    for _ in $(seq 30); do is_ours "$PM_PID" postgres || { pg_died=yes; break; }; sleep 0.1; done
    kill_postgres
    wait_clients
    RECORDER_PID=""
    teardown_crashed
    from="$(($(log_lines) + 1))"
    t0="$(now)"
    require "kill $kills: import after SIGKILL (no --force)" import_pool
    import_s="$(secs_since "$t0")"
    replayed="$(daemon_log_from "$from" | sed -n 's/.*intent log replayed records=\([0-9]*\).*/\1/p' | head -n 1)"
    replayed_total=$((replayed_total + ${replayed:-0}))
    t0="$(now)"
    require "kill $kills: losetup" attach_loop
    require "kill $kills: mount ext4 (journal replay)" mount "$LOOP" "$FS"
    require "kill $kills: PostgreSQL starts (WAL recovery)" pg_start
    pg_s="$(secs_since "$t0")"
    down_s="$(secs_since "$t_kill")"
    check "kill $kills: TPC-B invariant after recovery" "$PG" check "$DATA" postgres
    check "kill $kills: every acknowledged id so far is there ($(acked_count))" all_acked_present "$W"/acked.*.out
    start_load
    kill_report+=("kill $kills at ${at} s into the load: postgres had exited by itself: $pg_died; import ${import_s} s (${replayed:-0} log records replayed), mount + PostgreSQL recovery ${pg_s} s, load resumed ${down_s} s after the kill")
    info "${kill_report[-1]}"
}

ev_spike() {
    local ms="$1" s="$2" before
    spikes=$((spikes + 1))
    before="$(segment_acked)"
    require "spike $spikes: store ${ms} ms away each way for ${s} s" "$TOXI" latency "$ms"
    sleep "$s"
    require "spike $spikes: back to ${BASE_LATENCY_MS} ms" "$TOXI" latency "$BASE_LATENCY_MS"
    info "spike $spikes: $(($(segment_acked) - before)) acked commits during the ${s} s at ${ms} ms, pool $(pool_state)"
}

ev_reset() {
    local kind="$1" ms="$2" s="$3" before attrs
    resets=$((resets + 1))
    before="$(segment_acked)"
    attrs="{\"timeout\":$ms}"
    require "reset $resets: $kind toxic (timeout $ms ms) on the store's connections for ${s} s" \
        "$TOXI" toxic add chaos "$kind" 1.0 "$attrs"
    sleep "$s"
    require "reset $resets: toxic removed" "$TOXI" toxic remove chaos
    info "reset $resets: $(($(segment_acked) - before)) acked commits during the ${s} s of $kind, pool $(pool_state)"
}

# ev_outage S: the store is gone for S seconds under load; then it heals by itself.
ev_outage() {
    local s="$1" t0 acked0 acked_half="" st seen="" first_bad="" heal_s end half
    outages=$((outages + 1))
    acked0="$(segment_acked)"
    require "outage: proxy disabled (store unreachable) for ${s} s" "$TOXI" outage on
    t0=$SECONDS
    end=$((t0 + s))
    half=$((t0 + s / 2))
    while [ "$SECONDS" -lt "$end" ]; do
        st="$(pool_state)"
        case " $seen " in *" $st "*) ;; *) seen="$seen $st"; info "outage: status says $st after $((SECONDS - t0)) s";; esac
        if [ -z "$first_bad" ] && [ "$st" != ONLINE ]; then
            first_bad=$((SECONDS - t0))
            status_text >"$W/status.outage"
        fi
        [ -z "$acked_half" ] && [ "$SECONDS" -ge "$half" ] && acked_half="$(segment_acked)"
        sleep 2
    done
    outage_acked=$(($(segment_acked) - acked0))
    local late=$(($(segment_acked) - ${acked_half:-$acked0}))
    require "outage: proxy enabled again" "$TOXI" outage off
    info "outage: states seen:${seen}; $outage_acked commits acknowledged during it ($late in its second half)"
    [ -f "$W/status.outage" ] && info "outage: status said: $(grep -E '^ *state:' "$W/status.outage")"
    check "outage: status answered every poll within ${CMD_TIMEOUT_S} s" bash -c "! grep -q NOANSWER <<<'$seen'"
    check "outage: status reported SUSPENDED or DEGRADED during it (first after ${first_bad:-never} s)" \
        grep -qE 'SUSPENDED|DEGRADED' <<<"$seen"
    check "outage: commits kept being acknowledged while the store was away ($outage_acked)" test "$outage_acked" -gt 0
    check "outage: and still in its second half ($late)" test "$late" -gt 0
    t0=$SECONDS
    wait_state ONLINE "$HEAL_WAIT_S"
    heal_s=$((SECONDS - t0))
    check "outage: ONLINE again by itself, no restart or command (after ${heal_s} s)" test "$(pool_state)" = ONLINE
    info "outage: status after: $(status_text | grep -E '^ *state:')"
}

# ev_leg N: log leg N is deleted under load, then replaced.
ev_leg() {
    local leg="${LEGS[$1]}" before after
    legs_failed=$((legs_failed + 1))
    rm -f "$leg"
    check "log leg $leg deleted: status DEGRADED" wait_state DEGRADED "$STATE_WAIT_S"
    info "failed leg: $(status_text | grep -E '^ *state:'); legs: $(leg_states)"
    status_text >"$W/status.leg"
    before="$(segment_acked)"
    sleep 5
    after="$(segment_acked)"
    check "commits still acknowledged with one leg ($((after - before)) in 5 s)" test "$after" -gt "$before"
    local out rc t0=$SECONDS
    out="$(timeout 120 "$B" replace "$POOL" "$leg" 2>&1)"
    rc=$?
    # Under load, as an operator would run it: the writers keep going.
    check "fardisk replace $POOL $leg under load exits 0 after $((SECONDS - t0)) s: $out" test "$rc" -eq 0
    check "after replace: ONLINE" wait_state ONLINE "$STATE_WAIT_S"
    check "after replace: both legs ONLINE ($(leg_states))" \
        test "$(leg_states)" = "${LEGS[0]}=ONLINE ${LEGS[1]}=ONLINE"
}

while read -r what a1 a2 a3; do
    case "$what" in
        gap) sleep "$a1" ;;
        kill) ev_kill ;;
        spike) ev_spike "$a1" "$a2" ;;
        reset) ev_reset "$a1" "$a2" "$a3" ;;
        outage) ev_outage "$a1" ;;
        leg) ev_leg "$a1" ;;
    esac
done <"$W/schedule"
load_s="$(secs_since "$run0")"
check "the recorder was still committing at the end (segment $SEGMENT: $(segment_acked))" test "$(segment_acked)" -gt 0
stop_load
info "chaos phase took ${load_s} s (planned load ${DURATION_S} s plus restarts)"

# ---- 2. clean shutdown, fresh import, verification -------------------------------------------

t=$SECONDS
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
require "export" timeout 300 "$B" export "$POOL"
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
check "at least 3 kills ($kills), a spike, a reset, the outage and a failed leg" \
    test "$kills" -ge 3 -a "$spikes" -ge 1 -a "$resets" -ge 1 -a "$outages" -eq 1 -a "$legs_failed" -eq 1
require "stop PostgreSQL" pg_stop
require "umount ext4" umount "$FS"
detach_loop
check "export" timeout 300 "$B" export "$POOL"
check "the FUSE mount is gone after export" bash -c "! grep -q ' $MNT ' /proc/mounts"
info "verification took $((SECONDS - t)) s; whole test $((SECONDS - t_start)) s"

for line in "${kill_report[@]}"; do echo "$E2E_NAME: $line"; done
echo "E2E54 figures: seed $SEED, $kills fardisk kills ($replayed_total log records replayed), $spikes latency spikes, $resets resets, $outages outage of ${OUTAGE_S} s (acked commits during it: $outage_acked), $legs_failed failed log leg, $rows TPC-B transactions ($processed acknowledged to pgbench), $acked acked commits verified, $lost lost; $((SECONDS - t_start)) s"
e2e_finish

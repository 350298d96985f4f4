#!/usr/bin/env bash
# The intent log against the real process: a sync-write workload over NBD (tests/e2e/lib/
# syncwriter.py) records every write a FLUSH acknowledged; the daemon is SIGKILLed at seeded
# random moments and imported again, and every acknowledged write must be there while nothing
# never written appears. Rounds: plain kills; a kill after one mirror leg was deleted (import
# DEGRADED, nothing lost, then `fardisk replace` resilvers it); finally both legs gone: import is
# refused with the recovery point, --missing-log imports it and the volume is exactly the write
# history cut at one point.
#
# Env: E2E45_ROUNDS (plain kill rounds, default 4), E2E45_SEED (default: random, printed),
#      FARDISK_E2E_STORE=minio|versity|azurite: the pool on that server (tests/e2e/lib/stores.sh)
#      instead of a directory 10 ms away.
E2E_NAME=45_sigkill_loop
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
SW="$E2E_ROOT/tests/e2e/lib/syncwriter.py"
W="$(mktemp -d /tmp/fardisk-e2e45.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run"
SOCK="$W/nbd.sock"
ROUNDS="${E2E45_ROUNDS:-4}"
SEED="${E2E45_SEED:-$((RANDOM * 32768 + RANDOM))}"
RANDOM="$SEED" # every kill moment below derives from it
echo "$E2E_NAME: seed $SEED (E2E45_SEED=$SEED reproduces the kill moments), $ROUNDS plain rounds"
OPS_MAX=20000        # a writer stops by itself after this many writes
KILL_MS_MIN=700      # a kill comes 0.7 to 3.2 s into a round
KILL_MS_SPAN=2500
WRITER_PID=""
kill_daemon() { fardisk_kill tank; }
stop_writer() {
    [ -n "$WRITER_PID" ] || return 0
    for _ in $(seq 100); do kill -0 "$WRITER_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$WRITER_PID" 2>/dev/null
    wait "$WRITER_PID" 2>/dev/null
    WRITER_PID=""
}
on_exit 'stop_writer; "$B" export tank >/dev/null 2>&1; kill_daemon; if [ "$e2e_failed" -eq 0 ]; then rm -rf "$W"; else echo "$E2E_NAME: kept $W"; fi'
replayed() { grep -o "intent log replayed records=[0-9]*" "$FARDISK_HOME/log/tank.log" | tail -n 1 | grep -o "[0-9]*$"; }
total_acked() { wc -l <"$W/acked" | tr -d ' '; }

# One round: a writer runs, the daemon is killed at a seeded moment, the writer sees the socket
# close. $1 = round number (seq base), $2 = command to run mid-round before the kill (or "").
kill_round() {
    local round="$1" midway="$2" ms
    ms=$((KILL_MS_MIN + RANDOM % KILL_MS_SPAN))
    /usr/bin/python3 "$SW" write "$SOCK" v "$((SEED + round))" "$((round * 1000000))" "$OPS_MAX" "$W/issued" "$W/acked" 2>>"$W/writer.log" &
    WRITER_PID=$!
    sleep "$(awk "BEGIN { print $ms / 2000 }")"
    [ -n "$midway" ] && eval "$midway"
    sleep "$(awk "BEGIN { print $ms / 2000 }")"
    kill_daemon || return 1
    stop_writer
    echo "$E2E_NAME: round $round: killed after $ms ms, $(total_acked) writes acknowledged so far"
}
verify() { /usr/bin/python3 "$SW" verify "$SOCK" v "$W/issued" "$W/acked" "$@"; }

STORE=("file://$W/store" --simulate latency=10)
if [ -n "${FARDISK_E2E_STORE:-}" ]; then
    . "$E2E_ROOT/tests/e2e/lib/stores.sh"
    E2E_NAME="45_sigkill_loop_$E2E_STORE"
    require "$E2E_STORE start" store_start
    STORE=("$(store_url "e2e45-$$")")
fi

touch "$W/issued" "$W/acked"
require "create on ${STORE[*]} with a log mirror" "$B" create tank "${STORE[0]}" log mirror "$W/log0" "$W/log1" "${STORE[@]:1}"
require "import with NBD" "$B" import tank --nbd "unix:$SOCK"
require "volume create 16M" "$B" volume create tank/v 16M

replays=0
for round in $(seq 1 "$ROUNDS"); do
    require "round $round: writes, then SIGKILL" kill_round "$round" ""
    require "round $round: import after SIGKILL" "$B" import tank --nbd "unix:$SOCK"
    n="$(replayed)"; replays=$((replays + ${n:-0}))
    check "round $round: every acknowledged write is there, nothing else (${n:-0} records replayed)" verify
done
check "the log replayed records in at least one round ($replays in all)" test "$replays" -gt 0

round=$((ROUNDS + 1))
require "round $round: leg log1 deleted mid-round, then SIGKILL" kill_round "$round" "rm -f '$W/log1'"
require "round $round: import with one leg left" "$B" import tank --nbd "unix:$SOCK"
check "round $round: status says DEGRADED" bash -c "'$B' status tank | grep -q DEGRADED"
check "round $round: every acknowledged write is there" verify
require "round $round: replace the lost leg" "$B" replace tank "$W/log1"
check "round $round: ONLINE again" bash -c "'$B' status tank | grep -q 'state: ONLINE'"

round=$((ROUNDS + 2))
require "round $round: writes, then SIGKILL" kill_round "$round" ""
mv "$W/log0" "$W/log0.gone"; mv "$W/log1" "$W/log1.gone"
out="$("$B" import tank --nbd "unix:$SOCK" 2>&1)"; rc=$?
check "round $round: import without the log is refused" test "$rc" -ne 0
check "round $round: the refusal names the recovery point and --missing-log: $out" bash -c "grep -q 'recovery point' <<<\"\$1\" && grep -q -- '--missing-log' <<<\"\$1\"" _ "$out"
require "round $round: import --missing-log" "$B" import tank --nbd "unix:$SOCK" --missing-log
check "round $round: the volume is the write history cut at one point" verify --prefix
require "export" "$B" export tank
echo "$E2E_NAME: seed $SEED: $((ROUNDS + 2)) kills, $(wc -l <"$W/issued" | tr -d ' ') writes issued, $(total_acked) acknowledged, $replays log records replayed"
e2e_finish

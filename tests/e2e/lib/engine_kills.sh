# shellcheck shell=bash
# e2e 54's engine kills under the holder and its seeded timeline (split from the script, which
# sources this after setting B, POOL, W, SEED, DURATION_S, OUTAGE_S, KILLS, HOLDER_PID and its
# bounds): waiting for a serving engine, SIGKILLing it (and, with a delay, its successor during
# its import), noting how long each new engine took to answer; and make_schedule, the seeded
# timeline of kills, spikes, resets, the outage and the failed leg.
# ---- the engine under the holder --------------------------------------------------------------

ENGINE=""          # the engine that answers now
RESTART_PENDING="" # set from a kill until a new engine answers
KILLED_PID=""      # the engine killed last
KILL_T0=""         # when the kill that RESTART_PENDING waits out began
KILL_NO=0
ANSWERED_T=0       # when the current engine was first seen answering (`now`)

# note_engine_back: once an engine other than the killed one answers, note how long it took.
note_engine_back() {
    local pid
    pid="$(daemon_pid)"
    if [ -n "$pid" ] && [ "$pid" != "$KILLED_PID" ]; then
        local back
        back="$(secs_since "$KILL_T0")"
        echo "$KILL_NO $back" >>"$W/engine_back"
        info "kill $KILL_NO: engine $pid answered ${back} s after the kill"
        ENGINE="$pid"
        DAEMON_PIDS+=("$pid")
        RESTART_PENDING=""
        ANSWERED_T="$(now)"
    fi
}

# wait_serving: bounded wait until an engine answers (after a kill, a new one).
wait_serving() {
    local i
    for ((i = 0; i < ENGINE_WAIT_S * 5; i++)); do
        [ -z "$RESTART_PENDING" ] && return 0
        note_engine_back
        [ -z "$RESTART_PENDING" ] && return 0
        run_due_ends
        sleep 0.2
    done
    return 1
}

# is_engine PID: a live fardisk process whose parent is the holder.
is_engine() {
    is_ours "$1" fardisk && [ "$1" != "$HOLDER_PID" ] \
        && [ "$(awk '{ print $4 }' "/proc/$1/stat" 2>/dev/null)" = "$HOLDER_PID" ]
}

# successor_of PID: the holder's next engine (a live child other than PID); bounded wait.
successor_of() {
    local i pid
    for ((i = 0; i < SUCCESSOR_TRIES; i++)); do
        pid="$(ps -o pid=,stat= --ppid "$HOLDER_PID" | awk -v old="$1" '$1 != old && $2 !~ /^Z/ { print $1; exit }')"
        if [ -n "$pid" ]; then echo "$pid"; return 0; fi
        sleep 0.05
    done
    return 1
}

kills=0
SKIPPED_KILLS=0  # planned kills not made: the load was about to end (see kill_engine)
KILL_LOAD_END_S=2
# kill_engine KIND [DELAY]: SIGKILL the engine that serves (KIND: load, leg, outage); with DELAY,
# also its successor DELAY seconds after the holder started it (during its import).
kill_engine() {
    local kind="$1" delay="${2:-}" engine at succ answering
    wait_serving || { fail "kill $((KILL_NO + 1)) ($kind): no engine answered within ${ENGINE_WAIT_S} s"; return; }
    # At least 0.3 s after the engine began to answer: each kill is a restart of its own.
    awk -v a="$ANSWERED_T" -v b="$(now)" 'BEGIN { exit !(b - a < 0.3) }' && sleep 0.3
    # Kills under load only: one that the waits above pushed into the load's last
    # KILL_LOAD_END_S seconds (or past its end) would find no transaction in flight to pause
    # (CI of d46503e, seed 102337138: the engine after the outage's kill answered 54 s later and
    # the last two kills came after pgbench had ended). It is skipped and counted.
    if [ "$kind" = load ] && awk -v a="$run0" -v b="$(now)" -v d="$DURATION_S" -v m="$KILL_LOAD_END_S" 'BEGIN { exit !(b - a > d - m) }'; then
        SKIPPED_KILLS=$((SKIPPED_KILLS + 1))
        [ -n "$delay" ] && SKIPPED_KILLS=$((SKIPPED_KILLS + 1))
        info "a kill (load${delay:+, with its successor}) skipped at $(secs_since "$run0") s: within ${KILL_LOAD_END_S} s of the load's end, where the waits for a serving engine before it pushed it"
        return
    fi
    engine="$ENGINE"
    is_engine "$engine" || { fail "kill $((KILL_NO + 1)): '$engine' is not a live engine child of the holder $HOLDER_PID"; return; }
    KILL_NO=$((KILL_NO + 1))
    at="$(secs_since "$run0")"
    KILL_T0="$(now)"
    kill -KILL "$engine"
    kills=$((kills + 1))
    KILLED_PID="$engine"
    RESTART_PENDING=1
    echo "$KILL_NO $kind $KILL_T0" >>"$W/kill_times"
    [ "$kind" = outage ] && OUTAGE_KILL_ACKED="$(segment_acked)" OUTAGE_KILL_EPOCH="$(now)"
    [ "$kind" = leg ] && LEG_KILLED=yes
    if [ -z "$delay" ]; then
        info "kill $KILL_NO ($kind): SIGKILL engine $engine at ${at} s"
        return
    fi
    succ="$(successor_of "$engine")" || { fail "kill $KILL_NO: the holder started no new engine within $((SUCCESSOR_TRIES / 20)) s"; return; }
    sleep "$delay"
    answering=no
    [ "$(daemon_pid)" = "$succ" ] && answering=yes
    is_engine "$succ" || { fail "kill $KILL_NO: the new engine '$succ' is gone before its kill"; return; }
    kill -KILL "$succ"
    kills=$((kills + 1))
    KILLED_PID="$succ"
    IMPORT_KILLS=$((IMPORT_KILLS + 1))
    info "kill $KILL_NO ($kind): SIGKILL engine $engine at ${at} s, then its successor $succ ${delay} s after it started (answering status already: $answering)"
}

# ---- the timeline ----------------------------------------------------------------------------

# One line per action, "T ACTION ARGS" (T: seconds after the load began), all drawn from the
# seed: spike_on MS / spike_off, reset_on reset_peer|timeout MS / reset_off, outage_on /
# outage_off, leg_rm N / leg_replace N, kill load|leg|outage [DELAY]. Two spikes, two resets, one
# outage, one failed leg (longer durations add spikes and resets, one per 25 s of extra load),
# laid out one after another with seeded gaps; the kills are drawn over the whole load apart
# from the outage and the leg loss (at least 3 s apart), plus one inside each of those two.
make_schedule() {
    python3 - "$SEED" "$DURATION_S" "$OUTAGE_S" "$KILLS" <<'EOF'
import random, sys
seed, duration, outage, kills = (int(x) for x in sys.argv[1:5])
r = random.Random(seed)
GAP_MIN, LEAD, TAIL = 4.0, 6.0, 15.0  # seconds between events; before the first; after the last
KILL_SPACING = 3.0  # planned seconds between two kills
IMPORT_KILLS = 2    # kills whose successor is killed again during its import
LEG_S = 12          # a leg is gone this long before `replace`
if kills < 20:
    sys.exit("E2E54_KILLS=%d: at least 20" % kills)
def spike(): return ("spike", r.randint(50, 200), r.randint(3, 8))
def reset():
    kind = r.choice(["reset_peer", "timeout"])
    ms = r.randint(0, 1000) if kind == "reset_peer" else r.randint(500, 3000)
    return ("reset", kind, ms, r.randint(2, 6))
def planned(e):  # seconds the step takes (after the outage: the wait for ONLINE)
    if e[0] in ("spike", "reset"):
        return e[-1]
    return e[1] + 12 if e[0] == "outage" else LEG_S + 6
events = [spike(), spike(), reset(), reset(), ("outage", outage), ("leg", r.randint(0, 1))]
while sum(planned(e) for e in events) + 25 * (len(events) + 1) <= duration:
    events.append(r.choice([spike(), reset()]))
r.shuffle(events)
spare = duration - LEAD - TAIL - sum(planned(e) for e in events) - GAP_MIN * (len(events) - 1)
if spare < 0:
    sys.exit("E2E54_DURATION_S=%d is too short for the events" % duration)
weights = [r.random() + 0.2 for _ in range(len(events) + 1)]
gaps = [spare * w / sum(weights) for w in weights]
actions, blocked, t = [], [], LEAD + gaps[0]
for i, e in enumerate(events):
    if e[0] == "spike":
        actions += [(t, "spike_on %d" % e[1]), (t + e[2], "spike_off")]
    elif e[0] == "reset":
        actions += [(t, "reset_on %s %d" % (e[1], e[2])), (t + e[3], "reset_off")]
    elif e[0] == "outage":
        # Inside the outage's last 40 %, late enough that it was seen SUSPENDED and acknowledging.
        kill_at = t + e[1] * r.uniform(0.6, 0.9)
        actions += [(t, "outage_on"), (kill_at, "kill outage"), (t + e[1], "outage_off")]
        blocked.append((t - KILL_SPACING, t + planned(e) + KILL_SPACING))
    else:
        actions += [(t, "leg_rm %d" % e[1]), (t + r.uniform(3, 7), "kill leg"), (t + LEG_S, "leg_replace %d" % e[1])]
        blocked.append((t - KILL_SPACING, t + planned(e) + KILL_SPACING))
    t += planned(e) + GAP_MIN + gaps[i + 1]
# The other kills anywhere else in the load, at least KILL_SPACING apart.
free = kills - 2 - IMPORT_KILLS
times = []
for _ in range(200000):
    if len(times) == free:
        break
    c = r.uniform(LEAD, duration - TAIL)
    if any(a <= c <= b for a, b in blocked) or any(abs(c - x) < KILL_SPACING for x in times):
        continue
    times.append(c)
if len(times) < free:
    sys.exit("E2E54_DURATION_S=%d leaves no room for %d kills" % (duration, kills))
pairs = set(r.sample(range(free), IMPORT_KILLS))
for i, c in enumerate(times):
    actions.append((c, "kill load %.2f" % r.uniform(0.05, 0.5) if i in pairs else "kill load"))
for at, what in sorted(actions, key=lambda a: a[0]):
    print("%.1f %s" % (at, what))
EOF
}

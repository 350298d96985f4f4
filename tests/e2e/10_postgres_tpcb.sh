#!/usr/bin/env bash
# scripts/postgres.sh on a local data dir: initdb, start, a short pgbench TPC-B run
# whose invariant holds, an immediate shutdown (no checkpoint) after which WAL
# recovery must give back a database where it still holds, and a deliberately
# damaged balance that the check must report.
E2E_NAME=10_postgres_tpcb
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

PG="$SCRIPTS/postgres.sh"
DATA="$FARDISK_RUN_DIR/pgdata"
SECONDS_RUN=5

require "initdb" "$PG" init "$DATA"
require "start" "$PG" start "$DATA"
on_exit '"$PG" stop "$DATA"'

out="$("$PG" tpcb "$DATA" 1 "$SECONDS_RUN" 2 2)"
rc=$?
printf '%s\n' "$out"
check "pgbench -i -s 1, ${SECONDS_RUN} s TPC-B run, invariant holds" test "$rc" -eq 0
tx="$(sed -n 's/^transactions=//p' <<<"$out")"
check "pgbench committed transactions ($tx)" test "${tx:-0}" -gt 0

require "immediate shutdown" "$PG" crash "$DATA"
require "restart (WAL recovery)" "$PG" start "$DATA"
check "invariant holds after crash recovery" "$PG" check "$DATA"
rows="$("$PG" psql "$DATA" -X -At -c 'SELECT count(*) FROM pgbench_history')"
check "history rows survived recovery ($rows = $tx)" test "$rows" = "$tx"

"$PG" psql "$DATA" -X -At -c 'UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid = 3' >/dev/null
if "$PG" check "$DATA"; then
    fail "check must report a damaged teller balance"
else
    pass "check reports a damaged teller balance"
fi
e2e_finish

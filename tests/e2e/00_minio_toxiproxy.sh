#!/usr/bin/env bash
# MinIO and toxiproxy start from the project's scripts, objects survive a PUT/GET
# round trip through the proxy, `toxiproxy.sh latency 20` adds >= 2 x 20 ms to every
# request (the toxic delays each direction), removing it takes it away again, and an
# outage makes requests fail fast until it is lifted.
E2E_NAME=00_minio_toxiproxy
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

LATENCY_MS=20
ROUNDS=5
SIZE_BYTES=4096

# roundtrip ENDPOINT_SCRIPT KEY COUNT: PUT+GET through the endpoint that
# `SCRIPT env` prints; echoes s3.py's JSON summary.
roundtrip() {
    (
        eval "$("$SCRIPTS/$1" env)" || exit 1
        python3 "$SCRIPTS/s3.py" roundtrip "$FARDISK_BUCKET" "$2" "$SIZE_BYTES" "$3"
    )
}

require "minio.sh start" "$SCRIPTS/minio.sh" start
on_exit '"$SCRIPTS/minio.sh" stop'
require "toxiproxy.sh start" "$SCRIPTS/toxiproxy.sh" start
on_exit '"$SCRIPTS/toxiproxy.sh" stop'

require "PUT/GET direct to MinIO, data verified" roundtrip minio.sh direct 2

base="$(roundtrip toxiproxy.sh proxied "$ROUNDS")"
require "PUT/GET through toxiproxy, data verified" test -n "$base"
echo "no latency:  $base"

require "toxiproxy.sh latency $LATENCY_MS" "$SCRIPTS/toxiproxy.sh" latency "$LATENCY_MS"
slow="$(roundtrip toxiproxy.sh proxied "$ROUNDS")"
require "PUT/GET with latency, data verified" test -n "$slow"
echo "latency $LATENCY_MS ms each way: $slow"
# A floor, not a speed test: the toxic holds each direction for LATENCY_MS, so no
# request can come back sooner than 2 x LATENCY_MS, however busy the machine.
floor_ms=$((2 * LATENCY_MS))
check "every GET took >= $floor_ms ms (min $(json_field "$slow" get_min_ms) ms)" \
    float_ge "$(json_field "$slow" get_min_ms)" "$floor_ms"
check "every PUT took >= $floor_ms ms (min $(json_field "$slow" put_min_ms) ms)" \
    float_ge "$(json_field "$slow" put_min_ms)" "$floor_ms"
added_ms="$(python3 -c "print(round($(json_field "$slow" get_median_ms) - $(json_field "$base" get_median_ms), 1))")"
echo "measured: GET median $(json_field "$base" get_median_ms) ms -> $(json_field "$slow" get_median_ms) ms (+$added_ms ms per round trip)"

require "toxiproxy.sh latency 0" "$SCRIPTS/toxiproxy.sh" latency 0
fast="$(roundtrip toxiproxy.sh proxied "$ROUNDS")"
echo "latency removed: $fast"
check "after removal some GET is faster than $floor_ms ms" \
    float_ge "$floor_ms" "$(json_field "$fast" get_min_ms)"

require "toxiproxy.sh outage on" "$SCRIPTS/toxiproxy.sh" outage on
t0=$SECONDS
if roundtrip toxiproxy.sh outage 1 2>/dev/null; then
    fail "request during outage should fail"
else
    pass "request during outage fails ($((SECONDS - t0)) s)"
fi
require "toxiproxy.sh outage off" "$SCRIPTS/toxiproxy.sh" outage off
check "PUT/GET after outage" roundtrip toxiproxy.sh proxied 1

check "toxiproxy.sh reset" "$SCRIPTS/toxiproxy.sh" reset
e2e_finish

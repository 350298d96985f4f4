#!/usr/bin/env python3
"""MinIO's own trace of the requests it serves, without `mc`: the admin trace API, signed with
scripts/s3.py's SigV4. What MinIO saw of each request: when it came, how long MinIO took over it
to the last byte sent (`dur`), its time to first byte, its Range and its size.

    eval "$(scripts/minio.sh env)"
    scripts/minio-trace.py record OUT.jsonl SECONDS [storage]   # one JSON object per line
    scripts/minio-trace.py gets OUT.jsonl [--over-mib N] [PREFIX...]   # GETs per key prefix

`record` stops after SECONDS (or at Ctrl-C); `storage` adds MinIO's calls to its drives.
`gets` groups the traced GetObject calls by the first PREFIX their path contains (every path
when none is given) and prints, per group: GETs, MiB, MinIO's time per GET (p50, p90), time to
first byte (p50), MiB/s per GET (p50), the mean number under way and the group's span.
`--over-mib N` counts only GETs of more than N MiB (the engine's readahead GETs are 16 MiB; a
read without a cache sends 1 MiB ones).
"""
import datetime
import hashlib
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3  # noqa: E402  (the signing of scripts/s3.py)

USAGE = "usage: minio-trace.py record OUT SECONDS [storage] | gets OUT [--over-mib N] [PREFIX...]"


def record(out_path, seconds, storage):
    cfg = s3.config_from_env()
    query = {"s3": "true", "internal": "true"}
    if storage:
        query["storage"] = "true"
    path = "/minio/admin/v3/trace"
    now = datetime.datetime.now(datetime.timezone.utc)
    headers = s3.sign(cfg, "GET", path, hashlib.sha256(b"").hexdigest(), now, query)
    conn = http.client.HTTPConnection(cfg["host"], cfg["port"], timeout=seconds + 5)
    conn.request("GET", path + "?" + s3.canonical_query(query), headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"minio-trace: the trace API answered HTTP {resp.status}: "
                 f"{resp.read(300).decode(errors='replace')}")
    end = time.monotonic() + seconds
    lines = 0
    # Line-buffered: a trace cut short by Ctrl-C keeps every request it saw.
    with open(out_path, "w", buffering=1) as out:
        try:
            while time.monotonic() < end:
                line = resp.readline()
                if not line:
                    break
                if line.strip():
                    out.write(line.decode())
                    lines += 1
        except (KeyboardInterrupt, TimeoutError):
            pass
    print(f"minio-trace: {lines} entries in {out_path}", file=sys.stderr)


def timestamp(text):
    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(whole).replace(
        tzinfo=datetime.timezone.utc).timestamp() + float("0." + (fraction or "0"))


def mean_under_way(spans):
    """Time-weighted mean number of GETs under way over the group's span."""
    start = min(a for a, _ in spans)
    end = max(b for _, b in spans)
    return sum(b - a for a, b in spans) / (end - start) if end > start else float(len(spans)), end - start


def gets(trace_path, prefixes, over_bytes):
    groups = {}
    with open(trace_path) as trace:
        for line in trace:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("funcname") != "s3.GetObject":
                continue
            path = entry.get("path", "")
            group = next((p for p in prefixes if p in path), None) if prefixes else "all"
            if group is None:
                continue
            start = timestamp(entry["time"])
            seconds = entry["dur"] / 1e9
            stats = entry.get("http", {}).get("stats", {})
            if stats.get("outputbytes", 0) <= over_bytes:
                continue
            groups.setdefault(group, []).append(
                (start, seconds, stats.get("timetofirstbyte", 0) / 1e9, stats.get("outputbytes", 0)))
    if not groups:
        sys.exit("minio-trace: no GetObject in the trace" + (" for those prefixes" if prefixes else ""))
    for group, rows in groups.items():
        ms = sorted(r[1] * 1e3 for r in rows)
        ttfb = statistics.median(r[2] * 1e3 for r in rows)
        rate = statistics.median(r[3] / 2**20 / r[1] for r in rows if r[1] > 0)
        under_way, span = mean_under_way([(r[0], r[0] + r[1]) for r in rows])
        print(f"{group}: {len(rows)} GETs, {sum(r[3] for r in rows) / 2**20:.0f} MiB; "
              f"MinIO's time per GET p50 {statistics.median(ms):.1f} ms, "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:.1f} ms; first byte p50 {ttfb:.1f} ms; "
              f"{rate:.0f} MiB/s per GET (p50); {under_way:.1f} under way on average over {span:.2f} s")


def main(argv):
    if len(argv) >= 4 and argv[1] == "record" and len(argv) <= 5:
        try:
            seconds = float(argv[3])
        except ValueError:
            sys.exit(f"minio-trace: SECONDS must be a number, got '{argv[3]}'")
        if len(argv) == 5 and argv[4] != "storage":
            sys.exit(f"minio-trace: the optional 4th word is 'storage', got '{argv[4]}'")
        record(argv[2], seconds, len(argv) == 5)
    elif len(argv) >= 3 and argv[1] == "gets":
        rest, over_bytes = argv[3:], 0
        if rest[:1] == ["--over-mib"]:
            try:
                over_bytes = int(float(rest[1]) * 2**20)
            except (IndexError, ValueError):
                sys.exit("minio-trace: --over-mib takes a number of MiB")
            rest = rest[2:]
        gets(argv[2], rest, over_bytes)
    else:
        sys.exit(USAGE)


if __name__ == "__main__":
    main(sys.argv)

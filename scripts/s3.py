#!/usr/bin/env python3
"""Minimal S3 client for fardisk's test scripts (Python standard library only).

Signs requests with AWS Signature Version 4 and uses path-style addressing, which
is what MinIO on 127.0.0.1 expects. Configuration comes from the same environment
variables the engine reads (printed by `scripts/minio.sh env`):
AWS_ENDPOINT (or AWS_ENDPOINT_URL), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION.

Commands:
  s3.py mb BUCKET                      create a bucket (ok if we already own it)
  s3.py put BUCKET KEY FILE            upload FILE ('-' = stdin)
  s3.py get BUCKET KEY [FILE]          download to FILE (default stdout)
  s3.py put-create-only BUCKET KEY FILE
                                       upload with If-None-Match: * and print the HTTP
                                       status (412 where the key exists, on a store
                                       with conditional writes)
  s3.py rm BUCKET KEY                  delete an object
  s3.py ls BUCKET [PREFIX]             list keys (one "SIZE KEY" line each)
  s3.py roundtrip BUCKET KEY SIZE N    N x (PUT then GET and verify) of SIZE random
                                       bytes; prints one JSON line of timings (ms)
Exit status: 0 ok, 1 request failed or data mismatch, 2 usage error.
"""

import datetime
import hashlib
import hmac
import http.client
import json
import os
import random
import statistics
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET

TIMEOUT_S = 30.0
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class S3Error(Exception):
    """A request that got no 2xx answer, or no answer at all."""


def config_from_env():
    endpoint = os.environ.get("AWS_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        raise S3Error("AWS_ENDPOINT is not set (eval \"$(scripts/minio.sh env)\")")
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme != "http" or not url.hostname or not url.port:
        raise S3Error(f"AWS_ENDPOINT must look like http://127.0.0.1:PORT, got {endpoint!r}")
    return {
        "host": url.hostname,
        "port": url.port,
        "access_key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region": os.environ.get("AWS_REGION", "us-east-1"),
    }


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def canonical_query(query):
    """The SigV4 canonical form of a query: sorted, every name and value percent-encoded."""
    q = lambda s: urllib.parse.quote(s, safe="-_.~")
    return "&".join(f"{q(k)}={q(v)}" for k, v in sorted(query.items()))


def sign(cfg, method, path, body_sha256, now, query=None):
    """Return the headers of a SigV4-signed request."""
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = now.strftime("%Y%m%d")
    host = f"{cfg['host']}:{cfg['port']}"
    headers = {"host": host, "x-amz-content-sha256": body_sha256, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([
        method,
        urllib.parse.quote(path, safe="/-_.~"),
        canonical_query(query or {}),
        "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
        signed,
        body_sha256,
    ])
    scope = f"{day}/{cfg['region']}/s3/aws4_request"
    to_sign = "\n".join([
        "AWS4-HMAC-SHA256", amz_date, scope,
        hashlib.sha256(canonical.encode()).hexdigest(),
    ])
    key = _hmac(("AWS4" + cfg["secret_key"]).encode(), day)
    for part in (cfg["region"], "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={cfg['access_key']}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return headers


def request(cfg, method, path, body=b"", query=None, extra=None):
    """Send one signed request on a new connection; return (status, body). `extra` headers
    are sent unsigned (SigV4 signs only the headers it lists)."""
    headers = sign(cfg, method, path, hashlib.sha256(body).hexdigest(),
                   datetime.datetime.now(datetime.timezone.utc), query)
    headers.update(extra or {})
    conn = http.client.HTTPConnection(cfg["host"], cfg["port"], timeout=TIMEOUT_S)
    target = urllib.parse.quote(path, safe="/-_.~")
    if query:
        target += "?" + canonical_query(query)
    try:
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError as err:
        raise S3Error(f"{method} {path}: {err}") from err
    finally:
        conn.close()


def expect_ok(status, body, what):
    if not 200 <= status < 300:
        raise S3Error(f"{what}: HTTP {status}: {body[:300].decode(errors='replace')}")


def make_bucket(cfg, bucket):
    status, body = request(cfg, "PUT", f"/{bucket}")
    if status == 409 and b"BucketAlreadyOwnedByYou" in body:
        return "exists"
    expect_ok(status, body, f"create bucket {bucket}")
    return "created"


def put_object(cfg, bucket, key, data):
    status, body = request(cfg, "PUT", f"/{bucket}/{key}", data)
    expect_ok(status, body, f"PUT {bucket}/{key}")


def get_object(cfg, bucket, key):
    status, body = request(cfg, "GET", f"/{bucket}/{key}")
    expect_ok(status, body, f"GET {bucket}/{key}")
    return body


def delete_object(cfg, bucket, key):
    status, body = request(cfg, "DELETE", f"/{bucket}/{key}")
    expect_ok(status, body, f"DELETE {bucket}/{key}")


LIST_PAGES_MAX = 10000


def list_objects(cfg, bucket, prefix=""):
    """Every (key, size) under prefix (ListObjectsV2, 1000 a page)."""
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    out, token = [], None
    for _ in range(LIST_PAGES_MAX):
        query = {"list-type": "2", "prefix": prefix}
        if token:
            query["continuation-token"] = token
        status, body = request(cfg, "GET", f"/{bucket}", query=query)
        expect_ok(status, body, f"LIST {bucket}/{prefix}")
        root = ET.fromstring(body)
        for c in root.iter(f"{ns}Contents"):
            out.append((c.find(f"{ns}Key").text, int(c.find(f"{ns}Size").text)))
        token = root.findtext(f"{ns}NextContinuationToken")
        if root.findtext(f"{ns}IsTruncated") != "true" or not token:
            return out
    raise S3Error(f"LIST {bucket}/{prefix}: more than {LIST_PAGES_MAX} pages")


def roundtrip(cfg, bucket, key, size, count, seed):
    """PUT and GET `count` objects, verify each, and summarise latencies in ms."""
    rng = random.Random(seed)
    put_ms, get_ms = [], []
    for i in range(count):
        data = rng.randbytes(size)
        t0 = time.monotonic()
        put_object(cfg, bucket, key, data)
        t1 = time.monotonic()
        got = get_object(cfg, bucket, key)
        t2 = time.monotonic()
        if got != data:
            raise S3Error(f"roundtrip {i}: GET returned {len(got)} bytes that differ from the PUT")
        put_ms.append((t1 - t0) * 1000.0)
        get_ms.append((t2 - t1) * 1000.0)
    summary = {}
    for name, xs in (("put", put_ms), ("get", get_ms)):
        summary[f"{name}_min_ms"] = round(min(xs), 3)
        summary[f"{name}_median_ms"] = round(statistics.median(xs), 3)
        summary[f"{name}_max_ms"] = round(max(xs), 3)
    summary["count"] = count
    summary["size_bytes"] = size
    return summary


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, bucket = argv[1], argv[2]
    cfg = config_from_env()
    if cmd == "mb" and len(argv) == 3:
        print(f"bucket {bucket}: {make_bucket(cfg, bucket)}")
    elif cmd == "put" and len(argv) == 5:
        src = sys.stdin.buffer if argv[4] == "-" else open(argv[4], "rb")
        with src:
            put_object(cfg, bucket, argv[3], src.read())
    elif cmd == "put-create-only" and len(argv) == 5:
        with open(argv[4], "rb") as src:
            status, _ = request(cfg, "PUT", f"/{bucket}/{argv[3]}", src.read(),
                                extra={"If-None-Match": "*"})
        print(status)
    elif cmd == "get" and len(argv) in (4, 5):
        data = get_object(cfg, bucket, argv[3])
        if len(argv) == 5:
            with open(argv[4], "wb") as out:
                out.write(data)
        else:
            sys.stdout.buffer.write(data)
    elif cmd == "rm" and len(argv) == 4:
        delete_object(cfg, bucket, argv[3])
    elif cmd == "ls" and len(argv) in (3, 4):
        for key, size in list_objects(cfg, bucket, argv[3] if len(argv) == 4 else ""):
            print(size, key)
    elif cmd == "roundtrip" and len(argv) == 6:
        seed = int(os.environ.get("FARDISK_SEED", "1"))
        print(json.dumps(roundtrip(cfg, bucket, argv[3], int(argv[4]), int(argv[5]), seed)))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except S3Error as err:
        print(f"s3.py: {err}", file=sys.stderr)
        sys.exit(1)

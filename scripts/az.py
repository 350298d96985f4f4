#!/usr/bin/env python3
"""Minimal Azure Blob client for fardisk's test scripts (Python standard library only).

Signs requests with Shared Key against Azurite's path-style URLs
(http://127.0.0.1:PORT/ACCOUNT/CONTAINER/BLOB). Configuration comes from the same
environment variables the engine reads (printed by `scripts/azurite.sh env`):
AZURITE_BLOB_STORAGE_URL, AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY.

Commands:
  az.py mb CONTAINER                   create a container (ok if it exists)
  az.py put CONTAINER BLOB FILE [--create-only]
                                       upload FILE ('-' = stdin); --create-only sends
                                       If-None-Match: * and prints the HTTP status
  az.py ls CONTAINER [PREFIX]          list blobs (one "SIZE NAME" line each)
Exit status: 0 ok, 1 request failed, 2 usage error.
"""

import base64
import email.utils
import hashlib
import hmac
import http.client
import os
import sys
import urllib.parse
import xml.etree.ElementTree as ET

TIMEOUT_S = 30.0
API_VERSION = "2021-08-06"


class AzError(Exception):
    """A request that got no 2xx answer, or no answer at all."""


def config_from_env():
    endpoint = os.environ.get("AZURITE_BLOB_STORAGE_URL")
    if not endpoint:
        raise AzError("AZURITE_BLOB_STORAGE_URL is not set (eval \"$(scripts/azurite.sh env)\")")
    url = urllib.parse.urlsplit(endpoint)
    return {
        "host": url.hostname,
        "port": url.port,
        "account": os.environ["AZURE_STORAGE_ACCOUNT_NAME"],
        "key": base64.b64decode(os.environ["AZURE_STORAGE_ACCOUNT_KEY"]),
    }


def request(cfg, method, path, query=None, body=b"", headers=None):
    """One signed request; path is /CONTAINER[/BLOB]. Returns (status, body)."""
    query = query or {}
    headers = dict(headers or {})
    headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
    headers["x-ms-version"] = API_VERSION
    full_path = "/" + cfg["account"] + urllib.parse.quote(path)
    length = str(len(body)) if body else ""
    canon_headers = "".join(
        f"{k.lower()}:{v}\n" for k, v in sorted(headers.items()) if k.lower().startswith("x-ms-")
    )
    # Path-style URLs: the account appears once for the signature and once in the path.
    canon_resource = "/" + cfg["account"] + full_path
    for k in sorted(query):
        canon_resource += f"\n{k.lower()}:{query[k]}"
    to_sign = "\n".join([
        method, "", "", length, "", headers.get("Content-Type", ""), "", "", "",
        headers.get("If-None-Match", ""), "", "",
    ]) + "\n" + canon_headers + canon_resource
    sig = base64.b64encode(hmac.new(cfg["key"], to_sign.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {cfg['account']}:{sig}"
    target = full_path + ("?" + urllib.parse.urlencode(query) if query else "")
    conn = http.client.HTTPConnection(cfg["host"], cfg["port"], timeout=TIMEOUT_S)
    try:
        conn.request(method, target, body=body or None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError as e:
        raise AzError(f"{method} {target}: {e}") from e
    finally:
        conn.close()


def cmd_mb(cfg, container):
    status, body = request(cfg, "PUT", "/" + container, {"restype": "container"})
    if status == 201:
        print(f"container {container}: created")
    elif status == 409:
        print(f"container {container}: already there")
    else:
        raise AzError(f"create container {container}: HTTP {status}: {body[:200]!r}")


def cmd_put(cfg, container, blob, path, create_only):
    data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    headers = {"x-ms-blob-type": "BlockBlob"}
    if create_only:
        headers["If-None-Match"] = "*"
    status, body = request(cfg, "PUT", f"/{container}/{blob}", body=data, headers=headers)
    if create_only:
        print(status)
        return
    if status != 201:
        raise AzError(f"put {container}/{blob}: HTTP {status}: {body[:200]!r}")


def cmd_ls(cfg, container, prefix=""):
    marker = ""
    for _ in range(10_000):  # pages of up to 5000 names
        query = {"restype": "container", "comp": "list"}
        if prefix:
            query["prefix"] = prefix
        if marker:
            query["marker"] = marker
        status, body = request(cfg, "GET", "/" + container, query)
        if status != 200:
            raise AzError(f"list {container}: HTTP {status}: {body[:200]!r}")
        root = ET.fromstring(body)
        for b in root.iter("Blob"):
            print(b.findtext("Properties/Content-Length"), b.findtext("Name"))
        marker = root.findtext("NextMarker") or ""
        if not marker:
            return


def main(argv):
    try:
        cfg = config_from_env()
        if len(argv) == 2 and argv[0] == "mb":
            cmd_mb(cfg, argv[1])
        elif len(argv) in (4, 5) and argv[0] == "put":
            cmd_put(cfg, argv[1], argv[2], argv[3], argv[4:] == ["--create-only"])
        elif len(argv) in (2, 3) and argv[0] == "ls":
            cmd_ls(cfg, *argv[1:])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (AzError, KeyError) as e:
        print(f"az.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Checks JSON output against a schema in docs/json/ (the subset of JSON Schema those files use:
type, properties, required, items, anyOf, enum). No third-party package, so the check runs on a
fresh machine. Reads one JSON document, or JSON Lines (iostat prints one object per report).

usage: json_schema.py SCHEMA.json [FILE]   (stdin without FILE); exit 1 with every violation."""
import json
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def type_ok(value, t):
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[t])


def check(value, schema, path, errors):
    if "anyOf" in schema:
        trials = []
        for alt in schema["anyOf"]:
            e = []
            check(value, alt, path, e)
            if not e:
                break
            trials.append(e)
        else:
            errors.append(f"{path}: matches no alternative ({'; '.join(t[0] for t in trials)})")
        return
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, t) for t in types):
            errors.append(f"{path}: expected {'/'.join(types)}, got {json.dumps(value)[:60]}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing required field '{key}'")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                check(value[key], sub, f"{path}.{key}", errors)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{path}[{i}]", errors)


def main():
    schema = json.load(open(sys.argv[1]))
    text = open(sys.argv[2]).read() if len(sys.argv) > 2 else sys.stdin.read()
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not docs:
        print("no JSON document to check", file=sys.stderr)
        return 1
    errors = []
    for i, doc in enumerate(docs):
        check(doc, schema, f"$[{i}]" if len(docs) > 1 else "$", errors)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

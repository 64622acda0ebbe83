#!/usr/bin/env python3
"""Checks signet --json documents against docs/json-schema.json (its small type language is
described in the file's $comment). Usage: json_types.py SCHEMA DOCUMENTS, where DOCUMENTS is a
JSON array of {"command": NAME, "document": {...}}. Prints every mismatch; exit 1 if any."""
import json
import sys

schema = json.load(open(sys.argv[1]))
definitions = schema["definitions"]
problems = []


def scalar_ok(name, value):
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return type(value) is int
    if name == "number":
        return type(value) in (int, float)
    if name == "boolean":
        return type(value) is bool
    if name == "null":
        return value is None
    raise SystemExit(f"schema: unknown type {name!r}")


def check(expected, value, where):
    if isinstance(expected, str) and expected.startswith("#"):
        return check(definitions[expected[1:]], value, where)
    if isinstance(expected, str):
        if not any(scalar_ok(part, value) for part in expected.split("|")):
            problems.append(f"{where}: {json.dumps(value)[:80]} is not {expected}")
        return
    if isinstance(expected, list):
        if not isinstance(value, list):
            problems.append(f"{where}: {json.dumps(value)[:80]} is not an array")
            return
        for index, item in enumerate(value):
            check(expected[0], item, f"{where}[{index}]")
        return
    if set(expected) == {"?"}:
        if value is not None:
            check(expected["?"], value, where)
        return
    if not isinstance(value, dict):
        problems.append(f"{where}: {json.dumps(value)[:80]} is not an object")
        return
    if set(expected) == {"*"}:
        for key, item in value.items():
            check(expected["*"], item, f"{where}.{key}")
        return
    for key in expected:
        if key not in value:
            problems.append(f"{where}: the field {key!r} is missing")
    for key, item in value.items():
        if key not in expected:
            problems.append(f"{where}: the field {key!r} is not in the schema")
        else:
            check(expected[key], item, f"{where}.{key}")


documents = json.load(open(sys.argv[2]))
for entry in documents:
    command, document = entry["command"], entry["document"]
    if isinstance(document, dict) and set(document) == {"error"}:
        check("#error-document", document, f"{command} (error)")
    else:
        check(schema["commands"][command], document, command)
for problem in problems:
    print(problem)
print(f"{len(documents)} documents, {len(problems)} problems")
sys.exit(1 if problems else 0)

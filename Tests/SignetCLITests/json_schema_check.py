#!/usr/bin/env python3
"""Validates signet --json documents against the JSON Schema (draft 2020-12) documents in
docs/schema/, with the `jsonschema` package from PyPI.

Usage: json_schema_check.py SCHEMA_DIR DOCUMENTS, where DOCUMENTS is a JSON array of
{"schema": NAME, "document": {...}}: NAME.schema.json is the command's schema. A document that
is an error ({"error": {...}} alone) is validated against error.schema.json instead. Every schema
is first checked against the draft 2020-12 metaschema. Prints every error; exits 1 if any."""
import json
import pathlib
import sys

import jsonschema

schema_dir = pathlib.Path(sys.argv[1])
schemas = {}
for path in sorted(schema_dir.glob("*.schema.json")):
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
        raise SystemExit(f"{path.name}: not declared as draft 2020-12")
    schemas[path.name.removesuffix(".schema.json")] = jsonschema.Draft202012Validator(schema)

problems = []
documents = json.loads(pathlib.Path(sys.argv[2]).read_text())
for entry in documents:
    name, document = entry["schema"], entry["document"]
    if isinstance(document, dict) and set(document) == {"error"}:
        name, label = "error", f"{name} (error)"
    else:
        label = name
    if name not in schemas:
        problems.append(f"{label}: no {name}.schema.json in {schema_dir}")
        continue
    for error in schemas[name].iter_errors(document):
        where = "/".join(str(part) for part in error.absolute_path) or "(document)"
        problems.append(f"{label}: {where}: {error.message[:200]}")
for problem in problems:
    print(problem)
print(f"{len(documents)} documents, {len(schemas)} schemas, {len(problems)} problems")
sys.exit(1 if problems else 0)

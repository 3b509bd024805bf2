#!/usr/bin/env python3
"""Random walks under the structured-output mask produce valid output, checked by Python.

    test_structured_output.py SO_WALK DATA_DIR [MODEL]

For every schema of DATA_DIR/structured_output/*.json, so_walk draws seeded random walks
over the test vocabulary (and, when MODEL exists, over the model's own tokenizer); every
output it completes must parse with json.loads and validate with jsonschema (Draft 2020-12).
so_walk itself fails a walk whose mask breaks its promises (see so_walk.c). Also: any JSON
object (response_format json_object) and a choice list (guided_choice), and that schemas
asking for what cannot be enforced are refused with the keyword named.
"""
import json
import os
import subprocess
import sys

import jsonschema

WALK, DATA = sys.argv[1], sys.argv[2]
MODEL = sys.argv[3] if len(sys.argv) > 3 else ""
failures = []


def walk(args, samples, seed):
    r = subprocess.run([WALK, *args, "--samples", str(samples), "--seed", str(seed)],
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        failures.append(f"so_walk {' '.join(args)} seed {seed}: rc {r.returncode}: "
                        f"{r.stderr.decode(errors='replace').strip()}")
        return []
    lines = r.stdout.decode("utf-8").split("\n")[:-1]
    if len(lines) != samples:
        failures.append(f"so_walk {' '.join(args)}: {len(lines)} outputs, wanted {samples}")
    return lines


def check(name, schema, lines):
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError as e:
            failures.append(f"{name}: does not parse ({e}): {line!r}")
            continue
        errs = list(validator.iter_errors(value))
        if errs:
            failures.append(f"{name}: invalid ({errs[0].message}): {line!r}")


corpus = sorted(f for f in os.listdir(os.path.join(DATA, "structured_output")) if f.endswith(".json"))
assert len(corpus) >= 20, corpus
have_model = bool(MODEL) and os.path.exists(MODEL)
total = 0
for f in corpus:
    path = os.path.join(DATA, "structured_output", f)
    schema = json.load(open(path, encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    lines = walk(["--schema", path], 25, 1 + total)
    if have_model:
        lines += walk(["--schema", path, "--model", MODEL], 3, 7 + total)
    check(f, schema, lines)
    total += len(lines)

lines = walk(["--json-object"], 25, 99)
if have_model:
    lines += walk(["--json-object", "--model", MODEL], 3, 98)
check("json_object", {"type": "object"}, lines)
total += len(lines)

choices_path = os.path.join(DATA, "so_choices.json")
choices = json.load(open(choices_path, encoding="utf-8"))
lines = walk(["--choice", choices_path], 25, 5)
for line in lines:
    if line not in choices:
        failures.append(f"choice: {line!r} is not one of {choices}")
seen = set(lines)
if len(seen) < 3:
    failures.append(f"choice: 25 walks gave only {sorted(seen)}")

# Refused, naming what is unsupported: the matcher could not keep these promises.
for schema, word in [({"type": "string", "pattern": "^a+$"}, "pattern"),
                     ({"type": "integer", "minimum": 3}, "minimum"),
                     ({"type": "string", "format": "date"}, "format"),
                     ({"type": "object", "required": ["x"], "additionalProperties": False}, "x")]:
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"so_refused_{os.getpid()}.json")
    with open(tmp, "w") as fh:
        json.dump(schema, fh)
    r = subprocess.run([WALK, "--schema", tmp, "--samples", "1"], capture_output=True, timeout=60)
    os.unlink(tmp)
    err = r.stderr.decode()
    if r.returncode != 3 or "unsupported" not in err or word not in err:
        failures.append(f"schema {schema}: want a refusal naming {word!r}, got rc {r.returncode}: {err!r}")

print(f"{total} outputs from {len(corpus)} schemas + json_object; model vocabulary: {have_model}")
if failures:
    print("\n".join(failures[:30]))
    sys.exit(1)

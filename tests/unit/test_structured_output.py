#!/usr/bin/env python3
"""Random walks under the structured-output mask produce valid output, checked by Python.

    test_structured_output.py SO_WALK DATA_DIR [MODEL]

For every schema of DATA_DIR/structured_output/*.json, so_walk draws seeded random walks
over the test vocabulary (and, when MODEL exists, over the model's own tokenizer); every
output it completes must parse with json.loads and validate with jsonschema (Draft 2020-12).
so_walk itself fails a walk whose mask breaks its promises (see so_walk.c). Also: any JSON
object (response_format json_object) and a choice list (guided_choice), and that schemas
asking for what cannot be enforced are refused with the keyword named; regexes (each output
must re.fullmatch) and regex constructs the engine refuses. The keyword-by-keyword coverage
is test_schema_coverage.py's.
"""
import json
import os
import re
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

# Regexes (guided_regex): every walk's output (hex, any byte) fully matches under Python's re
# (re.ASCII: the engine's \d \w \s are ASCII classes); walks over the real tokenizer too.
REGEXES = [r"[a-z]+", r"\d{3}-\d{2,4}", r"(cat|dog)s?", r"x.y", r"[^a-c]{2}", r"\w{1,8}@\w{1,8}\.(com|org)",
           r"é+|ü", r"(?P<n>ab)*c", r"a{0,3}b", r"\S\W\D", r"[A-Z][a-z]{1,5}( [A-Z][a-z]{1,5})?",
           r"^(\+|-)?\d+(\.\d{1,2})?$", r"\(\d{3}\) [0-9]{3}\x2d\d{4}", r"(?:yes|no|maybe)\n?", r"[\u00e0-\u00e0\]\[.]{1,3}",
           r"\s*\{\s*\}"]
for i, pattern in enumerate(REGEXES):
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"so_regex_{os.getpid()}.txt")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(pattern)
    lines = walk(["--regex", tmp], 12, 300 + i)
    if have_model:
        lines += walk(["--regex", tmp, "--model", MODEL], 2, 400 + i)
    os.unlink(tmp)
    for line in lines:
        text = bytes.fromhex(line).decode("utf-8")
        if not re.fullmatch(pattern, text, re.ASCII):
            failures.append(f"regex {pattern!r}: output {text!r} does not match")
    total += len(lines)

# Refused, naming what is unsupported (the matcher could not keep these promises) or that no
# value meets the schema. Every other keyword is in test_schema_coverage.py.
for schema, word, kind in [({"not": {"type": "string"}}, "not", "unsupported"),
                           ({"type": "array", "uniqueItems": True}, "uniqueItems", "unsupported"),
                           ({"type": "string", "format": "hostname"}, "format", "unsupported"),
                           ({"type": "object", "required": ["x"], "additionalProperties": False}, "no value", "malformed")]:
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"so_refused_{os.getpid()}.json")
    with open(tmp, "w") as fh:
        json.dump(schema, fh)
    r = subprocess.run([WALK, "--schema", tmp, "--samples", "1"], capture_output=True, timeout=60)
    os.unlink(tmp)
    err = r.stderr.decode()
    if r.returncode != 3 or kind not in err or word not in err:
        failures.append(f"schema {schema}: want a refusal ({kind}) naming {word!r}, got rc {r.returncode}: {err!r}")

for pattern, word in [(r"(a)\1", "backreference"), (r"a(?=b)", "lookaround"), (r"\bword", "boundar"),
                      (r"a^b", "^ and $"), (r"[à-é]", "non-ASCII ranges"), (r"a{2000}", "1000")]:
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"so_regex_bad_{os.getpid()}.txt")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(pattern)
    r = subprocess.run([WALK, "--regex", tmp, "--samples", "1"], capture_output=True, timeout=60)
    os.unlink(tmp)
    err = r.stderr.decode()
    if r.returncode != 3 or word not in err:
        failures.append(f"regex {pattern!r}: want a refusal naming {word!r}, got rc {r.returncode}: {err!r}")

print(f"{total} outputs from {len(corpus)} schemas + json_object; model vocabulary: {have_model}")
if failures:
    print("\n".join(failures[:30]))
    sys.exit(1)

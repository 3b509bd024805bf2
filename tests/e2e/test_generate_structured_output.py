#!/usr/bin/env python3
"""The default model, constrained by the structured-output mask, always produces valid JSON.

    test_generate_structured_output.py LLMBUS MODEL

`llmbus generate --inproc --json --json-schema FILE` with seeds 1..50 at temperature 1
(vLLM's default, so the model samples freely among the allowed tokens): every output must
finish on its own (finish_reason "stop", not "length"), parse with json.loads and validate
against the schema with jsonschema. Also --json-object (greedy must finish as an object;
5 sampled seeds: those that finish are objects) and --choice (5 seeds: one of the strings). Skips (77) without the model file.
"""
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

LLMBUS, MODEL = sys.argv[1], sys.argv[2]
if not os.path.exists(MODEL):
    print(f"SKIP: no model at {MODEL}")
    sys.exit(77)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "Lima"]},
        "pets": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2},
    },
    "required": ["name", "age", "city", "pets"],
    "additionalProperties": False,
}
failures = []


def generate(extra, seed, prompt, temperature=1, allow_length=False):
    cmd = [LLMBUS, "generate", "--inproc", "--model", MODEL, "--json", "--temperature", str(temperature),
           "--max-tokens", "96", "--seed", str(seed), *extra, prompt]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    if r.returncode != 0:
        failures.append(f"seed {seed} {extra}: rc {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}")
        return None
    out = json.loads(r.stdout.decode().strip().splitlines()[-1])["outputs"][0]
    if out["finish_reason"] != "stop":
        if allow_length:
            return None
        failures.append(f"seed {seed} {extra}: finish_reason {out['finish_reason']}: {out['text']!r}")
        return None
    return out["text"]


with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(SCHEMA, f)
    schema_path = f.name
try:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    valid = 0
    for seed in range(1, 51):
        text = generate(["--json-schema", schema_path], seed, "Describe a person as JSON.")
        if text is None:
            continue
        try:
            value = json.loads(text)
        except ValueError as e:
            failures.append(f"seed {seed}: does not parse ({e}): {text!r}")
            continue
        errors = list(validator.iter_errors(value))
        if errors:
            failures.append(f"seed {seed}: invalid ({errors[0].message}): {text!r}")
            continue
        valid += 1
    print(f"json_schema: {valid}/50 valid")
    # json_object bounds no string: at temperature 1 the small model may ramble inside one up
    # to max_tokens (then the text is cut, as in vLLM). Greedy must finish; every sampled
    # output that finishes must be an object.
    for seed, temp in [(1, 0)] + [(s, 1) for s in range(1, 6)]:
        text = generate(["--json-object"], seed, "Reply with a JSON object with the name and color of a cat.", temp, temp > 0)
        if text is not None and not isinstance(json.loads(text), dict):
            failures.append(f"json_object seed {seed}: not an object: {text!r}")
    choices = ["positive", "negative", "neutral"]
    for seed in range(1, 6):
        text = generate(["--choice", json.dumps(choices)], seed, "Sentiment of: I love this!")
        if text is not None and text not in choices:
            failures.append(f"choice seed {seed}: {text!r} not in {choices}")
finally:
    os.unlink(schema_path)

if failures:
    print("\n".join(failures[:20]))
    sys.exit(1)

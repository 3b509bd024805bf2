#!/usr/bin/env python3
"""Structured output through `llmbus serve` with the official `openai` client, as a user calls it.

- response_format json_schema (nested object, array, enum, required): 50 seeded samples at
  temperature 1 (5 concurrent chat requests with n = 10), every one finishes on its own and
  validates against the schema with Python jsonschema; 10 more streamed (2 x n = 5), the
  deltas joined; one with logprobs;
- /v1/completions with vLLM's guided_json;
- response_format json_object (an object comes out); structured_outputs.choice and
  guided_choice (one of the strings);
- structured_outputs.regex and guided_regex: every output re.fullmatch-es the pattern;
- structured_outputs.grammar and guided_grammar (GBNF): an arithmetic grammar and a small
  JSON-like one, seeded samples at temperature 1, streamed and not, chat and completions:
  every output is in the grammar's language by Python's Lark (tests/unit/gbnf_ref.py);
- a schema with what real ones ask (issue 39: integer bounds inside an object, a number range
  with multipleOf, pattern, formats, anyOf beside the object's keywords, $ref into properties,
  prefixItems): 10 seeded samples at temperature 1 (2 requests with n = 5), every finished one
  validates (formats checked);
- errors: a schema keyword the engine cannot enforce is a 400 naming response_format and the
  keyword; malformed schema, a regex backreference, a grammar with an undefined rule (line
  and column named) or in Lark syntax, two constraints at once, an unknown response_format
  type: 400s naming the field.
Skips (77) without the build, the model or the venv's openai / jsonschema / lark.
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from api_stack import Stack, run_cases, skip

try:
    import jsonschema
    import openai
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
    import gbnf_ref
except ImportError as e:  # pragma: no cover - the venv has them
    skip(f"python module missing: {e}")

# GBNF grammars with finite languages short enough for max_tokens (a cut output would not be
# in the language).
ARITHMETIC = r'''
root    ::= sum " = " number
sum     ::= product ((" + " | " - ") product){0,2}
product ::= operand ((" * " | " / ") operand){0,1}
operand ::= number | "(" number ((" + " | " - ") number){0,2} ")"
number  ::= [0-9]{1,3}
'''
JSON_LIKE = r'''
# a small object: up to three pairs, values numbers, booleans, strings, lists or one nested object
root   ::= "{" pair (", " pair){0,2} "}"
pair   ::= key ": " (value | inner)
inner  ::= "{" key ": " value "}"
key    ::= "\"" [a-z]{1,8} "\""
value  ::= [0-9]{1,3} | "true" | "false" | "\"" [a-zA-Z ]{0,12} "\"" | "[" ([0-9]{1,2} (", " [0-9]{1,2}){0,2})? "]"
'''

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "home": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "Lima"]},
                "floor": {"type": "integer"},
            },
            "required": ["city", "floor"],
            "additionalProperties": False,
        },
        "pets": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
    },
    "required": ["name", "home", "pets"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON: name, home (city, floor) and pets."}]
GRAMMAR_MESSAGES = [{"role": "user", "content": "Write a small arithmetic equation, or a small JSON object."}]
MAX_TOKENS = 112


def check_valid(text, finish_reason, what):
    assert finish_reason == "stop", f"{what}: finish_reason {finish_reason}: {text!r}"
    value = json.loads(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(value)
    return value


def main():
    with Stack() as stack:
        client = openai.OpenAI(base_url=stack.base + "/v1", api_key="none", max_retries=0, timeout=300)
        model = stack.model_name

        def chat(**kw):
            return client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=MAX_TOKENS, **kw)

        def json_schema_50_seeded_samples_validate():
            def one(seed):
                r = chat(response_format=RESPONSE_FORMAT, temperature=1, seed=seed, n=10)
                return [(c.message.content, c.finish_reason) for c in r.choices]
            with ThreadPoolExecutor(5) as pool:
                samples = [s for batch in pool.map(one, range(1, 6)) for s in batch]
            assert len(samples) == 50, len(samples)
            bad = []
            for i, (text, fr) in enumerate(samples):
                try:
                    check_valid(text, fr, f"sample {i}")
                except Exception as e:  # noqa: BLE001 - count every failure
                    bad.append(f"{e}")
            assert not bad, f"{len(bad)}/50 invalid: {bad[:3]}"
            assert len({t for t, _ in samples}) > 10, "temperature 1 should give varied outputs"

        def json_schema_streamed_samples_validate():
            for seed in (101, 202):
                stream = chat(response_format=RESPONSE_FORMAT, temperature=1, seed=seed, n=5, stream=True)
                texts, finish = {}, {}
                for chunk in stream:
                    for c in chunk.choices:
                        texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
                        if c.finish_reason:
                            finish[c.index] = c.finish_reason
                assert sorted(texts) == list(range(5)), texts
                for i in range(5):
                    check_valid(texts[i], finish.get(i), f"seed {seed} stream {i}")

        def json_schema_with_logprobs_validates():
            r = chat(response_format=RESPONSE_FORMAT, temperature=1, seed=7, logprobs=True, top_logprobs=2)
            c = r.choices[0]
            check_valid(c.message.content, c.finish_reason, "logprobs")
            assert c.logprobs and len(c.logprobs.content) > 3
            assert all(t.logprob > -1e9 for t in c.logprobs.content), "a sampled token had -inf logprob"

        def completions_guided_json_validates():
            r = client.completions.create(model=model, prompt="A person as JSON: ", max_tokens=MAX_TOKENS,
                                          temperature=1, seed=11, n=3, extra_body={"guided_json": SCHEMA})
            for c in r.choices:
                check_valid(c.text, c.finish_reason, "completions")

        def json_object_is_an_object():
            r = client.chat.completions.create(model=model, messages=MESSAGES, response_format={"type": "json_object"},
                                               temperature=0, max_tokens=160)
            c = r.choices[0]
            if c.finish_reason == "stop":
                assert isinstance(json.loads(c.message.content), dict), c.message.content
            else:  # cut by max_tokens: still the start of an object
                assert c.message.content.startswith("{"), c.message.content

        def choice_is_one_of_the_strings():
            options = ["red", "green", "blue"]
            for body in ({"structured_outputs": {"choice": options}}, {"guided_choice": options}):
                r = chat(extra_body=body, temperature=1, seed=3, n=4)
                for c in r.choices:
                    assert c.message.content in options and c.finish_reason == "stop", (body, c.message.content)

        def bad_request(param_prefix, words, **kw):
            try:
                chat(**kw)
            except openai.BadRequestError as e:
                err = e.body if isinstance(e.body, dict) else {}
                err = err.get("error", err)
                prefixes = param_prefix if isinstance(param_prefix, tuple) else (param_prefix,)
                assert str(err.get("param", "")).startswith(prefixes), err
                for w in words:
                    assert w in str(err.get("message", "")), (w, err)
                return
            raise AssertionError(f"no 400 for {kw}")

        def real_world_keywords_validate():
            schema = {"type": "object", "additionalProperties": False,
                      "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120},
                                     "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 10,
                                               "multipleOf": 0.5},
                                     "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                     "born": {"type": "string", "format": "date"},
                                     "id": {"type": "string", "format": "uuid"},
                                     "backup_age": {"$ref": "#/properties/age"},
                                     "pair": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 8},
                                                                               {"type": "integer"}], "items": False}},
                      "required": ["age", "code", "born"],
                      "anyOf": [{"required": ["score"]}, {"required": ["id"]}]}
            rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
            checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
            def one(seed):
                r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=160, temperature=1,
                                                   seed=seed, n=5, response_format=rf)
                return [(c.message.content, c.finish_reason) for c in r.choices]

            with ThreadPoolExecutor(max_workers=2) as pool:
                outs = [o for batch in pool.map(one, (1, 2)) for o in batch]
            finished = 0
            for text, finish in outs:
                if finish == "stop":
                    jsonschema.Draft202012Validator(schema, format_checker=checker).validate(json.loads(text))
                    finished += 1
            assert finished >= 5, f"only {finished} of 10 samples finished within 160 tokens: {outs}"

        def unenforceable_schema_is_a_400_naming_the_keyword():
            schema = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
            bad_request("response_format", ["uniqueItems"],
                        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})

        def malformed_schema_is_a_400():
            bad_request("structured_outputs", [], extra_body={"structured_outputs": {"json": "{not json"}})
            bad_request("response_format.json_schema", [], response_format={"type": "json_schema"})
            bad_request("response_format.type", [], response_format={"type": "yaml"})

        def regex_output_fully_matches():
            import re
            pattern = r"(red|green|blue)-\d{2,3}"
            for body in ({"structured_outputs": {"regex": pattern}}, {"guided_regex": pattern}):
                r = chat(extra_body=body, temperature=1, seed=5, n=4)
                for c in r.choices:
                    assert re.fullmatch(pattern, c.message.content) and c.finish_reason == "stop", c.message.content

        def grammar_outputs_are_in_the_language():
            def chat(**kw):  # room for the longest output of both grammars (123 characters)
                return client.chat.completions.create(model=model, messages=GRAMMAR_MESSAGES, max_tokens=200, **kw)
            for grammar in (ARITHMETIC, JSON_LIKE):
                ref = gbnf_ref.Reference(grammar)
                outs = []
                for seed, body in ((21, {"structured_outputs": {"grammar": grammar}}), (22, {"guided_grammar": grammar})):
                    r = chat(extra_body=body, temperature=1, seed=seed, n=4)
                    outs += [(c.message.content, c.finish_reason) for c in r.choices]
                    stream = chat(extra_body=body, temperature=1, seed=seed + 100, n=3, stream=True)
                    texts, finish = {}, {}
                    for chunk in stream:
                        for c in chunk.choices:
                            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
                            if c.finish_reason:
                                finish[c.index] = c.finish_reason
                    assert sorted(texts) == list(range(3)), texts
                    outs += [(texts[i], finish.get(i)) for i in range(3)]
                r = client.completions.create(model=model, prompt="1 + 2 = 3\n", max_tokens=200, temperature=1,
                                              seed=23, n=3, extra_body={"structured_outputs": {"grammar": grammar}})
                outs += [(c.text, c.finish_reason) for c in r.choices]
                assert len(outs) == 17, len(outs)
                bad = [(t, fr) for t, fr in outs if fr != "stop" or not ref.accepts(t)]
                assert not bad, f"{len(bad)}/17 outputs not in the language: {bad[:3]}"
                assert len({t for t, _ in outs}) > 5, f"temperature 1 should give varied outputs: {outs}"

        def bad_regex_and_grammar_are_400s():
            bad_request("structured_outputs.regex", ["backreference"],
                        extra_body={"structured_outputs": {"regex": "(a)\\1"}})
            bad_request("guided_grammar", ["line 2 column 14", "undefined rule 'digit'"],
                        extra_body={"guided_grammar": "root ::= num\nnum ::= \"-\"? digit+"})
            bad_request("structured_outputs.grammar", ["Lark syntax is not supported"],
                        extra_body={"structured_outputs": {"grammar": "start: \"a\" | \"b\""}})

        def two_constraints_are_a_400():
            bad_request(("guided_choice", "response_format"), ["at most one"], response_format={"type": "json_object"},
                        extra_body={"guided_choice": ["a"]})

        failures = run_cases([
            ("json_schema_50_seeded_samples_validate", json_schema_50_seeded_samples_validate),
            ("json_schema_streamed_samples_validate", json_schema_streamed_samples_validate),
            ("json_schema_with_logprobs_validates", json_schema_with_logprobs_validates),
            ("completions_guided_json_validates", completions_guided_json_validates),
            ("json_object_is_an_object", json_object_is_an_object),
            ("choice_is_one_of_the_strings", choice_is_one_of_the_strings),
            ("real_world_keywords_validate", real_world_keywords_validate),
            ("unenforceable_schema_is_a_400_naming_the_keyword", unenforceable_schema_is_a_400_naming_the_keyword),
            ("malformed_schema_is_a_400", malformed_schema_is_a_400),
            ("regex_output_fully_matches", regex_output_fully_matches),
            ("grammar_outputs_are_in_the_language", grammar_outputs_are_in_the_language),
            ("bad_regex_and_grammar_are_400s", bad_regex_and_grammar_are_400s),
            ("two_constraints_are_a_400", two_constraints_are_a_400),
        ])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

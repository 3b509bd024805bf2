"""/v1/embeddings (vLLM's embed task: pooled final-norm hidden states) with the official `openai`
client against `llmbus serve` and the real model: the vectors are unit-norm, deterministic,
the same alone or in a batch, the same for a text and its token ids, equal (within 1e-4) to
the hidden states the CPU forward computes directly for the prompt (llmbus-test-hidden-states)
pooled LAST / MEAN / CLS; base64 carries the same floats; a generation running beside them
gives the same tokens as alone; clear 400s for what is refused."""
import base64
import json
import math
import os
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request

from api_stack import Stack, run_cases, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

TEXTS = ["The capital of France is Paris.", "Embeddings map text to vectors.",
         "A completely different sentence about the weather in spring."]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def normalized(v):
    n = norm(v)
    return [x / n for x in v]


def close(a, b, tol, what):
    assert len(a) == len(b), (len(a), len(b))
    worst = max(abs(x - y) for x, y in zip(a, b))
    print(f"     {what}: max |engine - forward| = {worst:.3g} (bound {tol:.3g})")
    assert worst <= tol, f"{what}: max |diff| {worst:g} > {tol:g}"


def hidden_states(model, ids):
    """Rows [len(ids)][E] of the CPU forward's final-norm hidden states (the reference)."""
    tool = os.environ.get("LLMBUS_HIDDEN_STATES") or os.path.join(
        os.environ.get("LLMBUS_BUILD_DIR", "build"), "tests", "llmbus-test-hidden-states")
    if not os.access(tool, os.X_OK):
        skip(f"{tool} not built")
    out = subprocess.run([tool, model] + [str(i) for i in ids], check=True, capture_output=True, text=True).stdout
    return [[float(x) for x in line.split()] for line in out.splitlines()]


def main():
    with Stack() as st:
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = st.model_name

        def embed(inp, **kw):
            return client.embeddings.create(model=model, input=inp, **kw)

        def token_ids(text):
            status, j = post(st.base, "/tokenize", {"model": model, "prompt": text})
            assert status == 200, j
            return j["tokens"]

        def response_has_the_openai_shape_and_unit_norm():
            r = embed(TEXTS[0])
            assert r.object == "list" and r.model == model and len(r.data) == 1, r
            d = r.data[0]
            assert d.object == "embedding" and d.index == 0
            assert len(d.embedding) == 576, len(d.embedding)  # SmolLM2-135M's hidden size
            assert abs(norm(d.embedding) - 1.0) < 1e-5, norm(d.embedding)
            assert r.usage.prompt_tokens == len(token_ids(TEXTS[0])) == r.usage.total_tokens, r.usage

        def same_text_gives_the_same_vector():
            assert embed(TEXTS[1]).data[0].embedding == embed(TEXTS[1]).data[0].embedding

        def batch_gives_each_text_its_vector_alone():
            alone = [embed(t).data[0].embedding for t in TEXTS]
            r = embed(TEXTS)
            assert [d.index for d in r.data] == [0, 1, 2]
            for i, d in enumerate(r.data):
                assert d.embedding == alone[i], f"input {i} differs in a batch"
            assert alone[0] != alone[1]
            ids = [token_ids(t) for t in TEXTS]
            assert r.usage.prompt_tokens == sum(len(x) for x in ids), r.usage

        def token_ids_give_the_vector_of_their_text():
            ids = token_ids(TEXTS[2])
            assert embed(ids).data[0].embedding == embed(TEXTS[2]).data[0].embedding
            two = embed([ids, token_ids(TEXTS[0])])
            assert two.data[1].embedding == embed(TEXTS[0]).data[0].embedding

        def vectors_equal_the_forward_hidden_states_pooled():
            ids = token_ids(TEXTS[0])
            rows = hidden_states(st.model, ids)
            assert len(rows) == len(ids) and len(rows[0]) == 576
            mean = [sum(col) / len(rows) for col in zip(*rows)]
            cases = [({}, normalized(rows[-1])),  # vLLM's default for a decoder LM: LAST, normalized
                     ({"pooling_type": "MEAN"}, normalized(mean)),
                     ({"pooling_type": "CLS"}, normalized(rows[0])),
                     ({"normalize": False}, rows[-1]),
                     ({"pooling_type": "MEAN", "normalize": False}, mean)]
            for extra, want in cases:
                got = embed(TEXTS[0], extra_body=extra).data[0].embedding
                close(got, want, 1e-4, json.dumps(extra))

        def base64_carries_the_same_floats():
            f = embed(TEXTS[1]).data[0].embedding
            status, j = post(st.base, "/v1/embeddings", {"model": model, "input": TEXTS[1],
                                                          "encoding_format": "base64"})
            assert status == 200, j
            raw = base64.b64decode(j["data"][0]["embedding"])
            got = list(struct.unpack(f"<{len(raw) // 4}f", raw))
            assert got == [struct.unpack("<f", struct.pack("<f", x))[0] for x in f]

        def generation_beside_embeddings_is_unchanged():
            kw = dict(model=model, prompt="Write a short story about a robot:", max_tokens=32, temperature=0)
            alone = client.completions.create(**kw).choices[0].text
            long_inputs = [" ".join(TEXTS) * 6, " ".join(reversed(TEXTS)) * 6]
            ref = [embed(t, extra_body={"pooling_type": "MEAN"}).data[0].embedding for t in long_inputs]
            out, errors = {}, []

            def embed_loop():
                try:
                    for _ in range(3):
                        r = embed(long_inputs, extra_body={"pooling_type": "MEAN"})
                        assert [d.embedding for d in r.data] == ref, "embedding changed beside a generation"
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=embed_loop) for _ in range(2)]
            for t in threads:
                t.start()
            out["text"] = client.completions.create(**kw).choices[0].text
            for t in threads:
                t.join()
            assert not errors, errors
            assert out["text"] == alone, (out["text"], alone)

        def refusals_are_clear_400s():
            for body, param in [({"input": TEXTS[0], "dimensions": 32}, "dimensions"),
                                ({"input": []}, "input"), ({"input": ""}, "input"),
                                ({"input": TEXTS[0], "encoding_format": "int8"}, "encoding_format"),
                                ({"input": TEXTS[0], "pooling_type": "MAX"}, "pooling_type"),
                                ({"input": [[1, 2, 10 ** 9]]}, None),
                                ({"input": [7] * 5000}, None),
                                ({"input": TEXTS[0], "temperature": 1}, "temperature"),
                                ({}, "input")]:
                status, j = post(st.base, "/v1/embeddings", {"model": model, **body})
                assert status == 400, (body, status, j)
                assert j["error"]["message"], j
                if param:
                    assert j["error"]["param"] == param, (body, j)
            try:
                embed(TEXTS[0], dimensions=16)
                raise AssertionError("dimensions was accepted")
            except openai.BadRequestError as e:
                assert "Matryoshka" in str(e), e
            status, j = post(st.base, "/v1/embeddings", {"model": "nope", "input": "x"})
            assert status == 404, j

        failures = run_cases([
            ("response_has_the_openai_shape_and_unit_norm", response_has_the_openai_shape_and_unit_norm),
            ("same_text_gives_the_same_vector", same_text_gives_the_same_vector),
            ("batch_gives_each_text_its_vector_alone", batch_gives_each_text_its_vector_alone),
            ("token_ids_give_the_vector_of_their_text", token_ids_give_the_vector_of_their_text),
            ("vectors_equal_the_forward_hidden_states_pooled", vectors_equal_the_forward_hidden_states_pooled),
            ("base64_carries_the_same_floats", base64_carries_the_same_floats),
            ("generation_beside_embeddings_is_unchanged", generation_beside_embeddings_is_unchanged),
            ("refusals_are_clear_400s", refusals_are_clear_400s),
        ])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

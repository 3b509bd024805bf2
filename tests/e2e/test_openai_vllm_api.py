"""The OpenAI and vLLM API as users call it, against `llmbus serve` with the real model: /tokenize,
/detokenize, /version, /v1/models/{id}; logit_bias, priority, cache_salt, truncate_prompt_tokens,
echo; special tokens in prompt text; X-Request-Id and Retry-After headers; CORS; `llmbus-bench serve`
on the chat endpoint. The official `openai` client where it has the call, plain HTTP otherwise."""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from api_stack import Stack, run_cases, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]
IM_START = "<|im_start|>"


def post(base, path, body, headers=None, timeout=120):
    """(status, headers, parsed JSON body) of a POST."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def get(base, path, headers=None):
    req = urllib.request.Request(base + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def main():
    with Stack() as st:
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = st.model_name

        def tokenize(**body):
            status, _, j = post(st.base, "/tokenize", {"model": model, **body})
            assert status == 200, (status, j)
            return j

        def tokenize_and_detokenize_round_trip():
            j = tokenize(prompt="Hello world, how are you?")
            assert j["count"] == len(j["tokens"]) > 3, j
            assert j["max_model_len"] > 0, j
            status, _, d = post(st.base, "/detokenize", {"model": model, "tokens": j["tokens"]})
            assert status == 200 and d["prompt"] == "Hello world, how are you?", (status, d)
            # messages go through the chat template; without the generation prompt it is shorter
            with_gen = tokenize(messages=CHAT)
            without = tokenize(messages=CHAT, add_generation_prompt=False)
            assert with_gen["count"] > without["count"] > 0, (with_gen, without)
            assert with_gen["tokens"][: without["count"]] == without["tokens"]
            status, _, e = post(st.base, "/detokenize", {"model": model, "tokens": [1, 10**8]})
            assert status == 400 and e["error"]["param"] == "tokens[1]", (status, e)
            status, _, e = post(st.base, "/tokenize", {"model": "nope", "prompt": "x"})
            assert status == 404, (status, e)

        def special_tokens_in_prompt_text_are_parsed():
            chat = tokenize(messages=CHAT)
            special = chat["tokens"][0]  # the template opens with <|im_start|>
            j = tokenize(prompt=IM_START + "user")
            assert j["tokens"][0] == special, (j, special)
            assert j["count"] == len(tokenize(prompt="user")["tokens"]) + 1, j
            # the chat template's text as a completion prompt gives the chat's tokens
            status, _, text = post(st.base, "/detokenize", {"model": model, "tokens": chat["tokens"]})
            assert status == 200
            assert tokenize(prompt=text["prompt"])["tokens"] == chat["tokens"]

        def version_and_model_by_id():
            status, _, v = get(st.base, "/version")
            assert status == 200 and isinstance(v["version"], str) and v["version"], (status, v)
            m = client.models.retrieve(model)
            assert m.id == model and m.object == "model", m
            assert (m.model_extra or {}).get("max_model_len", 0) > 0, m
            try:
                client.models.retrieve("no-such-model")
                raise AssertionError("no 404 for an unknown model id")
            except openai.NotFoundError as e:
                assert e.status_code == 404

        def logit_bias_forces_and_bans_tokens():
            forced = tokenize(prompt=" banana")["tokens"][0]
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0,
                                          logit_bias={str(forced): 100})
            status, _, want = post(st.base, "/detokenize", {"model": model, "tokens": [forced] * 3})
            assert r.choices[0].text == want["prompt"], (r.choices[0].text, want)
            base = client.completions.create(model=model, prompt=PROMPT, max_tokens=1, temperature=0).choices[0].text
            first = tokenize(prompt=base)["tokens"][0]
            banned = client.completions.create(model=model, prompt=PROMPT, max_tokens=1, temperature=0,
                                               logit_bias={str(first): -100}).choices[0].text
            assert banned != base, (banned, base)
            for bad in ({"99999999": 5}, {"5": 101}):
                try:
                    client.completions.create(model=model, prompt=PROMPT, max_tokens=1, logit_bias=bad)
                    raise AssertionError(f"no error for logit_bias {bad}")
                except openai.BadRequestError as e:
                    assert "logit_bias" in str(e), e

        def cache_salt_separates_prefix_cache_entries():
            long_prompt = "A long shared system prompt about rivers and mountains. " * 12
            kw = dict(model=model, prompt=long_prompt, max_tokens=2, temperature=0)

            def cached(salt):
                extra = {"cache_salt": salt} if salt else {}
                r = client.completions.create(extra_body=extra, **kw)
                return r.usage.prompt_tokens_details.cached_tokens, r.choices[0].text

            first, text = cached("salt-a")
            again, text_again = cached("salt-a")
            other, _ = cached("salt-b")
            unsalted, _ = cached(None)
            assert again > first and again > 0, (first, again)  # the same salt hits the cache
            assert other == 0 and unsalted == 0, (other, unsalted)  # another salt (or none) does not
            assert text_again == text

        def priority_cache_salt_and_truncation_are_accepted():
            kw = dict(model=model, prompt=PROMPT, max_tokens=6, temperature=0)
            plain = client.completions.create(**kw)
            salted = client.completions.create(extra_body={"priority": -5, "cache_salt": "tenant-a/x"}, **kw)
            assert salted.choices[0].text == plain.choices[0].text
            cut = client.completions.create(extra_body={"truncate_prompt_tokens": 2}, **kw)
            assert cut.usage.prompt_tokens == 2, cut.usage
            chat = client.chat.completions.create(model=model, messages=CHAT, max_tokens=4,
                                                  extra_body={"truncate_prompt_tokens": 3, "priority": 1})
            assert chat.usage.prompt_tokens == 3, chat.usage

        def echo_prepends_the_prompt():
            full = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0)
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, echo=True)
            assert r.choices[0].text == PROMPT + full.choices[0].text, r.choices[0].text
            chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0,
                                                    echo=True, stream=True))
            assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text

        def request_id_is_echoed():
            status, headers, _ = post(st.base, "/v1/completions",
                                      {"model": model, "prompt": PROMPT, "max_tokens": 2},
                                      headers={"X-Request-Id": "trace-42"})
            assert status == 200 and headers.get("X-Request-Id") == "trace-42", (status, dict(headers))
            status, headers, _ = post(st.base, "/v1/completions", {"model": "nope", "prompt": "x"},
                                      headers={"X-Request-Id": "trace-43"})
            assert status == 404 and headers.get("X-Request-Id") == "trace-43", (status, dict(headers))

        def cors_answers_browsers_as_vllm_does():
            # a browser's preflight: 200 with the CORS headers, no body
            req = urllib.request.Request(st.base + "/v1/chat/completions", method="OPTIONS", headers={
                "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200, r.status
                assert r.headers.get("Access-Control-Allow-Origin") == "*", dict(r.headers)
                assert "POST" in r.headers.get("Access-Control-Allow-Methods", ""), dict(r.headers)
                assert r.headers.get("Access-Control-Allow-Headers") == "authorization, content-type"
            # the request itself carries the origin header back (the default allows any origin)
            status, headers, j = post(st.base, "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 2},
                                      headers={"Origin": "https://app.example"})
            assert status == 200 and headers.get("Access-Control-Allow-Origin") == "*", (status, dict(headers))
            # no Origin: no CORS headers
            status, headers, _ = post(st.base, "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 2})
            assert status == 200 and headers.get("Access-Control-Allow-Origin") is None, dict(headers)

        def bench_serve_chat_endpoint_completes_every_request():
            bench = os.path.join(os.path.dirname(st.llmbus), "llmbus-bench")
            out = subprocess.run([bench, "serve", "--base-url", st.base, "--endpoint", "/v1/chat/completions",
                                  "--num-prompts", "3", "--input-len", "16", "--output-len", "4", "--warmup", "0",
                                  "--no-progress", "--no-memory", "--json"],
                                 capture_output=True, timeout=300, text=True)
            assert out.returncode == 0, out.stderr[-2000:]
            j = json.loads(out.stdout)
            assert j["completed"] == 3 and j["failed"] == 0, j
            # the same through `vllm bench serve`'s spellings: host/port, backend, dataset-name...
            out = subprocess.run([bench, "serve", "--backend", "openai-chat", "--host", "127.0.0.1",
                                  "--port", str(st.port), "--model", model, "--dataset-name", "random",
                                  "--random-input-len", "16", "--random-output-len", "4", "--num-prompts", "4",
                                  "--request-rate", "inf", "--max-concurrency", "2", "--seed", "7",
                                  "--ignore-eos", "--disable-tqdm", "--warmup", "0", "--no-memory", "--json"],
                                 capture_output=True, timeout=300, text=True)
            assert out.returncode == 0, out.stderr[-2000:]
            j = json.loads(out.stdout)
            assert j["completed"] == 4 and j["failed"] == 0, j
            assert j["total_output_tokens"] == 16, j  # --ignore-eos: every answer is 4 tokens
            assert j["model_id"] == model and j["max_concurrency"] == 2, j

        failures = run_cases([
            ("tokenize_and_detokenize_round_trip", tokenize_and_detokenize_round_trip),
            ("special_tokens_in_prompt_text_are_parsed", special_tokens_in_prompt_text_are_parsed),
            ("version_and_model_by_id", version_and_model_by_id),
            ("logit_bias_forces_and_bans_tokens", logit_bias_forces_and_bans_tokens),
            ("priority_cache_salt_and_truncation_are_accepted", priority_cache_salt_and_truncation_are_accepted),
            ("cache_salt_separates_prefix_cache_entries", cache_salt_separates_prefix_cache_entries),
            ("echo_prepends_the_prompt", echo_prepends_the_prompt),
            ("request_id_is_echoed", request_id_is_echoed),
            ("cors_answers_browsers_as_vllm_does", cors_answers_browsers_as_vllm_does),
            ("bench_serve_chat_endpoint_completes_every_request", bench_serve_chat_endpoint_completes_every_request),
        ])

    # One request runs at a time, two may wait: the rest get 429 with Retry-After; waiting
    # requests start by priority (lower first).
    with Stack(args=["--max-num-seqs", "1", "--max-num-waiting", "2", "--policy", "priority"]) as st:
        results = []

        def one():
            results.append(post(st.base, "/v1/completions", {"model": st.model_name, "prompt": PROMPT,
                                                             "max_tokens": 48, "ignore_eos": True}))

        def full_queue_answers_429_with_retry_after():
            threads = [threading.Thread(target=one) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            refused = [r for r in results if r[0] == 429]
            assert refused, [r[0] for r in results]
            assert all(r[1].get("Retry-After") == "1" for r in refused), [dict(r[1]) for r in refused]
            assert any(r[0] == 200 for r in results), [r[0] for r in results]

        def lower_priority_value_runs_first():
            done = []

            def send(name, priority, max_tokens):
                post(st.base, "/v1/completions", {"model": st.model_name, "prompt": PROMPT, "max_tokens": max_tokens,
                                                  "ignore_eos": True, "priority": priority})
                done.append(name)

            first = threading.Thread(target=send, args=("running", 0, 200))
            first.start()
            time.sleep(0.3)  # it holds the only running slot (for seconds); the next two wait
            late = threading.Thread(target=send, args=("low", 10, 8))
            late.start()
            time.sleep(0.2)
            urgent = threading.Thread(target=send, args=("urgent", -10, 8))
            urgent.start()
            for t in (first, late, urgent):
                t.join()
            assert done.index("urgent") < done.index("low"), done

        failures += run_cases([("full_queue_answers_429_with_retry_after", full_queue_answers_429_with_retry_after),
                               ("lower_priority_value_runs_first", lower_priority_value_runs_first)])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

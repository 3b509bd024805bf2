"""prompt_logprobs (vLLM SamplingParams.prompt_logprobs) against `llmbus serve` with the real
model, prefill cut into chunks (--max-num-batched-tokens 16): the list has one entry per prompt
token, null first; each entry holds the prompt token (with its rank) and the top-k; the greedy
(rank 1) token at position t and its logprob equal what a normal greedy decode of the prefix
prompt[:t] samples, with its logprob; the chat endpoint returns them at the top level; a
prefix-cached prompt still gets every entry; `echo` with `logprobs` puts the prompt tokens'
logprobs first; k > 20 and negative k are refused."""
import json
import math
import sys
import urllib.error
import urllib.request

from api_stack import Stack, run_cases

PROMPT = ("The quick brown fox jumps over the lazy dog. Rivers flow to the sea, and the capital of "
          "France is Paris, which lies on the Seine.")
K = 3


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def main():
    with Stack(args=["--max-num-batched-tokens", "16"]) as st:
        model = st.model_name

        def completion(**body):
            status, j = post(st.base, "/v1/completions", {"model": model, "temperature": 0, **body})
            assert status == 200, (status, j)
            return j

        status, tok = post(st.base, "/tokenize", {"model": model, "prompt": PROMPT})
        assert status == 200, tok
        ids = tok["tokens"]
        assert len(ids) > 20, ids  # several 16-token chunks

        def entries_cover_every_prompt_token():
            j = completion(prompt=ids, max_tokens=2, prompt_logprobs=K)
            plp = j["choices"][0]["prompt_logprobs"]
            assert len(plp) == len(ids) and plp[0] is None, (len(plp), len(ids))
            for t in range(1, len(ids)):
                e = plp[t]
                assert str(ids[t]) in e, (t, ids[t], e)  # the prompt token itself
                ranks = sorted(v["rank"] for v in e.values())
                assert ranks[:K] == list(range(1, K + 1)), (t, e)
                for v in e.values():
                    assert v["logprob"] <= 0 and math.isfinite(v["logprob"]), (t, e)
                    assert isinstance(v["decoded_token"], str)
                mine = e[str(ids[t])]
                above = [v for v in e.values() if v["logprob"] > mine["logprob"]]
                assert mine["rank"] >= len(above) + 1, (t, e)
            return plp

        plp_holder = []

        def greedy_token_at_t_matches_a_decode_of_the_prefix():
            plp = entries_cover_every_prompt_token()
            plp_holder.append(plp)
            for t in range(1, len(ids)):
                best = min(plp[t].values(), key=lambda v: v["rank"])
                j = completion(prompt=ids[:t], max_tokens=1, logprobs=1)
                lp = j["choices"][0]["logprobs"]
                assert lp["tokens"][0] == best["decoded_token"], (t, lp, best)
                assert abs(lp["token_logprobs"][0] - best["logprob"]) < 1e-3, (t, lp, best)

        def cached_prompt_still_scores_every_token():
            again = completion(prompt=ids, max_tokens=2, prompt_logprobs=K)  # every block is cached now
            plp = again["choices"][0]["prompt_logprobs"]
            assert len(plp) == len(ids), len(plp)
            first = plp_holder[0] if plp_holder else entries_cover_every_prompt_token()
            for t in range(1, len(ids)):
                a, b = first[t][str(ids[t])], plp[t][str(ids[t])]
                assert a["rank"] == b["rank"] and abs(a["logprob"] - b["logprob"]) < 1e-4, (t, a, b)

        def streamed_completion_carries_them_once():
            req = urllib.request.Request(st.base + "/v1/completions", method="POST",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 4,
                                                          "temperature": 0, "stream": True,
                                                          "prompt_logprobs": 0}).encode())
            with urllib.request.urlopen(req, timeout=300) as r:
                events = [json.loads(line[6:]) for line in r.read().decode().splitlines()
                          if line.startswith("data: {")]
            lists = [c["prompt_logprobs"] for e in events for c in e["choices"] if "prompt_logprobs" in c]
            assert len(lists) == 1 and len(lists[0]) == len(ids), [len(x) for x in lists]

        def chat_returns_them_at_the_top_level():
            status, j = post(st.base, "/v1/chat/completions",
                             {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                              "prompt_logprobs": 1})
            assert status == 200, j
            plp = j["prompt_logprobs"]
            assert plp[0] is None and len(plp) == j["usage"]["prompt_tokens"], (len(plp), j["usage"])

        def echo_with_logprobs_scores_the_prompt_first():
            j = completion(prompt=PROMPT, max_tokens=3, logprobs=2, echo=True, ignore_eos=True, n=2)
            plp = completion(prompt=PROMPT, max_tokens=1, prompt_logprobs=2)["choices"][0]["prompt_logprobs"]
            n = len(ids)
            assert len(j["choices"]) == 2, j
            for c in j["choices"]:  # every choice starts with the prompt's tokens
                lp = c["logprobs"]
                assert len(lp["tokens"]) == n + 3 and lp["token_logprobs"][0] is None, lp["tokens"]
                assert "".join(lp["tokens"]) == c["text"] and c["text"].startswith(PROMPT), (lp["tokens"], c["text"])
                assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(n + 3)], lp["text_offset"]
                assert "prompt_logprobs" not in c or c["prompt_logprobs"] is None, c  # not asked for
                for t in range(1, n):
                    assert abs(lp["token_logprobs"][t] - plp[t][str(ids[t])]["logprob"]) < 1e-4, t
                    assert len(lp["top_logprobs"][t]) >= 2, lp["top_logprobs"][t]
            req = urllib.request.Request(st.base + "/v1/completions", method="POST",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 3,
                                                          "temperature": 0, "stream": True, "echo": True,
                                                          "logprobs": 1}).encode())
            with urllib.request.urlopen(req, timeout=300) as r:
                events = [json.loads(line[6:]) for line in r.read().decode().splitlines()
                          if line.startswith("data: {")]
            tokens = [t for e in events for c in e["choices"] if c.get("logprobs") for t in c["logprobs"]["tokens"]]
            text = "".join(c["text"] for e in events for c in e["choices"])
            assert "".join(tokens) == text and text.startswith(PROMPT) and len(tokens) == n + 3, (tokens, text)

        def out_of_range_k_is_refused():
            for bad in (21, -1, "2"):
                status, j = post(st.base, "/v1/completions", {"model": model, "prompt": PROMPT, "prompt_logprobs": bad})
                assert status == 400 and j["error"]["param"] == "prompt_logprobs", (bad, status, j)

        failures = run_cases([
            ("greedy_token_at_t_matches_a_decode_of_the_prefix", greedy_token_at_t_matches_a_decode_of_the_prefix),
            ("cached_prompt_still_scores_every_token", cached_prompt_still_scores_every_token),
            ("streamed_completion_carries_them_once", streamed_completion_carries_them_once),
            ("chat_returns_them_at_the_top_level", chat_returns_them_at_the_top_level),
            ("echo_with_logprobs_scores_the_prompt_first", echo_with_logprobs_scores_the_prompt_first),
            ("out_of_range_k_is_refused", out_of_range_k_is_refused),
        ])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

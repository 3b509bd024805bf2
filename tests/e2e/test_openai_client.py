"""The official `openai` client against `llmbus serve` with the real model: completions and
chat, streaming and not, n > 1, stop, seed, logprobs, usage, errors; curl for SSE framing."""
import subprocess
import sys

from api_stack import Stack, run_cases, skip

try:
    import openai
except ImportError:
    skip("the openai package is missing (make venv)")

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]


def main():
    with Stack() as st:
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = st.model_name

        def models_list_serves_the_model():
            ids = [m.id for m in client.models.list().data]
            assert ids == [model], ids

        def completion_has_text_and_usage():
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
            c = r.choices[0]
            assert r.object == "text_completion" and c.index == 0
            assert c.text, "empty text"
            assert c.finish_reason in ("stop", "length"), c.finish_reason
            assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 8, r.usage
            assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

        def completion_stream_matches_non_stream_at_temperature_0():
            full = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
            chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}))
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
            assert text == full.choices[0].text, (text, full.choices[0].text)
            assert chunks[-1].choices == [] and chunks[-1].usage is not None
            assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
            finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
            assert finishes == [full.choices[0].finish_reason], finishes

        def chat_non_stream_and_stream_agree():
            r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=16, temperature=0)
            msg = r.choices[0].message
            assert r.object == "chat.completion" and msg.role == "assistant" and msg.content
            assert r.usage.completion_tokens > 0
            chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=16, temperature=0,
                                                         stream=True))
            assert chunks[0].choices[0].delta.role == "assistant"
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert text == msg.content, (text, msg.content)
            assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason

        def n_greater_than_one_gives_n_choices():
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=1.0, n=3, seed=7)
            assert sorted(c.index for c in r.choices) == [0, 1, 2]
            assert len({c.text for c in r.choices}) > 1, "three samples all equal"
            chunks = list(client.chat.completions.create(model=model, messages=CHAT, max_tokens=6, n=2, seed=3,
                                                         stream=True))
            assert {ch.choices[0].index for ch in chunks if ch.choices} == {0, 1}

        def same_seed_same_text():
            kw = dict(model=model, prompt=PROMPT, max_tokens=10, temperature=1.0, top_p=0.95)
            a = client.completions.create(seed=1234, **kw).choices[0].text
            b = client.completions.create(seed=1234, **kw).choices[0].text
            assert a == b, (a, b)
            others = {client.completions.create(seed=s, **kw).choices[0].text for s in (1, 2, 3)}
            assert len(others | {a}) > 1, "every seed gave the same text"

        def stop_string_cuts_the_text():
            full = client.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0).choices[0].text
            words = [w for w in full.split() if len(w) >= 3]
            assert words, f"no word to stop on in {full!r}"
            stop = words[min(1, len(words) - 1)]
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop])
            c = r.choices[0]
            assert c.finish_reason == "stop", c.finish_reason
            assert c.text == full[: full.index(stop)], (c.text, full, stop)

        def logprobs_have_one_entry_per_token():
            r = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2)
            lp = r.choices[0].logprobs
            assert len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens
            assert "".join(lp.tokens) == r.choices[0].text
            assert all(x <= 0 for x in lp.token_logprobs)
            assert all(1 <= len(t) <= 3 for t in lp.top_logprobs)
            c = client.chat.completions.create(model=model, messages=CHAT, max_tokens=5, temperature=0,
                                               logprobs=True, top_logprobs=2)
            content = c.choices[0].logprobs.content
            assert len(content) == c.usage.completion_tokens
            assert all(len(e.top_logprobs) == 2 for e in content)
            assert content[0].token == content[0].top_logprobs[0].token  # greedy = most likely

        def errors_are_openai_errors():
            try:
                client.completions.create(model="no-such-model", prompt="x")
                raise AssertionError("no error for an unknown model")
            except openai.NotFoundError as e:
                assert e.status_code == 404
            try:
                client.completions.create(model=model, prompt="x", max_tokens=10**7)
                raise AssertionError("no error for max_tokens over the context")
            except openai.BadRequestError as e:
                assert e.status_code == 400
            try:
                client.chat.completions.create(model=model, messages=CHAT, temperature=5)
                raise AssertionError("no error for temperature 5")
            except openai.BadRequestError as e:
                assert "temperature" in str(e)

        def curl_sse_framing():
            body = ('{"model": "%s", "prompt": "%s", "max_tokens": 5, "temperature": 0, "stream": true}'
                    % (model, PROMPT))
            out = subprocess.run(["curl", "-sN", "-D", "-", st.base + "/v1/completions",
                                  "-H", "Content-Type: application/json", "-d", body],
                                 capture_output=True, timeout=120, check=True).stdout.decode()
            head, _, payload = out.partition("\r\n\r\n")
            assert "content-type: text/event-stream" in head.lower(), head
            events = payload.split("\n\n")
            assert events[-1] == "", "stream does not end with a blank line"
            events = events[:-1]
            assert all(e.startswith("data: ") and "\n" not in e for e in events), events
            assert events[-1] == "data: [DONE]", events[-1]
            assert len(events) >= 2

        failures = run_cases([
            ("models_list_serves_the_model", models_list_serves_the_model),
            ("completion_has_text_and_usage", completion_has_text_and_usage),
            ("completion_stream_matches_non_stream_at_temperature_0",
             completion_stream_matches_non_stream_at_temperature_0),
            ("chat_non_stream_and_stream_agree", chat_non_stream_and_stream_agree),
            ("n_greater_than_one_gives_n_choices", n_greater_than_one_gives_n_choices),
            ("same_seed_same_text", same_seed_same_text),
            ("stop_string_cuts_the_text", stop_string_cuts_the_text),
            ("logprobs_have_one_entry_per_token", logprobs_have_one_entry_per_token),
            ("errors_are_openai_errors", errors_are_openai_errors),
            ("curl_sse_framing", curl_sse_framing),
        ])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

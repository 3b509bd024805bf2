"""Reasoning models over HTTP with the official `openai` client: `llmbus serve
--reasoning-parser deepseek_r1` with a random-weight model (small LLaMA, seeded weights) over
SmolLM2's vocabulary, which holds "<think>" / "</think>", and whose chat template opens a
thinking block in the generation prompt (closes an empty one with enable_thinking false):
tests/tools/make_reasoning_model.py --random-weights. The model knows nothing: logit_bias on
"</think>" decides where its reasoning ends (the output stays seeded).

- message.reasoning_content and message.content are the raw text (the same request as token
  ids on /v1/completions, which no parser reads) split at "</think>", markup left out; with
  no "</think>" everything is reasoning;
- streamed, the reasoning_content and content deltas add up to the same two strings and no
  delta holds markup;
- chat_template_kwargs.enable_thinking false: no reasoning, the whole text is content;
- structured output waits for the end of the reasoning (vLLM's rule): the reasoning is free
  text, the content validates against the schema; "</think>" forced at once (logit_bias 100)
  leaves empty reasoning and the JSON; with enable_thinking false the JSON starts at once;
- the Responses API gives the reasoning as a `reasoning` output item before the message.
"""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

from api_stack import Stack, run_cases, skip

try:
    import jsonschema
    import openai
except ImportError as e:
    skip(f"{e.name} is missing (make venv)")

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "days"], "additionalProperties": False}
MESSAGES = [{"role": "user", "content": "Plan a short trip. Answer as JSON."}]
BIAS = 6  # on "</think>": some seeds end the reasoning within 40 tokens, some do not


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    try:
        import gguf  # noqa: F401
    except ImportError:
        skip("the gguf package is missing (make venv)")
    src = os.environ.get("LLMBUS_MODEL", os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                      "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(src):
        skip(f"model {src} missing (run ops/fetch-model.sh)")
    tmp = tempfile.mkdtemp(prefix="llmbus-reasoning-")
    model = os.path.join(tmp, "random-think.gguf")
    subprocess.run([sys.executable, os.path.join(TOOLS, "make_reasoning_model.py"), src, model,
                    "--random-weights", "1"], check=True, stdout=subprocess.DEVNULL)
    os.environ["LLMBUS_MODEL"] = model
    with Stack(args=["--reasoning-parser", "deepseek_r1"]) as st:
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        name = st.model_name
        end_id = post(st.base, "/tokenize", {"model": name, "prompt": "</think>"})["tokens"]
        assert len(end_id) == 1, end_id
        end_id = end_id[0]

        def raw_text(messages, seed, bias, max_tokens, kwargs=None):
            """The same request's text from /v1/completions (no parser): the prompt as token ids."""
            body = {"model": name, "messages": messages}
            if kwargs:
                body["chat_template_kwargs"] = kwargs
            ids = post(st.base, "/tokenize", body)["tokens"]
            r = client.completions.create(model=name, prompt=ids, max_tokens=max_tokens, temperature=1, seed=seed,
                                          logit_bias={str(end_id): bias})
            return r.choices[0].text

        def chat(seed, bias, max_tokens=40, **kw):
            return client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=max_tokens, temperature=1,
                                                  seed=seed, logit_bias={str(end_id): bias}, **kw)

        def reasoning_and_content_split_the_raw_text():
            ended = 0
            for seed in range(1, 9):
                m = chat(seed, BIAS).choices[0].message
                raw = raw_text(MESSAGES, seed, BIAS, 40)
                reasoning = m.model_extra.get("reasoning_content")
                assert reasoning is not None and "think>" not in reasoning, m
                if "</think>" in raw:  # the first one ends the reasoning; the content may hold more
                    ended += 1
                    assert raw == reasoning + "</think>" + (m.content or ""), (raw, reasoning, m.content)
                else:
                    assert raw == reasoning and m.content is None, (raw, reasoning, m.content)
            assert 1 <= ended < 8, f"{ended} of 8 outputs ended their reasoning: both cases must be seen"

        def streamed_deltas_add_up_to_the_message():
            for seed in range(1, 5):
                whole = chat(seed, BIAS).choices[0].message
                parts = {"reasoning_content": "", "content": ""}
                for ch in chat(seed, BIAS, stream=True):
                    for c in ch.choices:
                        extra = c.delta.model_extra or {}
                        for k in parts:
                            v = extra.get(k) if k == "reasoning_content" else c.delta.content
                            if v:
                                assert k == "content" or "think>" not in v, v
                                parts[k] += v
                assert parts["reasoning_content"] == whole.model_extra["reasoning_content"], (parts, whole)
                assert parts["content"] == (whole.content or ""), (parts, whole)

        def thinking_off_is_all_content():
            m = chat(4, BIAS, extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
            assert m.model_extra.get("reasoning_content") is None, m
            assert m.content == raw_text(MESSAGES, 4, BIAS, 40, {"enable_thinking": False}), m.content

        def structured_output_starts_after_the_reasoning():
            rf = {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}}
            free = valid = 0
            for seed in range(1, 9):
                c = chat(seed, BIAS, max_tokens=96, response_format=rf).choices[0]
                reasoning = c.message.model_extra.get("reasoning_content") or ""
                free += any(ch.isalpha() for ch in reasoning[:3])  # no JSON grammar over the thinking
                if c.message.content is not None and c.finish_reason == "stop":
                    jsonschema.validate(json.loads(c.message.content), SCHEMA)
                    valid += 1
            assert free >= 1 and valid >= 1, (free, valid)
            forced = chat(7, 100, max_tokens=64, response_format=rf).choices[0]
            assert forced.message.model_extra.get("reasoning_content") == "", forced.message
            jsonschema.validate(json.loads(forced.message.content), SCHEMA)
            off = chat(8, 0, max_tokens=64, response_format=rf,
                       extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0]
            assert off.message.model_extra.get("reasoning_content") is None
            jsonschema.validate(json.loads(off.message.content), SCHEMA)
            text = ""
            for ch in chat(7, 100, max_tokens=64, response_format=rf, stream=True):
                for c in ch.choices:
                    text += c.delta.content or ""
            jsonschema.validate(json.loads(text), SCHEMA)

        def responses_api_gives_a_reasoning_item():
            r = client.responses.create(model=name, input="Plan a short trip.", max_output_tokens=40, temperature=1,
                                        extra_body={"seed": 3, "logit_bias": {str(end_id): BIAS}})
            kinds = [o.type for o in r.output]
            ref = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Plan a short trip."}],
                                                 max_tokens=40, temperature=1, seed=3,
                                                 logit_bias={str(end_id): BIAS}).choices[0].message
            assert kinds[0] == "reasoning", kinds
            assert r.output[0].content[0].text == ref.model_extra["reasoning_content"], (r.output[0], ref)
            assert r.output_text == (ref.content or ""), (r.output_text, ref.content)
            r = client.responses.create(model=name, input="Plan a short trip.", max_output_tokens=40, temperature=1,
                                        extra_body={"seed": 3, "logit_bias": {str(end_id): BIAS}}, stream=True)
            events = list(r)
            text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
            assert text == ref.model_extra["reasoning_content"], (text, ref)
            assert events[-1].response.output[0].type == "reasoning", events[-1]

        failures = run_cases([
            ("reasoning_and_content_split_the_raw_text", reasoning_and_content_split_the_raw_text),
            ("streamed_deltas_add_up_to_the_message", streamed_deltas_add_up_to_the_message),
            ("thinking_off_is_all_content", thinking_off_is_all_content),
            ("structured_output_starts_after_the_reasoning", structured_output_starts_after_the_reasoning),
            ("responses_api_gives_a_reasoning_item", responses_api_gives_a_reasoning_item),
        ])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

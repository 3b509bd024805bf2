"""The model's own Jinja chat template through `llmbus serve`: a chat request's prompt is the
GGUF's tokenizer.chat_template rendered as Hugging Face's apply_chat_template renders it
(Python jinja2 here), `--chat-template FILE` replaces it, chat_template_kwargs reach the
template, tool-call round trips (assistant tool_calls with their arguments parsed into a
dict, tool messages with tool_call_id) map to the OpenAI message objects templates expect,
continue_final_message continues the last assistant message, and a template's
raise_exception is the client's 400. /tokenize + /detokenize show the rendered prompt;
usage.prompt_tokens shows what a chat completion sent to the engine."""
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request

from api_stack import Stack, run_cases, skip

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit"))
try:
    from test_jinja_templates import gguf_chat_template, hf_env
except ImportError as e:
    skip(f"jinja2 missing (make venv): {e}")

CUSTOM = """{%- for m in messages %}<|im_start|>{{ m.role }}{% if m.name %}({{ m.name }}){% endif %}
{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }} city={{ c.function.arguments.city }}{% endfor %}{% else %}{{ m.content }}{% endif %}{% if m.tool_call_id %} [{{ m.tool_call_id }}]{% endif %}<|im_end|>
{% endfor %}
{%- if messages[0].role == 'tool' %}{{ raise_exception('a conversation cannot start with a tool result') }}{% endif %}
{%- if greeting is defined %}{{ greeting }}
{% endif %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colors."}]
TOOL_ROUND_TRIP = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C, clear"},
]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def hf_messages(messages):
    """What vLLM hands the template: tool_calls[i].function.arguments parsed into a dict."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        out.append(m)
    return out


def render(src, messages, add_generation_prompt=True, **kwargs):
    ctx = dict(kwargs, messages=hf_messages(messages), add_generation_prompt=add_generation_prompt,
               bos_token=kwargs.get("bos_token", ""), eos_token=kwargs.get("eos_token", ""))
    return hf_env().from_string(src).render(**ctx)


def main():
    model = os.environ.get("LLMBUS_MODEL") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models",
        "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        skip(f"model {model} missing")
    gguf_src = gguf_chat_template(model)
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(CUSTOM)
        custom_path = f.name

    def prompt_text(st, messages, **body):
        status, j = post(st.base, "/tokenize", {"model": st.model_name, "messages": messages, **body})
        assert status == 200, (status, j)
        status, d = post(st.base, "/detokenize", {"model": st.model_name, "tokens": j["tokens"]})
        assert status == 200, (status, d)
        return d["prompt"]

    def count_tokens(st, text):
        status, j = post(st.base, "/tokenize", {"model": st.model_name, "prompt": text})
        assert status == 200, (status, j)
        return j["count"]

    def chat_prompt_tokens(st, messages, **extra):
        status, j = post(st.base, "/v1/chat/completions", {"model": st.model_name, "messages": messages,
                                                            "max_tokens": 1, "temperature": 0, **extra})
        assert status == 200, (status, j)
        return j["usage"]["prompt_tokens"]

    with Stack() as st:
        def gguf_template_renders_the_prompt():
            want = render(gguf_src, CHAT, bos_token="<|im_start|>", eos_token="<|im_end|>")
            got = prompt_text(st, CHAT)
            assert got == want, (got, want)
            want = render(gguf_src, CHAT, add_generation_prompt=False)
            assert prompt_text(st, CHAT, add_generation_prompt=False) == want

        failures = run_cases([("gguf_template_renders_the_prompt", gguf_template_renders_the_prompt)])

    with Stack(args=["--chat-template", custom_path]) as st:
        def chat_template_file_overrides_the_gguf():
            assert prompt_text(st, CHAT) == render(CUSTOM, CHAT)

        def tool_round_trip_reaches_the_template():
            want = render(CUSTOM, TOOL_ROUND_TRIP)
            assert "CALL get_weather {\"city\": \"Paris\", \"unit\": \"celsius\"} city=Paris" in want, want
            assert prompt_text(st, TOOL_ROUND_TRIP) == want
            assert chat_prompt_tokens(st, TOOL_ROUND_TRIP) == count_tokens(st, want)

        def chat_template_kwargs_reach_the_template():
            want = render(CUSTOM, CHAT, greeting="Hello from kwargs")
            got = chat_prompt_tokens(st, CHAT, chat_template_kwargs={"greeting": "Hello from kwargs"})
            assert got == count_tokens(st, want) and got > chat_prompt_tokens(st, CHAT), got

        def continue_final_message_continues_the_assistant():
            msgs = CHAT + [{"role": "assistant", "content": "Red, green and"}]
            full = render(CUSTOM, msgs, add_generation_prompt=False)
            want = full[: full.rindex("Red, green and") + len("Red, green and")]
            got = chat_prompt_tokens(st, msgs, continue_final_message=True, add_generation_prompt=False)
            assert got == count_tokens(st, want), (got, want)
            status, j = post(st.base, "/v1/chat/completions", {"model": st.model_name, "messages": msgs,
                                                                "continue_final_message": True})
            assert status == 400 and "add_generation_prompt" in json.dumps(j), (status, j)

        def raise_exception_is_a_400_with_its_message():
            status, j = post(st.base, "/v1/chat/completions", {
                "model": st.model_name, "max_tokens": 1,
                "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]})
            assert status == 400 and "cannot start with a tool result" in json.dumps(j), (status, j)

        failures += run_cases([
            ("chat_template_file_overrides_the_gguf", chat_template_file_overrides_the_gguf),
            ("tool_round_trip_reaches_the_template", tool_round_trip_reaches_the_template),
            ("chat_template_kwargs_reach_the_template", chat_template_kwargs_reach_the_template),
            ("continue_final_message_continues_the_assistant", continue_final_message_continues_the_assistant),
            ("raise_exception_is_a_400_with_its_message", raise_exception_is_a_400_with_its_message),
        ])
    os.unlink(custom_path)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

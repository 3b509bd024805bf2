"""Differential test of the C Jinja interpreter (model/template/jinja.h, through the jinja_render
tool) against Python jinja2 as Hugging Face's apply_chat_template runs it:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, HF's AssistantTracker `generation` tag, its tojson filter (ensure_ascii=False)
and its raise_exception / strftime_now globals (the date fixed on both sides).

Templates: every *.jinja of llama.cpp's models/templates (ops/fetch-chat-templates.sh puts
them in .cache/chat-templates/) plus the default model's GGUF tokenizer.chat_template.
Each is rendered over the conversations below; the outputs must be equal byte for byte, and
where jinja2 raises, the C interpreter must refuse too. At least 20 model families must
render every conversation jinja2 renders.

usage: test_jinja_templates.py JINJA_RENDER TEMPLATES_DIR MODEL_GGUF
"""
import datetime
import json
import os
import struct
import subprocess
import sys
import tempfile

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2026, 7, 15, 10, 30, 0)
NOW_UNIX = int(NOW.replace(tzinfo=datetime.timezone.utc).timestamp())


class AssistantTracker(Extension):
    """HF's {% generation %} tag, rendering its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def hf_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALC_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thank you. How can I help?"}
U2 = {"role": "user", "content": "Écris « bonjour » en 日本語, please.\nTwo lines."}
CALL = {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
          "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}

CONVERSATIONS = [
    ("user_only", {"messages": [U1], "add_generation_prompt": True}),
    ("user_only_no_gen", {"messages": [U1], "add_generation_prompt": False}),
    ("system_user", {"messages": [SYS, U1], "add_generation_prompt": True}),
    ("multi_turn", {"messages": [SYS, U1, A1, U2], "add_generation_prompt": True}),
    ("multi_turn_no_system", {"messages": [U1, A1, U2], "add_generation_prompt": True}),
    ("ends_with_assistant", {"messages": [U1, A1], "add_generation_prompt": False}),
    ("tools_given", {"messages": [SYS, U1], "tools": [WEATHER_TOOL, CALC_TOOL],
                     "add_generation_prompt": True}),
    ("tool_call_and_result", {"messages": [U1, CALL, RESULT], "tools": [WEATHER_TOOL],
                              "add_generation_prompt": True}),
    ("tool_round_trip", {"messages": [SYS, U1, CALL, RESULT, A1, U2], "tools": [WEATHER_TOOL],
                         "add_generation_prompt": True}),
    ("kwargs_thinking", {"messages": [U1], "add_generation_prompt": True, "enable_thinking": False}),
]


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF v2/v3 file (None if absent)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    if data[:4] != b"GGUF":
        return None
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    off = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def read_str(o):
        n = struct.unpack_from("<Q", data, o)[0]
        return data[o + 8:o + 8 + n], o + 8 + n

    def skip(t, o):
        if t == 8:
            return read_str(o)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, o)
            o += 12
            for _ in range(n):
                o = skip(et, o)
            return o
        return o + sizes[t]

    for _ in range(n_kv):
        key, off = read_str(off)
        t = struct.unpack_from("<I", data, off)[0]
        off += 4
        if key == b"tokenizer.chat_template" and t == 8:
            return read_str(off)[0].decode()
        off = skip(t, off)
    return None


def main():
    render, tdir, model = sys.argv[1], sys.argv[2], sys.argv[3]
    templates = {}
    if not os.path.isdir(tdir) or not any(n.endswith(".jinja") for n in os.listdir(tdir)):
        print(f"SKIP: no templates in {tdir} (ops/fetch-chat-templates.sh)")
        return 77
    for name in sorted(os.listdir(tdir)):
        if name.endswith(".jinja"):
            with open(os.path.join(tdir, name), encoding="utf-8") as f:
                templates[name[:-6]] = f.read()
    if os.path.exists(model):
        src = gguf_chat_template(model)
        assert src, f"{model} has no tokenizer.chat_template"
        templates["gguf:" + os.path.basename(model)] = src
    env = hf_env()
    failures, passed, raised = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for tname, src in templates.items():
            tpath = os.path.join(tmp, "t.jinja")
            with open(tpath, "w", encoding="utf-8") as f:
                f.write(src)
            try:
                compiled = env.from_string(src)
            except jinja2.TemplateError as e:
                compiled, compile_err = None, e
            ok_all, rendered = True, 0
            for cname, conv in CONVERSATIONS:
                ctx = dict(conv, bos_token="<s>", eos_token="</s>")
                cpath = os.path.join(tmp, "c.json")
                with open(cpath, "w", encoding="utf-8") as f:
                    json.dump(ctx, f, ensure_ascii=False)
                try:
                    if compiled is None:
                        raise compile_err
                    want = compiled.render(**ctx).encode()
                    err = None
                except Exception as e:  # jinja2 raised: the C side must refuse too
                    want, err = None, f"{type(e).__name__}: {e}"
                p = subprocess.run([render, tpath, cpath, str(NOW_UNIX)], capture_output=True, timeout=60)
                if p.returncode not in (0, 1):
                    failures.append(f"{tname} / {cname}: jinja_render exit {p.returncode}: {p.stderr.decode()[-500:]}")
                    ok_all = False
                elif err is not None:
                    raised.setdefault(tname, err)
                    if p.returncode == 0:
                        failures.append(f"{tname} / {cname}: jinja2 raised ({err}) but C rendered")
                        ok_all = False
                elif p.returncode != 0:
                    failures.append(f"{tname} / {cname}: C refused: {p.stderr.decode().strip()[:300]}")
                    ok_all = False
                elif p.stdout != want:
                    i = next((k for k in range(min(len(want), len(p.stdout))) if want[k] != p.stdout[k]),
                             min(len(want), len(p.stdout)))
                    failures.append(f"{tname} / {cname}: differs at byte {i}:\n  jinja2: {want[max(0, i - 60):i + 60]!r}\n"
                                    f"  C:      {p.stdout[max(0, i - 60):i + 60]!r}")
                    ok_all = False
                else:
                    rendered += 1
            if ok_all and rendered:
                passed.append(tname)
    for t, e in sorted(raised.items()):
        print(f"jinja2 raises on some conversations of {t}: {e[:160]}")
    for f in failures:
        print("FAIL", f)
    print("match on every conversation:", ", ".join(passed))
    print(f"{len(passed)}/{len(templates)} templates match jinja2 on every conversation; "
          f"{len(failures)} mismatches")
    if failures or len(passed) < 20:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

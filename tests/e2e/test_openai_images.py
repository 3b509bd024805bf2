"""Images over HTTP with the official `openai` client (issue 22): `llmbus serve --mmproj` with
SmolLM2 whose vocabulary holds SmolVLM's image tokens (tests/tools/make_vlm_text_model.py) and
a seeded random mmproj of its width (tests/tools/make_mmproj.py tiny-idefics3), a SmolVLM-style
chat template (content parts, "<image>").

- a chat with an image gets an answer, its prompt counting the image's tokens;
- the same image in a second request (other text before it, so no prefix-cache hit) is not
  encoded again: the engine's encoder-cache hits grow, its encoder inputs by one in all;
- greedy output with the image equals the output for the same prompt sent to /v1/completions
  as token ids with the encoder's rows (computed by clip_tool from the same file) as
  `prompt_embeds` at the "<image>" positions;
- bad images (truncated, 100000 x 100000 header, GIF, bad base64, type mismatch), a remote URL
  and a file URL without --allowed-local-media-path are 400s naming the part, and none of
  them reaches the engine (its prefix-cache queries and encoder inputs do not move).
argv[1]: clip_tool (tests/unit/clip_tool.c)."""
import base64
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

from api_stack import Stack, metric, metrics, run_cases, skip

try:
    import numpy as np
    import openai
    from PIL import Image
except ImportError as e:
    skip(f"{e.name} is missing (make venv)")

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
            "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
            "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
            "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def png_bytes(w, h, seed):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def data_url(data, kind="png"):
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def image_message(text_before, url, text_after):
    return [{"role": "user", "content": [{"type": "text", "text": text_before},
                                         {"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text_after}]}]


def prepare(tmp, source_model):
    py = sys.executable
    model = os.path.join(tmp, "SmolLM2-vlm.gguf")
    mmproj = os.path.join(tmp, "mmproj.gguf")
    subprocess.run([py, os.path.join(TOOLS, "make_vlm_text_model.py"), source_model, model], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([py, os.path.join(TOOLS, "make_mmproj.py"), mmproj, "--shape", "tiny-idefics3", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)
    tmpl = os.path.join(tmp, "template.jinja")
    with open(tmpl, "w") as f:
        f.write(TEMPLATE)
    return model, mmproj, tmpl


def encoder_rows(clip_tool, mmproj, image_path):
    out = subprocess.run([clip_tool, "encode", mmproj, image_path], check=True, capture_output=True).stdout
    head, _, raw = out.partition(b"\n")
    rows, cols = map(int, head.split())
    return np.frombuffer(raw[: rows * cols * 4], dtype="<f4").reshape(rows, cols)


def image_plan(clip_tool, mmproj, w, h):
    out = subprocess.run([clip_tool, "plan", mmproj, str(w), str(h)], check=True, capture_output=True).stdout
    _, _, prompt = out.partition(b"\n")
    return prompt.decode()


def main():
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        skip("clip_tool not built (the image encoder, model/vision/clip.h)")
    if not os.path.exists(os.path.join(TOOLS, "make_mmproj.py")):
        skip("tests/tools/make_mmproj.py missing")
    try:
        import gguf  # noqa: F401
    except ImportError:
        skip("the gguf package is missing (make venv)")
    clip_tool = sys.argv[1]
    src = os.environ.get("LLMBUS_MODEL", os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                      "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(src):
        skip(f"model {src} missing (run ops/fetch-model.sh)")
    tmp = tempfile.mkdtemp(prefix="llmbus-images-")
    model, mmproj, tmpl = prepare(tmp, src)
    os.environ["LLMBUS_MODEL"] = model
    img = png_bytes(80, 56, 1)
    img_path = os.path.join(tmp, "img.png")
    with open(img_path, "wb") as f:
        f.write(img)
    with Stack(args=["--mmproj", mmproj, "--chat-template", tmpl]) as st:
        client = openai.OpenAI(base_url=st.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        name = st.model_name

        def engine_counters():
            """(prefix-cache queries, encoder inputs, encoder hits) once the engine's stats settle:
            the same three times a second apart (the scheduler publishes its series on the API
            port's /metrics every heartbeat, 2 s)."""
            seen = []
            for _ in range(40):
                v = metrics(st.base)
                seen.append((metric(v, "llmbus:prefix_cache_queries_total"),
                             metric(v, "llmbus:encoder_inputs_computed_total"),
                             metric(v, "llmbus:encoder_cache_hits_total")))
                if len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
                    return seen[-1]
                time.sleep(1.0)
            return seen[-1]

        def chat(messages, max_tokens=12):
            return client.chat.completions.create(model=name, messages=messages, max_tokens=max_tokens,
                                                  temperature=0)

        def chat_with_an_image_gets_an_answer():
            r = chat(image_message("Describe ", data_url(img), " briefly."))
            c = r.choices[0]
            assert c.finish_reason in ("length", "stop"), c.finish_reason
            assert isinstance(c.message.content, str) and c.message.content, c
            plan = image_plan(clip_tool, mmproj, 80, 56)
            assert r.usage.prompt_tokens > plan.count("<image>"), (r.usage, plan.count("<image>"))

        def same_image_twice_is_encoded_once():
            before = engine_counters()
            other = png_bytes(64, 64, 2)
            chat(image_message("First: ", data_url(other), " what?"), max_tokens=2)
            chat(image_message("Second, other words: ", data_url(other), " now?"), max_tokens=2)
            after = engine_counters()
            assert after[1] - before[1] == 1, (before, after)
            assert after[2] - before[2] >= 1, (before, after)

        def image_output_equals_its_embeddings_sent_as_prompt_embeds():
            before, after = "<|im_start|>user\nDescribe ", " briefly.<|im_end|>\n<|im_start|>assistant\n"
            want = chat(image_message("Describe ", data_url(img), " briefly."), max_tokens=12)
            rows = encoder_rows(clip_tool, mmproj, img_path)
            plan = image_plan(clip_tool, mmproj, 80, 56)

            def tok(text):
                req = urllib.request.Request(st.base + "/tokenize", data=json.dumps({"model": name, "prompt": text}).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as resp:
                    return json.loads(resp.read())["tokens"]

            ids_plan = tok(plan)
            image_id = tok("<image>")[0]
            ids = tok(before) + ids_plan + tok(after)
            pos = [i for i, t in enumerate(ids) if t == image_id]
            assert len(pos) == rows.shape[0], (len(pos), rows.shape)
            runs, k = [], 0  # contiguous runs of image tokens -> one prompt_embeds item each
            while k < len(pos):
                j = k
                while j + 1 < len(pos) and pos[j + 1] == pos[j] + 1:
                    j += 1
                runs.append({"data": base64.b64encode(rows[k: j + 1].astype("<f4").tobytes()).decode(),
                             "dtype": "float32", "shape": [j + 1 - k, rows.shape[1]], "placeholder_offset": pos[k]})
                k = j + 1
            got = client.completions.create(model=name, prompt=ids, max_tokens=12, temperature=0,
                                            extra_body={"prompt_embeds": runs})
            assert got.choices[0].text == want.choices[0].message.content, (got.choices[0].text,
                                                                            want.choices[0].message.content)
            # and the image matters: zero rows in its place give another answer
            runs0 = [dict(r, data=base64.b64encode(np.zeros((r["shape"][0], r["shape"][1]), "<f4").tobytes()).decode())
                     for r in runs]
            zero = client.completions.create(model=name, prompt=ids, max_tokens=12, temperature=0,
                                             extra_body={"prompt_embeds": runs0})
            assert zero.choices[0].text != got.choices[0].text, zero.choices[0].text

        def bad_images_are_400_and_reach_no_engine():
            before = engine_counters()
            huge = bytearray(img)
            huge[16:24] = struct.pack(">II", 100000, 100000)
            huge[29:33] = struct.pack(">I", zlib.crc32(bytes(huge[12:29])))  # a valid IHDR
            gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
            cases = [
                (data_url(img[: len(img) // 2]), "messages"),           # truncated: the decoder's
                (data_url(bytes(huge)), "messages"),                    # 100k x 100k header
                ("data:image/png;base64," + base64.b64encode(gif).decode(), "image_url"),
                ("data:image/png;base64,!!notbase64!!", "image_url"),
                (data_url(img, "jpeg"), "image_url"),                   # PNG declared JPEG
                ("https://example.com/cat.png", "image_url"),
                ("file://" + img_path, "image_url"),
            ]
            for url, where in cases:
                try:
                    chat(image_message("x ", url, " y"), max_tokens=2)
                    raise AssertionError(f"{url[:40]} was accepted")
                except openai.BadRequestError as e:
                    assert e.status_code == 400, e
                    body = e.body if isinstance(e.body, dict) else {}
                    param = body.get("param") or ""
                    assert where in param or where in str(e), (url[:40], param, str(e))
            after = engine_counters()
            assert after[:2] == before[:2], (before, after)

        def remote_url_names_the_reason():
            try:
                chat(image_message("x ", "http://example.com/a.jpg", ""), max_tokens=2)
                raise AssertionError("accepted")
            except openai.BadRequestError as e:
                assert "not fetched" in str(e), str(e)

        cases = [chat_with_an_image_gets_an_answer, same_image_twice_is_encoded_once,
                 image_output_equals_its_embeddings_sent_as_prompt_embeds,
                 bad_images_are_400_and_reach_no_engine, remote_url_names_the_reason]
        failures = run_cases([(f.__name__, f) for f in cases])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

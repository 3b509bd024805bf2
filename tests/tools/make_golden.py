#!/usr/bin/env python3
"""Records golden outputs of the default model with llama.cpp (the oracle) for
tests/e2e/test_golden_llamacpp.c.

For each prompt (4 chat-templated, 4 raw; two of them over 500 tokens) it writes: the
prompt text (and chat messages), the prompt token ids, the first step's logits (top 256
ids and values as float32, plus max/mean/std of the full vector) and a greedy continuation
of 64 tokens computed step by step (EOS ignored), with the top-2 logits at every step.

Chat prompts are rendered from the GGUF's own `tokenizer.chat_template` with jinja2
exactly as Hugging Face's apply_chat_template does (sandboxed env, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception/strftime_now, special tokens as variables,
add_generation_prompt=True), then tokenized with special tokens parsed; every prompt gets
BOS/EOS as the GGUF says (llama_tokenize's add_special).

Usage (see tests/tools/README.md for the venv):
  /tmp/venv-golden/bin/python tests/tools/make_golden.py [--model M.gguf] [--out FILE]
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox
import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests", "e2e", "golden", "smollm2-135m-instruct-q4_1.json")
LLAMA_CPP_COMMIT = "0c1e57098"  # llama-cpp-python 0.3.36 CHANGELOG: "update llama.cpp to ggml-org/llama.cpp@0c1e57098"
N_CTX = 2048
N_TOP_LOGITS = 256
N_GREEDY = 64
SEED = 1234

LONG_DOC = (
    "The history of lighthouses begins with fires lit on hilltops to guide ships home at "
    "night. The most famous early lighthouse was the Pharos of Alexandria, built in the third "
    "century BC on a small island at the entrance to the harbour. It stood for more than a "
    "thousand years before earthquakes brought it down. In the centuries that followed, "
    "towers along the coasts of Europe burned wood, then coal, and later oil in open braziers "
    "or lanterns. These lights were dim and smoky, and keepers struggled to keep the glass "
    "clean. A major change came in 1822, when the French physicist Augustin Fresnel designed "
    "a lens made of concentric rings of glass prisms. His lens gathered the light of a single "
    "lamp and bent it into a narrow, powerful beam that could be seen more than twenty miles "
    "out to sea. Within a few decades, Fresnel lenses were installed in lighthouses around "
    "the world. Each light was given its own pattern of flashes, called its characteristic, "
    "so that sailors could tell one lighthouse from another by timing the flashes with a "
    "watch. Keepers and their families often lived in small houses at the foot of the tower. "
    "Their days were filled with routine work: trimming wicks, polishing brass, winding the "
    "clockwork that turned the lens, and writing the weather in the logbook. During storms "
    "they might stay awake all night to make sure the light never went out. In the twentieth "
    "century, electricity replaced oil lamps, and automatic timers and sensors replaced most "
    "keepers. Radio beacons and, later, satellite navigation made lighthouses less important "
    "for ships, but many towers still operate today as aids to navigation. Others have become "
    "museums, hotels, or landmarks protected as part of a nation's heritage. Volunteers in "
    "many countries work to restore old towers, repair their lenses, and tell the stories of "
    "the people who once lived there. For many visitors, a lighthouse remains a symbol of "
    "safety, patience, and care: a single steady light that asks nothing of the ships it "
    "guides except that they arrive safely. Today engineers also study lighthouses to learn "
    "how stone and iron structures survive a century of wind, salt, and waves. Some towers "
    "lean or crack as the ground beneath them shifts, and a few have even been moved inland, "
    "rolled slowly on rails away from an eroding cliff edge. "
)

CODE = '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    seq = [0, 1]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]


if __name__ == "__main__":
    for i, x in enumerate(fibonacci(10)):
        print(f"{i:2d}: {x}")
'''

CASES = [
    {"name": "chat_capital_of_france", "kind": "chat",
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "chat_system_haiku", "kind": "chat",
     "messages": [{"role": "system", "content": "You are a poet who answers only in haiku."},
                  {"role": "user", "content": "Describe the ocean at night."}]},
    {"name": "chat_multi_turn", "kind": "chat",
     "messages": [{"role": "user", "content": "Give me three colors."},
                  {"role": "assistant", "content": "Red, green and blue."},
                  {"role": "user", "content": "Now list three fruits of those colors."}]},
    {"name": "chat_long_summary", "kind": "chat",
     "messages": [{"role": "user", "content": "Read the text below and summarize it in two "
                   "sentences.\n\n" + LONG_DOC}]},
    {"name": "raw_short_sentence", "kind": "raw", "text": "The quick brown fox jumps over"},
    {"name": "raw_unicode_mix", "kind": "raw",
     "text": "Café, naïve, Zürich — 東京 and Москва: 3.14159 ≈ π!  Emoji: 🙂🚀\n\tTabs  and   spaces."},
    {"name": "raw_python_code", "kind": "raw", "text": CODE},
    {"name": "raw_long_prose", "kind": "raw",
     "text": "Lighthouses: a short history\n\n" + LONG_DOC + "Many of these towers are now "
             "photographed by thousands of visitors each summer, and the keepers' logbooks are "
             "read by historians who want to know how people once lived beside the sea."
             "\n\nIn summary, the story of the lighthouse is"},
]


def render_chat_hf(template_src, messages, special_tokens):
    """Renders messages exactly as transformers' apply_chat_template (utils/chat_template_utils.py)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template_src).render(
        messages=messages, tools=None, documents=None, add_generation_prompt=True,
        **special_tokens)


def f32(x):
    """A float32 value as the shortest decimal that round-trips it (9 significant digits)."""
    return float("%.9g" % np.float32(x))


def top_logits(row, n):
    ids = np.argsort(-row, kind="stable")[:n]  # ties: lower id first
    return [int(i) for i in ids], [f32(row[i]) for i in ids]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    with open(args.model, "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=N_CTX, logits_all=True, n_threads=2,
                          n_threads_batch=2, seed=SEED, flash_attn=False, verbose=False)
    meta = llm.metadata
    template_src = meta["tokenizer.chat_template"]
    vocab = llm._model.vocab
    bos_id = llama_cpp.llama_vocab_bos(vocab)
    eos_id = llama_cpp.llama_vocab_eos(vocab)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    def piece(tid):
        return llm.detokenize([tid], special=True).decode("utf-8", "replace") if tid >= 0 else ""

    special_tokens = {"bos_token": piece(bos_id), "eos_token": piece(eos_id)}
    out_cases = []
    for case in CASES:
        entry = {"name": case["name"], "kind": case["kind"]}
        if case["kind"] == "chat":
            text = render_chat_hf(template_src, case["messages"], special_tokens)
            entry["messages"] = case["messages"]
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        else:
            text = case["text"]
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        entry["prompt"] = text
        entry["prompt_ids"] = ids
        llm.reset()
        llm.eval(ids)
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        tid, tval = top_logits(row, N_TOP_LOGITS)
        entry["first_logits"] = {"top_ids": tid, "top_values": tval, "max": f32(row.max()),
                                 "mean": f32(row.astype(np.float64).mean()),
                                 "std": f32(row.astype(np.float64).std())}
        steps = []
        for _ in range(N_GREEDY):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t2, v2 = top_logits(row, 2)
            steps.append({"id": t2[0], "top2_ids": t2, "top2_values": v2})
            llm.eval([t2[0]])
        entry["greedy"] = steps
        entry["greedy_text"] = llm.detokenize([s["id"] for s in steps], special=True).decode(
            "utf-8", "replace")
        out_cases.append(entry)
        print("%-24s prompt %4d tokens, greedy: %r" % (case["name"], len(ids),
              entry["greedy_text"][:60]), file=sys.stderr)

    doc = {
        "format": "llmbus-golden-v1",
        "model": os.path.basename(args.model), "model_sha256": model_sha,
        "oracle": {"llama_cpp_python": llama_cpp.__version__, "llama_cpp_commit": LLAMA_CPP_COMMIT,
                   "system_info": llama_cpp.llama_print_system_info().decode(),
                   "machine": platform.machine(), "n_ctx": N_CTX, "n_threads": 2, "seed": SEED,
                   "kv_cache_type": "f16 (llama.cpp default, as model/forward/forward.c)", "flash_attn": False, "n_batch": llm.n_batch},
        "vocab_size": llm.n_vocab(), "bos_id": bos_id, "eos_id": eos_id, "add_bos": add_bos,
        "chat_template_rendering": "jinja2 as transformers apply_chat_template, add_generation_prompt=True",
        "greedy_ignores_eos": True, "n_top_logits": N_TOP_LOGITS, "n_greedy": N_GREEDY,
        "cases": out_cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote %s (%d bytes)" % (args.out, os.path.getsize(args.out)), file=sys.stderr)


if __name__ == "__main__":
    main()

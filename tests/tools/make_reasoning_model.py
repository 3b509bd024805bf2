"""Writes a copy of a text model GGUF that marks its thinking as reasoning models do, for the
reasoning tests (tests/e2e/test_openai_reasoning.py).

    make_reasoning_model.py SRC DST [--random-weights SEED]

The tokens 15 and 16 (SmolLM2's unused "<jupyter_script>" and "<empty_output>") become
"<think>" and "</think>", typed user-defined (kept in the output text, as Qwen3's and
DeepSeek-R1's GGUFs have them), and the chat template becomes a ChatML one whose generation
prompt opens a thinking block, as DeepSeek-R1's does ("<|im_start|>assistant\\n<think>\\n"),
and closes an empty one instead when chat_template_kwargs.enable_thinking is false, as
Qwen3's does. Every other key and every tensor is copied byte for byte.

With --random-weights SEED the tensors are not copied: the model becomes a small LLaMA (2
layers, width 64, 4 query and 2 KV heads, F32) with seeded normal weights over SRC's
vocabulary, tied output: a model that knows nothing, whose template emits the markup, so that
what a test sees of the reasoning comes from the parser and the forced outputs alone."""
import argparse
import sys

import gguf
import numpy as np

# The random model's shape: LLaMA's tensors at a width a test runs in milliseconds per token.
RANDOM_SHAPE = {"block_count": 2, "embedding_length": 64, "feed_forward_length": 128, "head_count": 4,
                "head_count_kv": 2}

THINK = {15: "<think>", 16: "</think>"}
USER_DEFINED = 4
TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}")


def write_random_hparams(w, r):
    """The random model's llama.* keys (the context length is SRC's)."""
    e, h = RANDOM_SHAPE["embedding_length"], RANDOM_SHAPE["head_count"]
    w.add_context_length(int(r.fields["llama.context_length"].contents()))
    w.add_embedding_length(e)
    w.add_block_count(RANDOM_SHAPE["block_count"])
    w.add_feed_forward_length(RANDOM_SHAPE["feed_forward_length"])
    w.add_head_count(h)
    w.add_head_count_kv(RANDOM_SHAPE["head_count_kv"])
    w.add_rope_dimension_count(e // h)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(r.fields["tokenizer.ggml.tokens"].contents()))
    w.add_file_type(0)  # all F32


def random_tensors(seed, n_vocab):
    """(name, float32 array in numpy's row-major (rows = GGUF ne1) order) of a tied-output LLaMA.
    Embedding rows of std 0.25 put the logits' spread near 2 (an RMS-normed state of width 64
    against them): no token is certain, none impossible."""
    rng = np.random.default_rng(seed)
    e, f = RANDOM_SHAPE["embedding_length"], RANDOM_SHAPE["feed_forward_length"]
    kv = e // RANDOM_SHAPE["head_count"] * RANDOM_SHAPE["head_count_kv"]

    def normal(rows, cols, std):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    yield "token_embd.weight", normal(n_vocab, e, 0.25)
    yield "output_norm.weight", np.ones(e, dtype=np.float32)
    for i in range(RANDOM_SHAPE["block_count"]):
        yield f"blk.{i}.attn_norm.weight", np.ones(e, dtype=np.float32)
        yield f"blk.{i}.attn_q.weight", normal(e, e, e ** -0.5)
        yield f"blk.{i}.attn_k.weight", normal(kv, e, e ** -0.5)
        yield f"blk.{i}.attn_v.weight", normal(kv, e, e ** -0.5)
        yield f"blk.{i}.attn_output.weight", normal(e, e, e ** -0.5)
        yield f"blk.{i}.ffn_norm.weight", np.ones(e, dtype=np.float32)
        yield f"blk.{i}.ffn_gate.weight", normal(f, e, e ** -0.5)
        yield f"blk.{i}.ffn_up.weight", normal(f, e, e ** -0.5)
        yield f"blk.{i}.ffn_down.weight", normal(e, f, f ** -0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--random-weights", type=int, metavar="SEED",
                    help="a small random-weight LLaMA over SRC's vocabulary instead of SRC's tensors")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    random_weights = a.random_weights is not None
    if random_weights and arch != "llama":
        sys.exit(f"--random-weights writes a llama model; {a.src} is {arch}")
    w = gguf.GGUFWriter(a.dst, arch=arch, use_temp_file=False)
    if random_weights:
        write_random_hparams(w, r)
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        if random_weights and (f.name.startswith("llama.") or f.name == "general.file_type"):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == "tokenizer.ggml.tokens":
            if set(THINK.values()) & set(value):
                sys.exit(f"{a.src} already holds <think>")
            for i, text in THINK.items():
                value[i] = text
        elif f.name == "tokenizer.ggml.token_type":
            for i in THINK:
                value[i] = USER_DEFINED
        elif f.name == "tokenizer.chat_template":
            value = TEMPLATE
        w.add_key_value(f.name, value, vtype, sub_type=sub)
    if random_weights:
        for name, data in random_tensors(a.random_weights, len(r.fields["tokenizer.ggml.tokens"].contents())):
            w.add_tensor(name, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        print(" ".join(f"{text}={i}" for i, text in THINK.items()))
        return
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(np.asarray(t.data))
    w.close()
    print(" ".join(f"{text}={i}" for i, text in THINK.items()))


if __name__ == "__main__":
    main()

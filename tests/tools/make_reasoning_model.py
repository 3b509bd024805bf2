"""Writes a copy of a text model GGUF that marks its thinking as reasoning models do, for the
reasoning tests (tests/e2e/test_openai_reasoning.py).

    make_reasoning_model.py SRC DST

The tokens 15 and 16 (SmolLM2's unused "<jupyter_script>" and "<empty_output>") become
"<think>" and "</think>", typed user-defined (kept in the output text, as Qwen3's and
DeepSeek-R1's GGUFs have them), and the chat template becomes a ChatML one whose generation
prompt opens a thinking block, as DeepSeek-R1's does ("<|im_start|>assistant\\n<think>\\n"),
and closes an empty one instead when chat_template_kwargs.enable_thinking is false, as
Qwen3's does. Every other key and every tensor is copied byte for byte."""
import argparse
import sys

import gguf
import numpy as np

THINK = {15: "<think>", 16: "</think>"}
USER_DEFINED = 4
TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.dst, arch=arch, use_temp_file=False)
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
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

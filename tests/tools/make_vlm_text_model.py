"""Writes a copy of a text model GGUF whose vocabulary holds the image tokens of an
Idefics3 / SmolVLM prompt, for the image tests (tests/e2e/test_openai_images.py).

    make_vlm_text_model.py SRC DST [--first-id N]

SmolLM2 (the default model) is SmolVLM's text half but its vocabulary has no "<image>": the
tokens N.. (default 3.., SmolLM2's unused code-dataset specials such as <repo_name>, <file_sep>)
are renamed to "<image>", "<fake_token_around_image>", "<global-img>" and "<row_R_col_C>"
(R, C in 1..3), typed user-defined (always matched in text, as llama.cpp and HF treat added
tokens). Every other key and every tensor is copied byte for byte, so the weights, the
embeddings of those ids and the model's answers to text prompts stay what they were."""
import argparse
import sys

import gguf
import numpy as np

IMAGE_TOKENS = (["<image>", "<fake_token_around_image>", "<global-img>"] +
                [f"<row_{r}_col_{c}>" for r in range(1, 4) for c in range(1, 4)])
USER_DEFINED = 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--first-id", type=int, default=3)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.dst, arch=arch, use_temp_file=False)
    renamed = range(a.first_id, a.first_id + len(IMAGE_TOKENS))
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == "tokenizer.ggml.tokens":
            for k, i in enumerate(renamed):
                value[i] = IMAGE_TOKENS[k]
            clash = set(value[: a.first_id] + value[renamed.stop:]) & set(IMAGE_TOKENS)
            if clash:
                sys.exit(f"{a.src} already holds {sorted(clash)}")
        elif f.name == "tokenizer.ggml.token_type":
            for i in renamed:
                value[i] = USER_DEFINED
        w.add_key_value(f.name, value, vtype, sub_type=sub)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(np.asarray(t.data))
    w.close()
    print(" ".join(f"{IMAGE_TOKENS[k]}={i}" for k, i in enumerate(renamed)))


if __name__ == "__main__":
    main()

"""Writes a random LoRA adapter for a base GGUF in llama.cpp's format (convert_lora_to_gguf.py's
output; what model/forward/lora.h loads), for the LoRA tests.

    make_lora.py BASE.gguf OUT.gguf [--seed S] [--rank R] [--alpha A]
                 [--targets q,k,v,o,gate,up,down] [--type f32|f16] [--b-amp X]

Keys: general.architecture (the base's), general.type = adapter, adapter.type = lora,
adapter.lora.alpha (omitted when 0). For every layer and target weight "blk.<i>.<w>.weight" of
the base (ne = [cols, rows]) the pair "<w>.weight.lora_a" (ne = [cols, rank]) and
"<w>.weight.lora_b" (ne = [rank, rows]). A is uniform in [-1, 1) / sqrt(cols), B uniform in
[-b_amp, b_amp): seeded, so the same arguments write the same bytes."""
import argparse
import sys

import gguf
import numpy as np

TARGETS = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate", "up": "ffn_up",
           "down": "ffn_down"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--targets", default="q,k,v,o,gate,up,down")
    p.add_argument("--type", choices=("f32", "f16"), default="f32")
    p.add_argument("--b-amp", type=float, default=1.0)
    a = p.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets or a.rank < 1:
        sys.exit(f"make_lora.py: --targets from {','.join(TARGETS)} (got {a.targets}), --rank >= 1")
    r = gguf.GGUFReader(a.base)
    arch = r.fields["general.architecture"].contents()
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}  # ne: [cols, rows]
    rng = np.random.default_rng(a.seed)
    dtype = np.float32 if a.type == "f32" else np.float16
    w = gguf.GGUFWriter(a.out, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    if a.alpha:
        w.add_float32("adapter.lora.alpha", a.alpha)
    n_layers = int(r.fields[f"{arch}.block_count"].contents())
    pairs = 0
    for layer in range(n_layers):
        for t in targets:
            name = f"blk.{layer}.{TARGETS[t]}.weight"
            if name not in shapes:
                continue
            cols, rows = shapes[name][0], shapes[name][1]
            lora_a = (rng.uniform(-1, 1, size=(a.rank, cols)) / np.sqrt(cols)).astype(dtype)
            lora_b = rng.uniform(-a.b_amp, a.b_amp, size=(rows, a.rank)).astype(dtype)
            w.add_tensor(name + ".lora_a", lora_a)
            w.add_tensor(name + ".lora_b", lora_b)
            pairs += 1
    if pairs == 0:
        sys.exit(f"make_lora.py: {a.base} has none of the weights of --targets {a.targets}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {pairs} pairs, rank {a.rank}, alpha {a.alpha}, {a.type}")


if __name__ == "__main__":
    main()

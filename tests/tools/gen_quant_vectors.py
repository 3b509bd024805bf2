#!/usr/bin/env python3
"""Generates tests/unit/data/quant_vectors.bin: GGML blocks and their dequantized floats.

Reference: gguf-py (PyPI `gguf`, gguf/quants.py), whose numpy dequantizers mirror ggml-quants.c
dequantize_row_* operation for operation. Blocks of Q4_0, Q4_1, Q8_0 come from quantizing random
normal data with gguf-py's quantizers (ggml's reference quantizers); Q4_K, Q5_K and Q6_K have no
quantizer there, so their blocks are random bytes with sane fp16 super-block scales (every bit
pattern of quants and packed scales is a valid block). F16 and BF16 are conversions of random data
plus special values (zeros, subnormals, inf, quiet NaN).

Run once in a throwaway venv and commit the output:
  python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install gguf numpy
  /tmp/venv-gguf/bin/python tests/tools/gen_quant_vectors.py tests/unit/data/quant_vectors.bin

File format (little-endian):
  magic "LLBQVEC1" (8 bytes), u32 record count, then per record:
  u32 ggml type, u32 seed, u32 n_elems, u32 n_src_bytes, src bytes, n_elems f32 (the reference).
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEEDS = (1, 7, 1234)
BLOCKS = {T.Q4_0: 8, T.Q4_1: 8, T.Q8_0: 8, T.Q4_K: 2, T.Q5_K: 2, T.Q6_K: 2,
          T.Q5_0: 8, T.Q5_1: 8, T.Q2_K: 2, T.Q3_K: 2, T.IQ4_NL: 8, T.IQ4_XS: 2}
BLOCK_ELEMS = {T.Q4_0: 32, T.Q4_1: 32, T.Q8_0: 32, T.Q4_K: 256, T.Q5_K: 256, T.Q6_K: 256,
               T.Q5_0: 32, T.Q5_1: 32, T.Q2_K: 256, T.Q3_K: 256, T.IQ4_NL: 32, T.IQ4_XS: 256}
BLOCK_BYTES = {T.Q4_0: 18, T.Q4_1: 20, T.Q8_0: 34, T.Q4_K: 144, T.Q5_K: 176, T.Q6_K: 210,
               T.Q5_0: 22, T.Q5_1: 24, T.Q2_K: 84, T.Q3_K: 110, T.IQ4_NL: 18, T.IQ4_XS: 136}
# Types whose blocks are random bytes, and the byte offset of their fp16 scale d (and dmin,
# written positive as ggml's quantizers do).
RANDOM_BLOCK_D = {T.Q4_K: 0, T.Q5_K: 0, T.Q6_K: 208, T.Q2_K: 80, T.Q3_K: 108, T.IQ4_NL: 0,
                  T.IQ4_XS: 0}
RANDOM_BLOCK_DMIN = {T.Q4_K: 2, T.Q5_K: 2, T.Q2_K: 82}


def half_bytes(rng, n):
    """n random fp16 scales in [1e-4, 0.05) of random sign, as bytes."""
    v = rng.uniform(1e-4, 0.05, n) * rng.choice([-1.0, 1.0], n)
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def k_blocks(qtype, rng, n_blocks):
    raw = rng.integers(0, 256, (n_blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    d = RANDOM_BLOCK_D[qtype]
    raw[:, d:d + 2] = half_bytes(rng, n_blocks)
    if qtype in RANDOM_BLOCK_DMIN:
        m = RANDOM_BLOCK_DMIN[qtype]
        raw[:, m:m + 2] = np.abs(rng.uniform(1e-4, 0.05, n_blocks)).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw


def records():
    for seed in SEEDS:
        for qtype, n_blocks in BLOCKS.items():
            rng = np.random.default_rng(seed * 100 + int(qtype))
            n = n_blocks * BLOCK_ELEMS[qtype]
            if qtype in RANDOM_BLOCK_D:
                src = k_blocks(qtype, rng, n_blocks)
            else:
                data = rng.standard_normal(n).astype(np.float32) * np.float32(0.5)
                src = quants.quantize(data.reshape(1, n), qtype).reshape(-1)
            src = np.ascontiguousarray(src, dtype=np.uint8).reshape(-1)
            assert src.size == n_blocks * BLOCK_BYTES[qtype]
            ref = quants.dequantize(src, qtype).astype(np.float32).reshape(-1)
            assert ref.size == n and np.any(ref != 0)
            yield int(qtype), seed, n, src.tobytes(), ref.tobytes()
        rng = np.random.default_rng(seed)
        special = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6.1e-5, 5.96e-8, 3.0e-6,
                            np.inf, -np.inf, np.nan, 1e-3], dtype=np.float32)
        data = np.concatenate([special, (rng.standard_normal(116) * 10).astype(np.float32)])
        f16 = data.astype(np.float16)
        yield int(T.F16), seed, f16.size, f16.tobytes(), f16.astype(np.float32).tobytes()
        bf = quants.quantize(data, T.BF16).reshape(-1)
        yield int(T.BF16), seed, data.size, bf.tobytes(), quants.dequantize(bf, T.BF16).astype(np.float32).tobytes()
        f32 = (rng.standard_normal(64)).astype(np.float32)
        yield int(T.F32), seed, f32.size, f32.tobytes(), f32.tobytes()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/unit/data/quant_vectors.bin"
    recs = list(records())
    with open(out, "wb") as f:
        f.write(b"LLBQVEC1")
        f.write(struct.pack("<I", len(recs)))
        for qtype, seed, n, src, ref in recs:
            f.write(struct.pack("<IIII", qtype, seed, n, len(src)))
            f.write(src)
            f.write(ref)
    print(f"{out}: {len(recs)} records")


if __name__ == "__main__":
    main()

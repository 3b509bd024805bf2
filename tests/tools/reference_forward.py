#!/usr/bin/env python3
"""Plain numpy LLaMA forward pass (float64) over a GGUF file, for checking model/forward/forward.c.

Weights come from gguf-py (PyPI `gguf`): GGUFReader + gguf.quants.dequantize. The pass is
llama.cpp's llm_build_llama for arch "llama": RMSNorm, rope type NORM (adjacent pairs
(2i, 2i+1); the GGUF converter permutes Q/K rows so that this equals HF's rotate_half),
GQA (query head h reads KV head h // (n_head / n_head_kv)), causal softmax attention with
scale 1/sqrt(head_dim), SwiGLU silu(gate) * up, tied output when output.weight is absent.

Optional simulation of ggml's CPU numerics, to size each effect:
  --q8     activations quantized per row before each quantized matmul, as ggml's vec_dot
           types: Q8_1 (d, s = d * sum(q) both fp16) for Q4_1 weights, Q8_0 for Q8_0/Q4_0.
  --f16kv  K and V rounded to fp16 (llama.cpp's default KV cache type).

Output: the last position's logits as float32 .npy (--out), a summary against a golden case
(--golden FILE --case NAME: max |diff| over the golden top-256 ids, mean, std), and with
--stages DIR the per-layer intermediates of the last position as .npy files (names below).

Usage:
  python3 tests/tools/reference_forward.py MODEL.gguf --golden tests/e2e/golden/X.json \
      --case chat_capital_of_france [--q8] [--f16kv] [--out logits.npy] [--stages DIR]
  python3 tests/tools/reference_forward.py MODEL.gguf --ids 504,2365,6354 --out logits.npy
"""
import argparse
import json
import os
import sys

import numpy as np

import gguf
from gguf.quants import dequantize

Q4_1 = gguf.GGMLQuantizationType.Q4_1
Q4_0 = gguf.GGMLQuantizationType.Q4_0
Q8_0 = gguf.GGMLQuantizationType.Q8_0


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


class Weight:
    """A 2-D GGUF weight: dequantized [rows, cols] float64 plus, for Q4_1, per-block mins."""

    def __init__(self, t):
        self.type = t.tensor_type
        self.w = dequantize(t.data, t.tensor_type).astype(np.float64)
        self.w = self.w.reshape(int(t.shape[1]) if len(t.shape) > 1 else 1, int(t.shape[0]))
        self.mins = None
        if self.type == Q4_1:
            raw = np.asarray(t.data).view(np.uint8).reshape(-1, 20)
            m = raw[:, 2:4].copy().view(np.float16).astype(np.float64)
            self.mins = m.reshape(self.w.shape[0], self.w.shape[1] // 32)  # [rows, blocks]


def quant_q8(x):
    """ggml quantize_row_q8_0/q8_1 of rows x [n, k] (float32 arithmetic as ggml).
    Returns (x_hat = fp16(d) * q as float64 [n, k], s = fp16(d * sum(q)) [n, k/32])."""
    x32 = np.asarray(x, dtype=np.float32)
    n, k = x32.shape
    b = x32.reshape(n, k // 32, 32)
    amax = np.abs(b).max(axis=2)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(b * idv[:, :, None]).astype(np.int64)  # round half to even as lrintf/_mm256_round_ps
    dh = f16(d)
    s = f16(d * q.sum(axis=2).astype(np.float32))
    x_hat = (dh[:, :, None] * q).reshape(n, k)
    return x_hat, s


def matmul(x, W, q8):
    """y [n, rows] = x [n, cols] @ W^T, optionally with ggml's activation quantization."""
    if not q8 or W.type not in (Q4_1, Q4_0, Q8_0):
        return x @ W.w.T
    x_hat, s = quant_q8(x)
    y = x_hat @ W.w.T
    if W.type == Q4_1:
        # W = d*q + m per block: x_hat-based result uses m * sum(x_hat_block); ggml uses m * s.
        n = x.shape[0]
        sum_xhat = x_hat.reshape(n, -1, 32).sum(axis=2)  # [n, blocks]
        y += (s - sum_xhat) @ W.mins.T
    return y


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_norm(x, pos, n_dims, base):
    """x [T, H, D]; rotates adjacent pairs (2i, 2i+1) of the first n_dims dims."""
    inv = base ** (-np.arange(0, n_dims, 2, dtype=np.float64) / n_dims)  # [n_dims/2]
    th = pos[:, None].astype(np.float64) * inv[None, :]  # [T, n_dims/2]
    c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
    y = x.copy()
    x0, x1 = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
    y[..., 0:n_dims:2] = x0 * c - x1 * s
    y[..., 1:n_dims:2] = x0 * s + x1 * c
    return y


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def forward(path, ids, q8=False, f16kv=False, stages=None):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"architecture {arch}: only llama")
    n_layer = field(r, f"{arch}.block_count")
    n_head = field(r, f"{arch}.attention.head_count")
    n_kv = field(r, f"{arch}.attention.head_count_kv", n_head)
    E = field(r, f"{arch}.embedding_length")
    D = field(r, f"{arch}.attention.key_length", E // n_head)
    n_rot = field(r, f"{arch}.rope.dimension_count", D)
    base = float(field(r, f"{arch}.rope.freq_base", 10000.0))
    eps = float(np.float32(field(r, f"{arch}.attention.layer_norm_rms_epsilon")))
    T = {t.name: t for t in r.tensors}

    def vec(name):
        return np.asarray(T[name].data, dtype=np.float64).reshape(-1)

    def dump(name, a):
        if stages:
            np.save(os.path.join(stages, name + ".npy"), np.asarray(a, dtype=np.float64))

    emb = Weight(T["token_embd.weight"])
    out_w = Weight(T["output.weight"]) if "output.weight" in T else emb
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    pos = np.arange(n)
    x = emb.w[ids].copy()  # [n, E]
    dump("embd", x[-1])
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    group = n_head // n_kv
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, vec(p + "attn_norm.weight"), eps)
        q = matmul(h, Weight(T[p + "attn_q.weight"]), q8).reshape(n, n_head, D)
        k = matmul(h, Weight(T[p + "attn_k.weight"]), q8).reshape(n, n_kv, D)
        v = matmul(h, Weight(T[p + "attn_v.weight"]), q8).reshape(n, n_kv, D)
        if il == 0:
            dump("l0_attn_norm", h[-1])
            dump("l0_q", q.reshape(n, -1))
            dump("l0_k", k.reshape(n, -1))
            dump("l0_v", v.reshape(n, -1))
        q = rope_norm(q, pos, n_rot, base)
        k = rope_norm(k, pos, n_rot, base)
        if il == 0:
            dump("l0_q_rope", q.reshape(n, -1))
            dump("l0_k_rope", k.reshape(n, -1))
        if f16kv:
            k, v = f16(k), f16(v)
        att = np.empty((n, n_head, D))
        for hh in range(n_head):
            kk, vv = k[:, hh // group, :], v[:, hh // group, :]
            sc = q[:, hh, :] @ kk.T / np.sqrt(D) + mask
            sc = np.exp(sc - sc.max(axis=1, keepdims=True))
            sc /= sc.sum(axis=1, keepdims=True)
            att[:, hh, :] = sc @ vv
        att = att.reshape(n, n_head * D)
        o = matmul(att, Weight(T[p + "attn_output.weight"]), q8)
        if il == 0:
            dump("l0_attn", att)
            dump("l0_attn_out", o[-1])
        x = x + o
        dump(f"l{il}_after_attn", x[-1])
        h = rms_norm(x, vec(p + "ffn_norm.weight"), eps)
        g = matmul(h, Weight(T[p + "ffn_gate.weight"]), q8)
        u = matmul(h, Weight(T[p + "ffn_up.weight"]), q8)
        a = g / (1.0 + np.exp(-g)) * u
        f = matmul(a, Weight(T[p + "ffn_down.weight"]), q8)
        if il == 0:
            dump("l0_ffn_norm", h[-1])
            dump("l0_swiglu", a[-1])
            dump("l0_ffn_out", f[-1])
        x = x + f
        dump(f"l{il}_out", x[-1])
    h = rms_norm(x[-1:], vec("output_norm.weight"), eps)
    dump("final_norm", h[0])
    logits = matmul(h, out_w, q8)[0]
    dump("logits", logits)
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--golden", help="golden JSON (tests/e2e/golden/*.json)")
    ap.add_argument("--case", help="case name in the golden file (prompt ids and reference logits)")
    ap.add_argument("--ids", help="comma-separated token ids (instead of --case)")
    ap.add_argument("--q8", action="store_true", help="simulate ggml Q8_1/Q8_0 activation quantization")
    ap.add_argument("--f16kv", action="store_true", help="round K and V to fp16")
    ap.add_argument("--out", help="write last-position logits (float32 .npy)")
    ap.add_argument("--stages", help="directory for per-stage .npy dumps of the last position")
    ap.add_argument("--compare", help="another logits file (.npy or raw float32) to compare with")
    a = ap.parse_args()
    case = None
    if a.case:
        doc = json.load(open(a.golden))
        case = next(c for c in doc["cases"] if c["name"] == a.case)
        ids = case["prompt_ids"]
    elif a.ids:
        ids = [int(s) for s in a.ids.split(",")]
    else:
        sys.exit("--case or --ids required")
    if a.stages:
        os.makedirs(a.stages, exist_ok=True)
    logits = forward(a.model, ids, q8=a.q8, f16kv=a.f16kv, stages=a.stages)
    if a.out:
        np.save(a.out, logits.astype(np.float32))
    print(f"tokens {len(ids)}  argmax {int(np.argmax(logits))}  max {logits.max():.4f}  "
          f"mean {logits.mean():.4f}  std {logits.std():.4f}")
    if case:
        fl = case["first_logits"]
        top = np.array(fl["top_ids"])
        d = np.abs(logits[top] - np.array(fl["top_values"]))
        print(f"vs llama.cpp: max|diff| top-256 {d.max():.4f} (mean {d.mean():.4f}), "
              f"argmax {fl['top_ids'][0]}, mean {fl['mean']:.4f}, std {fl['std']:.4f}")
    if a.compare:
        other = np.load(a.compare) if a.compare.endswith(".npy") else np.fromfile(a.compare, np.float32)
        print(f"vs {a.compare}: max|diff| {np.abs(other - logits).max():.4f}")


if __name__ == "__main__":
    main()

"""A naive float64 numpy reference of the image encoder (model/vision/clip.h) for test_clip.py, written
from the models' definitions, not from our C code: transformers' SiglipVisionModel +
Idefics3Connector (pixel shuffle, linear) and CLIPVisionModel + LLaVA's 2-layer MLP projector,
with llama.cpp mtmd's layout choices where it has its own (the class embedding appended after
the patches, the llava rows 1..n_patches; idefics3 tiles then overview). Preprocessing with
Pillow, one axis at a time (horizontal pass first, as mtmd's resize_pillow), so the pixels
are exact. The GELU is the exact tanh / quick formula (ggml's fp16 table is what the tolerance
absorbs)."""
import math

import numpy as np
from PIL import Image

import make_mmproj


def test_image(w, h, seed):
    """A deterministic RGB image: smooth gradients plus seeded noise (uint8 [h, w, 3])."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255.0 / max(w - 1, 1), y * 255.0 / max(h - 1, 1), (x + y) * 127.0 / max(w + h - 2, 1)], -1)
    return np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)


def resize(img, w, h, resample):
    """Pillow's filter, horizontal pass then vertical, each rounded to 8 bits."""
    if img.size == (w, h):
        return img
    if img.size[0] != w:
        img = img.resize((w, img.size[1]), resample)
    if img.size[1] != h:
        img = img.resize((w, h), resample)
    return img


def idefics3_sizes(s, width, height):
    edge, tile = s["longest_edge"], s["image_size"]
    aspect = width / height
    if width >= height:
        w, h = edge, int(edge / aspect)
        h += h % 2
    else:
        h, w = edge, int(edge * aspect)
        w += w % 2
    w, h = max(w, 2), max(h, 2)
    return w, h, -(-w // tile), -(-h // tile)


def tiles(s, rgb):
    """uint8 tiles [n, side, side, 3] in the encoder's order, and (grid_rows, grid_cols)."""
    img = Image.fromarray(rgb)
    side = s["image_size"]
    if s["projector"] == "idefics3":
        rw, rh, gc, gr = idefics3_sizes(s, img.size[0], img.size[1])
        refined = resize(resize(img, rw, rh, Image.LANCZOS), gc * side, gr * side, Image.LANCZOS)
        ref = np.asarray(refined)
        out = [ref[y * side:(y + 1) * side, x * side:(x + 1) * side] for y in range(gr) for x in range(gc)]
        out.append(np.asarray(resize(refined, side, side, Image.LANCZOS)))
        return np.stack(out), (gr, gc)
    if img.size == (side, side):
        return np.asarray(img)[None], (0, 0)
    scale = np.float32(min(np.float32(side) / np.float32(img.size[0]), np.float32(side) / np.float32(img.size[1])))
    nw = min(int(math.ceil(np.float32(img.size[0]) * scale)), side)
    nh = min(int(math.ceil(np.float32(img.size[1]) * scale)), side)
    canvas = np.empty((side, side, 3), np.uint8)
    canvas[:] = (122, 116, 104)
    ox, oy = (side - nw) // 2, (side - nh) // 2
    canvas[oy:oy + nh, ox:ox + nw] = np.asarray(resize(img, nw, nh, Image.BICUBIC))
    return canvas[None], (0, 0)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_quick(x):
    return x / (1.0 + np.exp(-1.702 * x))


def weights(s, seed, dtype):
    """The mmproj's tensors as float64, rounded through f16 where the file stores f16."""
    out = {}
    for name, a in make_mmproj.tensors(s, seed).items():
        if dtype == "f16" and a.ndim >= 2 and name not in make_mmproj.F32_ALWAYS:
            a = a.astype(np.float16)
        out[name] = a.astype(np.float64)
    return out


def encode_tile(s, t, tile_u8):
    proj = s["projector"]
    mean, std = np.array(make_mmproj.MEAN[proj]), np.array(make_mmproj.STD[proj])
    eps = 1e-6 if proj == "idefics3" else 1e-5
    px = (tile_u8.astype(np.float32) / np.float32(255.0)).astype(np.float64)  # the 8-bit value as f32, as mtmd
    px = (px - mean) / std
    ps, side, d, nh = s["patch_size"], s["image_size"], s["n_embd"], s["n_head"]
    g = side // ps
    patches = px.reshape(g, ps, g, ps, 3).transpose(0, 2, 4, 1, 3).reshape(g * g, 3 * ps * ps)
    x = patches @ t["v.patch_embd.weight"].reshape(d, -1).T + t["v.patch_embd.bias"]
    if proj == "mlp":
        x = np.concatenate([x, t["v.class_embd"][None]], 0)
    x = x + t["v.position_embd.weight"]
    if "v.pre_ln.weight" in t:
        x = layer_norm(x, t["v.pre_ln.weight"], t["v.pre_ln.bias"], eps)
    n_run = s["n_layer"] if proj == "idefics3" else s["n_layer"] - 1
    hd = d // nh
    for il in range(n_run):
        p = f"v.blk.{il}."
        h = layer_norm(x, t[p + "ln1.weight"], t[p + "ln1.bias"], eps)
        q, k, v = (h @ t[p + n + ".weight"].T + t[p + n + ".bias"] for n in ("attn_q", "attn_k", "attn_v"))
        q, k, v = (a.reshape(-1, nh, hd).transpose(1, 0, 2) for a in (q, k, v))
        sc = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        a = (sc @ v).transpose(1, 0, 2).reshape(-1, d)
        x = x + a @ t[p + "attn_out.weight"].T + t[p + "attn_out.bias"]
        h = layer_norm(x, t[p + "ln2.weight"], t[p + "ln2.bias"], eps)
        h = h @ t[p + "ffn_up.weight"].T + t[p + "ffn_up.bias"]
        h = gelu_tanh(h) if proj == "idefics3" else gelu_quick(h)
        x = x + h @ t[p + "ffn_down.weight"].T + t[p + "ffn_down.bias"]
    if "v.post_ln.weight" in t:
        x = layer_norm(x, t["v.post_ln.weight"], t["v.post_ln.bias"], eps)
    if proj == "idefics3":
        sf = s["scale_factor"]
        gg = g // sf
        m = x.reshape(gg, sf, gg, sf, d).transpose(0, 2, 1, 3, 4).reshape(gg * gg, sf * sf * d)
        return m @ t["mm.model.fc.weight"].T
    feat = x[1:1 + g * g]
    h = gelu_tanh(feat @ t["mm.0.weight"].T + t["mm.0.bias"])
    return h @ t["mm.2.weight"].T + t["mm.2.bias"]


def encode(s, seed, dtype, rgb):
    t = weights(s, seed, dtype)
    tl, grid = tiles(s, rgb)
    return np.concatenate([encode_tile(s, t, x) for x in tl], 0), grid


def prompt(s, grid):
    """The text that replaces one image marker (mtmd's idefics3 slice template)."""
    sf = s.get("scale_factor", 1)
    n = (s["image_size"] // s["patch_size"]) ** 2 // (sf * sf)
    img = "<image>" * n
    if s["projector"] != "idefics3":
        return img
    gr, gc = grid
    rows = ["".join(f"<fake_token_around_image><row_{r + 1}_col_{c + 1}>{img}" for c in range(gc)) for r in range(gr)]
    return "\n".join(rows) + f"\n\n<fake_token_around_image><global-img>{img}<fake_token_around_image>"

"""Writes a random-weight mmproj GGUF in llama.cpp mtmd's format (clip.* metadata, tensor
names of tools/mtmd/clip-impl.h TN_*) for the image encoder's tests and benchmark.

    make_mmproj.py OUT --projector idefics3|mlp --shape NAME [--seed N] [--layers N] [--dtype f32|f16]

Shapes (--shape):
  tiny-idefics3   64-px tiles of 8-px patches, width 64, 4 heads, MLP 128, scale 2 (16 rows a
                  tile), longest edge 96, output 576 (SmolLM2-135M's hidden size)
  tiny-mlp        32-px image of 8-px patches + class embedding, width 64, 4 heads, MLP 128,
                  projector 64 -> 128 -> 576
  smolvlm-256m    SmolVLM-256M's encoder: SigLIP-B/16 at 512 (width 768, 12 heads, MLP 3072,
                  12 layers), scale 4 (64 rows a tile), longest edge 2048, output 576
  llava-clip-l    LLaVA-1.5's CLIP-L/14 at 336 (width 1024, 16 heads, MLP 4096, 24 layers),
                  projector 1024 -> 4096 -> 4096
The same seed gives the same file byte for byte (numpy's PCG64). Weights are normal with
std 0.02 (matrices; LayerNorm weights 1 + N(0, 0.1)); the 1-D tensors and the patch and
position embeddings are f32 whatever --dtype says, as llama.cpp's converters write them. Importable: `shape(name)` and
`write(path, ...)` for the tests' float64 reference (tests/unit/clip_reference.py)."""
import argparse
import sys

import gguf
import numpy as np

SHAPES = {
    "tiny-idefics3": dict(projector="idefics3", image_size=64, patch_size=8, n_embd=64, n_ff=128, n_head=4,
                          n_layer=2, scale_factor=2, longest_edge=96, n_embd_out=576),
    "tiny-mlp": dict(projector="mlp", image_size=32, patch_size=8, n_embd=64, n_ff=128, n_head=4, n_layer=3,
                     mm_hidden=128, n_embd_out=576),
    "smolvlm-256m": dict(projector="idefics3", image_size=512, patch_size=16, n_embd=768, n_ff=3072, n_head=12,
                         n_layer=12, scale_factor=4, longest_edge=2048, n_embd_out=576),
    "llava-clip-l": dict(projector="mlp", image_size=336, patch_size=14, n_embd=1024, n_ff=4096, n_head=16,
                         n_layer=24, mm_hidden=4096, n_embd_out=4096),
}
# llama.cpp's SmolVLM converter keeps the embeddings f32 (conversion/smolvlm.py tensor_force_quant);
# its llava graph cannot add an f16 position table (ggml's CPU add has no f32 + f16)
F32_ALWAYS = ("v.patch_embd.weight", "v.position_embd.weight")
MEAN = {"idefics3": [0.5, 0.5, 0.5], "mlp": [0.48145466, 0.4578275, 0.40821073]}
STD = {"idefics3": [0.5, 0.5, 0.5], "mlp": [0.26862954, 0.26130258, 0.27577711]}


def shape(name, layers=None):
    s = dict(SHAPES[name])
    if layers is not None:
        s["n_layer"] = layers
    return s


def tensors(s, seed):
    """name -> float32 array in numpy order (the reverse of GGUF's ne)."""
    rng = np.random.default_rng(seed)
    d, ff, ps = s["n_embd"], s["n_ff"], s["patch_size"]
    n_patches = (s["image_size"] // ps) ** 2
    t = {}

    def mat(name, rows, cols):
        t[name] = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    def vec(name, n, base=0.0, std=0.02):
        t[name] = (base + rng.standard_normal(n) * std).astype(np.float32)

    t["v.patch_embd.weight"] = (rng.standard_normal((d, 3, ps, ps)) * 0.02).astype(np.float32)
    vec("v.patch_embd.bias", d)
    n_pos = n_patches
    if s["projector"] == "mlp":
        vec("v.class_embd", d, std=0.1)
        n_pos += 1
        vec("v.pre_ln.weight", d, 1.0, 0.1)
        vec("v.pre_ln.bias", d)
    t["v.position_embd.weight"] = (rng.standard_normal((n_pos, d)) * 0.1).astype(np.float32)
    for il in range(s["n_layer"]):
        p = f"v.blk.{il}."
        vec(p + "ln1.weight", d, 1.0, 0.1)
        vec(p + "ln1.bias", d)
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            mat(p + n + ".weight", d, d)
            vec(p + n + ".bias", d)
        vec(p + "ln2.weight", d, 1.0, 0.1)
        vec(p + "ln2.bias", d)
        mat(p + "ffn_up.weight", ff, d)
        vec(p + "ffn_up.bias", ff)
        mat(p + "ffn_down.weight", d, ff)
        vec(p + "ffn_down.bias", d)
    if s["projector"] == "idefics3":
        vec("v.post_ln.weight", d, 1.0, 0.1)
        vec("v.post_ln.bias", d)
        mat("mm.model.fc.weight", s["n_embd_out"], d * s["scale_factor"] ** 2)
    else:
        mat("mm.0.weight", s["mm_hidden"], d)
        vec("mm.0.bias", s["mm_hidden"])
        mat("mm.2.weight", s["n_embd_out"], s["mm_hidden"])
        vec("mm.2.bias", s["n_embd_out"])
    return t


def write(path, s, seed, dtype="f16", projector_name=None):
    """projector_name: the clip.projector_type written (default the shape's; tests of refusal
    write others)."""
    w = gguf.GGUFWriter(path, "clip")
    proj = s["projector"]
    w.add_string("general.name", f"random {proj} mmproj (seed {seed})")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_text_encoder", False)
    w.add_string("clip.projector_type", projector_name or proj)
    w.add_bool("clip.use_gelu", proj == "idefics3")  # SigLIP: gelu_pytorch_tanh; CLIP: quick_gelu
    w.add_uint32("clip.vision.image_size", s["image_size"])
    w.add_uint32("clip.vision.patch_size", s["patch_size"])
    w.add_uint32("clip.vision.embedding_length", s["n_embd"])
    w.add_uint32("clip.vision.feed_forward_length", s["n_ff"])
    w.add_uint32("clip.vision.projection_dim", s["n_embd_out"])
    w.add_uint32("clip.vision.block_count", s["n_layer"])
    w.add_uint32("clip.vision.attention.head_count", s["n_head"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6 if proj == "idefics3" else 1e-5)
    w.add_array("clip.vision.image_mean", MEAN[proj])
    w.add_array("clip.vision.image_std", STD[proj])
    if proj == "idefics3":
        w.add_uint32("clip.vision.projector.scale_factor", s["scale_factor"])
        w.add_uint32("clip.vision.preproc_image_size", s["longest_edge"])
    for name, a in tensors(s, seed).items():
        if dtype == "f16" and a.ndim >= 2 and name not in F32_ALWAYS:
            a = a.astype(np.float16)
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the shape's)")
    ap.add_argument("--dtype", choices=("f32", "f16"), default="f16", help="matrices' type")
    a = ap.parse_args()
    write(a.out, shape(a.shape, a.layers), a.seed, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())

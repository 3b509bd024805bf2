"""The image encoder (model/vision/clip.h) through tests/unit/clip_tool, with random-weight mmproj files
of real tensor names and shapes written at test time (tests/tools/make_mmproj.py, seeded):

- plans: tile grid, rows and the prompt text replacing one image marker equal what
  transformers' Idefics3Processor / llama.cpp's mtmd lay out, for tiny and SmolVLM-256M shapes;
- embeddings equal a naive float64 numpy reference (tests/unit/clip_reference.py) within a
  stated tolerance: idefics3 (SigLIP + pixel shuffle + linear) and mlp (CLIP + 2-layer MLP), f32
  and f16 weights, tiled and padded images, and the real SmolVLM-256M encoder shape (SigLIP-B/16
  at 512, 2 of its 12 layers to stay fast on a 2-core CI);
- embeddings equal what llama.cpp's mtmd computed for the same seeded mmproj and image
  (tests/unit/data/clip/*.f32, recorded by tests/tools/record_clip_llamacpp.sh);
- bad images (empty, GIF, truncated PNG, a 100000 x 100000 PNG header) and bad mmproj files (an
  unsupported projector type, a missing tensor, a truncated file) are refused with a clear
  status, never a crash.

usage: test_clip.py CLIP_TOOL"""
import io
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, HERE)
import clip_reference as ref  # noqa: E402
import make_mmproj  # noqa: E402

TOOL = sys.argv[1]
DATA = os.path.join(HERE, "data", "clip")
TMP = tempfile.mkdtemp(prefix="test_clip.")
failures = []

# The llama.cpp golden cases: shape, seed, image size and image seed (record_clip_llamacpp.sh
# writes the same ones).
GOLDEN = [("tiny-idefics3", 7, 100, 70, 1), ("tiny-mlp", 8, 40, 30, 2)]


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        failures.append(name)


def mmproj(shape, seed, dtype="f16", layers=None):
    path = os.path.join(TMP, f"{shape}-{seed}-{dtype}-{layers}.gguf")
    if not os.path.exists(path):
        make_mmproj.write(path, make_mmproj.shape(shape, layers), seed, dtype)
    return path


def png(rgb):
    b = io.BytesIO()
    Image.fromarray(rgb).save(b, "PNG")
    return b.getvalue()


def run(*args, data=None):
    path = None
    if data is not None:
        path = os.path.join(TMP, "in.img")
        with open(path, "wb") as f:
            f.write(data)
        args = args + (path,)
    p = subprocess.run([TOOL, *args], capture_output=True, timeout=600)
    # the last stderr line is the error (log lines come before it)
    return p.returncode, p.stdout, (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]


def encode(path, rgb=None, data=None):
    rc, out, err = run("encode", path, data=png(rgb) if data is None else data)
    if rc != 0:
        return None, err
    head, _, raw = out.partition(b"\n")
    rows, d = map(int, head.split())
    return np.frombuffer(raw, np.float32).reshape(rows, d), ""


def errors(got, want):
    diff = np.abs(got.astype(np.float64) - want)
    return diff.max(), diff.max() / np.abs(want).max()


# ---------------------------------------------------------------- plans

def test_plans():
    for shape, sizes in (("tiny-idefics3", [(100, 70), (70, 100), (96, 96), (1, 1), (8192, 1), (20, 400), (64, 64)]),
                         ("smolvlm-256m", [(1024, 768), (512, 512), (300, 2000)]),
                         ("tiny-mlp", [(40, 30), (32, 32)])):
        s = make_mmproj.shape(shape, 2)
        path = mmproj(shape, 1, layers=2)
        for w, h in sizes:
            rc, out, err = run("plan", path, str(w), str(h))
            if rc != 0:
                check(f"plan {shape} {w}x{h}", False, err)
                continue
            head, _, text = out.partition(b"\n")
            nt, gr, gc, rpt, rows, d, proj = head.decode().split()
            grid = (0, 0)
            if s["projector"] == "idefics3":
                _, _, egc, egr = ref.idefics3_sizes(s, w, h)
                grid = (egr, egc)
            want = ref.prompt(s, grid)
            ok = (int(gr), int(gc)) == grid and text.decode() == want and int(rows) == want.count("<image>") \
                and int(nt) == (grid[0] * grid[1] + 1 if grid != (0, 0) else 1) and int(d) == s["n_embd_out"] \
                and proj == s["projector"]
            check(f"plan {shape} {w}x{h}", ok, f"grid {gr}x{gc} tiles {nt} rows {rows}")
    rc, _, err = run("plan", mmproj("tiny-idefics3", 1, layers=1), "0", "5")
    check("plan refuses a 0-pixel side", rc == 2 and err.startswith("invalid argument"), err)


# ---------------------------------------------------------------- float64 reference

def test_reference(shape, dtype, w, h, tol, layers=None, seed=3):
    s = make_mmproj.shape(shape, layers)
    rgb = ref.test_image(w, h, seed + 100)
    got, err = encode(mmproj(shape, seed, dtype, layers), rgb)
    if got is None:
        check(f"reference {shape} {dtype} {w}x{h}", False, err)
        return
    want, _ = ref.encode(s, seed, dtype, rgb)
    ok = got.shape == want.shape
    abs_err, rel_err = errors(got, want) if ok else (np.inf, np.inf)
    check(f"reference {shape} {dtype} {w}x{h} (layers {s['n_layer']})", ok and rel_err < tol,
          f"rows {got.shape[0]} max abs err {abs_err:.3g} max rel err {rel_err:.3g} (tol {tol:g}, |ref| max "
          f"{np.abs(want).max():.3g})")


# ---------------------------------------------------------------- llama.cpp

def test_llamacpp():
    for shape, seed, w, h, img_seed in GOLDEN:
        gold = os.path.join(DATA, f"{shape}.f32")
        with open(gold, "rb") as f:
            head = f.readline()
            rows, d = map(int, head.split())
            want = np.frombuffer(f.read(), np.float32).reshape(rows, d).astype(np.float64)
        got, err = encode(mmproj(shape, seed, "f16"), ref.test_image(w, h, img_seed))
        if got is None:
            check(f"llama.cpp {shape}", False, err)
            continue
        ok = got.shape == want.shape
        abs_err, rel_err = errors(got, want) if ok else (np.inf, np.inf)
        check(f"llama.cpp {shape} {w}x{h}", ok and rel_err < 2e-3,
              f"rows {got.shape[0]} max abs err {abs_err:.3g} max rel err {rel_err:.3g} (tol 2e-3)")


# ---------------------------------------------------------------- bad inputs

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header(w, h):
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        png_chunk(b"IEND", b"")


def test_bad_images():
    path = mmproj("tiny-idefics3", 1, layers=1)
    good = png(ref.test_image(50, 40, 9))
    for name, data, status in (("empty", b"", "malformed"), ("gif", b"GIF89a" + b"\0" * 64, "unsupported"),
                               ("truncated png", good[:len(good) // 2], "malformed"),
                               ("100000x100000 png header", png_header(100000, 100000), "too large")):
        got, err = encode(path, data=data)
        check(f"bad image: {name}", got is None and err.startswith(status), err)


def test_bad_mmproj():
    s = make_mmproj.shape("tiny-idefics3", 1)
    cases = []
    p = os.path.join(TMP, "ldp.gguf")
    make_mmproj.write(p, s, 1, projector_name="ldpv2")
    cases.append(("unsupported projector", p, "unsupported", "'ldpv2'"))
    p2 = os.path.join(TMP, "missing.gguf")
    open(p2, "wb").write(open(mmproj("tiny-idefics3", 1, layers=1), "rb").read().replace(b"v.blk.0.attn_q.weight",
                                                                                          b"v.blk.0.attn_Q.weight"))
    cases.append(("missing tensor", p2, "malformed", "v.blk.0.attn_q.weight"))
    p3 = os.path.join(TMP, "truncated.gguf")
    full = open(mmproj("tiny-idefics3", 1, layers=1), "rb").read()
    open(p3, "wb").write(full[:len(full) - 1000])
    cases.append(("truncated mmproj", p3, "malformed", ""))
    for name, path, status, needle in cases:
        rc, _, err = run("plan", path, "10", "10")
        check(f"bad mmproj: {name}", rc == 2 and err.startswith(status) and needle in err, err)


test_plans()
test_bad_images()
test_bad_mmproj()
test_reference("tiny-idefics3", "f32", 100, 70, 1e-3)
test_reference("tiny-idefics3", "f16", 70, 100, 2e-3)
test_reference("tiny-mlp", "f32", 40, 30, 1e-3)
test_reference("tiny-mlp", "f16", 32, 32, 2e-3)
test_llamacpp()
test_reference("smolvlm-256m", "f16", 400, 100, 2e-3, layers=2)
print(f"{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)

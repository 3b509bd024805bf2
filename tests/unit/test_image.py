"""model/vision/image.h against Pillow, through tests/unit/image_tool.

- PNG decoding (RGB, RGBA, gray, 16-bit, palette) gives Pillow's pixels exactly (alpha is
  dropped against black as libpng's simplified API composes it: checked on opaque images);
- JPEG decoding is within 2 levels of Pillow's (both libjpeg, possibly other versions);
- Pillow's BILINEAR, BICUBIC and LANCZOS resizes, up and down, square and not, are reproduced exactly, horizontal
  pass first as llama.cpp's mtmd does (the vision encoder must see the pixels the reference
  implementation gives);
- bad inputs are refused with the right status and never decoded: empty, a GIF, a truncated
  PNG and JPEG, a PNG and a JPEG whose header claims 100000 x 100000 (resp. 65000 x 65000)
  pixels, a CMYK JPEG.

usage: test_image.py IMAGE_TOOL"""
import io
import os
import random
import struct
import subprocess
import sys
import tempfile
import zlib

from PIL import Image

TOOL = sys.argv[1]
failures = []


def run(data, size=None, filt=None):
    with tempfile.NamedTemporaryFile(suffix=".img", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        args = [TOOL, path] + ([str(size[0]), str(size[1])] if size else []) + ([str(filt)] if filt is not None else [])
        p = subprocess.run(args, capture_output=True, timeout=60)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, p.returncode, p.stderr.decode(errors="replace").strip()
    head, _, raw = p.stdout.partition(b"\n")
    w, h = map(int, head.split())
    return (w, h, raw), 0, ""


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def encoded(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def random_image(rng, w, h, mode="RGB"):
    px = bytes(rng.randrange(256) for _ in range(w * h * 3))
    img = Image.frombytes("RGB", (w, h), px)
    # smooth structure as well as noise: what photos look like to a resampler
    return img.resize((w, h)).convert(mode) if mode != "RGB" else img


def decode_cases(rng):
    for mode in ("RGB", "L", "P"):
        img = random_image(rng, 37, 23, mode)
        got, rc, err = run(encoded(img, "PNG"))
        want = img.convert("RGB").tobytes()
        check(f"png_{mode}_decodes_exactly", rc == 0 and got[:2] == (37, 23) and got[2] == want, err)
    img16 = Image.frombytes("I;16", (8, 5), bytes(rng.randrange(256) for _ in range(80)))
    got, rc, err = run(encoded(img16, "PNG"))
    check("png_16bit_gray_decodes", rc == 0 and got[:2] == (8, 5), err)
    rgba = random_image(rng, 9, 9).convert("RGBA")
    got, rc, err = run(encoded(rgba, "PNG"))
    check("png_opaque_rgba_decodes_exactly", rc == 0 and got[2] == rgba.convert("RGB").tobytes(), err)
    img = random_image(rng, 64, 48)
    jpg = encoded(img, "JPEG", quality=90)
    got, rc, err = run(jpg)
    want = Image.open(io.BytesIO(jpg)).convert("RGB").tobytes()
    diff = max(abs(a - b) for a, b in zip(got[2], want)) if rc == 0 else None
    check("jpeg_decodes_like_pillow", rc == 0 and got[:2] == (64, 48) and diff <= 2, f"max diff {diff} {err}")
    gray_jpg = encoded(img.convert("L"), "JPEG")
    got, rc, err = run(gray_jpg)
    check("jpeg_gray_expands_to_rgb", rc == 0 and len(got[2]) == 64 * 48 * 3, err)


def resize_cases(rng):
    # filters as image_tool numbers them (enum llb_image_filter): BILINEAR, BICUBIC (llava), LANCZOS (idefics3)
    shapes = [((37, 23), (16, 16)), ((20, 30), (64, 64)), ((100, 77), (33, 50)), ((64, 64), (64, 64)),
              ((5, 300), (224, 224)), ((384, 256), (384, 384))]
    filters = ((None, Image.BILINEAR, "bilinear"), (1, Image.BICUBIC, "bicubic"), (2, Image.LANCZOS, "lanczos"))
    for (filt, pil, name), ((w, h), (tw, th)) in ((f, sh) for f in filters for sh in shapes):
        img = random_image(rng, w, h)
        got, rc, err = run(encoded(img, "PNG"), (tw, th), filt)
        # each pass is Pillow's filter; horizontal first, as llama.cpp's mtmd resize_pillow
        # (one Pillow 13 call may run the vertical pass first for some shapes: a 1-level
        # difference in ~20% of values)
        want = img.resize((tw, h), pil).resize((tw, th), pil).tobytes()
        same = rc == 0 and got[:2] == (tw, th) and got[2] == want
        detail = err
        if rc == 0 and not same:
            diff = [abs(a - b) for a, b in zip(got[2], want)]
            detail = f"{sum(d > 0 for d in diff)} of {len(diff)} values differ, max {max(diff)}"
        check(f"{name}_{w}x{h}_to_{tw}x{th}_matches_pillow", same, detail)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def bad_cases(rng):
    def refused(name, data, status):
        got, rc, err = run(data)
        check(name, rc == 2 and err.startswith(status), err)

    refused("empty_is_malformed", b"", "malformed")
    refused("gif_is_unsupported", b"GIF89a" + bytes(40), "unsupported")
    png = encoded(random_image(rng, 40, 40), "PNG")
    refused("truncated_png_is_malformed", png[: len(png) // 2], "malformed")
    jpg = encoded(random_image(rng, 40, 40), "JPEG")
    refused("truncated_jpeg_is_malformed", jpg[: len(jpg) // 2], "malformed")
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    huge_png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        png_chunk(b"IEND", b"")
    refused("png_header_100k_by_100k_is_too_large", huge_png, "too large")
    i = jpg.find(b"\xff\xc0")  # SOF0: length(2) precision(1) height(2) width(2)
    huge_jpg = jpg[: i + 5] + struct.pack(">HH", 65000, 65000) + jpg[i + 9:]
    refused("jpeg_header_65k_by_65k_is_too_large", huge_jpg, "too large")
    cmyk = encoded(random_image(rng, 16, 16).convert("CMYK"), "JPEG")
    refused("cmyk_jpeg_is_unsupported", cmyk, "unsupported")


def main():
    rng = random.Random(1234)
    decode_cases(rng)
    resize_cases(rng)
    bad_cases(rng)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

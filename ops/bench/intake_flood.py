"""Floods one intake path of `llmbus serve` with the costliest requests we know how to build for
it, from tenant A's key, as fast as --threads clients can send (each sends its next request as
soon as the previous one is answered; a refusal — 400, 413, 429 — comes straight back).
tenant-flood.sh runs it beside `llmbus-bench serve` measuring tenant B's time to first token.

    intake_flood.py PATH --base-url URL --api-key KEY --model NAME [--threads 8] [--seconds 60]

Paths (what each request makes the input processor do before anything reaches an engine):
  template    a chat of two 400 KB messages of one repeated character (under the 1 MiB body
              limit), continue_final_message: the chat template renders it and the cut after
              the final message searches it (quadratic until KMP; issue 38 measured 12-16 s
              for 150 KB), then it is refused: since 2026-11-30 from its length alone (at least
              9,877 tokens for SmolLM2's 8,192), before that after tokenizing ~200k tokens
  tokenize    /tokenize of 800 KB of text built to be slow for the byte-level BPE (a long
              run of mixed letters and digits, no spaces: one pre-token, the merge heap's
              worst case)
  images      8 PNG images of 4096 x 4096 pixels (the pixel limit), each ~50 KB, in one chat:
              8 decodes of 16 M pixels each before the request is planned; a model without an
              image token (the default) refuses it before decoding any, so what this path costs
              there is the api server reading and parsing 540 KB of JSON a request
  images-mm   the same, to a multimodal model (tenant-flood.sh serves one): each image is
              decoded, planned into the model's tiles and encoded by the engine's encoder
  grammar     a JSON Schema of ~70 KB, anyOf nested 60 deep with enums of 50 strings, a new
              one per request (no verdict cache hit), compiled at intake
  generate    ordinary 256-token prompts with ignore_eos and 128 tokens (the engine's load, as
              tenant-flood.sh's original case)
Prints one line: path, requests sent, answers by HTTP status, seconds.
"""
import argparse
import base64
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib


def png_of(width, height):
    """A valid, highly compressible RGB PNG of width x height (zlib-compressed zero rows)."""
    def chunk(kind, data):
        return (len(data).to_bytes(4, "big") + kind + data +
                zlib.crc32(kind + data).to_bytes(4, "big"))
    raw = (b"\x00" + b"\x00" * (width * 3)) * height
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def nested_schema(rng, depth=60):
    """anyOf nested `depth` deep, each level with an enum of 50 fresh strings beside the deeper
    level: ~70 KB, a new schema per request (no verdict cache hit), linear in size (each level
    refers to the one below once)."""
    node = {"type": "string", "enum": [f"v{rng.randrange(10**9)}" for _ in range(50)]}
    for d in range(depth):
        node = {"anyOf": [node, {"type": "object", "properties": {f"k{d}": {"enum": [
            f"e{rng.randrange(10**9)}" for _ in range(50)]}}, "required": [f"k{d}"]}]}
    return node


def body_for(path, model, rng, png_b64):
    if path == "template":
        text = "a" * 400_000
        return "/v1/chat/completions", {"model": model, "max_tokens": 1, "continue_final_message": True,
                                        "add_generation_prompt": False,
                                        "messages": [{"role": "user", "content": text},
                                                     {"role": "assistant", "content": text}]}
    if path == "tokenize":
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
        text = "".join(rng.choice(alphabet) for _ in range(800_000))
        return "/tokenize", {"model": model, "prompt": text}
    if path in ("images", "images-mm"):
        parts = [{"type": "text", "text": "What is in these?"}]
        parts += [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_b64}} for _ in range(8)]
        return "/v1/chat/completions", {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": parts}]}
    if path == "grammar":
        return "/v1/chat/completions", {"model": model, "max_tokens": 1,
                                        "messages": [{"role": "user", "content": "json please"}],
                                        "response_format": {"type": "json_schema", "json_schema": {
                                            "name": "x", "schema": nested_schema(rng)}}}
    if path == "generate":
        words = " ".join(rng.choice(["sea", "river", "stone", "light", "wind", "bird"]) for _ in range(256))
        return "/v1/completions", {"model": model, "prompt": words, "max_tokens": 128, "ignore_eos": True}
    raise SystemExit(f"intake_flood: unknown path {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    png_b64 = base64.b64encode(png_of(4096, 4096)).decode() if args.path.startswith("images") else ""
    stop = time.monotonic() + args.seconds
    counts, lock = {}, threading.Lock()

    # The images bodies are the same every time: serialized once, so that the flooding client (on
    # the same machine) spends its CPU sending, not building 540 KB of JSON per request.
    fixed = None
    if args.path.startswith("images"):
        route, body = body_for(args.path, args.model, random.Random(0), png_b64)
        fixed = (route, json.dumps(body).encode())

    def client(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            if fixed:
                route, data = fixed
            else:
                route, body = body_for(args.path, args.model, rng, png_b64)
                data = json.dumps(body).encode()
            req = urllib.request.Request(args.base_url + route, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {args.api_key}"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    r.read()
                    status = r.status
            except urllib.error.HTTPError as e:
                e.read()
                status = e.code
            except OSError:
                status = 0
            with lock:
                counts[status] = counts.get(status, 0) + 1

    t0 = time.monotonic()

    def report(*_):
        with lock:
            print(f"{args.path} sent={sum(counts.values())} statuses={json.dumps(dict(sorted(counts.items())))} "
                  f"seconds={time.monotonic() - t0:.1f}", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, report)  # tenant-flood.sh stops it when B is done
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report()


if __name__ == "__main__":
    sys.exit(main())

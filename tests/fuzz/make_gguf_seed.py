"""Writes the seed of fuzz_gguf: a tiny GGUF v3 file (general.architecture, llama.context_length,
a 3-token vocabulary, one F32 tensor of 4 values, aligned to 32 bytes) at the path given.
Generated rather than committed: no model-format binaries in git.   usage: make_gguf_seed.py OUT"""
import struct
import sys


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


kv = s("general.architecture") + struct.pack("<I", 8) + s("llama")
kv += s("llama.context_length") + struct.pack("<I", 4) + struct.pack("<I", 128)
kv += s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<I", 8) + struct.pack("<Q", 3)
kv += s("<unk>") + s("<s>") + s("a")
tensor = s("token_embd.weight") + struct.pack("<I", 1) + struct.pack("<Q", 4) + struct.pack("<I", 0) + \
    struct.pack("<Q", 0)
body = b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 1) + struct.pack("<Q", 3) + kv + tensor
body += b"\0" * ((32 - len(body) % 32) % 32) + struct.pack("<4f", 1, 2, 3, 4)
with open(sys.argv[1], "wb") as f:
    f.write(body)

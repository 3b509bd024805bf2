#!/usr/bin/env python3
"""GBNF grammars: the engine's matcher and Python's Lark (Earley) agree on the language.

    test_gbnf_walks.py SO_WALK DATA_DIR [MODEL]

For every grammar of DATA_DIR/gbnf/*.gbnf, and of llama.cpp's grammars/ folder when its tree
is found ($LLB_LLAMACPP_GRAMMARS, or .cache/llamacpp/*/vendor/llama.cpp/grammars beside the
repository): gbnf_ref.py reads the grammar into a Lark grammar (written apart from the C
compiler). Then, both ways:
- so_walk draws seeded random walks under the mask over the test vocabulary (every token's
  mask bit checked) and, when MODEL exists, over the model's tokenizer: every output must be
  valid UTF-8 and in the language by Lark;
- Python draws random strings of the language: the matcher must accept every one; and near
  misses of them (a character dropped, inserted, replaced): the matcher's verdict must equal
  Lark's.
Also: grammars the engine refuses say why, with the line and column.
"""
import glob
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbnf_ref  # noqa: E402

WALK, DATA = sys.argv[1], sys.argv[2]
MODEL = sys.argv[3] if len(sys.argv) > 3 else ""
failures = []


def run(args, timeout=300):
    return subprocess.run([WALK, *args], capture_output=True, timeout=timeout)


def grammars():
    files = sorted(glob.glob(os.path.join(DATA, "gbnf", "*.gbnf")))
    assert len(files) >= 8, files
    llama = os.environ.get("LLB_LLAMACPP_GRAMMARS")
    if not llama:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        found = glob.glob(os.path.join(root, ".cache", "llamacpp", "*", "vendor", "llama.cpp", "grammars"))
        llama = found[0] if found else ""
    extra = sorted(glob.glob(os.path.join(llama, "*.gbnf"))) if llama else []
    print(f"{len(files)} grammars of ours, {len(extra)} of llama.cpp ({llama or 'tree not found'})")
    return files + extra


def walks(path, ref, name):
    outs = []
    for seed in (1, 2):
        r = run(["--grammar", path, "--samples", "15", "--seed", str(seed), "--max-steps", "600"])
        if r.returncode != 0:
            failures.append(f"{name}: so_walk seed {seed}: rc {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
            continue
        outs += r.stdout.decode().split("\n")[:-1]
    if MODEL and os.path.exists(MODEL):
        r = run(["--grammar", path, "--model", MODEL, "--samples", "3", "--seed", "7", "--max-steps", "600"])
        if r.returncode != 0:
            failures.append(f"{name}: so_walk --model: rc {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
        else:
            outs += r.stdout.decode().split("\n")[:-1]
    for h in outs:
        try:
            text = bytes.fromhex(h).decode("utf-8")
        except UnicodeDecodeError as e:
            failures.append(f"{name}: walk output is not UTF-8 ({e}): {h}")
            continue
        if not ref.accepts(text):
            failures.append(f"{name}: walk output not in the language: {text!r}")
    return len(outs)


def verdicts(path, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".hex", delete=False) as f:
        for t in texts:
            f.write(t.encode("utf-8").hex() + "\n")
    try:
        r = run(["--grammar", path, "--accept", f.name])
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        failures.append(f"{path}: so_walk --accept: rc {r.returncode}: {r.stderr.decode(errors='replace')}")
        return None
    return [line == "1" for line in r.stdout.decode().split("\n")[:-1]]


def both_ways(path, ref, name, seed):
    rng = random.Random(seed)
    members = [s for s in (ref.sample(rng) for _ in range(60)) if s is not None][:40]
    alphabet = sorted({c for s in members for c in s} | set("()[]{}\"\\ \n-+0a"))
    near = [m for s in members for m in gbnf_ref.mutants(rng, s, alphabet, 3)]
    got = verdicts(path, members + near)
    if got is None:
        return 0, 0
    for s, ok in zip(members, got):
        if not ok:
            failures.append(f"{name}: a string of the language refused: {s!r}")
    differ = 0
    for s, ok in zip(near, got[len(members):]):
        want = ref.accepts(s)
        if ok != want:
            differ += 1
            failures.append(f"{name}: near miss {s!r}: matcher {ok}, Lark {want}")
    return len(members), len(near)


total_walks = total_members = total_near = 0
for i, path in enumerate(grammars()):
    name = os.path.basename(path)
    text = open(path, encoding="utf-8").read()
    ref = gbnf_ref.Reference(text)
    total_walks += walks(path, ref, name)
    m, n = both_ways(path, ref, name, 100 + i)
    total_members += m
    total_near += n

# Refusals name the place and the reason.
BAD = [
    ("root ::= \"a\" | item\n", "line 1 column 16: undefined rule 'item'"),
    ("root ::= expr\nexpr ::= expr \"-\" [0-9] | [0-9]\n", "line 2 column 1: rule 'expr' is left-recursive"),
    ("start: \"a\"\n", "Lark syntax is not supported"),
    ("root ::= [0-9\n", "line 1 column 10: unterminated character class"),
]
for text, want in BAD:
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(text)
    try:
        # run()'s 300 s: so_walk reads the model's vocabulary first (a minute under a loaded ASan build)
        r = run(["--grammar", f.name, "--samples", "1"])
    finally:
        os.unlink(f.name)
    err = r.stderr.decode(errors="replace")
    if r.returncode != 3 or want not in err:
        failures.append(f"grammar {text!r}: want a refusal naming {want!r}, got rc {r.returncode}: {err!r}")

print(f"{total_walks} walk outputs in the language, {total_members} drawn members accepted, "
      f"{total_near} near misses judged as Lark does")
if failures:
    print(f"{len(failures)} failures:")
    for f in failures[:30]:
        print("  " + f)
    sys.exit(1)
print("OK")

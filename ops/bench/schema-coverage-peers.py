#!/usr/bin/env python3
"""JSON Schema coverage of llmbus beside llama.cpp's json-schema-to-grammar and xgrammar.

    .venv/bin/python ops/bench/schema-coverage-peers.py [--so-walk PATH] [--no-xgrammar] [--list N] [--json FILE]

(the test venv of `make venv`: jsonschema and the coverage test's checkers; ~6 min on 2 cores)

Corpora: (a) every schema of tests/unit/schema_corpus.py (its handwritten cases and the 260
seeded random ones test_schema_coverage.py checks); (b) the schemas of llama.cpp's own
tests/test-json-schema-to-grammar.cpp, read from its source at run time, with the verdict that
test expects.

Verdicts:
  - llmbus: so_walk --schema (build-release/tests/so_walk, or --so-walk): exit 3 is a refusal,
    its message the reason.
  - llama.cpp: json_schema_to_grammar() of the llama-cpp-python sdist that compare-llamacpp.sh
    pins (same version and sha256, same cache: LLAMACPP_CACHE, default .cache/llamacpp),
    through schema_to_grammar_driver.cpp, built here with g++ against the converter's own files
    only. It compiles a schema or throws; it also compiles many keywords into nothing (number
    bounds, multipleOf, not, siblings of anyOf / $ref, uniqueItems, formats it does not know,
    ...) and turns a pattern it cannot translate into "any string" with a warning. So each
    grammar it compiles is also checked: random walks over it (so_walk --grammar: llmbus's GBNF
    matcher reads llama.cpp's GBNF) and the coverage test's candidate texts and near misses
    (so_walk --grammar --accept), each judged by Python jsonschema as test_schema_coverage.py
    judges llmbus's own outputs; a grammar that produces or accepts an invalid text is
    "compiled, not exact".
  - xgrammar (vLLM's default backend): GrammarCompiler.compile_json_schema of the xgrammar wheel
    on PyPI with its defaults (as vLLM calls it), run without torch (xgrammar_schema_verdicts.py,
    in a venv under the cache with only apache-tvm-ffi installed); its logged warnings (keywords
    it ignores) are reported, and its own matcher (a byte vocabulary) is asked about the same
    candidate texts: one it accepts that jsonschema rejects makes it "compiled, not exact". Its
    grammars are not walked (xgrammar's matcher has no sampler without torch).

Prints the counts per corpus and lists, with the reasons, what each side compiles that the
other refuses. Exit 0 whatever the counts (a bench); 1 on a set-up error (no so_walk, no
llama.cpp source, the driver does not build).
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "ops", "bench")
XGRAMMAR = "0.2.9"
TVM_FFI = "0.1.15.post2"
TMP = tempfile.mkdtemp(prefix="llb-schema-peers.")


def log(msg):
    print(f"schema-coverage-peers: {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(msg)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, **kw)


# ---- set-up ------------------------------------------------------------------------------

def pinned_llamacpp():
    """(version, sha256) of the llama-cpp-python sdist, as compare-llamacpp.sh pins them."""
    with open(os.path.join(HERE, "compare-llamacpp.sh"), encoding="utf-8") as fh:
        text = fh.read()
    version = re.search(r"^version=(\S+)$", text, re.M)
    sha = re.search(r"^sha256=([0-9a-f]{64})$", text, re.M)
    if not version or not sha:
        die("no version= / sha256= line in compare-llamacpp.sh")
    return version.group(1), sha.group(1)


def fetch_llamacpp(cache):
    """The llama.cpp source tree of the pinned sdist, downloaded (or copied from .cache/sdist, as
    compare-llamacpp.sh does) and unpacked when missing."""
    version, sha = pinned_llamacpp()
    src = os.path.join(cache, f"llama_cpp_python-{version}", "vendor", "llama.cpp")
    if os.path.isfile(os.path.join(src, "common", "json-schema-to-grammar.cpp")):
        return src
    tarball = os.path.join(cache, f"llama_cpp_python-{version}.tar.gz")
    os.makedirs(cache, exist_ok=True)
    sdist = os.path.join(ROOT, ".cache", "sdist", os.path.basename(tarball))
    if not os.path.isfile(tarball) and os.path.isfile(sdist):
        shutil.copyfile(sdist, tarball)
    if not os.path.isfile(tarball):
        log(f"downloading llama-cpp-python {version} (source package, 77 MB) into {cache}")
        r = run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                 "--no-binary", ":all:", "-d", cache, f"llama-cpp-python=={version}"])
        if r.returncode != 0:
            die(f"pip download failed: {r.stderr.decode(errors='replace')[-400:]}")
    with open(tarball, "rb") as fh:
        if hashlib.sha256(fh.read()).hexdigest() != sha:
            os.unlink(tarball)
            die(f"checksum mismatch: {tarball}")
    log(f"unpacking {tarball}")
    r = run(["tar", "-xzf", tarball, "-C", cache])
    if r.returncode != 0 or not os.path.isdir(src):
        die(f"unpacking {tarball} failed: {r.stderr.decode(errors='replace')[-300:]}")
    return src


def build_driver(src, cache):
    """schema_to_grammar_driver built against src, cached by the hash of the driver's source."""
    driver = os.path.join(HERE, "schema_to_grammar_driver.cpp")
    with open(driver, "rb") as fh:
        tag = hashlib.sha256(fh.read() + src.encode()).hexdigest()[:12]
    exe = os.path.join(cache, "schema-driver", f"schema_to_grammar_driver-{tag}")
    if os.access(exe, os.X_OK):
        return exe
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    log("building schema_to_grammar_driver (g++, ~1 min)")
    files = [f"{src}/common/{f}" for f in ("json-schema-to-grammar.cpp", "json-schema.cpp", "json.cpp", "trie.cpp",
                                           "unicode.cpp")]
    incs = [f"-I{src}/{d}" for d in ("common", "include", "ggml/include", "vendor")]
    r = run(["g++", "-std=c++17", "-O1", *incs, driver, *files, "-o", exe + ".tmp"])
    if r.returncode != 0:
        die(f"driver build failed:\n{r.stderr.decode(errors='replace')[-2000:]}")
    os.replace(exe + ".tmp", exe)
    return exe


def setup_xgrammar(cache):
    """(python, package dir) of a venv that can run xgrammar_schema_verdicts.py, or a reason."""
    venv = os.path.join(cache, f"xgrammar-{XGRAMMAR}-venv")
    pkg = os.path.join(cache, f"xgrammar-{XGRAMMAR}", "xgrammar")
    python = os.path.join(venv, "bin", "python")
    if not os.path.isfile(os.path.join(pkg, "libxgrammar_bindings.so")):
        dl = os.path.join(cache, "xgrammar-wheel")
        r = run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                 "--only-binary", ":all:", "-d", dl, f"xgrammar=={XGRAMMAR}"])
        wheels = [f for f in os.listdir(dl) if f.endswith(".whl")] if os.path.isdir(dl) else []
        if r.returncode != 0 or not wheels:
            return None, f"pip download xgrammar=={XGRAMMAR}: {r.stderr.decode(errors='replace')[-300:]}"
        with zipfile.ZipFile(os.path.join(dl, wheels[0])) as zf:
            zf.extractall(os.path.dirname(pkg))
    if not os.path.isfile(python):
        r = run([sys.executable, "-m", "venv", venv])
        if r.returncode == 0:
            r = run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"apache-tvm-ffi=={TVM_FFI}"])
        if r.returncode != 0:
            return None, f"venv with apache-tvm-ffi: {r.stderr.decode(errors='replace')[-300:]}"
    return (python, pkg), None


# ---- corpora -----------------------------------------------------------------------------

def llamacpp_test_cases(src):
    """[(name, schema or None, expected 'SUCCESS' / 'FAILURE')] of test-json-schema-to-grammar.cpp."""
    with open(os.path.join(src, "tests", "test-json-schema-to-grammar.cpp"), encoding="utf-8") as fh:
        text = fh.read()
    out = []
    lit = r'R"""\((.*?)\)"""|"((?:[^"\\]|\\.)*)"'
    for m in re.finditer(r'test\(\{\s*(SUCCESS|FAILURE),\s*"((?:[^"\\]|\\.)*)",\s*(?:' + lit + ")", text, re.S):
        body = m.group(3) if m.group(3) is not None else m.group(4).encode().decode("unicode_escape")
        try:
            schema = json.loads(body)
        except ValueError:
            schema = None
        out.append((m.group(2), schema, m.group(1)))
    if not out:
        die("no test({...}) cases found in llama.cpp's test-json-schema-to-grammar.cpp")
    return out


# ---- verdicts ----------------------------------------------------------------------------

def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def llmbus_verdict(walk, path):
    r = run([walk, "--schema", path, "--samples", "1", "--seed", "1", "--max-steps", "600"], timeout=300)
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode == 3:
        return False, err.replace("so_walk: compile: ", "")
    if r.returncode != 0:
        return True, f"compiled; so_walk rc {r.returncode}: {err[-200:]}"
    return True, ""


def llamacpp_verdict(driver, path):
    r = run([driver, path], timeout=60)
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode == 2:
        return False, " ".join(err.replace("JSON schema conversion failed:", "").split()), ""
    if r.returncode != 0:
        die(f"driver rc {r.returncode} on {path}: {err[-300:]}")
    warning = err.replace("WARNING: JSON schema conversion was incomplete: ", "") if err else ""
    return True, warning, r.stdout  # bytes: llama.cpp may split a UTF-8 sequence


def invalid(judge, text):
    """jsonschema rejects text (False where it cannot judge: a $dynamicRef to nowhere, ...)."""
    try:
        return not judge.value(text)[0]
    except Exception:
        return False


def candidates(cov, judge, schema, index, walks=()):
    """The coverage test's candidate texts for schema (every small value of its atoms, a sample
    of larger ones), the walks' outputs, near misses of those or of the first valid ones, and
    every object among them with its first key repeated."""
    rng = random.Random(index)
    values = [cov.load(t) for t in walks]
    compact = [t for t in (cov.dumps(v) for v in values) if t is not None]
    texts = cov.candidate_texts(schema, [s for v in values for s in cov.strings_in(v)][:10], rng) + compact
    bases = compact[:4]
    for t in texts:
        if len(bases) >= 4:
            break
        if not invalid(judge, t):
            bases.append(t)
    for t in bases:
        texts += cov.near_misses(t, rng, 25)
    texts += [d for t in texts if t.startswith("{\"") for d in duplicate_key(cov, t)]
    return list(dict.fromkeys(texts))


def duplicate_key(cov, text):
    """text with its first member written twice ({"a":1} -> {"a":1,"a":1}), when it is an object:
    one key to jsonschema (Python's json keeps the last), two entries to a grammar that counts."""
    try:
        v = cov.load(text)
    except ValueError:
        return []
    if not isinstance(v, dict) or not v:
        return []
    k, e = next(iter(v.items()))
    member = cov.dumps(e)
    return ["{" + cov.dumps(k) + ":" + member + "," + text[1:]] if member is not None else []


def llamacpp_inexact(cov, walk, judge, grammar, schema, index):
    """('walk' | 'accepts', text): a text llama.cpp's grammar produces or accepts that jsonschema
    rejects; ('unreadable', message) when llmbus's GBNF reader cannot take the grammar; None."""
    gpath = write("llamacpp.gbnf", grammar)
    r = run([walk, "--grammar", gpath, "--samples", "4", "--seed", str(index + 1), "--max-steps", "600"], timeout=300)
    if r.returncode != 0:
        return ("unreadable", r.stderr.decode(errors="replace").strip()[-200:])
    walks = [bytes.fromhex(h).decode("utf-8", "replace") for h in r.stdout.decode().split()]
    for t in walks:
        if invalid(judge, t):
            return ("walk", t)
    texts = candidates(cov, judge, schema, index, walks)
    hexfile = write("accept.hex", "".join(t.encode("utf-8").hex() + "\n" for t in texts))
    r = run([walk, "--grammar", gpath, "--accept", hexfile], timeout=300)
    if r.returncode != 0:
        return ("unreadable", r.stderr.decode(errors="replace").strip()[-200:])
    for t, accepted in zip(texts, r.stdout.decode().split("\n")):
        if accepted == "1" and invalid(judge, t):
            return ("accepts", t)
    return None


def xgrammar_verdicts(xgr, jobs):
    """xgrammar_schema_verdicts.py's answer for each {"path", "texts"} job, or (None, reason)."""
    python, pkg = xgr
    data = "".join(json.dumps(j, ensure_ascii=False) + "\n" for j in jobs).encode()
    r = run([python, os.path.join(HERE, "xgrammar_schema_verdicts.py"), pkg], input=data, timeout=3600)
    lines = r.stdout.decode().splitlines()
    if r.returncode != 0 or len(lines) != len(jobs):
        return None, f"xgrammar_schema_verdicts.py rc {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}"
    return [json.loads(line) for line in lines], None


# ---- report ------------------------------------------------------------------------------

def short(s, n=110):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def report(title, rows, have_xgr, limit):
    n = len(rows)
    lc = [r for r in rows if r["llamacpp"]]
    lb = [r for r in rows if r["llmbus"]]
    inexact = [r for r in lc if r["inexact"] and r["inexact"][0] in ("walk", "accepts")]
    warned = [r for r in lc if r["llamacpp_warning"]]
    both = [r for r in rows if r["llamacpp"] and r["llmbus"]]
    lc_only = [r for r in rows if r["llamacpp"] and not r["llmbus"]]
    lb_only = [r for r in rows if r["llmbus"] and not r["llamacpp"]]
    print(f"\n## {title}\n")
    print("| | schemas |\n|---|---:|")
    print(f"| in the corpus | {n} |")
    print(f"| compiled by llama.cpp | {len(lc)} |")
    print(f"| ... of which its grammar produces or accepts a text jsonschema rejects | {len(inexact)} |")
    print(f"| ... of which it warns (a pattern turned into any string) | {len(warned)} |")
    print(f"| compiled by llmbus | {len(lb)} |")
    print(f"| compiled by both | {len(both)} |")
    print(f"| llama.cpp only | {len(lc_only)} (not exact there: {sum(r in inexact for r in lc_only)}) |")
    print(f"| llmbus only | {len(lb_only)} |")
    if have_xgr:
        xg = [r for r in rows if r["xgrammar"]]
        xg_only = [r for r in rows if r["xgrammar"] and not r["llmbus"]]
        print(f"| compiled by xgrammar | {len(xg)} |")
        print(f"| ... of which its matcher accepts a text jsonschema rejects | {sum(bool(r['xgrammar_inexact']) for r in xg)} |")
        print(f"| ... of which it logs a warning (a keyword ignored) | {sum(bool(r['xgrammar_warnings']) for r in xg)} |")
        print(f"| compiled by xgrammar and llmbus | {sum(r['llmbus'] for r in xg)} |")
        print(f"| xgrammar only (vs llmbus) | {len(xg_only)} (not exact there: {sum(bool(r['xgrammar_inexact']) for r in xg_only)}) |")
        print(f"| llmbus only (vs xgrammar) | {sum(r['llmbus'] and not r['xgrammar'] for r in rows)} |")
    if "expected" in rows[0]:
        agree = sum((r["expected"] == "SUCCESS") == r["llamacpp"] for r in rows)
        print(f"| llama.cpp's verdict as its test expects | {agree} of {n} |")

    def listing(head, sel, fmt):
        if sel:
            print(f"\n{head} ({len(sel)}):")
            for r in sel[:limit]:
                print(f"- {r['name']}: {fmt(r)}")
            if len(sel) > limit:
                print(f"- ... {len(sel) - limit} more")

    def lc_note(r):
        note = ""
        if r["inexact"] and r["inexact"][0] in ("walk", "accepts"):
            note = f"; llama.cpp's grammar {'produces' if r['inexact'][0] == 'walk' else 'accepts'} {short(r['inexact'][1], 60)!r}, invalid"
        elif r["llamacpp_warning"]:
            note = f"; llama.cpp warns: {short(r['llamacpp_warning'], 80)}"
        return f"llmbus: {short(r['llmbus_reason'])}{note}"

    listing("llama.cpp compiles, llmbus refuses", lc_only, lc_note)
    listing("llmbus compiles, llama.cpp refuses", lb_only, lambda r: f"llama.cpp: {short(r['llamacpp_reason'])}")
    listing("both compile, llama.cpp not exact", [r for r in inexact if r["llmbus"]],
            lambda r: f"{r['inexact'][0]} {short(r['inexact'][1], 80)!r}")
    unreadable = [r for r in lc if r["inexact"] and r["inexact"][0] == "unreadable"]
    listing("llama.cpp's grammar not checked (llmbus's GBNF reader refused it)", unreadable,
            lambda r: short(r["inexact"][1]))
    if have_xgr:
        def xg_note(r):
            if r["xgrammar_inexact"]:
                return f"; xgrammar accepts {short(r['xgrammar_inexact'], 60)!r}, invalid"
            if r["xgrammar_warnings"]:
                return f"; xgrammar warns: {short('; '.join(r['xgrammar_warnings']), 90)}"
            return ""
        listing("xgrammar compiles, llmbus refuses", [r for r in rows if r["xgrammar"] and not r["llmbus"]],
                lambda r: f"llmbus: {short(r['llmbus_reason'], 90)}{xg_note(r)}")
        listing("both compile, xgrammar not exact", [r for r in rows if r["xgrammar"] and r["llmbus"] and r["xgrammar_inexact"]],
                lambda r: f"accepts {short(r['xgrammar_inexact'], 80)!r}"
                + (f"; warns: {short('; '.join(r['xgrammar_warnings']), 80)}" if r["xgrammar_warnings"] else ""))
        listing("llmbus compiles, xgrammar refuses", [r for r in rows if r["llmbus"] and not r["xgrammar"]],
                lambda r: f"xgrammar: {short(r['xgrammar_error'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--so-walk", default=None, help="so_walk binary (default build-release/tests/so_walk)")
    ap.add_argument("--no-xgrammar", action="store_true", help="skip xgrammar")
    ap.add_argument("--list", type=int, default=1000, help="at most this many names per list")
    ap.add_argument("--json", help="write every verdict to this file")
    args = ap.parse_args()
    walk = args.so_walk or next((p for p in (os.path.join(ROOT, b, "tests", "so_walk") for b in ("build-release", "build"))
                                 if os.access(p, os.X_OK)), None)
    if not walk or not os.access(walk, os.X_OK):
        die("no so_walk: make build-release (or give --so-walk PATH)")
    cache = os.environ.get("LLAMACPP_CACHE", os.path.join(ROOT, ".cache", "llamacpp"))
    src = fetch_llamacpp(cache)
    driver = build_driver(src, cache)
    xgr, why = (None, "--no-xgrammar") if args.no_xgrammar else setup_xgrammar(cache)
    if why:
        log(f"xgrammar skipped: {why}")

    sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    import schema_corpus
    saved, sys.argv = sys.argv, [sys.argv[0], walk]  # the coverage test reads its so_walk from argv at import
    try:
        import test_schema_coverage as cov
    except ImportError as e:
        die(f"{e}: run with the test venv's Python (make venv; .venv/bin/python {sys.argv[0]})")
    sys.argv = saved

    corpora = [("llmbus's corpus (tests/unit/schema_corpus.py)",
                [(n, s, None) for n, s, _ in schema_corpus.CASES + schema_corpus.generated(260, 2026)]),
               ("llama.cpp's tests (tests/test-json-schema-to-grammar.cpp)", llamacpp_test_cases(src))]
    results = {}
    for ci, (title, cases) in enumerate(corpora):
        rows, jobs, judges = [], [], []
        for i, (name, schema, expected) in enumerate(cases):
            text = json.dumps(schema, ensure_ascii=False) if schema is not None else "not JSON"
            path = write(f"c{ci}-{i}.json", text)
            try:
                judge = cov.Judge(schema) if schema is not None else None
            except Exception:  # not a schema jsonschema reads (prefixItems as an object, ...)
                judge = None
            judges.append(judge)
            ok_lb, why_lb = llmbus_verdict(walk, path) if schema is not None else (False, "not JSON")
            ok_lc, why_lc, grammar = llamacpp_verdict(driver, path)
            row = {"name": name, "llmbus": ok_lb, "llmbus_reason": why_lb, "llamacpp": ok_lc,
                   "llamacpp_reason": why_lc if not ok_lc else "", "llamacpp_warning": why_lc if ok_lc else "",
                   "inexact": None}
            if ok_lc:
                row["inexact"] = (llamacpp_inexact(cov, walk, judge, grammar, schema, i) if judge
                                  else ("unjudged", "jsonschema cannot read the schema"))
            if expected:
                row["expected"] = expected
            rows.append(row)
            jobs.append({"path": path, "texts": candidates(cov, judge, schema, i) if judge else []})
        if xgr:
            got, why = xgrammar_verdicts(xgr, jobs)
            if why:
                log(f"xgrammar skipped: {why}")
                xgr = None
            else:
                for row, job, judge, v in zip(rows, jobs, judges, got):
                    bad = [t for t, a in zip(job["texts"], v["accepted"]) if a and invalid(judge, t)]
                    row.update(xgrammar=v["ok"], xgrammar_error=v["error"], xgrammar_warnings=v["warnings"],
                               xgrammar_inexact=bad[0] if bad else None)
        report(title, rows, xgr is not None, args.list)
        results[title] = rows
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()

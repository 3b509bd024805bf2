"""xgrammar's verdict on JSON Schemas, for schema-coverage-peers.py; run with the Python of the
venv that script sets up (apache-tvm-ffi installed, xgrammar's wheel unpacked, no torch).

    python xgrammar_schema_verdicts.py XGRAMMAR_PACKAGE_DIR < one JSON object a line

Each input line is {"path": schema file, "texts": [str]}; each output line
{"ok": bool, "error": str, "warnings": [str], "accepted": [bool]}: whether xgrammar compiles the
schema, its message when not, the keywords it logged as ignored, and for each text whether its
matcher accepts the text as a whole output (accept_string, then the stop token).

`import xgrammar` pulls in torch (its matcher and kernels), so this loads the compiled core
(libxgrammar_bindings.so) through tvm_ffi, as xgrammar's load_binding.py does, and its FFI
class declarations (tvm_ffi_binding/_ffi_api.py) under another module name, then calls what
xgrammar's Python classes call: GrammarCompiler.compile_json_schema with
GrammarCompiler.compile_json_schema's defaults (any whitespace, strict mode; what vLLM's xgrammar
backend passes) over a byte-level vocabulary (the 256 bytes and a stop token), and a
GrammarMatcher per text. The C++ core logs the keywords it ignores ("Warning: ...") to stderr,
captured here per schema.
"""
import importlib.util
import json
import os
import pathlib
import sys
import tempfile

from tvm_ffi.libinfo import load_lib_module


def main():
    pkg = pathlib.Path(sys.argv[1])
    load_lib_module("xgrammar", "xgrammar_bindings", extra_lib_paths=[pkg])
    spec = importlib.util.spec_from_file_location("xgrammar_ffi_api", pkg / "tvm_ffi_binding" / "_ffi_api.py")
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    vocab = [bytes([i]) for i in range(256)] + [b"</s>"]
    info = api.TokenizerInfo(vocab, 0, len(vocab), [256], False)  # 0: VocabType.RAW
    compiler = api.GrammarCompiler(info, 1, False, -1, False)
    log = tempfile.TemporaryFile()
    saved = os.dup(2)
    for line in sys.stdin:
        job = json.loads(line)
        with open(job["path"], encoding="utf-8") as fh:
            text = fh.read()
        log.seek(0)
        log.truncate()
        sys.stderr.flush()
        os.dup2(log.fileno(), 2)
        compiled, error = None, ""
        try:
            compiled = compiler.compile_json_schema(text, True, None, None, True, None, False)
        except Exception as e:  # the core raises RuntimeError / ValueError with its message
            error = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
        log.seek(0)
        warnings = [w.split("Warning: ", 1)[1] for w in log.read().decode(errors="replace").splitlines()
                    if "Warning: " in w]
        accepted = [accepts(api, compiled, t) for t in job["texts"]] if compiled is not None else []
        print(json.dumps({"ok": compiled is not None, "error": error, "warnings": warnings, "accepted": accepted}),
              flush=True)


def accepts(api, compiled, text):
    matcher = api.GrammarMatcher(compiled, None, False, -1, None)
    return bool(matcher.accept_string(text.encode("utf-8"), False) and matcher.accept_token(256, False))


if __name__ == "__main__":
    main()

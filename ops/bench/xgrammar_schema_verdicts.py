"""xgrammar's verdict on JSON Schemas, for schema-coverage-peers.py; run with the Python of the
venv that script sets up (apache-tvm-ffi installed, xgrammar's wheel unpacked, no torch).

    python xgrammar_schema_verdicts.py XGRAMMAR_PACKAGE_DIR < schema paths, one a line

Prints one JSON line per schema: {"ok": bool, "error": str, "warnings": [str]}.

`import xgrammar` pulls in torch (its matcher and kernels), so this loads the compiled core
(libxgrammar_bindings.so) through tvm_ffi, as xgrammar's load_binding.py does, and its FFI
class declarations (tvm_ffi_binding/_ffi_api.py) under another module name, then calls
Grammar.from_json_schema with the arguments xgrammar.Grammar.from_json_schema passes by default
(any whitespace, strict mode: what vLLM's xgrammar backend uses). The C++ core logs the
keywords it ignores ("Warning: ...") to stderr, captured here per schema.
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
    log = tempfile.TemporaryFile()
    saved = os.dup(2)
    for line in sys.stdin:
        with open(line.rstrip("\n"), encoding="utf-8") as fh:
            text = fh.read()
        log.seek(0)
        log.truncate()
        sys.stderr.flush()
        os.dup2(log.fileno(), 2)
        try:
            api.Grammar.from_json_schema(text, True, None, None, True, None, False, False)
            ok, error = True, ""
        except Exception as e:  # the core raises RuntimeError / ValueError with its message
            ok, error = False, str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
        log.seek(0)
        warnings = [w.split("Warning: ", 1)[1] for w in log.read().decode(errors="replace").splitlines()
                    if "Warning: " in w]
        print(json.dumps({"ok": ok, "error": error, "warnings": warnings}), flush=True)


if __name__ == "__main__":
    main()

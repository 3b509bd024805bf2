"""Builds the llmbus client package; the FlatBuffers code is generated here, at build time.

`pip install ./clients/python` (from a checkout) runs flatc --python over the repository's
schemas/*.fbs and puts the generated modules (llmbus/GenerateRequest.py, ...) beside the
hand-written ones, so the wire code always matches the schemas of the checkout it is built
from; nothing generated is committed. Needs flatc on PATH (Debian: flatbuffers-compiler, which
ops/install-deps.sh installs) or in $FLATC; the schemas are found at ../../schemas or in
$LLMBUS_SCHEMAS_DIR.
"""
import glob
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def schemas_dir():
    for d in (os.environ.get("LLMBUS_SCHEMAS_DIR"), os.path.join(HERE, "..", "..", "schemas")):
        if d and glob.glob(os.path.join(d, "*.fbs")):
            return os.path.abspath(d)
    raise SystemExit("llmbus-client: no schemas/*.fbs found (build from an llmbus checkout: "
                     "pip install ./clients/python, or set LLMBUS_SCHEMAS_DIR)")


def flatc():
    exe = os.environ.get("FLATC") or shutil.which("flatc")
    if not exe:
        raise SystemExit("llmbus-client: flatc not found (apt-get install flatbuffers-compiler, "
                         "or set FLATC)")
    return exe


class BuildWithSchemas(build_py):
    """build_py, plus the flatc-generated modules of every schema in build_lib/llmbus/."""

    def run(self):
        super().run()
        src = schemas_dir()
        with tempfile.TemporaryDirectory() as out:
            fbs = sorted(glob.glob(os.path.join(src, "*.fbs")))
            subprocess.run([flatc(), "--python", "-o", out, "-I", src] + fbs, check=True)
            target = os.path.join(self.build_lib, "llmbus")
            os.makedirs(target, exist_ok=True)
            ours = set(os.listdir(os.path.join(HERE, "llmbus")))
            for stale in glob.glob(os.path.join(target, "*.py")):  # of a schema since removed
                if os.path.basename(stale) not in ours:
                    os.remove(stale)
            for path in glob.glob(os.path.join(out, "llmbus", "*.py")):
                if os.path.basename(path) != "__init__.py":  # ours re-exports the client API
                    shutil.copy(path, target)


setup(cmdclass={"build_py": BuildWithSchemas})

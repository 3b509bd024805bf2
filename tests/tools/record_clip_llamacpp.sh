#!/bin/sh
# Records the golden embeddings of test_clip.py's llama.cpp cases (tests/unit/data/clip/*.f32):
# builds libmtmd in the llama.cpp tree of ../shared/PLATFORM.md (the llama-cpp-python sdist),
# compiles tests/tools/record_clip_llamacpp.c against it, writes each case's seeded random
# mmproj (tests/tools/make_mmproj.py) and test image (tests/unit/clip_reference.py), and runs
# mtmd on them with flash attention off (ggml's f32 attention, the order closest to ours).
# The text model is only needed by mtmd_init_from_file: SmolLM2-135M (hidden size 576 = the
# random projectors' output), fetched by `make model`.
#
#   tests/tools/record_clip_llamacpp.sh [LLAMA_CPP_DIR]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
L=${1:-$ROOT/.cache/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
PY=${PY:-$ROOT/.venv/bin/python}
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=$ROOT/tests/unit/data/clip
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

flock "$(dirname "$(dirname "$(dirname "$L")")")/.lock" sh -c \
  "cmake -S '$L' -B '$L/build' -DLLAMA_BUILD_MTMD=ON >/dev/null && cmake --build '$L/build' --target mtmd llama -j2 >/dev/null"
cc -O2 -o "$TMP/record" "$ROOT/tests/tools/record_clip_llamacpp.c" -I"$L/include" -I"$L/ggml/include" \
  -I"$L/tools/mtmd" -L"$L/build/bin" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin"

mkdir -p "$OUT"
# shape seed width height image-seed: the GOLDEN list of tests/unit/test_clip.py
for c in "tiny-idefics3 7 100 70 1" "tiny-mlp 8 40 30 2"; do
  set -- $c
  ROOT="$ROOT" "$PY" - "$TMP" "$@" <<'EOF'
import os, sys

sys.path[:0] = [os.environ["ROOT"] + "/tests/tools", os.environ["ROOT"] + "/tests/unit"]
import clip_reference, make_mmproj
tmp, shape, seed, w, h, img_seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
make_mmproj.write(f"{tmp}/{shape}.gguf", make_mmproj.shape(shape), seed, "f16")
open(f"{tmp}/{shape}.rgb", "wb").write(clip_reference.test_image(w, h, img_seed).tobytes())
EOF
  "$TMP/record" "$MODEL" "$TMP/$1.gguf" "$TMP/$1.rgb" "$3" "$4" "$OUT/$1.f32" 0
  echo "recorded $OUT/$1.f32 ($(head -1 "$OUT/$1.f32"))"
done

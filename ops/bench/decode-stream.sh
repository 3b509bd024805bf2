#!/bin/sh
# How fast the batch-1 decode matmul streams its weights from DRAM, beside plain reads of the
# same bytes by the same threads (docs/performance.md "Near the bounds", the decode part):
# `llmbus-kernel-bench --kernel TYPE --stream` (cmd/bench/kernel_stream.h), 1 activation row.
#   1. a 65536x2048 weight (48-142 MB: every pass from DRAM) of Q4_0, Q4_K, Q5_0, Q6_K and Q8_0 at
#      AVX2 and AVX-512 VNNI, on 1 and 2 threads;
#   2. Q4_0 ops of 0.2, 0.5, 1 and 4 MB (576 inputs, as SmolLM2's per-layer matmuls), 2 threads,
#      AVX2 and AVX-512, on copies that together hold 3x the L3 (each call reads DRAM).
# Every case prints the fastest and median GB/s of the matmul and of the two reads (128 KiB
# chunks claimed from the pool, as the matmul's decode chunks; one contiguous slice a thread).
# Release build (build-release/).
#
#   ops/bench/decode-stream.sh [--passes P] [--small-passes P]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PASSES=100 SMALL=2000
while [ $# -gt 0 ]; do
  case $1 in
    --passes) PASSES=$2; shift ;;
    --small-passes) SMALL=$2; shift ;;
    *) echo "usage: $0 [--passes P] [--small-passes P]" >&2; exit 2 ;;
  esac
  shift
done
cmake -S "$ROOT" -B "$ROOT/build-release" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >/dev/null
cmake --build "$ROOT/build-release" --target llmbus-kernel-bench -j2 >/dev/null
KB="$ROOT/build-release/cmd/llmbus-kernel-bench"
for t in q4_0 q4_k q5_0 q6_k q8_0; do
  for isa in avx2 avx512vnni; do
    for n in 1 2; do
      LLMBUS_SIMD=$isa "$KB" --kernel "$t" --stream --shape 65536x2048 --rows 1 --threads "$n" --passes "$PASSES"
    done
  done
done
for s in 640x576 1536x576 3072x576 12288x576; do
  for isa in avx2 avx512vnni; do
    LLMBUS_SIMD=$isa "$KB" --kernel q4_0 --stream --shape "$s" --rows 1 --threads 2 --passes "$SMALL"
  done
done

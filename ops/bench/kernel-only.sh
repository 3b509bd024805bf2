#!/bin/sh
# The packed int8 matmul kernels alone (kernels/cpu/README.md's table): `llmbus-kernel-bench
# --kernel TYPE` (cmd/bench/kernel_only.h) on L2-resident 1536x576 / 576x1536 random weights,
# 64 and 8 activation rows, 1 thread, fastest and median of 300 passes against the level's int8
# peak, at AVX2 in 8-row and 64-row calls and at AVX-512 VNNI (8-row calls: it has no many-row
# kernel); every case checked bit for bit against the scalar kernel first. ROUNDS rounds, the
# cases interleaved, so a burst of load touches one round of each. Release build (build-release/).
#
#   ops/bench/kernel-only.sh [--rounds N] [--passes P]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=3 PASSES=300
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --passes) PASSES=$2; shift ;;
    *) echo "usage: $0 [--rounds N] [--passes P]" >&2; exit 2 ;;
  esac
  shift
done
cmake -S "$ROOT" -B "$ROOT/build-release" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >/dev/null
cmake --build "$ROOT/build-release" --target llmbus-kernel-bench -j2 >/dev/null
KB="$ROOT/build-release/cmd/llmbus-kernel-bench"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
round=1
while [ "$round" -le "$ROUNDS" ]; do
  for c in q4_0:1536x576 q4_0:576x1536 q5_0:1536x576 q4_k:576x1536 q6_k:576x1536; do
    t=${c%%:*} s=${c#*:}
    for rows in 64 8; do
      LLMBUS_SIMD=avx2 "$KB" --kernel "$t" --shape "$s" --rows "$rows" --calls-of 8 --passes "$PASSES" | grep fastest
      LLMBUS_SIMD=avx2 "$KB" --kernel "$t" --shape "$s" --rows "$rows" --calls-of 64 --passes "$PASSES" | grep fastest
      LLMBUS_SIMD=avx512vnni "$KB" --kernel "$t" --shape "$s" --rows "$rows" --passes "$PASSES" | grep fastest
    done
  done
  round=$((round + 1))
done

#!/usr/bin/env bash
# One command on a GPU machine: configure and build the standalone CUDA project
# (kernels/cuda/standalone: no NATS/libevent/flatbuffers/cmocka needed) for sm_90, run every
# CUDA test, run the benchmark and print its table (record it in kernels/cuda/README.md).
#   ops/bench/cuda-bench.sh [--shape smollm2|llama1b]
# Env: CUDA_ARCH (default 90), BUILD_DIR (default build-cuda-standalone), JOBS.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-cuda-standalone}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
cmake -S "$root/kernels/cuda/standalone" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" || exit 1
cmake --build "$build" -j"$jobs" || exit 1
tests_rc=0
ctest --test-dir "$build" --output-on-failure -L cuda || tests_rc=$?
"$build/llmbus_cuda_bench" "$@"
bench_rc=$?
if [ "$tests_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ]; then
  echo "cuda-bench: tests rc=$tests_rc, bench rc=$bench_rc" >&2
  exit 1
fi

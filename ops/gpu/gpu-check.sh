#!/usr/bin/env bash
# One call on a lent GPU machine (no registry there): install the carried Debian packages,
# build the whole project for sm_90 (Release, no sanitizers), run the CUDA tests, the worker
# tests and the CUDA benchmark, and optionally the e2e tests over NATS with --device cuda.
#   ops/gpu/gpu-check.sh [build] [cuda-tests] [bench] [prof] [e2e] [stack] [serve-bench]
# Steps run in the order given (default: build cuda-tests bench). Logs go to $OUT (or
# /tmp/gpu-check) as <step>.log; the last lines printed are a summary table.
# Env: DEBS (folder of .deb files, default .debs), BUILD_DIR (default build-gpu), MODEL
# (default models/SmolLM2-135M-Instruct.Q4_1.gguf), JOBS.
# kernels/cuda/README.md ("Run on a GPU machine") says how to fetch the .deb files and call it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
debs=${DEBS:-.debs}
jobs=${JOBS:-$(nproc)}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build cuda-tests bench)
summary=()
note() { summary+=("$1"); echo "gpu-check: $1"; }

install_debs() {
  [ -d "$debs" ] || { echo "gpu-check: no $debs folder: build deps must already be installed"; return 0; }
  # Never dpkg -x into / itself: a package with ./lib/ (nats-server's systemd unit) replaces the
  # /lib -> usr/lib link with a directory and the system's libc disappears from the linker.
  local stage=/opt/llmbus-debs
  rm -rf "$stage"; mkdir -p "$stage"
  for f in "$debs"/*.deb; do
    case $(basename "$f") in libssl3_*) continue ;; esac  # keep the system's TLS runtime
    if command -v dpkg >/dev/null; then dpkg -x "$f" "$stage"; else
      (t=$(mktemp -d) && cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$stage"; rm -rf "$t"); fi
  done
  cp -a "$stage/usr/." /usr/
  ldconfig 2>/dev/null || true
}

step_build() {
  install_debs
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF -DLLB_CUDA=ON \
        -DLLB_CUDA_ARCHITECTURES=90 >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; return 1; }
  cmake --build "$build" -j"$jobs" >"$out/build.log" 2>&1 || { grep -m20 -B2 -A5 'error' "$out/build.log"; return 1; }
}

step_cuda_tests() {
  ctest --test-dir "$build" --output-on-failure -L cuda --timeout 900 >"$out/cuda-tests.log" 2>&1
  local rc=$?
  ctest --test-dir "$build" --output-on-failure -R 'model_runner|worker_device|forward|sampler' \
        --timeout 900 >>"$out/cuda-tests.log" 2>&1 || rc=1
  grep -E 'tests passed|Passed|Failed|Skipped|\*\*\*' "$out/cuda-tests.log" | tail -30
  return $rc
}

step_bench() {
  "$build/tests/llmbus_cuda_bench" >"$out/bench.log" 2>&1
  local rc=$?
  tail -40 "$out/bench.log"
  return $rc
}

# Per-kernel GPU time under Nsight Compute, one summary line per kernel, for each
# PROF_SPECS entry SHAPE:dB (decode at batch B, graph replays) or SHAPE:pP (a P-token
# prefill); launches of model load and warm-up are skipped.
step_prof() {
  local ncu; ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "gpu-check: no ncu"; return 1; }
  local spec shape kind n mode skip count
  for spec in ${PROF_SPECS:-smollm2:d1}; do
    shape=${spec%%:*}; kind=${spec#*:}; n=${kind:1}
    if [ "${kind:0:1}" = d ]; then mode=--decode-only; skip=2000; count=600;
    else mode=--prefill-only; skip=1200; count=500; fi
    "$ncu" --launch-skip $skip --launch-count $count --metrics gpu__time_duration.sum --print-summary per-kernel \
        "$build/tests/llmbus_cuda_bench" --shape "$shape" $mode "$n" >"$out/prof-$shape-$kind.log" 2>&1
    echo "== $spec: kernel, invocations, mean time"
    grep -E '^  [A-Za-z_].*\(|gpu__time_duration.sum' "$out/prof-$shape-$kind.log" | paste - - |
      awk '{for(i=1;i<=NF;i++) if($i=="Invocations") inv=$(i+1); sub(/\(.*/,"",$1); printf "%-46s %5s %9s %s\n", $1, inv, $NF, $(NF-3)}'
  done
  return 0
}

# e2e tests over a real nats-server with the worker on the GPU (tests/e2e/stack.c reads
# LLMBUS_E2E_DEVICE).
step_e2e() {
  [ -f "$model" ] || { echo "gpu-check: no model at $model"; return 1; }
  LLMBUS_MODEL=$root/$model LLMBUS_E2E_DEVICE=cuda ctest --test-dir "$build" --output-on-failure \
      -L e2e -LE api -E 'golden|cross_language' --timeout 900 \
      >"$out/e2e.log" 2>&1
  local rc=$?
  grep -E 'tests passed|Passed|Failed|Skipped|\*\*\*' "$out/e2e.log" | tail -30
  return $rc
}

# `llmbus-bench serve` against a whole `llmbus serve --device cuda` stack (HTTP, every actor,
# NATS): batch-1 decode, 16 and 64 concurrent streams, a 2048-token prefill.
step_serve_bench() {
  [ -f "$model" ] || { echo "gpu-check: no model at $model"; return 1; }
  local port=18123 pid rc=0
  "$build/cmd/llmbus" serve --model "$model" --device cuda --http 127.0.0.1:$port --max-num-seqs 64 \
      --max-num-batched-tokens 2048 >"$out/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do curl -sf -o /dev/null http://127.0.0.1:$port/health && break; sleep 0.2; done
  local -a names=(decode1 conc16 conc64 prefill2048)
  local -A args=([decode1]="--num-prompts 4 --max-concurrency 1 --input-len 16 --output-len 256"
                 [conc16]="--num-prompts 64 --max-concurrency 16 --input-len 100 --output-len 256"
                 [conc64]="--num-prompts 256 --max-concurrency 64 --input-len 100 --output-len 256"
                 [prefill2048]="--num-prompts 4 --max-concurrency 1 --input-len 2048 --output-len 1")
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086
    "$build/cmd/llmbus-bench" serve --base-url http://127.0.0.1:$port --model "$model" ${args[$n]} --ignore-eos \
        --no-progress --label "cuda/$n" --result-file "$out/serve-$n.json" >"$out/serve-$n.txt" 2>&1 || rc=1
    grep -E 'Output token throughput|Median TTFT|Median TPOT|Median ITL|Peak resident' "$out/serve-$n.txt" | sed "s/^/$n: /"
  done
  kill -TERM $pid; wait $pid
  return $rc
}

# `llmbus run` on cpu and on cuda with the same greedy prompts: the answers side by side.
step_stack() {
  [ -f "$model" ] || { echo "gpu-check: no model at $model"; return 1; }
  local rc=0
  for dev in cpu cuda; do
    for p in "Name three primary colors." "What is the capital of France?" "Write a haiku about the sea."; do
      # cuda: no --num-blocks, so the KV cache is sized from device memory and reaches the
      # scheduler and kv_manager through the worker's heartbeat (kv_geometry log lines)
      timeout 300 "$build/cmd/llmbus" run --model "$model" --device "$dev" --verbose --temperature 0 \
          --max-tokens 64 "$p" >>"$out/stack-$dev.txt" 2>>"$out/stack-$dev.log" || rc=1
      echo "---" >>"$out/stack-$dev.txt"
    done
  done
  if cmp -s "$out/stack-cpu.txt" "$out/stack-cuda.txt"; then echo "stack: cpu and cuda answers identical";
  else echo "stack: answers differ"; diff "$out/stack-cpu.txt" "$out/stack-cuda.txt" | head -20; fi
  grep -h 'event=gpu_worker_cuda\|event=kv_geometry \|event=kv_manager_started\|event=scheduler_started' \
      "$out/stack-cuda.log" | head -5
  return $rc
}

for s in "${steps[@]}"; do
  t0=$(date +%s)
  case $s in
    build) step_build ;; cuda-tests) step_cuda_tests ;; bench) step_bench ;;
    e2e) step_e2e ;; stack) step_stack ;; prof) step_prof ;; serve-bench) step_serve_bench ;;
    *) echo "gpu-check: unknown step $s"; false ;;
  esac
  rc=$?
  note "$(printf '%-11s rc=%d  %4ds' "$s" "$rc" $(( $(date +%s) - t0 )))"
  [ "$s" = build ] && [ $rc -ne 0 ] && break
done
printf '%s\n' "${summary[@]}"

#!/usr/bin/env bash
# llmbus vs llama.cpp (llama-cpp-python's OpenAI server) on the same GGUF, same machine, one run.
#
#   ops/bench/compare-llamacpp.sh [--model PATH] [--repeats N] [--threads N] [--install-only]
#
# 1. Installs llama-cpp-python[server] from PyPI into a private venv (.cache/llamacpp-venv,
#    reused when it imports), built for this CPU (GGML_NATIVE=ON), without the multimodal
#    library (LLAVA_BUILD=OFF), CMAKE_BUILD_PARALLEL_LEVEL=2. The first build takes 20-40 min
#    on 2 cores.
# 2. Builds llmbus in Release (build-bench-rel: -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF).
# 3. Serves the model with both (llmbus: `llmbus serve --http`, which also starts its own
#    nats-server; llama.cpp: `python -m llama_cpp.server`), one at a time, and runs
#    `llmbus-bench serve` against each for three scenarios:
#      decode  : 1 request, 16-token prompt, 128 output tokens (ignore_eos)   -> TPOT, tok/s
#      prefill : 1 request, 512-token prompt, 1 output token                   -> TTFT
#      conc16  : 16 concurrent requests, 100-token prompts, 128 output tokens  -> throughput
#    and, without a server, the forward passes alone: llmbus-kernel-bench against llama.cpp
#    through llama-cpp-python's Llama.eval (ops/bench/llamacpp_kernel_bench.py).
#    Repeats are interleaved A/B (llmbus, llama.cpp, llmbus, ...); each server is started once
#    per repeat and warmed with one request. The tables give medians over the repeats and the
#    ratio llmbus / llama.cpp.
# llmbus runs with LLMBUS_SERVE_ARGS (default "--max-num-batched-tokens 256": shorter steps, so
# that on a loaded 2-core machine no stream waits long between two tokens; failed requests
# are counted in the table).
# Env: LLAMACPP_VENV, LLAMACPP_SPEC (pip requirement, default llama-cpp-python[server]==0.3.36),
# LLMBUS_SERVE_ARGS, BUILD_DIR (default build-bench-rel), PORT_A/PORT_B, JOBS.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${LLB_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
repeats=3
threads=2
install_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --install-only) install_only=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "compare-llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done
venv=${LLAMACPP_VENV:-$root/.cache/llamacpp-venv}
build=${BUILD_DIR:-$root/build-bench-rel}
port_a=${PORT_A:-18431}
port_b=${PORT_B:-18432}
serve_args=${LLMBUS_SERVE_ARGS---max-num-batched-tokens 256}
jobs=${JOBS:-2}
llamacpp_spec=${LLAMACPP_SPEC:-llama-cpp-python[server]==0.3.36}
work=$(mktemp -d /tmp/llb-compare.XXXXXX)
server_pid=""

cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "compare-llamacpp: $*" >&2; }

# ---- 1. llama-cpp-python ---------------------------------------------------------------
install_llamacpp() {
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import llama_cpp.server, uvicorn' 2>/dev/null; then
    return 0
  fi
  log "installing llama-cpp-python[server] into $venv (builds llama.cpp from source; 20-40 min on 2 cores)"
  python3 -m venv "$venv" || return 1
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs FORCE_CMAKE=1 \
    nice -n 10 "$venv/bin/pip" install --no-cache-dir "$llamacpp_spec" || return 1
  "$venv/bin/python" -c 'import llama_cpp.server, uvicorn' || return 1
}
if ! install_llamacpp; then
  log "llama-cpp-python install failed"
  exit 1
fi
if [ "$install_only" = 1 ]; then
  "$venv/bin/python" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__)'
  exit 0
fi

# ---- 2. llmbus (Release) ---------------------------------------------------------------
if [ ! -r "$model" ]; then
  log "no model at $model (run ops/fetch-model.sh)"
  exit 1
fi
log "building llmbus in $build (Release)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >"$work/cmake.log" 2>&1 &&
  nice -n 5 cmake --build "$build" -j"$jobs" --target llmbus llmbus-bench llmbus-kernel-bench >>"$work/cmake.log" 2>&1 || {
  tail -20 "$work/cmake.log" >&2
  log "llmbus build failed"
  exit 1
}
bench=$build/cmd/llmbus-bench

# ---- 3. serve both, interleaved --------------------------------------------------------
wait_http() { # url pid
  for _ in $(seq 1 600); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.3
  done
  return 1
}

start_server() { # name rep
  case "$1" in
    llmbus)
      # shellcheck disable=SC2086
      "$build/cmd/llmbus" serve --model "$model" --http "127.0.0.1:$port_a" --threads "$threads" $serve_args \
        >"$work/llmbus-$2.log" 2>&1 &
      server_pid=$!
      wait_http "http://127.0.0.1:$port_a/health" "$server_pid" ;;
    llamacpp)
      "$venv/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port_b" \
        --n_threads "$threads" --n_threads_batch "$threads" --n_ctx 2048 --n_batch 512 \
        --interrupt_requests False --verbose False >"$work/llamacpp-$2.log" 2>&1 &
      server_pid=$!
      wait_http "http://127.0.0.1:$port_b/v1/models" "$server_pid" ;;
  esac
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=""
}

# name: llmbus-bench serve arguments (the model's tokenizer makes exact-length prompts)
scenarios=(decode prefill conc16)
declare -A scenario_args=(
  [decode]="--num-prompts 1 --max-concurrency 1 --input-len 16 --output-len 128 --ignore-eos"
  [prefill]="--num-prompts 1 --max-concurrency 1 --input-len 512 --output-len 1"
  [conc16]="--num-prompts 16 --max-concurrency 16 --input-len 100 --output-len 128 --ignore-eos"
)

run_server() { # name rep
  local port=$port_a
  [ "$1" = llamacpp ] && port=$port_b
  if ! start_server "$1" "$2"; then
    log "$1 did not come up; its log:"
    tail -20 "$work/$1-$2.log" >&2
    stop_server
    return 1
  fi
  for s in "${scenarios[@]}"; do
    # shellcheck disable=SC2086
    "$bench" serve --base-url "http://127.0.0.1:$port" --model "$model" ${scenario_args[$s]} \
      --seed "$2" --no-progress --json --label "$1/$s/$2" --result-file "$work/$1-$s-$2.json" >/dev/null ||
      log "$1 $s repeat $2: some requests failed (see $work/$1-$s-$2.json)"
  done
  stop_server
}

# The forward passes alone, no server: llmbus-kernel-bench vs llama.cpp through
# llama-cpp-python's Llama.eval (ops/bench/llamacpp_kernel_bench.py), 3 runs each.
run_kernels() { # name rep
  case "$1" in
    llmbus) "$build/cmd/llmbus-kernel-bench" --model "$model" --threads "$threads" --runs 3 --prefill 512 \
              --decode 128 --batch 1 --roofline >"$work/kern-$1-$2.txt" 2>&1 ;;
    llamacpp) "$venv/bin/python" "$root/ops/bench/llamacpp_kernel_bench.py" "$model" "$threads" 3 \
              >"$work/kern-$1-$2.txt" 2>&1 ;;
  esac || log "$1 kernel bench repeat $2 failed (see $work/kern-$1-$2.txt)"
}

for rep in $(seq 1 "$repeats"); do
  if [ $((rep % 2)) -eq 1 ]; then order="llmbus llamacpp"; else order="llamacpp llmbus"; fi
  for name in $order; do
    log "repeat $rep/$repeats: $name"
    run_server "$name" "$rep" || exit 1
    run_kernels "$name" "$rep"
  done
done

# ---- 4. tables -------------------------------------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+local changes"; fi
llamacpp_version=$("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null)
python3 - "$work" "$repeats" "$(date -u +%Y-%m-%d)" "$cpu" "$(nproc)" "$commit" "$(basename "$model")" \
  "$llamacpp_version" "$threads" "$serve_args" <<'PY'
import json, statistics, sys
work, repeats, date, cpu, ncpu, commit, model, lcv, threads, serve_args = sys.argv[1:]
repeats = int(repeats)
def load(server, scen):
    out = []
    for r in range(1, repeats + 1):
        try:
            with open(f"{work}/{server}-{scen}-{r}.json") as f:
                out.append(json.load(f))
        except OSError:
            pass
    return out
def med(rows, key):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else float("nan")
rows = [  # scenario, metric key, label, higher is better
    ("decode", "output_throughput", "batch-1 decode: output tok/s", True),
    ("decode", "median_tpot_ms", "batch-1 decode: median TPOT (ms)", False),
    ("prefill", "median_ttft_ms", "512-token prefill: TTFT (ms)", False),
    ("conc16", "output_throughput", "16 concurrent: output tok/s", True),
    ("conc16", "request_throughput", "16 concurrent: requests/s", True),
    ("conc16", "mean_ttft_ms", "16 concurrent: mean TTFT (ms)", False),
    ("conc16", "median_ttft_ms", "16 concurrent: median TTFT (ms)", False),
    ("conc16", "p99_ttft_ms", "16 concurrent: p99 TTFT (ms)", False),
    ("conc16", "median_tpot_ms", "16 concurrent: median TPOT (ms)", False),
    ("conc16", "stack_peak_mib", "16 concurrent: server peak resident, shared pages once (MiB)", False),
]
print(f"llmbus vs llama.cpp (llama-cpp-python {lcv} server), {date}, {cpu}, {ncpu} cores, "
      f"commit {commit}, model {model}, {threads} threads each; medians of {repeats} interleaved repeats")
print(f"llmbus: `llmbus serve --threads {threads} {serve_args}`; llama.cpp: `python -m llama_cpp.server "
      f"--n_threads {threads} --n_ctx 2048 --n_batch 512 --interrupt_requests False` (one sequence at a time)")
loads = [r.get("loadavg_1m_start") for n in ("llmbus", "llamacpp") for s in ("decode", "prefill", "conc16")
         for r in load(n, s) if isinstance(r.get("loadavg_1m_start"), (int, float))]
if loads:
    print(f"machine load average (1 min) during the runs: {min(loads):.1f} to {max(loads):.1f}")
print()
print("| metric | llmbus | llama.cpp | llmbus / llama.cpp |")
print("|---|---:|---:|---:|")
for scen, key, label, higher in rows:
    a, b = med(load("llmbus", scen), key), med(load("llamacpp", scen), key)
    ratio = a / b if b and b == b and a == a else float("nan")
    better = "" if ratio != ratio else (" (better)" if (ratio > 1) == higher and abs(ratio - 1) > 0.02 else "")
    print(f"| {label} | {a:.2f} | {b:.2f} | {ratio:.2f}{better} |")
def kern(name, what):
    vals = []
    for rep in range(1, int(repeats) + 1):
        try:
            for line in open(f"{work}/kern-{name}-{rep}.txt"):
                if line.startswith(what):
                    vals.append(float(line[len(what):].split()[0]))
        except OSError:
            pass
    return statistics.median(vals) if vals else float("nan")
for what, label in (("prefill 512", "forward only: 512-token prefill tok/s"), ("decode b1", "forward only: batch-1 decode tok/s")):
    a, b = kern("llmbus", what), kern("llamacpp", what)
    ratio = a / b if b and b == b and a == a else float("nan")
    print(f"| {label} | {a:.2f} | {b:.2f} | {ratio:.2f}{' (better)' if ratio > 1.02 else ''} |")
def frac(what):  # the roofline line under llmbus-kernel-bench's `what` row, median over repeats
    vals = []
    for rep in range(1, int(repeats) + 1):
        try:
            lines = open(f"{work}/kern-llmbus-{rep}.txt").read().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines[:-1]):
            if line.startswith(what) and " of the " in lines[i + 1]:
                vals.append(float(lines[i + 1].split()[0]))
    return statistics.median(vals) if vals else float("nan")
fa, fb = (sum(r.get("failed", 0) for s in ("decode", "prefill", "conc16") for r in load(n, s)) for n in ("llmbus", "llamacpp"))
print(f"| failed requests, all runs | {fa} | {fb} | |")
print()
try:
    print(next(l for l in open(f"{work}/kern-llmbus-1.txt") if l.startswith("roofline:")).strip())
except (OSError, StopIteration):
    pass
print(f"llmbus forward against the machine: 512-token prefill {frac('prefill 512'):.2f} of the int8 peak, "
      f"batch-1 decode {frac('decode b1'):.2f} of the DRAM read bound")
print()
for n in ("llmbus", "llamacpp"):
    per = {s: [round(r.get("output_throughput", 0), 1) for r in load(n, s)] for s in ("decode", "conc16")}
    ttft = [round(r.get("median_ttft_ms", 0), 1) for r in load(n, "prefill")]
    print(f"{n}: per-repeat decode tok/s {per['decode']}, conc16 tok/s {per['conc16']}, prefill TTFT ms {ttft}")
failed = sum(r.get("failed", 0) for n in ("llmbus", "llamacpp") for s in ("decode", "prefill", "conc16") for r in load(n, s))
if failed:
    print(f"WARNING: {failed} failed requests in all (see {work})")
PY
log "raw results in $work"

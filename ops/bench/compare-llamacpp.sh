#!/usr/bin/env bash
# llmbus vs llama.cpp's own C++ tools on the same GGUF, same machine, one run.
#
#   ops/bench/compare-llamacpp.sh [--model PATH] [--repeats N] [--threads N] [--ctx N] [--runs N]
#                                 [--build-only] [--llmbus-only] [--plot DIR]
#   ops/bench/compare-llamacpp.sh --types Q4_0,Q4_K_M,... [--isa avx2,avx512] [--gguf PATH]...
#                                 [--model PATH] [--runs N] [--threads N] [--repeats N]
#     the forward only, as one table of file x instruction set (ops/bench/compare-types.sh)
#
# Three columns, each measured in every repeat (the order rotates: A B C, B C A, C A B, ...):
#   A  llmbus       `llmbus serve` / `llmbus-kernel-bench` on the model (Q4_1)
#   B  llama.cpp    the same file: `llama-server`, `llama-bench`, `llama-batched-bench`
#   C  llama.cpp    the same weights requantized to Q4_0 (`llama-quantize --allow-requantize`),
#                   which llama.cpp repacks for AVX-512 at load: its best path on this CPU
# 1. llama.cpp from the llama-cpp-python source package on PyPI (pinned, sha256-checked), in
#    .cache/llamacpp/: download, unpack, configure (Release, GGML_NATIVE=ON, no curl/openssl,
#    no tests), build only llama-server llama-bench llama-batched-bench llama-quantize
#    (~10 min on 2 cores), requantize to Q4_0. Each step is skipped when its output exists;
#    configure and build hold .cache/llamacpp/.lock (flock), so two checkouts sharing the tree
#    take turns.
# 2. llmbus in Release (build-bench-rel: -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF).
# 3. Serving: each server started fresh per repeat, `llmbus-bench serve` against it (one
#    untimed warm-up request first; peak resident memory of the server's process tree):
#      decode  : 1 request, 16-token prompt, 128 output tokens (ignore_eos) -> tok/s, TPOT
#      prefill : 1 request, 512-token prompt, 1 output token                 -> TTFT
#      conc16  : 16 concurrent, 100-token prompts, 128 output tokens         -> tok/s, TTFT
#      conc32  : 32 concurrent, the same                                     -> tok/s, TTFT
#    llmbus: `llmbus serve --threads T --max-model-len CTX $LLMBUS_SERVE_ARGS`; llama.cpp:
#    `llama-server --parallel 32 -c 32*CTX -t T -tb T --cont-batching` (32 slots of CTX each).
# 4. The forward alone, --runs runs each (medians): llmbus-kernel-bench --prefill 512
#    --decode 128 --batch 1,16 --roofline; llama-bench -p 512 -n 128 (pp512, tg128) and
#    llama-batched-bench -npp 16 -ntg 128 -npl 16 (batch-16 decode after 16-token prompts, the
#    shape of llmbus-kernel-bench's decode b16).
# 5. Prints two markdown tables (serving, forward: medians over the repeats and llmbus's
#    ratios) and the roofline lines (ops/bench/compare_llamacpp_report.py).
# 6. With --plot DIR: DIR/throughput.png and DIR/latency.png from the serving results
#    (ops/bench/plot.py: output tok/s against concurrency, TTFT and ITL distributions).
# --llmbus-only measures the llmbus column alone (no llama.cpp download or build, no tables):
#    for the pictures, or a quick look at llmbus's own numbers.
# Env: LLMBUS_SERVE_ARGS (default "--max-num-batched-tokens 256"), LLAMACPP_CACHE, BUILD_DIR,
# PORT_A/PORT_B, JOBS (default 2). The raw results stay in /tmp/llb-compare.* (printed).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
for arg in "$@"; do
  case "$arg" in --types|--isa|--gguf) exec "$root/ops/bench/compare-types.sh" "$@" ;; esac
done
model=${LLB_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
repeats=3
threads=2
ctx=2048
runs=3
build_only=0
llmbus_only=0
plot_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --llmbus-only) llmbus_only=1; shift ;;
    --plot) plot_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    *) echo "compare-llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done
for n in "$repeats" "$threads" "$ctx" "$runs"; do
  case "$n" in ''|*[!0-9]*|0) echo "compare-llamacpp: counts must be positive integers" >&2; exit 2 ;; esac
done
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache=${LLAMACPP_CACHE:-$root/.cache/llamacpp}
src=$cache/llama_cpp_python-$version/vendor/llama.cpp
lbin=$src/build/bin
build=${BUILD_DIR:-$root/build-bench-rel}
port_a=${PORT_A:-18431}
port_b=${PORT_B:-18432}
serve_args=${LLMBUS_SERVE_ARGS---max-num-batched-tokens 256}
jobs=${JOBS:-2}
slots=32
targets=(llama-server llama-bench llama-batched-bench llama-quantize)
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
die() { log "$*"; exit 1; }

# ---- 1. llama.cpp ----------------------------------------------------------------------
fetch_llamacpp() {
  local tarball=$cache/llama_cpp_python-$version.tar.gz
  mkdir -p "$cache" || return 1
  if [ ! -f "$tarball" ] && [ -f "$root/.cache/sdist/llama_cpp_python-$version.tar.gz" ]; then
    cp "$root/.cache/sdist/llama_cpp_python-$version.tar.gz" "$tarball" || return 1
  fi
  if [ ! -f "$tarball" ]; then
    log "downloading llama-cpp-python $version (source package, 77 MB) into $cache"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$cache" "llama-cpp-python==$version" || return 1
  fi
  echo "$sha256  $tarball" | sha256sum -c --quiet - || { rm -f "$tarball"; log "checksum mismatch: $tarball"; return 1; }
  if [ ! -f "$src/CMakeLists.txt" ]; then
    log "unpacking $tarball"
    tar -xzf "$tarball" -C "$cache" || return 1
  fi
}

# The native build's extra compiler flags: none, or -mno-amx-* once it was found not to run
# (check_llamacpp_runs; $src/build/.no-amx records it).
native_flags() { if [ -f "$src/build/.no-amx" ]; then echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi; }

build_llamacpp() {
  if [ ! -f "$src/build/CMakeCache.txt" ]; then
    log "configuring llama.cpp in $src/build"
    flock "$cache/.lock" cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
      -DCMAKE_C_FLAGS="$(native_flags)" -DCMAKE_CXX_FLAGS="$(native_flags)" \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >"$work/llamacpp-cmake.log" 2>&1 ||
      { tail -20 "$work/llamacpp-cmake.log" >&2; return 1; }
  fi
  local missing=() t
  for t in "${targets[@]}"; do [ -x "$lbin/$t" ] || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "building ${missing[*]} (about 10 min on 2 cores)"
  flock "$cache/.lock" nice -n 10 cmake --build "$src/build" -j"$jobs" --target "${missing[@]}" \
    >"$work/llamacpp-build.log" 2>&1 || { tail -20 "$work/llamacpp-build.log" >&2; return 1; }
}

[ -r "$model" ] || die "no model at $model (run ops/fetch-model.sh)"
q40=$cache/requant/$(basename "$model" .gguf)-requant-Q4_0.gguf
requant_q40() {
  [ -s "$q40" ] && return 0
  log "requantizing $(basename "$model") to Q4_0: $q40"
  mkdir -p "$(dirname "$q40")" || return 1
  if ! "$lbin/llama-quantize" --allow-requantize "$model" "$q40.tmp.$$" Q4_0 "$threads" >"$work/quantize.log" 2>&1; then
    rm -f "$q40.tmp.$$"
    tail -20 "$work/quantize.log" >&2
    return 1
  fi
  mv "$q40.tmp.$$" "$q40"
}
# A native build must run here to be a peer. On a KVM guest with AMX (Intel Xeon, 2026-12-01)
# llama.cpp's AMX matmul (ggml-cpu/amx, compiled in by GGML_NATIVE where the CPU has AMX-INT8)
# died at its first tile instruction (SIGILL; SIGSEGV at ldtilecfg under gdb) although the guest
# grants AMX to a process that asks (a tdpbusd loop ran there): the build is then redone without
# AMX, its strongest form that runs, and says so. Any other failure stops the comparison.
check_llamacpp_runs() {
  local rc=0
  "$lbin/llama-bench" -m "$q40" -t "$threads" -p 32 -n 0 -r 1 >"$work/llamacpp-smoke.log" 2>&1 || rc=$?
  [ $rc = 0 ] && return 0
  if [ -f "$src/build/.no-amx" ] || ! grep -qw amx_int8 /proc/cpuinfo; then
    tail -5 "$work/llamacpp-smoke.log" >&2
    return 1
  fi
  log "llama.cpp's native build does not run on this CPU (exit $rc, $work/llamacpp-smoke.log): rebuilding it" \
    "without AMX (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16), about 10 min"
  flock "$cache/.lock" rm -rf "$src/build" && mkdir -p "$src/build" && touch "$src/build/.no-amx" &&
    build_llamacpp && check_llamacpp_runs
}

if [ "$llmbus_only" = 0 ]; then
  fetch_llamacpp || die "could not get llama-cpp-python $version's source"
  build_llamacpp || die "llama.cpp build failed"
  requant_q40 || die "llama-quantize failed"
  check_llamacpp_runs || die "llama.cpp's llama-bench does not run on this machine"
  [ -f "$src/build/.no-amx" ] && log "llama.cpp: native build without AMX (its AMX matmul does not run here)"
fi

# ---- 2. llmbus (Release) ---------------------------------------------------------------
log "building llmbus in $build (Release)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >"$work/cmake.log" 2>&1 &&
  nice -n 5 cmake --build "$build" -j"$jobs" --target llmbus llmbus-bench llmbus-kernel-bench >>"$work/cmake.log" 2>&1 || {
  tail -20 "$work/cmake.log" >&2
  die "llmbus build failed"
}
bench=$build/cmd/llmbus-bench
if [ "$build_only" = 1 ]; then
  log "built: $lbin/{${targets[*]// /,}}, $q40, $build/cmd/llmbus"
  exit 0
fi

# ---- 3. serving ------------------------------------------------------------------------
gguf_of() { # column name -> its GGUF
  case "$1" in llamacpp-q4_0) echo "$q40" ;; *) echo "$model" ;; esac
}

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
      "$build/cmd/llmbus" serve --model "$model" --http "127.0.0.1:$port_a" --threads "$threads" \
        --max-model-len "$ctx" $serve_args >"$work/serve-$1-$2.log" 2>&1 &
      server_pid=$!
      wait_http "http://127.0.0.1:$port_a/health" "$server_pid" ;;
    *)
      "$lbin/llama-server" -m "$(gguf_of "$1")" --host 127.0.0.1 --port "$port_b" -t "$threads" -tb "$threads" \
        --parallel "$slots" -c $((slots * ctx)) --cont-batching --no-webui >"$work/serve-$1-$2.log" 2>&1 &
      server_pid=$!
      wait_http "http://127.0.0.1:$port_b/health" "$server_pid" ;;
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

# name: llmbus-bench serve arguments (the model's tokenizer makes exact-length prompts; every
# column gets the same prompt texts)
scenarios=(decode prefill conc16 conc32)
declare -A scenario_args=(
  [decode]="--num-prompts 1 --max-concurrency 1 --input-len 16 --output-len 128 --ignore-eos"
  [prefill]="--num-prompts 1 --max-concurrency 1 --input-len 512 --output-len 1"
  [conc16]="--num-prompts 16 --max-concurrency 16 --input-len 100 --output-len 128 --ignore-eos"
  [conc32]="--num-prompts 32 --max-concurrency 32 --input-len 100 --output-len 128 --ignore-eos"
)

run_server() { # name rep
  local port=$port_b
  [ "$1" = llmbus ] && port=$port_a
  if ! start_server "$1" "$2"; then
    log "$1 did not come up; its log:"
    tail -20 "$work/serve-$1-$2.log" >&2
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

# ---- 4. the forward alone --------------------------------------------------------------
batched_ctx=$((16 * ((16 + 128 + 255) / 256 * 256))) # 16 sequences of 16 + 128 tokens, 256-aligned

run_forward() { # name rep
  local out=$work/fwd-$1-$2
  case "$1" in
    llmbus)
      "$build/cmd/llmbus-kernel-bench" --model "$model" --threads "$threads" --runs "$runs" --prefill 512 \
        --decode 128 --batch 1,16 --roofline >"$out.txt" 2>&1 || log "llmbus-kernel-bench repeat $2 failed (see $out.txt)" ;;
    *)
      local g; g=$(gguf_of "$1")
      "$lbin/llama-bench" -m "$g" -t "$threads" -p 512 -n 128 -r "$runs" -o json >"$out-bench.json" 2>"$out-bench.err" ||
        log "llama-bench $1 repeat $2 failed (see $out-bench.err)"
      for _ in $(seq 1 "$runs"); do
        "$lbin/llama-batched-bench" -m "$g" -t "$threads" -tb "$threads" -c "$batched_ctx" -npp 16 -ntg 128 -npl 16 \
          --output-format jsonl >>"$out-batched.jsonl" 2>>"$out-batched.err" ||
          log "llama-batched-bench $1 repeat $2 failed (see $out-batched.err)"
      done ;;
  esac
}

names=(llmbus llamacpp-q4_1 llamacpp-q4_0)
[ "$llmbus_only" = 1 ] && names=(llmbus)
for rep in $(seq 1 "$repeats"); do
  for k in $(seq 0 $((${#names[@]} - 1))); do
    name=${names[$(((rep - 1 + k) % ${#names[@]}))]}
    log "repeat $rep/$repeats: $name"
    run_server "$name" "$rep" || exit 1
    run_forward "$name" "$rep"
  done
done

# ---- 6. pictures (before the tables: those exit with their status) ---------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
if [ -n "$plot_dir" ]; then
  py=python3
  [ -x "$root/.venv/bin/python" ] && py=$root/.venv/bin/python
  "$py" "$root/ops/bench/plot.py" "$work"/*-decode-*.json "$work"/*-conc*.json -o "$plot_dir" \
    --title "$(basename "$model"), $threads threads, $cpu ($(nproc) cores), $(date +%F)" >&2 ||
    log "plot.py failed (matplotlib: ops/requirements-test.txt)"
fi
if [ "$llmbus_only" = 1 ]; then
  log "raw results in $work"
  exit 0
fi

# ---- 5. tables -------------------------------------------------------------------------
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+local changes"; fi
python3 "$root/ops/bench/compare_llamacpp_report.py" --work "$work" --repeats "$repeats" --runs "$runs" \
  --cpu "$cpu" --ncpu "$(nproc)" --commit "$commit" --model "$(basename "$model")" --version "$version" \
  --threads "$threads" --ctx "$ctx" --slots "$slots" --serve-args "$serve_args"
rc=$?
log "raw results in $work"
exit $rc

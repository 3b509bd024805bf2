#!/usr/bin/env bash
# The type x instruction-set matrix of llmbus's forward against llama.cpp's, one table.
# Called by `ops/bench/compare-llamacpp.sh --types T1,T2,... [--isa avx2,avx512]` (its flags:
# --model, --runs, --threads, --repeats, plus --gguf PATH for real files beside the
# requantizations); usable directly with the same flags.
#
#   types  llama-quantize type names (Q4_0 Q4_1 Q8_0 Q4_K_M Q5_K_M Q6_K Q3_K_M IQ4_XS F16 BF16):
#          the model requantized to each (`llama-quantize --allow-requantize`, cached in
#          .cache/llamacpp/requant/); --gguf adds files as they are (e.g. a real Q4_K_M download)
#   isa    avx512 (llmbus: LLMBUS_SIMD=avx512; llama.cpp: its GGML_NATIVE=ON build) and avx2
#          (LLMBUS_SIMD=avx2; llama.cpp built with GGML_NATIVE=OFF GGML_AVX=ON GGML_AVX2=ON
#          GGML_FMA=ON GGML_F16C=ON, in llama.cpp/build-avx2); a level the CPU lacks is skipped
#   each cell: llmbus-kernel-bench --prefill 512 --decode 128 --batch 1,16 --roofline (the
#          roofline of that level) against llama-bench -p 512 -n 128 and llama-batched-bench
#          -npp 16 -ntg 128 -npl 16, --runs runs each, engines alternating, --repeats times
# Prints a markdown table (ops/bench/compare_types_report.py); raw results stay in the printed
# /tmp/llb-types.* folder.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${LLB_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
types=Q4_0,Q4_1,Q8_0,Q4_K_M,Q5_K_M,Q6_K,Q3_K_M,IQ4_XS,F16,BF16
isas=avx2,avx512
runs=3
threads=2
repeats=1
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --isa) isas=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --gguf) extra+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare-types: unknown argument $1" >&2; exit 2 ;;
  esac
done
for n in "$runs" "$threads" "$repeats"; do
  case "$n" in ''|*[!0-9]*|0) echo "compare-types: counts must be positive integers" >&2; exit 2 ;; esac
done
version=0.3.36
cache=${LLAMACPP_CACHE:-$root/.cache/llamacpp}
src=$cache/llama_cpp_python-$version/vendor/llama.cpp
build=${BUILD_DIR:-$root/build-bench-rel}
jobs=${JOBS:-2}
work=$(mktemp -d /tmp/llb-types.XXXXXX)
log() { echo "compare-types: $*" >&2; }
die() { log "$*"; exit 1; }

# llama.cpp: the native build (compare-llamacpp.sh --build-only makes it, with llama-quantize) and
# an AVX2-only one of llama-bench and llama-batched-bench.
[ -x "$src/build/bin/llama-quantize" ] || "$root/ops/bench/compare-llamacpp.sh" --build-only --model "$model" ||
  die "llama.cpp's native build failed"
lbin_of() { # isa -> llama.cpp's bin folder for it
  case "$1" in avx512) echo "$src/build/bin" ;; avx2) echo "$src/build-avx2/bin" ;; esac
}
build_avx2() {
  [ -x "$src/build-avx2/bin/llama-bench" ] && [ -x "$src/build-avx2/bin/llama-batched-bench" ] && return 0
  log "building llama.cpp for AVX2 only in $src/build-avx2 (llama-bench, llama-batched-bench)"
  flock "$cache/.lock" cmake -S "$src" -B "$src/build-avx2" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >"$work/avx2-cmake.log" 2>&1 &&
    flock "$cache/.lock" cmake --build "$src/build-avx2" -j"$jobs" --target llama-bench llama-batched-bench \
      >"$work/avx2-build.log" 2>&1 || { tail -20 "$work/avx2-build.log" >&2; return 1; }
}
has_avx512=0
grep -qw avx512_vnni /proc/cpuinfo && has_avx512=1
IFS=, read -r -a isa_list <<<"$isas"
run_isas=()
for i in "${isa_list[@]}"; do
  case "$i" in
    avx2) build_avx2 || die "llama.cpp AVX2 build failed"; run_isas+=(avx2) ;;
    avx512) if [ $has_avx512 = 1 ]; then run_isas+=(avx512); else log "this CPU has no AVX-512 VNNI: avx512 skipped"; fi ;;
    *) die "unknown --isa $i (avx2, avx512)" ;;
  esac
done
[ ${#run_isas[@]} -gt 0 ] || die "no instruction set to run"

# the files: requantizations of --model, then --gguf files
files=() labels=()
IFS=, read -r -a type_list <<<"$types"
for t in "${type_list[@]}"; do
  f=$cache/requant/$(basename "$model" .gguf)-requant-$t.gguf
  if [ ! -s "$f" ]; then
    log "requantizing $(basename "$model") to $t"
    mkdir -p "$(dirname "$f")"
    "$src/build/bin/llama-quantize" --allow-requantize "$model" "$f.tmp.$$" "$t" "$threads" >"$work/quantize-$t.log" 2>&1 ||
      { tail -5 "$work/quantize-$t.log" >&2; rm -f "$f.tmp.$$"; die "llama-quantize $t failed"; }
    mv "$f.tmp.$$" "$f"
  fi
  files+=("$f") labels+=("$(basename "$model" .gguf | sed 's/\.Q4_1$//') $t")
done
for f in "${extra[@]}"; do
  [ -r "$f" ] || die "no file $f"
  files+=("$f") labels+=("$(basename "$f" .gguf)")
done

log "building llmbus in $build (Release)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLB_SANITIZE=OFF >"$work/cmake.log" 2>&1 &&
  cmake --build "$build" -j"$jobs" --target llmbus-kernel-bench >>"$work/cmake.log" 2>&1 ||
  { tail -20 "$work/cmake.log" >&2; die "llmbus build failed"; }

batched_ctx=$((16 * ((16 + 128 + 255) / 256 * 256)))
run_llmbus() { # file isa out
  LLMBUS_SIMD=$2 "$build/cmd/llmbus-kernel-bench" --model "$1" --threads "$threads" --runs "$runs" --prefill 512 \
    --decode 128 --batch 1,16 --roofline >"$3.txt" 2>&1 || log "llmbus-kernel-bench failed: $3.txt"
}
run_llamacpp() { # file isa out
  local b; b=$(lbin_of "$2")
  "$b/llama-bench" -m "$1" -t "$threads" -p 512 -n 128 -r "$runs" -o json >"$3-bench.json" 2>"$3-bench.err" ||
    log "llama-bench failed: $3-bench.err"
  for _ in $(seq 1 "$runs"); do
    "$b/llama-batched-bench" -m "$1" -t "$threads" -tb "$threads" -c "$batched_ctx" -npp 16 -ntg 128 -npl 16 \
      --output-format jsonl >>"$3-batched.jsonl" 2>>"$3-batched.err" || log "llama-batched-bench failed: $3-batched.err"
  done
}
: >"$work/cells.tsv"
for rep in $(seq 1 "$repeats"); do
  for fi in "${!files[@]}"; do
    for isa in "${run_isas[@]}"; do
      out=$work/c$fi-$isa-$rep
      log "repeat $rep/$repeats: ${labels[$fi]} $isa"
      if [ $(((rep + fi) % 2)) = 0 ]; then
        run_llmbus "${files[$fi]}" "$isa" "$out-llmbus"; run_llamacpp "${files[$fi]}" "$isa" "$out-llamacpp"
      else
        run_llamacpp "${files[$fi]}" "$isa" "$out-llamacpp"; run_llmbus "${files[$fi]}" "$isa" "$out-llmbus"
      fi
      printf '%s\t%s\t%s\t%s\n' "$fi" "${labels[$fi]}" "$isa" "$rep" >>"$work/cells.tsv"
    done
  done
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+local changes"; fi
python3 "$root/ops/bench/compare_types_report.py" --work "$work" --cpu "$cpu" --ncpu "$(nproc)" --commit "$commit" \
  --threads "$threads" --runs "$runs" --repeats "$repeats" --version "$version"
rc=$?
log "raw results in $work"
exit $rc

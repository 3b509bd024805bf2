#!/usr/bin/env bash
# What a quantized KV cache buys and costs (--kv-cache-dtype): decode after long prompts and
# perplexity, for each dtype against fp16, on one model, one table; with --llamacpp, llama.cpp's
# decode at the same depths beside it.
#
#   ops/bench/kv-cache-dtype.sh [--model M.gguf] [--dtypes fp16,q8_0,fp8] [--contexts 1024,4096]
#                               [--batch 1,16] [--threads 2] [--runs 3] [--repeats 3]
#                               [--isa avx512[,avx2]] [--llamacpp]
#                               [--text FILE] [--ctx 512] [--chunks 8]
#
#   decode   llmbus-kernel-bench --prefill 0 --decode 32 --context C --batch B --kv-cache-dtype D
#            (decode steps after C-token prompts: the rows read are the weights plus C tokens of
#            K and V per sequence), --runs each, dtypes alternating within each repeat; the
#            median over repeats of each cell's median. --isa: LLMBUS_SIMD for each level (a
#            row group per level; "native" leaves the detected level)
#   llama.cpp with --llamacpp, the build ops/bench/compare-llamacpp.sh makes (its AVX2-only build
#            in build-avx2 for --isa avx2; neither is built here): batch 1 `llama-bench -p 0 -n 32
#            -d C -r RUNS`, batch B > 1 `llama-batched-bench -npp C -ntg 32 -npl B -pps -no-kvu`
#            (the prompt computed once and copied into each sequence's own cache, so each of
#            the B sequences attends its own C keys, as llmbus's B prompts); fp16 with flash
#            attention off (ggml's mul_mat + soft_max path, the arithmetic llmbus follows) and on
#            (flash_attn_ext), q8_0 with it on (llama.cpp needs it for a quantized V); no fp8
#   quality  llmbus perplexity --kv-cache-dtype D on --text (default: the GPL-3 text of Debian's
#            common-licenses), --ctx tokens a chunk, the first --chunks chunks (0: none)
# Bytes a K or V element takes: fp16 2, q8_0 34/32 (llama.cpp's block of 32 with an fp16 scale),
# fp8 1 (e4m3).
# Release build in build-release/ (made if missing; BUILD_DIR=DIR picks another). Prints a markdown table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
dtypes=fp16,q8_0,fp8
contexts=1024,4096
batches=1,16
threads=2
runs=3
repeats=3
isas=native
llamacpp=0
text=/usr/share/common-licenses/GPL-3
ctx=512
chunks=8
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --contexts) contexts=$2; shift 2 ;;
    --batch) batches=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --isa) isas=$2; shift 2 ;;
    --llamacpp) llamacpp=1; shift ;;
    --text) text=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "kv-cache-dtype: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
[ -x "$build/cmd/llmbus-kernel-bench" ] && [ -x "$build/cmd/llmbus" ] || make -C "$root" build-release >&2
lsrc=${LLAMACPP_CACHE:-$root/.cache/llamacpp}/llama_cpp_python-0.3.36/vendor/llama.cpp
lbin_of() { case "$1" in avx2) echo "$lsrc/build-avx2/bin" ;; *) echo "$lsrc/build/bin" ;; esac; }
work=$(mktemp -d /tmp/llb-kvdtype.XXXXXX)
echo "kv-cache-dtype: raw results in $work" >&2
IFS=, read -r -a dtype_list <<<"$dtypes"
IFS=, read -r -a ctx_list <<<"$contexts"
IFS=, read -r -a batch_list <<<"$batches"
IFS=, read -r -a isa_list <<<"$isas"
if [ $llamacpp = 1 ]; then
  for isa in "${isa_list[@]}"; do
    for tool in llama-bench llama-batched-bench; do
      [ -x "$(lbin_of "$isa")/$tool" ] || { echo "kv-cache-dtype: no $(lbin_of "$isa")/$tool (ops/bench/compare-llamacpp.sh builds it)" >&2; exit 2; }
    done
  done
fi
llama_type() { case "$1" in fp16) echo f16 ;; q8_0) echo q8_0 ;; *) echo "" ;; esac; }
run_llamacpp() { # isa dtype context fa out
  local bin t; bin=$(lbin_of "$1"); t=$(llama_type "$2")
  for b in "${batch_list[@]}"; do
    if [ "$b" = 1 ]; then
      "$bin/llama-bench" -m "$model" -t "$threads" -p 0 -n 32 -d "$3" -r "$runs" -fa "$4" -ctk "$t" -ctv "$t" -o json \
        >"$5-b1.json" 2>"$5-b1.err" || true
    else
      "$bin/llama-batched-bench" -m "$model" -t "$threads" -tb "$threads" -c $((b * ($3 + 32))) -b 2048 -ub 512 \
        -npp "$3" -ntg 32 -npl "$b" -pps -no-kvu -fa "$4" -ctk "$t" -ctv "$t" --output-format jsonl \
        >"$5-b$b.jsonl" 2>"$5-b$b.err" || true
    fi
  done
}
for rep in $(seq 1 "$repeats"); do
  for isa in "${isa_list[@]}"; do
    for c in "${ctx_list[@]}"; do
      # alternate the dtypes' order from one repeat to the next (drift on a shared machine)
      order=("${dtype_list[@]}")
      if [ $((rep % 2)) = 0 ]; then order=($(printf '%s\n' "${dtype_list[@]}" | tac)); fi
      for d in "${order[@]}"; do
        echo "kv-cache-dtype: repeat $rep $isa context $c $d" >&2
        simd=(); [ "$isa" = native ] || simd=("LLMBUS_SIMD=$isa")
        env "${simd[@]}" "$build/cmd/llmbus-kernel-bench" --model "$model" \
          --threads "$threads" --runs "$runs" --prefill 0 --decode 32 --context "$c" --batch "$batches" \
          --kv-cache-dtype "$d" >"$work/decode-$isa-$d-$c-$rep.txt" 2>&1
        [ $llamacpp = 1 ] && [ -n "$(llama_type "$d")" ] || continue
        [ "$d" = fp16 ] && run_llamacpp "$isa" "$d" "$c" off "$work/llama-$isa-$d-off-$c-$rep"
        run_llamacpp "$isa" "$d" "$c" on "$work/llama-$isa-$d-on-$c-$rep"
      done
    done
  done
done
for d in "${dtype_list[@]}"; do
  [ "$chunks" -gt 0 ] || break
  echo "kv-cache-dtype: perplexity $d" >&2
  "$build/cmd/llmbus" perplexity --model "$model" --file "$text" --ctx "$ctx" --chunks "$chunks" \
    --threads "$threads" --kv-cache-dtype "$d" --json >"$work/ppl-$d.json" 2>"$work/ppl-$d.err"
done
python3 - "$work" "$dtypes" "$contexts" "$batches" "$repeats" "$(basename "$model")" "$ctx" "$chunks" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$isas" "$llamacpp" <<'PY'
import json, re, statistics, sys
work, dtypes, contexts, batches, repeats, model, ctx, chunks, load, isas, llamacpp = sys.argv[1:]
dtypes, contexts, batches, isas = dtypes.split(","), contexts.split(","), batches.split(","), isas.split(",")
reps = range(1, int(repeats) + 1)
def llmbus(isa, d, c, b, rep):
    try:
        t = open(f"{work}/decode-{isa}-{d}-{c}-{rep}.txt").read()
    except OSError:
        return None
    m = re.search(rf"^decode b{b} c{c}\s+([\d.]+) tok/s", t, re.M)
    return float(m.group(1)) if m else None
def llama(isa, d, fa, c, b, rep):
    base = f"{work}/llama-{isa}-{d}-{fa}-{c}-{rep}"
    try:
        if b == "1":
            for r in json.load(open(f"{base}-b1.json")):
                if r.get("n_gen") == 32 and r.get("n_prompt") == 0:
                    return float(r["avg_ts"])
        else:
            for line in open(f"{base}-b{b}.jsonl"):
                if line.startswith("{") and '"speed_tg"' in line:
                    return float(json.loads(line)["speed_tg"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None
def med(vals):
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None
print(f"model {model}; decode 32 steps after the context, medians of {repeats} repeats; load {load}\n")
cells = [(c, b) for c in contexts for b in batches]
print("| level | engine, attention | KV dtype | " + " | ".join(f"decode b{b} @ {c}, tok/s (vs llmbus {dtypes[0]})" for c, b in cells)
      + (f" | perplexity ({chunks} x {ctx} tokens) |" if int(chunks) > 0 else " |"))
print("|---|---|---|" + "---:|" * (len(cells) + (1 if int(chunks) > 0 else 0)))
ppl = {}
for d in dtypes:
    try:
        p = json.load(open(f"{work}/ppl-{d}.json"))
        ppl[d] = f"{p['ppl']:.4f} ± {p['ppl_stderr']:.4f}"
    except (OSError, ValueError, KeyError):
        ppl[d] = "failed" if int(chunks) > 0 else ""
def row(isa, engine, d, f):
    out = []
    for c, b in cells:
        m = med(f(c, b, rep) for rep in reps)
        base = med(llmbus(isa, dtypes[0], c, b, rep) for rep in reps)
        out.append(f"{m:.1f} ({m / base:.2f}x)" if m and base else (f"{m:.1f}" if m else "failed"))
    tail = f" | {ppl[d]} |" if int(chunks) > 0 and engine == "llmbus" else (" | |" if int(chunks) > 0 else " |")
    print(f"| {isa} | {engine} | {d} | " + " | ".join(out) + tail)
for isa in isas:
    for d in dtypes:
        row(isa, "llmbus", d, lambda c, b, rep, isa=isa, d=d: llmbus(isa, d, c, b, rep))
    if llamacpp == "1":
        for d, fa in (("fp16", "off"), ("fp16", "on"), ("q8_0", "on")):
            if d in dtypes:
                row(isa, f"llama.cpp, flash attn {fa}", d, lambda c, b, rep, isa=isa, d=d, fa=fa: llama(isa, d, fa, c, b, rep))
PY

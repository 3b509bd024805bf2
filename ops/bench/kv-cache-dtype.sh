#!/usr/bin/env bash
# What a quantized KV cache buys and costs (--kv-cache-dtype): decode after long prompts and
# perplexity, for each dtype against fp16, on one model, one table.
#
#   ops/bench/kv-cache-dtype.sh [--model M.gguf] [--dtypes fp16,q8_0,fp8] [--contexts 1024,4096]
#                               [--batch 1,16] [--threads 2] [--runs 3] [--repeats 3]
#                               [--text FILE] [--ctx 512] [--chunks 8]
#
#   decode   llmbus-kernel-bench --prefill 0 --decode 32 --context C --batch B --kv-cache-dtype D
#            (decode steps after C-token prompts: the rows read are the weights plus C tokens of
#            K and V per sequence), --runs each, dtypes alternating within each repeat; the
#            median over repeats of each cell's median
#   quality  llmbus perplexity --kv-cache-dtype D on --text (default: the GPL-3 text of Debian's
#            common-licenses), --ctx tokens a chunk, the first --chunks chunks
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
    --text) text=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "kv-cache-dtype: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
[ -x "$build/cmd/llmbus-kernel-bench" ] && [ -x "$build/cmd/llmbus" ] || make -C "$root" build-release >&2
work=$(mktemp -d /tmp/llb-kvdtype.XXXXXX)
echo "kv-cache-dtype: raw results in $work" >&2
IFS=, read -r -a dtype_list <<<"$dtypes"
IFS=, read -r -a ctx_list <<<"$contexts"
for rep in $(seq 1 "$repeats"); do
  for c in "${ctx_list[@]}"; do
    # alternate the dtypes' order from one repeat to the next (drift on a shared machine)
    order=("${dtype_list[@]}")
    if [ $((rep % 2)) = 0 ]; then order=($(printf '%s\n' "${dtype_list[@]}" | tac)); fi
    for d in "${order[@]}"; do
      echo "kv-cache-dtype: repeat $rep context $c $d" >&2
      "$build/cmd/llmbus-kernel-bench" --model "$model" --threads "$threads" --runs "$runs" --prefill 0 \
        --decode 32 --context "$c" --batch "$batches" --kv-cache-dtype "$d" >"$work/decode-$d-$c-$rep.txt" 2>&1
    done
  done
done
for d in "${dtype_list[@]}"; do
  echo "kv-cache-dtype: perplexity $d" >&2
  "$build/cmd/llmbus" perplexity --model "$model" --file "$text" --ctx "$ctx" --chunks "$chunks" \
    --threads "$threads" --kv-cache-dtype "$d" --json >"$work/ppl-$d.json" 2>"$work/ppl-$d.err"
done
python3 - "$work" "$dtypes" "$contexts" "$batches" "$repeats" "$(basename "$model")" "$ctx" "$chunks" \
  "$(cat /proc/loadavg | cut -d' ' -f1-3)" <<'EOF'
import json, re, statistics, sys
work, dtypes, contexts, batches, repeats, model, ctx, chunks, load = sys.argv[1:]
dtypes, contexts, batches = dtypes.split(","), contexts.split(","), batches.split(",")
def rate(d, c, b, rep):
    t = open(f"{work}/decode-{d}-{c}-{rep}.txt").read()
    m = re.search(rf"^decode b{b} c{c}\s+([\d.]+) tok/s", t, re.M)
    return float(m.group(1)) if m else None
print(f"model {model}; decode 32 steps after the context, medians of {repeats} repeats; load {load}\n")
head = "| KV dtype | " + " | ".join(f"decode b{b} @ {c}, tok/s (vs fp16)" for c in contexts for b in batches)
print(head + f" | perplexity ({chunks} x {ctx} tokens) |")
print("|---|" + "---:|" * (len(contexts) * len(batches) + 1))
base = {}
for d in dtypes:
    cells = []
    for c in contexts:
        for b in batches:
            v = [r for r in (rate(d, c, b, rep) for rep in range(1, int(repeats) + 1)) if r is not None]
            med = statistics.median(v) if v else None
            if d == dtypes[0]: base[(c, b)] = med
            ratio = f" ({med / base[(c, b)]:.2f}x)" if med and base.get((c, b)) else ""
            cells.append(f"{med:.1f}{ratio}" if med else "failed")
    try:
        p = json.load(open(f"{work}/ppl-{d}.json"))
        ppl = f"{p['ppl']:.4f} ± {p['ppl_stderr']:.4f}"
    except (OSError, ValueError, KeyError):
        ppl = "failed"
    print(f"| {d} | " + " | ".join(cells) + f" | {ppl} |")
EOF

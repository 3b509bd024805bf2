#!/usr/bin/env bash
# Disaggregated prefill/decode against aggregated serving at equal engine count, on sim workers
# with a GPU's step-time model (docs/scaling.md "Disaggregated prefill/decode"), one run each,
# side by side.
#
#   ops/bench/pd-sim.sh [--engines N] [--prompts N] [--rate R] [--repeats N]
#
# On one nats-server it starts `llmbus serve --device sim --sim-cost SIM_COST` twice per repeat:
#   agg   --engines N                              (every engine prefills and decodes)
#   pd    --engines N --roles prefill..,decode..   (half prefill, half decode; KV moved over the bus)
#   pd-rc the same with --no-kv-transfer            (the decode engine recomputes the prompt)
# and runs `llmbus-bench serve` with a mixed load of long prompts and long generations (random
# dataset, INPUT_LEN 2048 +-50%, OUTPUT_LEN 256, Poisson arrivals at --rate). Prints TTFT and TPOT
# median / p99 and output tokens/s per config (medians over the repeats).
# Env: BUILD_DIR (default build-release), SIM_COST (default ops/sim/h100-sxm-llama-3-8b-bf16.json),
# NATS_PORT (default random), INPUT_LEN (2048), OUTPUT_LEN (256), CONFIGS ("agg pd pd-rc").
# The KV geometry is the model file's (the default SmolLM2-135M: 23,040 bytes a token in fp16),
# so a hand-off moves the bytes that model's cache holds, not Llama 3 8B's.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
engines=4
prompts=48
rate=4
repeats=1
while [ $# -gt 0 ]; do
  case "$1" in
    --engines) engines=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "pd-sim: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $((engines % 2)) -eq 0 ] && [ "$engines" -ge 2 ] || { echo "pd-sim: --engines must be even" >&2; exit 2; }
build=${BUILD_DIR:-$root/build-release}
sim_cost=${SIM_COST:-$root/ops/sim/h100-sxm-llama-3-8b-bf16.json}
input_len=${INPUT_LEN:-2048}
output_len=${OUTPUT_LEN:-256}
configs=${CONFIGS:-agg pd pd-rc}
work=$(mktemp -d /tmp/llb-pd-sim.XXXXXX) # mktemp's template, not a placeholder
log() { echo "pd-sim: $*" >&2; }
# shellcheck source=ops/bench/sim-lib.sh
. "$root/ops/bench/sim-lib.sh"
trap sim_stop EXIT
trap 'exit 130' INT TERM

for b in llmbus llmbus-bench; do
  [ -x "$build/cmd/$b" ] || { log "$build/cmd/$b missing: run make build-release"; exit 1; }
done
roles=""
for i in $(seq 1 "$engines"); do
  r=prefill; [ "$i" -gt $((engines / 2)) ] && r=decode
  roles=${roles:+$roles,}$r
done

# run_config NAME REPEAT SERVE_FLAGS...: a fresh nats-server and stack, the load, both stopped.
run_config() {
  local name=$1 rep=$2; shift 2
  sim_start_nats "$name-$rep" && sim_start_serve "$name-$rep" "$engines" --sim-cost "$sim_cost" "$@" &&
    sim_bench --dataset random --input-len "$input_len" --range-ratio 0.5 --output-len "$output_len" \
      --ignore-eos --num-prompts "$prompts" --request-rate "$rate" --seed "$rep" --json --label "$name" \
      >"$work/bench-$name-$rep.json" 2>"$work/bench-$name-$rep.err"
  sim_stop
}

has() { [[ " $configs " == *" $1 "* ]]; }
for rep in $(seq 1 "$repeats"); do
  log "repeat $rep/$repeats"
  has agg && run_config agg "$rep"
  has pd && run_config pd "$rep" --roles "$roles" --disagg-min-prompt-tokens 0
  has pd-rc && run_config pd-rc "$rep" --roles "$roles" --disagg-min-prompt-tokens 0 --no-kv-transfer
done

python3 - "$work" "$repeats" "$configs" <<'EOF'
import json, statistics, sys, os
work, repeats, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def med(xs): return statistics.median(xs) if xs else float('nan')
keys = ["output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "failed"]
print("| config | runs | output tok/s | TTFT median / p99 ms | TPOT median / p99 ms | ITL p99 ms | failed |")
print("|---|---|---|---|---|---|---|")
for name in configs:
    vals = {k: [] for k in keys}
    for rep in range(1, repeats + 1):
        try:
            b = json.load(open(os.path.join(work, f"bench-{name}-{rep}.json")))
        except Exception:
            continue
        for k in keys:
            vals[k].append(b.get(k, float('nan')))
    m = {k: med(v) for k, v in vals.items()}
    n = len(vals["output_throughput"])
    print(f"| {name} | {n} | {m['output_throughput']:.1f} | {m['median_ttft_ms']:.0f} / {m['p99_ttft_ms']:.0f} | "
          f"{m['median_tpot_ms']:.1f} / {m['p99_tpot_ms']:.1f} | {m['p99_itl_ms']:.0f} | {m['failed']:.0f} |")
EOF
log "raw results in $work"

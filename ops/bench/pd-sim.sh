#!/usr/bin/env bash
# Disaggregated prefill/decode against aggregated serving at equal engine count, on sim workers
# with a GPU's step-time model (docs/scaling.md "Disaggregated prefill/decode"), one run each,
# side by side.
#
#   ops/bench/pd-sim.sh [--engines N] [--prompts N] [--rate R] [--repeats N]
#
# On one nats-server it starts `llmbus serve --device sim --sim-cost SIM_COST` once per config
# and repeat:
#   agg    --engines N                              (every engine prefills and decodes)
#   pd     --engines N --roles prefill..,decode..   (half prefill, half decode; KV moved over the
#                                                    bus; every prompt disaggregated)
#   pd-rc  the same with --no-kv-transfer            (the decode engine recomputes the prompt)
#   cond   the same roles, Dynamo's conditional disaggregation with the transfer weighed: the
#          model's KV bytes a token over BUS_BYTES_PER_S against PREFILL_TOKENS_PER_S
#   cond-q the same roles, conditional by prompt length and the prefill engines' queue only
#          (--max-prefill-queue-size MAX_PREFILL_QUEUE)
# and runs `llmbus-bench serve` with a mixed load of long prompts and long generations (random
# dataset, INPUT_LEN 2048 +-50%, OUTPUT_LEN 256, Poisson arrivals at --rate). Appends one JSON line
# per run to RESULTS and prints the table of ops/bench/pd_sim_report.py over RESULTS (with
# PLOT_DIR set, its plot too).
# Env: BUILD_DIR (default build-release), SIM_COST (default ops/sim/h100-sxm-llama-3-8b-bf16.json),
# NATS_PORT (default random), INPUT_LEN (2048), OUTPUT_LEN (256), CONFIGS ("agg pd pd-rc"),
# RESULTS (default a file in the run's temporary directory), PLOT_DIR (none), PY (a Python with
# matplotlib for the plot; default python3),
# BUS_BYTES_PER_S (250e6: KV fetches measured on this machine, docs/scaling.md),
# PREFILL_TOKENS_PER_S (42500: the cost model's token_s), MAX_PREFILL_QUEUE (4).
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
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "pd-sim: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $((engines % 2)) -eq 0 ] && [ "$engines" -ge 2 ] || { echo "pd-sim: --engines must be even" >&2; exit 2; }
build=${BUILD_DIR:-$root/build-release}
sim_cost=${SIM_COST:-$root/ops/sim/h100-sxm-llama-3-8b-bf16.json}
input_len=${INPUT_LEN:-2048}
output_len=${OUTPUT_LEN:-256}
configs=${CONFIGS:-agg pd pd-rc}
bus_rate=${BUS_BYTES_PER_S:-250e6}
prefill_rate=${PREFILL_TOKENS_PER_S:-42500}
max_queue=${MAX_PREFILL_QUEUE:-4}
work=$(mktemp -d /tmp/llb-pd-sim.XXXXXX) # mktemp's template, not a placeholder
results=${RESULTS:-$work/results.jsonl}
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

# run_config NAME REPEAT SERVE_FLAGS...: a fresh nats-server and stack, the load, both stopped;
# the run's line appended to $results.
run_config() {
  local name=$1 rep=$2; shift 2
  local out=$work/bench-$name-$rep.json
  sim_start_nats "$name-$rep" && sim_start_serve "$name-$rep" "$engines" --sim-cost "$sim_cost" "$@" &&
    sim_bench --dataset random --input-len "$input_len" --range-ratio 0.5 --output-len "$output_len" \
      --ignore-eos --num-prompts "$prompts" --request-rate "$rate" --seed "$rep" --json --label "$name" \
      >"$out" 2>"$work/bench-$name-$rep.err"
  sim_stop
  local handed
  handed=$(grep -c request_handed_off "$work/serve-$name-$rep.log" 2>/dev/null)
  python3 -c 'import json,sys; print(json.dumps({"config": sys.argv[1], "repeat": int(sys.argv[2]),
    "rate": float(sys.argv[3]), "prompts": int(sys.argv[4]), "handed_off": int(sys.argv[5] or 0),
    "bench": json.load(open(sys.argv[6]))}))' "$name" "$rep" "$rate" "$prompts" "$handed" "$out" >>"$results" ||
    log "$name repeat $rep: no result (see $work)"
}

has() { [[ " $configs " == *" $1 "* ]]; }
for rep in $(seq 1 "$repeats"); do
  log "repeat $rep/$repeats"
  has agg && run_config agg "$rep"
  has pd && run_config pd "$rep" --roles "$roles" --disagg-min-prompt-tokens 0 --max-prefill-queue-size 0
  has pd-rc && run_config pd-rc "$rep" --roles "$roles" --disagg-min-prompt-tokens 0 --max-prefill-queue-size 0 \
    --no-kv-transfer
  has cond && run_config cond "$rep" --roles "$roles" --disagg-transfer-bytes-per-s "$bus_rate" \
    --disagg-prefill-tokens-per-s "$prefill_rate"
  has cond-q && run_config cond-q "$rep" --roles "$roles" --max-prefill-queue-size "$max_queue"
done

"${PY:-python3}" "$root/ops/bench/pd_sim_report.py" --results "$results" ${PLOT_DIR:+--out "$PLOT_DIR"}
log "raw results in $work (runs appended to $results)"

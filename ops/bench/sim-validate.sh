#!/usr/bin/env bash
# The sim worker against the real one (issue: scale measured, not assumed; item 2), one run.
#
#   ops/bench/sim-validate.sh [--repeats N] [--fit | --fit-served | --sim-cost FILE] [--threads T] [--model PATH]
#                             [--autogroup-nice N]
#
# The same workloads through `llmbus serve --device cpu` and `llmbus serve --device sim`, the
# two interleaved (cpu sim, sim cpu, ...), each stack started fresh per repeat; `llmbus-bench
# serve` measures:
#   decode   batch-1 decode: 4 requests one at a time, 16-token prompts, 128 tokens each
#   prefill  512-token prompts one at a time (8 of them, 1 output token): TTFT
#   conc16   32 requests of 100 + 128 tokens, 16 in flight
#   conc32   64 requests of 100 + 128 tokens, 32 in flight
#   shared   32 requests over 4 shared 384-token prefixes (+ 32 tokens of their own), 64 out,
#            8 in flight: prefix-cache hits
# and sim_validate_report.py prints, per workload, output tokens/s, mean TTFT and median TPOT of
# both (medians over the repeats), sim / real and whether it is within 10%, with the load
# average of each run (a shared machine's other work slows the real engine, never the sim), and
# writes the figures to OUT/sim-validate.json.
# The sim's step-time model: --fit fits it on this machine first (llmbus-kernel-bench --fit, the
# same threads); --fit-served fits it, each repeat, to the real worker's own steps of that
# repeat (its --step-log, llmbus-kernel-bench --fit-steps) and runs the sim right after the real
# engine (real, sim, real, sim: on a machine shared with other work the forward's speed drifts,
# and this measures the sim under the same conditions as the real run it follows); --sim-cost
# FILE uses that model; default: the worker's built-in one.
# --autogroup-nice N runs everything in a session of its own (setsid) whose CFS autogroup gets
# nice N (/proc/self/autogroup; a negative N needs CAP_SYS_NICE): on a machine shared with other
# sessions' work, the scheduler charges the real forward's CPU to the stack's session, and right
# after a long step the actors that carry its tokens (the worker's bus thread, nats-server, the
# scheduler, ...) wait behind the other sessions (docs/scaling.md: 4 ms of a batch-1 TTFT), which
# a sim's sleeping step never pays; -19 gives both stacks the cores they would have on a quiet
# machine. Default: the caller's session, unchanged.
# Env: BUILD_DIR (default build-release), OUT (default a temporary directory), SERVE_ARGS (more
# serve flags for both; default "--max-num-batched-tokens 256 --max-model-len 2048").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
repeats=3
threads=2
fit=0
sim_cost=""
autogroup_nice=""
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --fit) fit=1; shift ;;
    --fit-served) fit=2; shift ;;
    --sim-cost) sim_cost=$2; shift 2 ;;
    --autogroup-nice) autogroup_nice=$2; shift 2 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "sim-validate: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { echo "sim-validate: $*" >&2; }
if [ -n "$autogroup_nice" ] && [ -z "${LLB_SIM_VALIDATE_SESSION:-}" ]; then
  # a session of its own (its own autogroup), then its nice; the stacks and clients inherit it
  LLB_SIM_VALIDATE_SESSION=1 exec setsid --wait "$0" "${args[@]}"
fi
if [ -n "$autogroup_nice" ]; then
  echo "$autogroup_nice" >/proc/self/autogroup 2>/dev/null ||
    { log "cannot set the autogroup's nice to $autogroup_nice (CAP_SYS_NICE? sched_autogroup_enabled?)"; exit 1; }
  log "session autogroup: $(cat /proc/self/autogroup)"
fi
build=${BUILD_DIR:-$root/build-release}
work=${OUT:-$(mktemp -d /tmp/llb-sim-validate.XXXXXX)}
mkdir -p "$work"
serve_args=${SERVE_ARGS---max-num-batched-tokens 256 --max-model-len 2048}
serve_pid=""
cleanup() { [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM

for b in llmbus llmbus-bench llmbus-kernel-bench llmbus-gpu-worker; do
  [ -x "$build/cmd/$b" ] || { log "$build/cmd/$b missing: run make build-release"; exit 1; }
done
[ -r "$model" ] || { log "model $model missing: run ops/fetch-model.sh"; exit 1; }
if [ "$fit" = 2 ]; then
  sim_cost=served
elif [ "$fit" = 1 ]; then
  sim_cost=$work/cost.json
  log "fitting the step-time model (llmbus-kernel-bench --fit, $threads threads)"
  "$build/cmd/llmbus-kernel-bench" --model "$model" --threads "$threads" --runs 7 --fit "$sim_cost" \
    >"$work/fit.txt" 2>&1 || { log "fit failed: see $work/fit.txt"; exit 1; }
  tail -1 "$work/fit.txt" >&2
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A scenario_args=(
  [decode]="--num-prompts 4 --max-concurrency 1 --input-len 16 --output-len 128 --ignore-eos"
  [prefill]="--num-prompts 8 --max-concurrency 1 --input-len 512 --output-len 1"
  [conc16]="--num-prompts 32 --max-concurrency 16 --input-len 100 --output-len 128 --ignore-eos"
  [conc32]="--num-prompts 64 --max-concurrency 32 --input-len 100 --output-len 128 --ignore-eos"
  [shared]="--dataset shared-prefix --prefix-len 384 --num-prefixes 4 --input-len 32 --output-len 64 --num-prompts 32 --max-concurrency 8 --ignore-eos"
)
scenarios=(decode prefill conc16 conc32 shared)

run_device() { # device rep
  local dev=$1 rep=$2 port
  port=$(free_port)
  local extra=(--device "$dev" --threads "$threads")
  if [ "$dev" = sim ] && [ "$fit" = 2 ]; then
    "$build/cmd/llmbus-kernel-bench" --fit-steps "$work/steps-$rep.jsonl" --fit "$work/cost-$rep.json" \
      >"$work/fit-$rep.txt" 2>&1 || { log "fit of repeat $rep's steps failed: see $work/fit-$rep.txt"; return 1; }
    head -1 "$work/fit-$rep.txt" >&2
    extra+=(--sim-cost "$work/cost-$rep.json")
  elif [ "$dev" = sim ] && [ -n "$sim_cost" ]; then
    extra+=(--sim-cost "$sim_cost")
  fi
  [ "$dev" = cpu ] && [ "$fit" = 2 ] && extra+=(--step-log "$work/steps-$rep.jsonl")
  # shellcheck disable=SC2086
  "$build/cmd/llmbus" serve --model "$model" --http "127.0.0.1:$port" --metrics-port 0 $serve_args "${extra[@]}" \
    >"$work/serve-$dev-$rep.log" 2>&1 &
  serve_pid=$!
  local ok=0
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { ok=1; break; }
    sleep 0.5
  done
  if [ "$ok" != 1 ]; then
    log "$dev: stack not healthy (see $work/serve-$dev-$rep.log)"
    return 1
  fi
  for s in "${scenarios[@]}"; do
    # shellcheck disable=SC2086
    "$build/cmd/llmbus-bench" serve --base-url "http://127.0.0.1:$port" --model "$model" ${scenario_args[$s]} \
      --seed "$rep" --no-progress --json --label "$dev/$s/$rep" --result-file "$work/$dev-$s-$rep.json" >/dev/null ||
      log "$dev $s repeat $rep: some requests failed (see $work/$dev-$s-$rep.json)"
  done
  kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
}

for rep in $(seq 1 "$repeats"); do
  order=(cpu sim)
  [ $((rep % 2)) = 0 ] && [ "$fit" != 2 ] && order=(sim cpu)
  for dev in "${order[@]}"; do
    log "repeat $rep/$repeats: $dev"
    run_device "$dev" "$rep" || exit 1
  done
done
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 "$root/ops/bench/sim_validate_report.py" --work "$work" --repeats "$repeats" --threads "$threads" \
  --commit "$commit" --sim-cost "${sim_cost:-built-in}" --serve-args "$serve_args" \
  --autogroup-nice "${autogroup_nice:-unchanged}"
rc=$?
log "raw results in $work"
exit $rc

#!/usr/bin/env bash
# Interleaved A/B of `llmbus serve` set-ups, served only (no forward-alone runs): per round, for
# each CONFIG in turn, one fresh stack (ops/bench/serve-stack.sh, with --step-log), a short
# warm-up, then llmbus-bench serve at concurrency 1 (4 requests) and 16 (32 requests), 16-token
# prompts, 128 output tokens each (ignore_eos), streamed /v1/completions, measured by
# served_cpu.py --threads gpu_worker. Prints the medians per CONFIG and concurrency
# (ops/bench/served_ab_report.py): output tok/s, TTFT and ITL (mean, p99), the share of the run
# the worker was not inside a step (1 - the --step-log's step seconds / the run's duration: waiting
# for its next SchedulerOutput, decoding it, sampling, replying), CPU microseconds per output
# token of each process, and per thread of the worker its CPU, run-queue wait, voluntary and
# involuntary switches per token.
#
#   ops/bench/served-ab.sh ROUNDS CONFIG...        (B=build-release/cmd, M=model, PY=python3)
#   CONFIG = LABEL[:NICE[:BUILD]]
#     NICE  0 (default): as started; 1..19: every thread of every process of the stack but the
#           worker (the actors, nats-server, the supervisor) reniced to NICE once the stack is up;
#           idle: those threads SCHED_IDLE instead; batch: SCHED_BATCH (the same weight, but a
#           woken thread does not preempt the running one); poolbatch: the worker's pool threads
#           (llb-pool-*) SCHED_BATCH instead, the rest as started
#     BUILD the cmd directory of another build (an old main's build-release/cmd), default $B
#   e.g. ops/bench/served-ab.sh 3 base nice10:10   |   ops/bench/served-ab.sh 3 old:0:/tmp/old/cmd new
# SERVE_FLAGS (optional) go to every stack. AUTOGROUP_NICE=N (as sim-validate.sh's
# --autogroup-nice) runs everything in a session of its own (setsid) whose CFS autogroup gets nice
# N (a negative N needs CAP_SYS_NICE): -19 gives the stacks about the cores of a quiet machine on
# one shared with other sessions' work (at their expense while it runs). One JSON line per run is kept in $OUT (default a file
# under /tmp, named on stderr). Note: renice and SCHED_IDLE order threads within one autogroup
# (kernel.sched_autogroup_enabled: one per session); against other sessions' processes (another
# user's build) the stack competes as one group whatever its threads' nice values.
set -euo pipefail
cd "$(dirname "$0")/../.."
B0=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
[ $# -ge 2 ] || { echo "usage: $0 ROUNDS LABEL[:NICE[:BUILD]]..." >&2; exit 2; }
ROUNDS=$1
if [ -n "${AUTOGROUP_NICE:-}" ] && [ -z "${LLB_SERVED_AB_SESSION:-}" ]; then
  LLB_SERVED_AB_SESSION=1 exec setsid --wait "$0" "$@"
fi
if [ -n "${AUTOGROUP_NICE:-}" ]; then
  echo "$AUTOGROUP_NICE" >/proc/self/autogroup 2>/dev/null ||
    { echo "served-ab: cannot set the autogroup's nice to $AUTOGROUP_NICE" >&2; exit 1; }
  echo "served-ab: session autogroup: $(cat /proc/self/autogroup)" >&2
fi
shift
OUT=${OUT:-$(mktemp /tmp/served-ab.XXXXXX.jsonl)}
echo "served-ab: runs in $OUT" >&2

# the non-worker processes of the stack under $1, one pid a line
stack_rest() {
  "$PY" - "$1" <<'PY'
import os, sys
sys.path.insert(0, "ops/bench")
from proc_cpu import descendants, kind_of, processes
ps = processes()
print("\n".join(str(q) for q in descendants(ps, [int(sys.argv[1])]) if kind_of(ps[q][1]) != "gpu_worker"))
PY
}

# the worker's pool threads (llb-pool-*) SCHED_BATCH: woken, they wait for the running thread's
# slice instead of preempting it (the forward's caller, on whose core the kernel puts them)
pool_batch() {
  local p t
  for p in $("$PY" -c 'import sys; sys.path.insert(0, "ops/bench")
from proc_cpu import descendants, kind_of, processes
ps = processes()
print("\n".join(str(q) for q in descendants(ps, [int(sys.argv[1])]) if kind_of(ps[q][1]) == "gpu_worker"))' "$1"); do
    for t in /proc/"$p"/task/*; do
      case "$(cat "$t/comm" 2>/dev/null)" in llb-pool-*) chrt --batch -p 0 "${t##*/}" >/dev/null ;; esac
    done
  done
}

# renice (or SCHED_IDLE) every thread of the stack's processes but the worker's
demote() {
  local stack=$1 how=$2 p t
  if [ "$how" = poolbatch ]; then pool_batch "$stack"; return; fi
  for p in $(stack_rest "$stack"); do
    for t in /proc/"$p"/task/*; do
      t=${t##*/}
      case "$how" in
        idle) chrt --idle -p 0 "$t" >/dev/null 2>&1 || true ;;
        batch) chrt --batch -p 0 "$t" >/dev/null 2>&1 || true ;;
        *) renice -n "$how" -p "$t" >/dev/null 2>&1 || true ;;
      esac
    done
  done
}

one_run() { # label nice build round
  local label=$1 how=$2 round=$4 c n l0 res
  B=$3
  steps=$(mktemp /tmp/served-ab-steps.XXXXXX)
  SERVE_FLAGS="${SERVE_FLAGS:-} --step-log $steps"
  . ops/bench/serve-stack.sh
  trap 'kill -TERM $stack 2>/dev/null; wait $stack 2>/dev/null || true; rm -rf "$tmp" "$steps"' EXIT
  [ "$how" = 0 ] || demote "$stack" "$how"
  "$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" --model "$M" --num-prompts 2 --max-concurrency 2 \
    --input-len 16 --output-len 16 --ignore-eos --no-progress --no-memory --json >/dev/null
  for c in 1 16; do
    n=$((c == 1 ? 4 : 32))
    l0=$(wc -l <"$steps")
    res=$("$PY" ops/bench/served_cpu.py --tree "$stack" --threads gpu_worker -- "$B/llmbus-bench" serve \
      --base-url "http://127.0.0.1:$http" --model "$M" --num-prompts "$n" --max-concurrency "$c" --input-len 16 \
      --output-len 128 --ignore-eos --no-progress --no-memory --json)
    tail -n +$((l0 + 1)) "$steps" | "$PY" ops/bench/served_ab_report.py --record "$label" "$round" "$c" "$res" >>"$OUT"
  done
}

for r in $(seq 1 "$ROUNDS"); do
  for cfg in "$@"; do
    IFS=: read -r label how build <<<"$cfg"
    (one_run "$label" "${how:-0}" "${build:-$B0}" "$r")
  done
done
"$PY" ops/bench/served_ab_report.py "$OUT"

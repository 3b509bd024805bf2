#!/usr/bin/env bash
# Who takes the forward's cores while served: one `llmbus serve` stack, llmbus-bench serve at
# concurrency C (16-token prompts, 128 output tokens, streamed), `perf sched record -a` for
# SECONDS in the middle of the run, then ops/bench/served_preemptions.py: on-CPU microseconds
# per output token of every thread kind on the machine (the stack's by actor, the worker's
# threads each, anything else as other:<comm>), and for the worker's two busiest threads (the
# forward's caller, the execute subscription's delivery thread, and the pool's llb-pool-1) how
# often per token each was switched out while runnable (preempted) and by whom, and how often it
# slept. Needs perf and the right to trace the scheduler (root, or perf_event_paranoid <= -1).
#   ops/bench/served-preemptions.sh [C [SECONDS]]        (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
C=${1:-1}
SECONDS_=${2:-2}
. ops/bench/serve-stack.sh
"$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" --model "$M" --num-prompts 2 --max-concurrency 2 \
  --input-len 16 --output-len 16 --ignore-eos --no-progress --no-memory --json >/dev/null
# every thread of the stack: tid, kind (proc_cpu.py's), thread name
"$PY" - "$stack" >"$tmp/threads" <<'PY'
import os, sys
sys.path.insert(0, "ops/bench")
from proc_cpu import descendants, kind_of, processes
ps = processes()
for q in descendants(ps, [int(sys.argv[1])]):
    for t in os.listdir(f"/proc/{q}/task"):
        try:
            with open(f"/proc/{q}/task/{t}/comm") as f:
                print(t, kind_of(ps[q][1]), f.read().strip())
        except OSError:
            pass
PY
# long enough to cover the recording: ~1 s before it, the rest after
n=$((C == 1 ? 3 * (SECONDS_ + 1) : C * ((SECONDS_ + 2) / 2)))
"$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" --model "$M" --num-prompts "$n" --max-concurrency "$C" \
  --input-len 16 --output-len 128 --ignore-eos --no-progress --no-memory --json >"$tmp/bench.json" &
bench=$!
sleep 1
perf sched record -a -o "$tmp/sched.data" -- sleep "$SECONDS_" >/dev/null 2>&1
wait "$bench"
perf script -i "$tmp/sched.data" -F cpu,time,event,trace 2>/dev/null | grep 'sched:sched_switch' >"$tmp/switches"
"$PY" ops/bench/served_preemptions.py "$tmp/switches" "$tmp/threads" "$tmp/bench.json"

#!/usr/bin/env bash
# The bus overhead per batch-1 decode step (docs/design.md §4, issue 19 item 4), for several forward
# thread settings, interleaved over --repeats: `llmbus-bench engine` (the same greedy decode
# in-process and through a stack it starts) with
#   all      --threads T                      every core in the forward
#   decode1  --threads T --decode-threads 1   decode steps on one thread: a core for the bus
#   one      --threads 1                      one forward thread everywhere
# and prints per setting the medians of the in-process step, the bus step, the overhead, and
# per process of the stack the CPU ms and thread wake-ups per step.
#   ops/bench/bus-overhead.sh [--repeats N] [--tokens N]    (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
REPEATS=3 TOKENS=256
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--tokens N]" >&2; exit 2 ;;
  esac
done
[ -x "$B/llmbus-bench" ] || { echo "$B/llmbus-bench missing: make build-release" >&2; exit 1; }
T=$(nproc)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for rep in $(seq 1 "$REPEATS"); do
  for setting in all decode1 one; do
    case $setting in
      all) args=(--threads "$T") ;;
      decode1) args=(--threads "$T" --decode-threads 1) ;;
      one) args=(--threads 1) ;;
    esac
    "$B/llmbus-bench" engine --model "$M" --tokens "$TOKENS" --repeats 2 --json "${args[@]}" 2>/dev/null \
      | tail -1 | sed "s/^/$setting /" >>"$out"
  done
done
"$PY" - "$out" "$T" "$REPEATS" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    setting, js = line.split(" ", 1)
    runs.setdefault(setting, []).append(json.loads(js))
med = lambda xs: statistics.median(xs)
print(f"bus overhead per batch-1 decode step, {sys.argv[2]} CPUs, medians of {sys.argv[3]} runs "
      f"(each the median step of 2 interleaved A/B repeats), load {open('/proc/loadavg').read().split()[0]}")
print("| forward threads | in-process step (ms) | bus step (ms) | overhead | bus tok/s |")
print("|---|---:|---:|---:|---:|")
names = {"all": f"{sys.argv[2]}", "decode1": f"{sys.argv[2]}, decode steps on 1", "one": "1"}
for s in ("all", "decode1", "one"):
    if s not in runs: continue
    r = runs[s]
    a, b = med([x["inproc_median_step_ms"] for x in r]), med([x["bus_median_step_ms"] for x in r])
    print(f"| {names[s]} | {a:.3f} | {b:.3f} | {b - a:+.3f} ms ({(b - a) / a * 100:+.1f}%) | {1e3 / b:.1f} |")
for s in ("all", "decode1", "one"):
    if s not in runs: continue
    r = runs[s]
    procs = sorted({p for x in r for p in x.get("stack_cpu_ms_per_step_by_process", {})})
    cells = []
    for p in procs:
        cpu = med([x["stack_cpu_ms_per_step_by_process"].get(p, 0) for x in r])
        wake = med([x["stack_wakeups_per_step_by_process"].get(p, 0) for x in r])
        if cpu >= 0.005 or wake >= 0.5:
            cells.append(f"{p} {cpu:.3f} ms / {wake:.1f}")
    print(f"- {names[s]}: per step, CPU / wake-ups: " + ", ".join(cells) +
          f"; in-process CPU {med([x['inproc_cpu_ms_per_step'] for x in r]):.3f} ms")
    print(f"  greedy tokens identical in-process and through the bus: {all(x['same_tokens'] for x in r)}")
PY

#!/usr/bin/env bash
# The cost of tracing on batch-1 decode (issue 15): `llmbus-bench engine` against a stack with
# tracing off and one with every actor exporting at sample ratio 1.0 to an OTLP/HTTP receiver
# (tests/e2e/otlp_receiver.py; --validate makes it parse every export, a cost on the same
# CPUs, otherwise it only counts them), in one run, A/B interleaved
# (off/on, then on/off, ...), each run starting its own stack. Prints the medians over the
# repeats of the decode step (wall clock) and of the stack's CPU time per step, and the cost.
#   ops/bench/trace-cost.sh [--repeats N] [--tokens N] [--validate]   (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-.venv/bin/python}
REPEATS=5
TOKENS=128
SINK=--no-validate
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --validate) SINK=""; shift ;;
    *) echo "usage: $0 [--repeats N] [--tokens N] [--validate]" >&2; exit 2 ;;
  esac
done
[ -x "$B/llmbus-bench" ] || { echo "$B/llmbus-bench missing: make build-release" >&2; exit 1; }
[ -x "$PY" ] || { echo "$PY missing: make venv" >&2; exit 1; }
tmp=$(mktemp -d)
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PY" tests/e2e/otlp_receiver.py --port "$port" --quiet $SINK >"$tmp/receiver.log" 2>&1 &
rx=$!
trap 'kill $rx 2>/dev/null || true; rm -rf "$tmp"' EXIT
sleep 1
run() { # $1 = off | on
  local extra=()
  [ "$1" = on ] && extra=(--serve-arg --otlp-endpoint --serve-arg "http://127.0.0.1:$port"
                          --serve-arg --trace-sample-ratio --serve-arg 1.0)
  "$B/llmbus-bench" engine --model "$M" --tokens "$TOKENS" --repeats 1 --json "${extra[@]}" >>"$tmp/$1.jsonl"
}
for r in $(seq 1 "$REPEATS"); do
  if [ $((r % 2)) -eq 1 ]; then run off; run on; else run on; run off; fi
done
kill -TERM $rx; wait $rx || true
"$PY" - "$tmp" <<'PY'
import json, statistics, sys
d = sys.argv[1]
rows = {v: [json.loads(l) for l in open(f"{d}/{v}.jsonl")] for v in ("off", "on")}
med = lambda v, k: statistics.median(r[k] for r in rows[v])
print(f"batch-1 decode, {len(rows['off'])} runs each, medians (llmbus-bench engine, stack through NATS)")
print(f"{'':28} {'tracing off':>12} {'ratio 1.0':>12} {'cost':>8}")
for k, name in (("bus_median_step_ms", "decode step (ms)"), ("stack_cpu_ms_per_step", "stack CPU per step (ms)")):
    a, b = med("off", k), med("on", k)
    print(f"{name:28} {a:12.3f} {b:12.3f} {100 * (b - a) / a:+7.1f}%")
for v in ("off", "on"):
    print(f"  {v:3} runs: step ms", [round(r["bus_median_step_ms"], 3) for r in rows[v]],
          "stack CPU ms/step", [round(r["stack_cpu_ms_per_step"], 3) for r in rows[v]])
print("same greedy tokens in every run:", all(r["same_tokens"] for v in rows for r in rows[v]))
print("load average (1 min) at the starts:", [round(r["loadavg_1m_start"], 2) for v in rows for r in rows[v]])
PY
cat "$tmp/receiver.log" | tail -1

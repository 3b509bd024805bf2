#!/usr/bin/env bash
# The cost of structured output (issue 17): one `llmbus serve` stack, `llmbus-bench serve`
# on /v1/chat/completions without a constraint, with response_format json_object and with a
# json_schema (ops/bench/person.schema.json), A/B interleaved over --repeats; after each run
# the gpu worker's mask histograms (llmbus:structured_output_mask_seconds: helper-thread time
# per step; ..._mask_wait_seconds: what sampling waited for it after the forward) are read from
# its /metrics. Prints TPOT (median, mean), output tokens/s and the mask time per step.
#   ops/bench/structured-output.sh [--repeats N] [--num-prompts N] [--output-len N]
#                                  [--concurrency C] [--temperature T]  (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-.venv/bin/python}
REPEATS=2 NUM=24 OUT=96 CONC=8 TEMP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --num-prompts) NUM=$2; shift 2 ;;
    --output-len) OUT=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --temperature) TEMP=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--num-prompts N] [--output-len N] [--concurrency C] [--temperature T]" >&2
       exit 2 ;;
  esac
done
[ -x "$B/llmbus-bench" ] || { echo "$B/llmbus-bench missing: make build-release" >&2; exit 1; }
[ -x "$PY" ] || { echo "$PY missing: make venv" >&2; exit 1; }
. ops/bench/serve-stack.sh
run() { # $1 = none | json_object | json_schema
  local extra=()
  [ "$1" = json_object ] && extra=(--response-format json_object)
  [ "$1" = json_schema ] && extra=(--response-format ops/bench/person.schema.json)
  curl -s "http://127.0.0.1:$wport/metrics" >"$tmp/before"
  "$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" --endpoint /v1/chat/completions --num-prompts "$NUM" \
    --input-len 64 --output-len "$OUT" --max-concurrency "$CONC" --temperature "$TEMP" --seed 1 --no-progress \
    --no-memory --json --label "$1" "${extra[@]}" >"$tmp/run.json"
  curl -s "http://127.0.0.1:$wport/metrics" >"$tmp/after"
  "$PY" - "$tmp" >>"$tmp/$1.jsonl" <<'PY'
import json, sys
d = sys.argv[1]
def scrape(f):
    out = {}
    for line in open(f"{d}/{f}"):
        if line.startswith("llmbus:structured_output_mask") and ("_sum" in line or "_count" in line):
            k, v = line.rsplit(" ", 1)
            out[k.split("{")[0]] = float(v)
    return out
a, b = scrape("before"), scrape("after")
r = json.load(open(f"{d}/run.json"))
for k in ("llmbus:structured_output_mask_seconds", "llmbus:structured_output_mask_wait_seconds"):
    n = b.get(k + "_count", 0) - a.get(k + "_count", 0)
    r[k.split(":")[1] + "_steps"] = n
    r[k.split(":")[1] + "_mean_ms"] = 1e3 * (b.get(k + "_sum", 0) - a.get(k + "_sum", 0)) / n if n else 0.0
print(json.dumps(r))
PY
}
for rep in $(seq 1 "$REPEATS"); do
  if [ $((rep % 2)) -eq 1 ]; then run none; run json_object; run json_schema
  else run json_schema; run json_object; run none; fi
done
"$PY" - "$tmp" "$NUM" "$CONC" "$OUT" "$TEMP" <<'PY'
import json, statistics, sys
d, num, conc, out, temp = sys.argv[1:]
med = statistics.median
print(f"llmbus serve, chat, {num} prompts x max_tokens {out}, concurrency {conc}, temperature {temp}; medians over runs")
print(f"{'':12} {'TPOT med ms':>11} {'TPOT mean ms':>12} {'out tok/s':>9} {'out toks':>8} {'mask ms/step':>12} {'wait ms/step':>12} {'steps':>6}")
for v in ("none", "json_object", "json_schema"):
    rows = [json.loads(l) for l in open(f"{d}/{v}.jsonl")]
    print(f"{v:12} {med(r['median_tpot_ms'] for r in rows):11.2f} {med(r['mean_tpot_ms'] for r in rows):12.2f} "
          f"{med(r['output_throughput'] for r in rows):9.1f} {med(r['total_output_tokens'] for r in rows):8.0f} "
          f"{med(r['structured_output_mask_seconds_mean_ms'] for r in rows):12.3f} "
          f"{med(r['structured_output_mask_wait_seconds_mean_ms'] for r in rows):12.3f} "
          f"{med(r['structured_output_mask_seconds_steps'] for r in rows):6.0f}")
    failed = sum(r["failed"] for r in rows)
    if failed:
        print(f"  {v}: {failed} failed requests")
PY

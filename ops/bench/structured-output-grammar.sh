#!/usr/bin/env bash
# The cost of the `grammar` kind of structured output (issue 17): one `llmbus serve` stack;
# chat requests with vLLM's structured_outputs.grammar (ops/bench/json.gbnf: JSON with
# optional whitespace, and tests/unit/data/gbnf/arithmetic.gbnf), and for reference without a
# constraint and with json_object, sent by the openai client (llmbus-bench has no grammar
# option) at a fixed concurrency; after each run the gpu worker's mask histograms
# (llmbus:structured_output_mask_seconds: helper-thread time per step;
# ..._mask_wait_seconds: what sampling waited for it after the forward) are read from its
# /metrics, as ops/bench/structured-output.sh does for json. Prints per constraint: the mask
# time per step, the wait per step, the steps, output tokens/s and requests that broke.
#   ops/bench/structured-output-grammar.sh [--num-prompts N] [--output-len N] [--concurrency C]
#                                          (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-.venv/bin/python}
NUM=16 OUT=128 CONC=8
while [ $# -gt 0 ]; do
  case "$1" in
    --num-prompts) NUM=$2; shift 2 ;;
    --output-len) OUT=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    *) echo "usage: $0 [--num-prompts N] [--output-len N] [--concurrency C]" >&2; exit 2 ;;
  esac
done
[ -x "$B/llmbus" ] || { echo "$B/llmbus missing: make build-release" >&2; exit 1; }
[ -x "$PY" ] || { echo "$PY missing: make venv" >&2; exit 1; }
. ops/bench/serve-stack.sh
"$PY" - "http://127.0.0.1:$http" "http://127.0.0.1:$wport/metrics" "$NUM" "$OUT" "$CONC" <<'PY'
import sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
import openai
sys.path.insert(0, "tests/unit")
import gbnf_ref
base, metrics, num, out, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
model = client.models.list().data[0].id
def scrape():
    d = {}
    for line in urllib.request.urlopen(metrics).read().decode().splitlines():
        if line.startswith("llmbus:structured_output_mask") and ("_sum" in line or "_count" in line):
            k, v = line.rsplit(" ", 1)
            d[k.split("{")[0]] = float(v)
    return d
runs = [("none", {}, None), ("json_object", {"response_format": {"type": "json_object"}}, None)]
for name, path in (("grammar json.gbnf", "ops/bench/json.gbnf"), ("grammar arithmetic", "tests/unit/data/gbnf/arithmetic.gbnf")):
    g = open(path).read()
    runs.append((name, {"extra_body": {"structured_outputs": {"grammar": g}}}, gbnf_ref.Reference(g)))
print(f"llmbus serve, chat, {num} requests x max_tokens {out}, concurrency {conc}, temperature 1 (seeded)")
print(f"{'':20} {'mask ms/step':>12} {'wait ms/step':>12} {'steps':>6} {'out tok/s':>9} {'stopped, in language':>20} {'cut':>4}")
for name, kw, ref in runs:
    def one(i):
        r = client.chat.completions.create(model=model, max_tokens=out, temperature=1, seed=1000 + i,
            messages=[{"role": "user", "content": f"Write a JSON object describing item {i}, or an equation."}], **kw)
        c = r.choices[0]
        return r.usage.completion_tokens, c.finish_reason, ref is None or ref.accepts(c.message.content)
    a, t0 = scrape(), time.time()
    with ThreadPoolExecutor(conc) as pool:
        res = list(pool.map(one, range(num)))
    dt, b = time.time() - t0, scrape()
    row = []
    for k in ("llmbus:structured_output_mask_seconds", "llmbus:structured_output_mask_wait_seconds"):
        n = b.get(k + "_count", 0) - a.get(k + "_count", 0)
        row.append((1e3 * (b.get(k + "_sum", 0) - a.get(k + "_sum", 0)) / n if n else 0.0, n))
    stopped = [good for _, fr, good in res if fr == "stop"]
    print(f"{name:20} {row[0][0]:12.3f} {row[1][0]:12.3f} {row[0][1]:6.0f} {sum(t for t, _, _ in res) / dt:9.1f} "
          f"{sum(stopped):>13}/{len(stopped):<6} {num - len(stopped):4}")
PY

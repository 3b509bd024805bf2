#!/usr/bin/env bash
# Speculative decoding (issue 19 item 5): batch-1 decode on a repetitive workload (copying and
# editing given text: ops/bench/spec-decode.jsonl) with and without --speculative-config (the
# n-gram proposer), A/B interleaved over --repeats, each stack started fresh per run and warmed;
# llmbus-bench serve on /v1/chat/completions, greedy, max concurrency 1, and the scheduler's
# llmbus:spec_decode_* counters (--spec-metrics-url). Prints medians: TPOT, output tokens/s,
# acceptance rate, mean acceptance length.
#   ops/bench/spec-decode.sh [--repeats N] [--spec JSON] [--threads N]  (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
REPEATS=3 THREADS=2
SPEC='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --spec) SPEC=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--spec JSON] [--threads N]" >&2; exit 2 ;;
  esac
done
[ -x "$B/llmbus-bench" ] || { echo "$B/llmbus-bench missing: make build-release" >&2; exit 1; }
tmp=$(mktemp -d)
stack=
cleanup() { [ -n "$stack" ] && { kill -TERM "$stack" 2>/dev/null; wait "$stack" 2>/dev/null || true; }; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run() { # $1 = base | spec
  local http mport extra=()
  http=$(free_port)
  mport=$(( ($(free_port) % 20000) + 30000 ))
  [ "$1" = spec ] && extra=(--speculative-config "$SPEC")
  "$B/llmbus" serve --model "$M" --http "127.0.0.1:$http" --metrics-port "$mport" --threads "$THREADS" \
    "${extra[@]}" >"$tmp/serve.log" 2>&1 &
  stack=$!
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$http/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  # the scheduler is the third actor: its metrics port is BASE + 2 (llmbus serve --help)
  "$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" --endpoint /v1/chat/completions --model "$M" \
    --dataset jsonl --dataset-path ops/bench/spec-decode.jsonl --max-concurrency 1 --temperature 0 --warmup 1 \
    --no-progress --no-memory --json --label "$1" --spec-metrics-url "http://127.0.0.1:$((mport + 2))" \
    >>"$tmp/$1.jsonl"
  kill -TERM "$stack"; wait "$stack" 2>/dev/null || true; stack=
}
for rep in $(seq 1 "$REPEATS"); do
  if [ $((rep % 2)) -eq 1 ]; then run base; run spec; else run spec; run base; fi
done
"$PY" - "$tmp" "$SPEC" <<'PY'
import json, statistics, sys
d, spec = sys.argv[1:]
med = statistics.median
rows = {v: [json.loads(l) for l in open(f"{d}/{v}.jsonl")] for v in ("base", "spec")}
print(f"batch-1 greedy decode, ops/bench/spec-decode.jsonl, {len(rows['base'])} runs each; medians")
print(f"{'':5} {'out tok/s':>9} {'TPOT med ms':>11} {'TPOT mean ms':>12} {'out toks':>8} {'accept %':>8} {'mean acc len':>12}")
for v, rs in rows.items():
    acc = [r["spec_decode_acceptance_rate"] for r in rs if r.get("spec_decode_acceptance_rate") is not None]
    mal = [r["spec_decode_mean_acceptance_length"] for r in rs if r.get("spec_decode_mean_acceptance_length") is not None]
    print(f"{v:5} {med(r['output_throughput'] for r in rs):9.1f} {med(r['median_tpot_ms'] for r in rs):11.2f} "
          f"{med(r['mean_tpot_ms'] for r in rs):12.2f} {med(r['total_output_tokens'] for r in rs):8.0f} "
          f"{100 * med(acc) if acc else 0:8.1f} {med(mal) if mal else 0:12.2f}")
    for r in rs:
        if r["failed"]:
            print(f"  {v}: {r['failed']} failed requests")
print(f"speed-up (out tok/s): {med(r['output_throughput'] for r in rows['spec']) / med(r['output_throughput'] for r in rows['base']):.2f}x; --speculative-config {spec}")
PY

#!/usr/bin/env bash
# Routing quality at scale (issue: scale measured, not assumed; item 4), one run.
#
#   ops/bench/sim-routing.sh [--engines 8,32] [--policies cache-aware,least-loaded,random]
#                            [--prefixes G] [--prefix-len N] [--num-blocks B] [--repeats R]
#
# Many users, few system prompts: llmbus-bench's shared-prefix dataset (G distinct prefix-len
# token prefixes, each request one of them + 32 tokens of its own, 32 tokens out), 24 requests
# per engine with 4 per engine in flight, against `llmbus serve --device sim --engines N
# --router POLICY` with B KV blocks of 16 tokens per engine (so an engine holds a few prefixes,
# not all G). Per run: the prefix-cache hit rate over the run (the engines' SchedulerStats summed,
# `llmbus status --json` before and after), mean and median TTFT, output tok/s, and the load
# imbalance: `llmbus status` sampled through the run, max / mean of the engines' running
# requests, averaged over the samples with at least half the requests in flight (the tail of a
# run, a few requests left on a few engines, says nothing of routing). One JSON line per run in OUT/sim-routing.jsonl; the
# table (medians over repeats) is printed. Env: BUILD_DIR, OUT, SIM_COST (a --sim-cost file).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
engines_list=8,32
policies=cache-aware,least-loaded,random
prefixes=16
prefix_len=512
num_blocks=192
repeats=1
while [ $# -gt 0 ]; do
  case "$1" in
    --engines) engines_list=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --prefixes) prefixes=$2; shift 2 ;;
    --prefix-len) prefix_len=$2; shift 2 ;;
    --num-blocks) num_blocks=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "sim-routing: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
work=${OUT:-$(mktemp -d /tmp/llb-sim-routing.XXXXXX)}
mkdir -p "$work"
log() { echo "sim-routing: $*" >&2; }
# shellcheck source=ops/bench/sim-lib.sh
. "$root/ops/bench/sim-lib.sh"
sampler_pid=""
stop_all() { [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null; sim_stop; }
trap stop_all EXIT
trap 'exit 130' INT TERM
status_json() { "$build/cmd/llmbus" status --nats "$nats_url" --json --wait-ms 1200 2>/dev/null || echo '{}'; }

run_one() { # N policy rep
  local n=$1 policy=$2 rep=$3 name="$1-$2-$3"
  sim_start_nats "$name" || return 1
  local extra=(--router "$policy" --num-blocks "$num_blocks" --block-size 16)
  [ -n "${SIM_COST:-}" ] && extra+=(--sim-cost "$SIM_COST")
  sim_start_serve "$name" "$n" "${extra[@]}" || return 1
  local ds=(--dataset shared-prefix --prefix-len "$prefix_len" --num-prefixes "$prefixes" --input-len 32
            --output-len 32 --ignore-eos)
  status_json >"$work/status-before-$name.json"
  # the running requests of every engine, sampled through the run
  ( while :; do status_json; echo; done ) >"$work/samples-$name.jsonl" 2>/dev/null &
  sampler_pid=$!
  sim_bench "${ds[@]}" --num-prompts $((24 * n)) --max-concurrency $((4 * n)) --seed "$rep" --json \
    --label "$name" --result-file "$work/bench-$name.json" >/dev/null 2>"$work/bench-$name.err"
  kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null; sampler_pid=""
  status_json >"$work/status-after-$name.json"
  python3 - "$n" "$policy" "$rep" "$work" "$name" >>"$work/sim-routing.jsonl" <<'PY'
import json, statistics, sys
n, policy, rep, work, name = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def engines(path):
    try:
        return {e["engine_id"]: e for e in json.load(open(path)).get("engines", [])}
    except (OSError, ValueError):
        return {}
b, a = engines(f"{work}/status-before-{name}.json"), engines(f"{work}/status-after-{name}.json")
q = sum(e["prefix_cache_queries"] - b.get(k, {}).get("prefix_cache_queries", 0) for k, e in a.items())
h = sum(e["prefix_cache_hits"] - b.get(k, {}).get("prefix_cache_hits", 0) for k, e in a.items())
ratios = []
for line in open(f"{work}/samples-{name}.jsonl"):
    try:
        es = json.loads(line).get("engines", [])
    except ValueError:
        continue
    run = [e["num_running_reqs"] + e["num_waiting_reqs"] for e in es]
    if len(run) == n and sum(run) >= 2 * n:  # steady state: at least half the 4 per engine in flight
        ratios.append(max(run) / (sum(run) / n))
gen = {k: e["generation_tokens_total"] - b.get(k, {}).get("generation_tokens_total", 0) for k, e in a.items()}
bench = json.load(open(f"{work}/bench-{name}.json"))
print(json.dumps(dict(engines=n, policy=policy, repeat=rep, hit_rate=h / q if q else 0.0,
                      mean_ttft_ms=bench["mean_ttft_ms"], median_ttft_ms=bench["median_ttft_ms"],
                      p99_ttft_ms=bench["p99_ttft_ms"], output_throughput=bench["output_throughput"],
                      failed=bench["failed"], imbalance=statistics.mean(ratios) if ratios else None,
                      imbalance_samples=len(ratios),
                      tokens_max_over_mean=max(gen.values()) / (sum(gen.values()) / n) if gen and sum(gen.values()) else None)))
PY
  sim_stop
}

IFS=, read -r -a ns <<<"$engines_list"
IFS=, read -r -a ps <<<"$policies"
for rep in $(seq 1 "$repeats"); do
  for n in "${ns[@]}"; do
    for p in "${ps[@]}"; do
      log "repeat $rep/$repeats: $n engines, --router $p (load average $(cut -d' ' -f1 /proc/loadavg))"
      run_one "$n" "$p" "$rep" || log "$n $p failed"
    done
  done
done
python3 - "$work/sim-routing.jsonl" "$prefixes" "$prefix_len" "$num_blocks" <<'PY'
import json, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["engines"], r["policy"])].append(r)
med = lambda xs: statistics.median([x for x in xs if x is not None]) if any(x is not None for x in xs) else float("nan")
print(f"\n{sys.argv[2]} prefixes of {sys.argv[3]} tokens, {sys.argv[4]} KV blocks of 16 tokens per engine\n")
print("| engines | router | prefix hit rate | mean TTFT ms | median TTFT ms | output tok/s | imbalance (max/mean running+waiting) | tokens max/mean | runs |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for (n, p), rs in sorted(runs.items()):
    print(f"| {n} | {p} | {100 * med([r['hit_rate'] for r in rs]):.1f}% | {med([r['mean_ttft_ms'] for r in rs]):.0f} | "
          f"{med([r['median_ttft_ms'] for r in rs]):.0f} | {med([r['output_throughput'] for r in rs]):.0f} | "
          f"{med([r['imbalance'] for r in rs]):.2f} | {med([r['tokens_max_over_mean'] for r in rs]):.2f} | {len(rs)} |")
PY
log "raw results in $work"

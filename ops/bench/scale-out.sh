#!/usr/bin/env bash
# Scale-out benchmark (issue: several engines behind one subject), one run, side by side.
#
#   ops/bench/scale-out.sh [--model PATH] [--repeats N] [--prompts N] [--concurrency C]
#
# On one nats-server it starts `llmbus serve --nats URL` in each configuration, waits for
# /health, warms it, runs `llmbus-bench serve` and reads every engine's SchedulerStats with
# `llmbus status --json` (prefix-cache queries and hits, summed over the engines), then stops it:
#   1x1     --engines 1 --threads 1       random prompts          (the baseline)
#   2x1     --engines 2 --threads 2       random prompts          (1 worker thread each)
#   random  --engines 2 --router random   shared-prefix dataset (G distinct prefixes)
#   affine  --engines 2 --router cache-aware  the same dataset
# Repeats are interleaved (1x1, 2x1, random, affine, 1x1, ...). The table gives medians over
# the repeats: output tokens/s, TTFT median, TPOT median, prefix-cache hit rate, and the
# ratios 2x1 / 1x1 (throughput) and affine / random (TTFT, hit rate).
# Env: BUILD_DIR (default build-release, built by `make build-release`), PORT (HTTP, default
# 18561), NATS_PORT (default 18562), SERVE_ARGS (extra serve flags, default
# "--max-num-batched-tokens 256"), INPUT_LEN/OUTPUT_LEN (random: 128/64), PREFIX_LEN (512),
# NUM_PREFIXES (8), SUFFIX_LEN (32), SHARED_ARGS (more llmbus-bench flags for the shared-prefix
# runs, e.g. "--request-rate 4"), CONFIGS (which to run, default "1x1 2x1 random affine").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
repeats=3
prompts=96
concurrency=32
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "scale-out: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
port=${PORT:-18561}
nats_port=${NATS_PORT:-18562}
serve_args=${SERVE_ARGS---max-num-batched-tokens 256}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-64}
prefix_len=${PREFIX_LEN:-512}
num_prefixes=${NUM_PREFIXES:-8}
suffix_len=${SUFFIX_LEN:-32}
shared_args=${SHARED_ARGS:-}
configs=${CONFIGS:-1x1 2x1 random affine}
work=$(mktemp -d /tmp/llb-scale-out.XXXXXX)
serve_pid="" nats_pid=""
log() { echo "scale-out: $*" >&2; }

cleanup() {
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  [ -n "$nats_pid" ] && kill -TERM "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for b in llmbus llmbus-bench; do
  [ -x "$build/cmd/$b" ] || { log "$build/cmd/$b missing: run make build-release"; exit 1; }
done
[ -r "$model" ] || { log "model $model missing: run ops/fetch-model.sh"; exit 1; }
nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$work/js" >"$work/nats.log" 2>&1 &
nats_pid=$!
nats_url=nats://127.0.0.1:$nats_port
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$nats_port") 2>/dev/null && break; sleep 0.1; done

# run_config NAME REPEAT SERVE_FLAGS... -- BENCH_FLAGS...
run_config() {
  local name=$1 rep=$2; shift 2
  local sflags=() bflags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sflags+=("$1"); shift; done
  shift
  bflags=("$@")
  # shellcheck disable=SC2086
  "$build/cmd/llmbus" serve --nats "$nats_url" --model "$model" --http "127.0.0.1:$port" $serve_args \
    "${sflags[@]}" >"$work/serve-$name-$rep.log" 2>&1 &
  serve_pid=$!
  local ok=0
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { ok=1; break; }
    sleep 0.5
  done
  if [ "$ok" != 1 ]; then
    log "$name: stack not healthy (see $work/serve-$name-$rep.log)"
    kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
    return 1
  fi
  sleep 2 # every engine announced itself (stats every second)
  "$build/cmd/llmbus-bench" serve --base-url "http://127.0.0.1:$port" --model "$model" --no-progress \
    --max-concurrency "$concurrency" --num-prompts "$prompts" --ignore-eos --seed "$rep" --json \
    --label "$name" "${bflags[@]}" >"$work/bench-$name-$rep.json" 2>"$work/bench-$name-$rep.err"
  "$build/cmd/llmbus" status --nats "$nats_url" --json --wait-ms 1500 >"$work/status-$name-$rep.json" 2>/dev/null
  kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
}

random_ds=(--input-len "$input_len" --output-len "$output_len")
# shellcheck disable=SC2206
shared_ds=(--dataset shared-prefix --prefix-len "$prefix_len" --num-prefixes "$num_prefixes"
           --input-len "$suffix_len" --output-len "$output_len" $shared_args)
has() { [[ " $configs " == *" $1 "* ]]; }
for rep in $(seq 1 "$repeats"); do
  log "repeat $rep/$repeats"
  has 1x1 && run_config 1x1 "$rep" --engines 1 --threads 1 -- "${random_ds[@]}"
  has 2x1 && run_config 2x1 "$rep" --engines 2 --threads 2 -- "${random_ds[@]}"
  has random && run_config random "$rep" --engines 2 --threads 2 --router random -- "${shared_ds[@]}"
  has affine && run_config affine "$rep" --engines 2 --threads 2 --router cache-aware -- "${shared_ds[@]}"
done

python3 - "$work" "$repeats" <<'EOF'
import json, statistics, sys, os
work, repeats = sys.argv[1], int(sys.argv[2])
def med(xs): return statistics.median(xs) if xs else float('nan')
rows = {}
for name in ["1x1", "2x1", "random", "affine"]:
    tput, ttft, tpot, hit, failed = [], [], [], [], 0
    for rep in range(1, repeats + 1):
        try:
            b = json.load(open(os.path.join(work, f"bench-{name}-{rep}.json")))
        except Exception:
            continue
        tput.append(b.get("output_throughput", 0.0))
        ttft.append(b.get("median_ttft_ms", 0.0))
        tpot.append(b.get("median_tpot_ms", 0.0))
        failed += b.get("failed", 0)
        try:
            st = json.load(open(os.path.join(work, f"status-{name}-{rep}.json")))
            q = sum(e["prefix_cache_queries"] for e in st["engines"])
            h = sum(e["prefix_cache_hits"] for e in st["engines"])
            hit.append(100.0 * h / q if q else 0.0)
        except Exception:
            pass
    rows[name] = dict(tput=med(tput), ttft=med(ttft), tpot=med(tpot), hit=med(hit), failed=failed, n=len(tput))
print(f"| config | runs | output tok/s | TTFT median ms | TPOT median ms | prefix hit % | failed |")
print(f"|---|---|---|---|---|---|---|")
for k, r in rows.items():
    print(f"| {k} | {r['n']} | {r['tput']:.1f} | {r['ttft']:.1f} | {r['tpot']:.2f} | {r['hit']:.1f} | {r['failed']} |")
a, b = rows["1x1"], rows["2x1"]
if a['tput'] == a['tput'] and b['tput'] == b['tput'] and a['tput']:
    print(f"\n2 engines x 1 thread / 1 engine x 1 thread, output tok/s: {b['tput'] / a['tput']:.2f}x")
r, f = rows["random"], rows["affine"]
if r['ttft'] and f['ttft']:
    print(f"prefix-affinity / random routing: TTFT {f['ttft'] / r['ttft']:.2f}x, prefix hit {f['hit']:.1f}% vs {r['hit']:.1f}%")
EOF
log "raw results in $work"

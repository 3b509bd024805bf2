#!/usr/bin/env bash
# Scaling curves of sim engines behind one subject (issue: scale measured, not assumed; item 3).
#
#   ops/bench/sim-scale.sh [--engines 1,2,4,8,16,32] [--concurrency-per-engine C] [--prompts-per-engine P]
#                          [--input-len N] [--output-len N] [--sim-cost FILE] [--repeats R]
#                          [--router POLICY] [--input-processors K] [--label TEXT] [--idle-s S]
#                          [--routing-detail]
#
# For each engine count N (repeats interleaved: 1 2 4 ... 1 2 4 ...), on a nats-server of its own
# (JetStream, monitoring port): `llmbus serve --nats URL --engines N --device sim` (every actor
# real, the forward replaced by the cost model's wait); first S seconds idle (default 10: what N
# engines cost with no request: heartbeats and stats, CPU by kind and NATS msgs/s), then warmed
# and `llmbus-bench serve` with
# C x N requests in flight and P x N random prompts (so each engine sees the same load whatever
# N: the ideal is N x the output of one). Around each run it records
#   - the CPU seconds of every process by kind (scheduler, kv_manager, gpu_worker (the sims),
#     output_processor, input_processor, api_server, encoder_cache, nats-server, the benchmark
#     client, the supervisor) from /proc, and the machine's busy CPU from /proc/stat (other
#     users of the machine included) and its load average;
#   - nats-server's messages and bytes in and out (/varz) and its CPU;
# With --routing-detail, serve logs at debug level and OUT/routing-N-REP.txt says which engine got
# each request and when (sim_routing_detail.py; its requests per engine go into the results too):
# the run ends when the engine that got the most requests is done.
# one JSON line per run in OUT/sim-scale.jsonl. sim_scale_report.py prints the table (output
# tok/s, its ratio to N x one engine, TTFT, TPOT, CPU per 1,000 output tokens by process kind,
# NATS msgs/s) and draws OUT/sim-scale-throughput.png and OUT/sim-scale-ttft.png (matplotlib,
# when importable by $PY).
# Env: BUILD_DIR (default build-release), OUT (default a temporary directory), PY (a Python with
# matplotlib for the plots; default python3), SERVE_ARGS (more serve flags), NATS_PORT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
engines_list=1,2,4,8,16,32
conc=8
prompts=24
input_len=64
output_len=64
sim_cost=""
repeats=1
router=least-loaded
input_processors=2
label=""
idle_s=10
routing_detail=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --engines) engines_list=$2; shift 2 ;;
    --concurrency-per-engine) conc=$2; shift 2 ;;
    --prompts-per-engine) prompts=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --sim-cost) sim_cost=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --router) router=$2; shift 2 ;;
    --input-processors) input_processors=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    --idle-s) idle_s=$2; shift 2 ;;
    --routing-detail) routing_detail=1; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "sim-scale: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
work=${OUT:-$(mktemp -d /tmp/llb-sim-scale.XXXXXX)}
mkdir -p "$work"
py=${PY:-python3}
serve_args=${SERVE_ARGS:-}
log() { echo "sim-scale: $*" >&2; }
# shellcheck source=ops/bench/sim-lib.sh
. "$root/ops/bench/sim-lib.sh"
trap sim_stop EXIT
trap 'exit 130' INT TERM
for b in llmbus llmbus-bench llmbus-gpu-worker; do
  [ -x "$build/cmd/$b" ] || { log "$build/cmd/$b missing: run make build-release"; exit 1; }
done
[ -r "$model" ] || { log "model $model missing: run ops/fetch-model.sh"; exit 1; }
machine_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
varz() { curl -sf "http://127.0.0.1:$mon_port/varz" || echo '{}'; }

run_one() { # N rep
  local n=$1 rep=$2
  sim_start_nats "$n-$rep" || return 1
  local extra=(--router "$router" --input-processors "$input_processors")
  [ -n "$sim_cost" ] && extra+=(--sim-cost "$sim_cost")
  [ "$routing_detail" = 1 ] && extra+=(--log-level debug)
  # shellcheck disable=SC2086
  sim_start_serve "$n-$rep" "$n" "${extra[@]}" $serve_args || return 1
  local c=$((conc * n)) p=$((prompts * n))
  # idle: what N engines cost with no request (heartbeats, stats), over idle_s seconds
  local i0 i1 iv0 iv1
  sleep 2; i0=$(sim_cpu_by_kind); iv0=$(varz); sleep "$idle_s"; i1=$(sim_cpu_by_kind); iv1=$(varz)
  # warm-up: every engine's first steps, the client's connections
  sim_bench --num-prompts "$c" --max-concurrency "$c" --input-len "$input_len" --output-len 8 --ignore-eos \
    --seed 999 --json >/dev/null 2>&1
  local cpu0 cpu1 v0 v1 busy0 busy1 load0 load1 times_out
  cpu0=$(sim_cpu_by_kind); v0=$(varz); busy0=$(machine_busy); load0=$(cut -d' ' -f1 /proc/loadavg)
  times_out=$( { sim_bench --num-prompts "$p" --max-concurrency "$c" --input-len "$input_len" \
      --output-len "$output_len" --ignore-eos --seed "$rep" --json --label "N=$n" \
      --result-file "$work/bench-$n-$rep.json" >/dev/null 2>"$work/bench-$n-$rep.err"; times; } | tail -1)
  cpu1=$(sim_cpu_by_kind); v1=$(varz); busy1=$(machine_busy); load1=$(cut -d' ' -f1 /proc/loadavg)
  local routing='{}'
  if [ "$routing_detail" = 1 ]; then
    sleep 0.5 # the last request_done lines
    python3 "$root/ops/bench/sim_routing_detail.py" --log "$work/serve-$n-$rep.log" --completion-tokens "$output_len" \
      >"$work/routing-$n-$rep.txt"
    routing=$(python3 "$root/ops/bench/sim_routing_detail.py" --log "$work/serve-$n-$rep.log" \
      --completion-tokens "$output_len" --json)
  fi
  python3 - "$n" "$rep" "$work/bench-$n-$rep.json" "$cpu0" "$cpu1" "$v0" "$v1" "$busy0" "$busy1" "$load0" "$load1" \
    "$times_out" "$conc" "$label" "$i0" "$i1" "$iv0" "$iv1" "$idle_s" "$routing" >>"$work/sim-scale.jsonl" <<'PY'
import json, os, re, sys
n, rep, bench = int(sys.argv[1]), int(sys.argv[2]), json.load(open(sys.argv[3]))
c0, c1, v0, v1 = (json.loads(x) for x in sys.argv[4:8])
b0, b1 = [float(x) for x in sys.argv[8].split()], [float(x) for x in sys.argv[9].split()]
times = [float(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", sys.argv[12])]
dur = bench["duration"]
cpu = {k: c1.get(k, 0) - c0.get(k, 0) for k in set(c0) | set(c1)}
cpu["client"] = sum(times[:2]) if len(times) >= 2 else 0.0  # the subshell's children: the benchmark
d = lambda k: v1.get(k, 0) - v0.get(k, 0)
def idle_of(c0, c1, v0, v1, secs):
    c0, c1, v0, v1, secs = json.loads(c0), json.loads(c1), json.loads(v0), json.loads(v1), float(secs)
    return dict(seconds=secs, cpu_cores={k: (c1.get(k, 0) - c0.get(k, 0)) / secs for k in set(c0) | set(c1)},
                nats_in_msgs_s=(v1.get("in_msgs", 0) - v0.get("in_msgs", 0)) / secs,
                nats_out_msgs_s=(v1.get("out_msgs", 0) - v0.get("out_msgs", 0)) / secs,
                nats_out_bytes_s=(v1.get("out_bytes", 0) - v0.get("out_bytes", 0)) / secs)
print(json.dumps(dict(
    engines=n, repeat=rep, label=sys.argv[14], concurrency_per_engine=int(sys.argv[13]),
    completed=bench["completed"], failed=bench["failed"], duration_s=dur,
    output_throughput=bench["output_throughput"], mean_ttft_ms=bench["mean_ttft_ms"],
    median_ttft_ms=bench["median_ttft_ms"], median_tpot_ms=bench["median_tpot_ms"],
    output_tokens=bench["total_output_tokens"], cpu_s=cpu,
    machine_busy_cores=(b1[0] - b0[0]) / max(b1[1] - b0[1], 1e-9) * os.cpu_count(),
    load_start=float(sys.argv[10]), load_end=float(sys.argv[11]),
    nats_in_msgs_s=d("in_msgs") / dur, nats_out_msgs_s=d("out_msgs") / dur,
    nats_in_bytes_s=d("in_bytes") / dur, nats_out_bytes_s=d("out_bytes") / dur,
    idle=idle_of(*sys.argv[15:20]), routing=json.loads(sys.argv[20]))))
PY
  sim_stop
}

IFS=, read -r -a ns <<<"$engines_list"
for rep in $(seq 1 "$repeats"); do
  for n in "${ns[@]}"; do
    log "repeat $rep/$repeats: $n engine(s), $((conc * n)) in flight (load average $(cut -d' ' -f1 /proc/loadavg))"
    run_one "$n" "$rep" || log "N=$n repeat $rep failed"
  done
done
"$py" "$root/ops/bench/sim_scale_report.py" --results "$work/sim-scale.jsonl" --out "$work"
log "raw results in $work"

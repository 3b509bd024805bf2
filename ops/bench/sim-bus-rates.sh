#!/usr/bin/env bash
# What one engine puts on the bus (issue: scale measured, not assumed; item 6), one run.
#
#   ops/bench/sim-bus-rates.sh [--engines N] [--concurrency-per-engine C] [--seconds S]
#
# `llmbus serve --device sim --engines N` (default 8) on a nats-server of its own; ops/bench/bus_tap.py
# counts every message by kind for S seconds (default 20) idle, then again at steady load
# (llmbus-bench serve with C requests per engine in flight, 64-token prompts, 64 tokens out, run
# long enough to outlast the tap). Output tokens during the loaded tap come from the engines'
# SchedulerStats (`llmbus status --json` before and after). Printed per kind: messages/s and
# bytes/s per engine, idle and loaded, and per 1,000 output tokens; nats-server's own in/out
# msgs/s (/varz) beside; all in OUT/sim-bus-rates.json (docs/scaling.md's 1,000-engine plan reads it).
# Env: BUILD_DIR, OUT, PY (a Python with nats-py: pip install nats-py).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
n=8
conc=8
seconds=20
while [ $# -gt 0 ]; do
  case "$1" in
    --engines) n=$2; shift 2 ;;
    --concurrency-per-engine) conc=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "sim-bus-rates: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
work=${OUT:-$(mktemp -d /tmp/llb-sim-bus-rates.XXXXXX)}
mkdir -p "$work"
py=${PY:-python3}
log() { echo "sim-bus-rates: $*" >&2; }
# shellcheck source=ops/bench/sim-lib.sh
. "$root/ops/bench/sim-lib.sh"
bench_pid=""
stop_all() { [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null; sim_stop; }
trap stop_all EXIT
trap 'exit 130' INT TERM
"$py" -c 'import nats' 2>/dev/null || { log "$py has no nats-py (PY=<a python with nats-py>)"; exit 1; }
varz() { curl -sf "http://127.0.0.1:$mon_port/varz" || echo '{}'; }
status_json() { "$build/cmd/llmbus" status --nats "$nats_url" --json --wait-ms 1500 2>/dev/null || echo '{}'; }

sim_start_nats rates || exit 1
sim_start_serve rates "$n" || exit 1
sleep 3
log "idle tap, $seconds s ($n engines)"
v0=$(varz)
"$py" "$root/ops/bench/bus_tap.py" --nats "$nats_url" --seconds "$seconds" >"$work/tap-idle.json" || exit 1
v1=$(varz)
sim_bench --num-prompts $((400 * n)) --max-concurrency $((conc * n)) --input-len 64 --output-len 64 --ignore-eos \
  --json >"$work/bench.json" 2>"$work/bench.err" &
bench_pid=$!
sleep 8
log "loaded tap, $seconds s ($((conc * n)) requests in flight)"
status_json >"$work/status-before.json"
v2=$(varz)
"$py" "$root/ops/bench/bus_tap.py" --nats "$nats_url" --seconds "$seconds" >"$work/tap-loaded.json" || exit 1
v3=$(varz)
status_json >"$work/status-after.json"
kill "$bench_pid" 2>/dev/null; wait "$bench_pid" 2>/dev/null; bench_pid=""
python3 - "$work" "$n" "$v0" "$v1" "$v2" "$v3" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
v0, v1, v2, v3 = (json.loads(x) for x in sys.argv[3:7])
idle, loaded = json.load(open(f"{work}/tap-idle.json")), json.load(open(f"{work}/tap-loaded.json"))
def eng(path):
    try:
        return {e["engine_id"]: e["generation_tokens_total"] for e in json.load(open(path))["engines"]}
    except (OSError, ValueError, KeyError):
        return {}
b, a = eng(f"{work}/status-before.json"), eng(f"{work}/status-after.json")
tokens = sum(a[k] - b.get(k, 0) for k in a)
# the status calls around the tap take ~1.5 s each and stats come every second: the token
# window is the tap's plus about one stats interval
window = loaded["seconds"] + 1.5
tok_s = tokens / window if window else 0.0
kinds = sorted(set(idle["kinds"]) | set(loaded["kinds"]))
rows = []
for k in kinds:
    i, l = idle["kinds"].get(k, {"msgs": 0, "bytes": 0}), loaded["kinds"].get(k, {"msgs": 0, "bytes": 0})
    rows.append(dict(kind=k, idle_msgs_s_per_engine=i["msgs"] / idle["seconds"] / n,
                     idle_bytes_s_per_engine=i["bytes"] / idle["seconds"] / n,
                     loaded_msgs_s_per_engine=l["msgs"] / loaded["seconds"] / n,
                     loaded_bytes_s_per_engine=l["bytes"] / loaded["seconds"] / n,
                     msgs_per_1k_tokens=1000.0 * l["msgs"] / loaded["seconds"] / tok_s if tok_s else 0.0,
                     bytes_per_1k_tokens=1000.0 * l["bytes"] / loaded["seconds"] / tok_s if tok_s else 0.0))
d = lambda x, y, k: (y.get(k, 0) - x.get(k, 0))
server = dict(idle_in_msgs_s=d(v0, v1, "in_msgs") / idle["seconds"], idle_out_msgs_s=d(v0, v1, "out_msgs") / idle["seconds"],
              loaded_in_msgs_s=d(v2, v3, "in_msgs") / loaded["seconds"],
              loaded_out_msgs_s=d(v2, v3, "out_msgs") / loaded["seconds"],
              loaded_in_bytes_s=d(v2, v3, "in_bytes") / loaded["seconds"],
              loaded_out_bytes_s=d(v2, v3, "out_bytes") / loaded["seconds"])
out = dict(engines=n, output_tokens_s=tok_s, output_tokens_s_per_engine=tok_s / n, rows=rows, server=server,
           load=float(sys.argv[7]))
json.dump(out, open(f"{work}/sim-bus-rates.json", "w"), indent=1)
print(f"\n{n} sim engines; loaded: {tok_s:.0f} output tokens/s ({tok_s / n:.0f} per engine); load average {sys.argv[7]}\n")
print("| kind | idle msgs/s per engine | idle B/s per engine | loaded msgs/s per engine | loaded B/s per engine | msgs per 1k tokens | bytes per 1k tokens |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: -r["loaded_bytes_s_per_engine"]):
    print(f"| {r['kind']} | {r['idle_msgs_s_per_engine']:.2f} | {r['idle_bytes_s_per_engine']:.0f} | "
          f"{r['loaded_msgs_s_per_engine']:.1f} | {r['loaded_bytes_s_per_engine']:.0f} | {r['msgs_per_1k_tokens']:.1f} | "
          f"{r['bytes_per_1k_tokens']:.0f} |")
tot = lambda key: sum(r[key] for r in rows)
print(f"| all | {tot('idle_msgs_s_per_engine'):.2f} | {tot('idle_bytes_s_per_engine'):.0f} | "
      f"{tot('loaded_msgs_s_per_engine'):.1f} | {tot('loaded_bytes_s_per_engine'):.0f} | {tot('msgs_per_1k_tokens'):.1f} | "
      f"{tot('bytes_per_1k_tokens'):.0f} |")
print(f"\nnats-server (its counters, the tap's own deliveries included): idle in {server['idle_in_msgs_s']:.0f} / out "
      f"{server['idle_out_msgs_s']:.0f} msgs/s; loaded in {server['loaded_in_msgs_s']:.0f} / out "
      f"{server['loaded_out_msgs_s']:.0f} msgs/s, {server['loaded_in_bytes_s'] / 1e6:.2f} / "
      f"{server['loaded_out_bytes_s'] / 1e6:.2f} MB/s")
PY
log "raw results in $work"

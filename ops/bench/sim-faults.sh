#!/usr/bin/env bash
# Faults at scale (issue: scale measured, not assumed; item 5), one run.
#
#   ops/bench/sim-faults.sh [--engines N] [--kills K] [--requests R] [--concurrency C] [--max-tokens T]
#
# tests/chaos/chaos.py against `llmbus serve --device sim --engines N` (default 16): R streamed
# requests (greedy and seeded, in turn) without faults, then again while whole engines (every
# process of one engine at once), the nats-server, input processors, schedulers and workers are
# SIGKILLed K times each, spread over the run. Printed: requests completed and token-identical
# to the fault-free run (0 accepted requests lost means R of R), first-attempt errors, added
# latency, and per kill the recovery of the requests it interrupted (kill -> their next token).
# The log goes to OUT/sim-faults.txt. Env: BUILD_DIR (default build-release), OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
engines=16
kills=3
requests=480
concurrency=64
max_tokens=128
while [ $# -gt 0 ]; do
  case "$1" in
    --engines) engines=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "sim-faults: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-$root/build-release}
work=${OUT:-$(mktemp -d /tmp/llb-sim-faults.XXXXXX)}
mkdir -p "$work"
echo "sim-faults: $engines sim engines, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" | tee "$work/sim-faults.txt"
LLMBUS_SOURCE_DIR=$root LLMBUS_BUILD_DIR=$build LLMBUS_MODEL=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  LLMBUS_CHAOS_LOG_DIR=$work python3 "$root/tests/chaos/chaos.py" \
  --serve-args "--device sim --engines $engines" --victims engine,nats_server,input_processor,scheduler,gpu_worker \
  --kills "$kills" --requests "$requests" --concurrency "$concurrency" --max-tokens "$max_tokens" --jitter-s 0.5 \
  --keep-log 2>&1 | tee -a "$work/sim-faults.txt"
rc=${PIPESTATUS[0]}
echo "sim-faults: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; results in $work" | tee -a "$work/sim-faults.txt"
exit "$rc"

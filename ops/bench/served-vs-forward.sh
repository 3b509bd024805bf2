#!/usr/bin/env bash
# Served output tokens/s against the forward's rate at the same batch (issue 19 item 3):
# one `llmbus serve` stack (default flags: --threads = the CPUs, every one in decode steps), and
# per repeat, interleaved:
#   forward  llmbus-kernel-bench --decode 128 --batch 1,16,32 with the worker's thread counts
#            (every sequence after a 16-token prompt: decode steps only, no sampling, no bus)
#   served   llmbus-bench serve, streamed /v1/completions, C concurrent requests (C = 1, 16,
#            32), 16-token prompts, 128 output tokens each (ignore_eos): the same shape, through
#            HTTP, the api server, input processor, scheduler, worker, output processor, NATS
# and prints the medians and served / forward per batch: output tokens / duration (the first
# step's prefill of C prompts included), and the steady decode rate C / mean TPOT. The forward
# alone times decode steps only; "the forward's job" adds what served also does, the prefill:
#   job      llmbus-kernel-bench --prefill 16*C: one step of the C prompts' rows (as one
#            sequence of 16*C tokens: the same matmul rows; attention over 16*C positions where
#            the worker's step has C of 16, a few % of that step, which makes the job slower),
#            then the decode steps: C * 128 tokens / (that step + 127 decode steps at the
#            forward's rate), the first token of each sequence coming from the prefill step as
#            in served; served / job is the ratio of the same job with and without the stack.
# The client
# runs on this machine too. Then, per process of the stack and the client, the CPU (user +
# system) and wake-ups (voluntary context switches) per output token of the served runs
# (ops/bench/served_cpu.py): on a loaded machine the CPU figures hold where the rates do not.
#   ops/bench/served-vs-forward.sh [--repeats N]          (B=build-release/cmd, M=model)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-release/cmd}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
REPEATS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N]" >&2; exit 2 ;;
  esac
done
[ -x "$B/llmbus-bench" ] && [ -x "$B/llmbus-kernel-bench" ] || { echo "$B: make build-release" >&2; exit 1; }
T=$(nproc)
DT=$T # the worker's default --decode-threads
. ops/bench/serve-stack.sh
for rep in $(seq 1 "$REPEATS"); do
  "$B/llmbus-kernel-bench" --model "$M" --threads "$T" --decode-threads "$DT" --runs 3 --prefill 0 --decode 128 \
    --batch 1,16,32 | awk -v r="$rep" '/^decode b/ {sub("b", "", $2); print "forward", r, $2, $3}' >>"$tmp/rates"
  for c in 1 16 32; do # the prompts' step of the job: prefill tok/s of 16*C tokens
    "$B/llmbus-kernel-bench" --model "$M" --threads "$T" --decode-threads "$DT" --runs 3 --prefill $((16 * c)) \
      --decode 1 --batch 1 | awk -v r="$rep" -v c="$c" '/^prefill / {print "prefill", r, c, $3}' >>"$tmp/rates"
  done
  for c in 1 16 32; do
    "$PY" ops/bench/served_cpu.py --tree "$stack" -- "$B/llmbus-bench" serve --base-url "http://127.0.0.1:$http" \
      --model "$M" --num-prompts "$c" --max-concurrency "$c" --input-len 16 --output-len 128 --ignore-eos \
      --no-progress --no-memory --json \
      | "$PY" -c 'import json,sys; d = json.loads(sys.stdin.readline()); r, c = sys.argv[1], int(sys.argv[2])
print("served", r, c, d["output_throughput"]); print("steady", r, c, c * 1e3 / d["mean_tpot_ms"])
for k, v in json.loads(sys.stdin.readline())["per_token"].items():
    print("cpu:" + k, r, c, v["cpu_us"]); print("wake:" + k, r, c, v["wakeups"])' \
        "$rep" "$c" >>"$tmp/rates"
  done
done
"$PY" - "$tmp/rates" "$T" "$DT" "$REPEATS" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    kind, _, batch, v = line.split()
    rates.setdefault((kind, int(batch)), []).append(float(v))
print(f"served vs forward: {sys.argv[2]} threads ({sys.argv[3]} in steps of <= 8 tokens), medians of {sys.argv[4]}, load {open('/proc/loadavg').read().split()[0]}")
print("| batch | forward tok/s | served tok/s | served / forward | served decode tok/s (C / mean TPOT) | / forward "
      "| forward's job tok/s (prefill + decode) | served / job |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
OUT = 128  # output tokens a sequence: the prefill step samples the first, 127 decode steps the rest
for b in (1, 16, 32):
    f, s, d, p = (statistics.median(rates[(k, b)]) for k in ("forward", "served", "steady", "prefill"))
    job = b * OUT / (16 * b / p + (OUT - 1) * b / f)
    print(f"| {b} | {f:.1f} | {s:.1f} | {s / f:.2f} | {d:.1f} | {d / f:.2f} | {job:.1f} | {s / job:.2f} |")
print("forward: decode steps only; job: one prefill step of the C 16-token prompts, then 127 decode steps "
      "(C * 128 tokens over both); served: the same job through the stack")
kinds = sorted({k[0][4:] for k in rates if k[0].startswith("cpu:")},
               key=lambda k: -statistics.median(rates[("cpu:" + k, 32)]) if ("cpu:" + k, 32) in rates else 0)
print("\nper output token while served (medians): CPU microseconds / wake-ups (voluntary context switches)")
print("| process | " + " | ".join(f"batch {b}" for b in (1, 16, 32)) + " |")
print("|---|" + "---:|" * 3)
for k in kinds:
    cells = []
    for b in (1, 16, 32):
        c, w = rates.get(("cpu:" + k, b)), rates.get(("wake:" + k, b))
        cells.append(f"{statistics.median(c):.1f} / {statistics.median(w):.2f}" if c and w else "-")
    print(f"| {k} | " + " | ".join(cells) + " |")
for k in sorted(rates):
    if ":" not in k[0]:
        print(f"  {k[0]} b{k[1]} per repeat: {rates[k]}")
PY

#!/usr/bin/env bash
# Does a flood from tenant A hurt tenant B? TTFT of B alone, then while A floods, with and
# without A's per-tenant limits (actors/input_processor/tenant_limits.h).
#
#   ops/bench/tenant-flood.sh [--build DIR] [--model PATH] [--repeats N]
#
# One `llmbus serve` per configuration (tenants a and b, an API key each):
#   limited   : tenants file `a max_concurrent=$A_MAX_CONCURRENT max_queued=$A_MAX_QUEUED`, `b`
#               (and `requests_per_s=$A_REQUESTS_PER_S` when set: A's HTTP request rate)
#   unlimited : `a`, `b` (no limits): what the limits are for
# In each, `llmbus-bench serve` with b's key measures B ($B_PROMPTS requests one at a time,
# $B_INPUT-token prompts, $B_OUTPUT tokens): once alone, then while a second llmbus-bench with
# a's key floods ($A_RATE requests/s, Poisson, up to $A_CONCURRENCY in flight, $A_INPUT-token
# prompts, $A_OUTPUT tokens, ignore_eos: several times what the engine can serve; its 429s
# come straight back). Repeats interleaved; prints B's mean and median TTFT per case and the ratio
# flood / alone, and how many of A's requests were refused. CASES="limited" runs one case.
#
# PATHS="template tokenize images grammar generate" instead floods one intake path each
# (ops/bench/intake_flood.py: the costliest requests we can build for the chat template, /tokenize,
# images, grammars; `generate` is plain load) from A_THREADS (8) clients for the time B's run
# takes, tenants file `a max_concurrent=... max_queued=...` (the limited case); images get a tiny
# random mmproj (tests/tools/make_mmproj.py) so that the intake decodes and plans them (with the
# default text model, which has no image token, the request is then refused); `images-mm` sends the
# same images to a multimodal model — the default model with SmolVLM's image tokens in its
# vocabulary (tests/tools/make_vlm_text_model.py), that mmproj and a SmolVLM-style chat template
# (ops/bench/smolvlm-chat.jinja) — so every image is decoded, planned and encoded by the engine's
# encoder, and B's text requests run on that model too. Prints path,repeat,B alone,B under
# flood,ratio and the statuses A's requests got.
# The flooding client (either kind) runs under `nice -n $FLOOD_NICE` (default 19): on a 2-core
# machine the attacker's own client would otherwise take CPU that a real attacker spends on its
# own machine, not on the server's; FLOOD_NICE=0 measures it at equal priority.
# Needs a Release build (make build-release) and, for PATHS, the venv (make venv).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-release
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "tenant-flood: unknown argument $1" >&2; exit 2 ;;
  esac
done
A_MAX_CONCURRENT=${A_MAX_CONCURRENT:-4}
A_MAX_QUEUED=${A_MAX_QUEUED:-1}
A_REQUESTS_PER_S=${A_REQUESTS_PER_S:-} # e.g. 5: A's HTTP request rate, refused on the headers
FLOOD_NICE=${FLOOD_NICE:-19}
A_CONCURRENCY=${A_CONCURRENCY:-32}
A_RATE=${A_RATE:-100}
A_PROMPTS=${A_PROMPTS:-3000}
A_INPUT=${A_INPUT:-256}
A_OUTPUT=${A_OUTPUT:-128}
B_PROMPTS=${B_PROMPTS:-12}
B_INPUT=${B_INPUT:-128}
B_OUTPUT=${B_OUTPUT:-16}
port=${PORT:-18461}
bench=$build/cmd/llmbus-bench
for f in "$build/cmd/llmbus" "$bench" "$model"; do
  [ -e "$f" ] || { echo "tenant-flood: $f missing (make build-release; ops/fetch-model.sh)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/llb-tenant-flood.XXXXXX)
chmod 700 "$work"
serve_pid=""
flood_pid=""
cleanup() {
  [ -n "$flood_pid" ] && kill -TERM "$flood_pid" 2>/dev/null && wait "$flood_pid" 2>/dev/null
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
printf 'sk-flood-tenant-a-000001 a\nsk-quiet-tenant-b-000002 b\n' > "$work/keys"
chmod 600 "$work/keys"

start_serve() { # $1 = tenants file, then more serve flags
  local tenants=$1
  shift
  "$build/cmd/llmbus" serve --model "${serve_model:-$model}" --http "127.0.0.1:$port" --tenants "$tenants" \
    --api-keys "$work/keys" "$@" > "$work/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 1 600); do
    curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-quiet-tenant-b-000002' \
      "http://127.0.0.1:$port/health" 2>/dev/null | grep -q 200 && return 0
    sleep 0.1
  done
  echo "tenant-flood: serve not ready; log: $work/serve.log" >&2
  exit 1
}
stop_serve() { kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""; }

measure_b() { # $1 = result file, $2 = seed (other prompts each run: no prefix-cache hits)
  "$bench" serve --base-url "http://127.0.0.1:$port" --model "${serve_model:-$model}" --api-key sk-quiet-tenant-b-000002 \
    --num-prompts "$B_PROMPTS" --max-concurrency 1 --input-len "$B_INPUT" --output-len "$B_OUTPUT" \
    --ignore-eos --seed "$2" --no-progress --no-memory --json > "$1" 2>/dev/null
}
start_flood() { # $1 = result file
  nice -n "$FLOOD_NICE" "$bench" serve --base-url "http://127.0.0.1:$port" --model "$model" --api-key sk-flood-tenant-a-000001 \
    --num-prompts "$A_PROMPTS" --request-rate "$A_RATE" --max-concurrency "$A_CONCURRENCY" \
    --input-len "$A_INPUT" --output-len "$A_OUTPUT" \
    --ignore-eos --seed 11 --warmup 0 --no-progress --no-memory --json > "$1" 2>/dev/null &
  flood_pid=$!
  sleep 3 # the flood fills the engine before B starts
}
stop_flood() { kill -TERM "$flood_pid" 2>/dev/null; wait "$flood_pid" 2>/dev/null; flood_pid=""; }

field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2], 'nan'))" "$1" "$2"; }

printf 'default\na max_concurrent=%s max_queued=%s%s\nb\n' "$A_MAX_CONCURRENT" "$A_MAX_QUEUED" \
  "${A_REQUESTS_PER_S:+ requests_per_s=$A_REQUESTS_PER_S}" > "$work/limited"
if [ -n "${PATHS:-}" ]; then
  py=$root/.venv/bin/python
  [ -x "$py" ] || { echo "tenant-flood: PATHS needs $py (make venv)" >&2; exit 1; }
  echo "path,repeat,b_alone_mean_ttft_ms,b_alone_median_ttft_ms,b_flood_mean_ttft_ms,b_flood_median_ttft_ms,ratio_mean,a_answers,load_1m"
  for r in $(seq 1 "$repeats"); do
    for path in $PATHS; do
      extra=()
      serve_model=$model
      if [ "$path" = images ] || [ "$path" = images-mm ]; then
        [ -f "$work/mmproj.gguf" ] || "$py" "$root/tests/tools/make_mmproj.py" "$work/mmproj.gguf" --shape tiny-idefics3
        extra=(--mmproj "$work/mmproj.gguf")
      fi
      if [ "$path" = images-mm ]; then
        [ -f "$work/vlm.gguf" ] || "$py" "$root/tests/tools/make_vlm_text_model.py" "$model" "$work/vlm.gguf" > /dev/null
        serve_model=$work/vlm.gguf
        extra+=(--chat-template "$root/ops/bench/smolvlm-chat.jinja")
      fi
      start_serve "$work/limited" "${extra[@]}"
      measure_b "$work/alone.json" $((100 + 2 * r))
      nice -n "$FLOOD_NICE" "$py" "$root/ops/bench/intake_flood.py" "$path" --base-url "http://127.0.0.1:$port" \
        --api-key sk-flood-tenant-a-000001 --model "$(basename "$serve_model" .gguf)" --threads "${A_THREADS:-8}" --seconds 600 \
        > "$work/flood.txt" 2>&1 &
      flood_pid=$!
      sleep 3 # the flood fills the intake before B starts
      measure_b "$work/flood.json" $((101 + 2 * r))
      stop_flood
      stop_serve
      am=$(field "$work/alone.json" mean_ttft_ms); ad=$(field "$work/alone.json" median_ttft_ms)
      fm=$(field "$work/flood.json" mean_ttft_ms); fd=$(field "$work/flood.json" median_ttft_ms)
      ratio=$(python3 -c "print(f'{float($fm)/float($am):.2f}')")
      answers=$(sed -n 's/.*statuses=\(.*\) seconds=.*/\1/p' "$work/flood.txt" | tr -d ' "' | tr ',' ';')
      echo "$path,$r,$am,$ad,$fm,$fd,$ratio,${answers:-none},$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  exit 0
fi
printf 'default\na\nb\n' > "$work/unlimited"
echo "case,repeat,b_alone_mean_ttft_ms,b_alone_median_ttft_ms,b_flood_mean_ttft_ms,b_flood_median_ttft_ms,ratio_mean,a_refused,b_prompt_tokens_alone,b_prompt_tokens_flood,load_1m"
for r in $(seq 1 "$repeats"); do
  for case in ${CASES:-limited unlimited}; do
    start_serve "$work/$case"
    measure_b "$work/alone.json" $((100 + 2 * r))
    start_flood "$work/flood-a.json"
    measure_b "$work/flood.json" $((101 + 2 * r))
    a_refused=$(grep -c 'event=tenant_limited tenant=a ' "$work/serve.log")
    stop_flood
    stop_serve
    am=$(field "$work/alone.json" mean_ttft_ms); ad=$(field "$work/alone.json" median_ttft_ms)
    fm=$(field "$work/flood.json" mean_ttft_ms); fd=$(field "$work/flood.json" median_ttft_ms)
    ratio=$(python3 -c "print(f'{float($fm)/float($am):.2f}')")
    ai=$(field "$work/alone.json" total_input_tokens); fi=$(field "$work/flood.json" total_input_tokens)
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$case,$r,$am,$ad,$fm,$fd,$ratio,$a_refused,$ai,$fi,$load"
  done
done

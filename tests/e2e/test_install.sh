#!/usr/bin/env bash
# `cmake --install` into a temporary prefix gives a working llmbus: the installed `llmbus serve`
# (it finds the installed actor binaries beside itself) answers a completion over HTTP, and a C
# program built against the installed header and pkg-config file (the client library's
# example) streams an answer and tokenizes over NATS; schemas, units and dashboards are there.
#   test_install.sh BUILD_DIR MODEL SANITIZE(ON|OFF)      (ctest: test_install_into_prefix)
set -uo pipefail
build=${1:?build dir} model=${2:?model} sanitize=${3:-OFF}
[ -f "$model" ] || { echo "SKIP: model $model missing (ops/fetch-model.sh)"; exit 77; }
[ -x "$build/cmd/llmbus" ] || { echo "SKIP: $build/cmd/llmbus not built"; exit 77; }
prefix=$(mktemp -d /tmp/llmbus-prefix.XXXXXX)
serve_pid=
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; fi
  rm -rf "$prefix"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$prefix/serve.log" ] && tail -30 "$prefix/serve.log"; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; fail "cmake --install"; }
for f in bin/llmbus bin/llmbus-scheduler bin/llmbus-gpu-worker bin/llmbus-api-server bin/llmbus-bench \
         include/llmbus_client.h share/llmbus/schemas/generate_request.fbs share/llmbus/grafana/llmbus.json \
         share/llmbus/prometheus/prometheus.yml lib/systemd/system/llmbus-api-server.service etc/llmbus/llmbus.env; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
pc=$(find "$prefix" -name llmbus-client.pc | head -1)
[ -n "$pc" ] || fail "not installed: llmbus-client.pc"
echo "ok   installed into $prefix (binaries, client library, schemas, units, dashboards)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$prefix/bin/llmbus" serve --model "$model" --http "127.0.0.1:$port" --metrics-port 0 >"$prefix/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 720); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || fail "the installed llmbus serve exited"
  sleep 0.25
done
name=$(basename "$model" .gguf)
answer=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "'"$name"'", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}' 2>&1)
text=$(printf '%s' "$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null)
[ -n "$text" ] || fail "no completion from the installed serve: $answer"
echo "ok   the installed llmbus serve answers: \"The capital of France is$text\""

export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs llmbus-client) || fail "pkg-config llmbus-client"
libdir=$(pkg-config --variable=libdir llmbus-client)
san=()
[ "$sanitize" = ON ] && san=(-fsanitize=address,undefined)
cc -std=c11 -Wall -Werror "${san[@]}" -o "$prefix/example" "$prefix/share/doc/llmbus/examples/llmbus-client-example.c" \
  $flags -Wl,-rpath,"$libdir" 2>"$prefix/cc.log" || { cat "$prefix/cc.log"; fail "the example does not build against the installed header and .pc"; }
url=$(grep -o 'event=nats_ready url=[^ ]*' "$prefix/serve.log" | head -1 | cut -d= -f3)
dir=$(grep -o 'event=nats_auth_generated dir=[^ ]*' "$prefix/serve.log" | head -1 | cut -d= -f3)
[ -n "$url" ] && [ -n "$dir" ] || fail "serve logged no NATS url / credentials dir"
login=(--url "$url" --user tenant-default --password-file "$dir/tenant-default.password")
ids=$("$prefix/example" "${login[@]}" --tokenize "Hello world" 2>"$prefix/err.log") ||
  fail "example --tokenize: $ids $(cat "$prefix/err.log")"
[ ! -s "$prefix/err.log" ] || fail "the client library wrote to stderr: $(cat "$prefix/err.log")"
[ "$ids" = "19556 905" ] || fail "tokenize over the C client: '$ids', expected '19556 905'"
echo "ok   the C client tokenizes: $ids"
out=$("$prefix/example" "${login[@]}" --max-tokens 8 --temperature 0 "The capital of France is" 2>"$prefix/err.log") ||
  fail "example generate: $out $(cat "$prefix/err.log")"
[ "$out" = "$text" ] || fail "the C client's greedy answer '$out' differs from HTTP's '$text'"
echo "ok   the C client streams the same greedy answer: \"$out\""
mkdir -p "$prefix/home/llmbus"   # the connection file `llmbus serve` writes, as the library reads it
printf '{"nats_url": "%s", "nats_user": "tenant-default", "nats_password_file": "%s", "pid": %d}\n' \
  "$url" "$dir/tenant-default.password" "$serve_pid" >"$prefix/home/llmbus/test.json"
ids=$(XDG_RUNTIME_DIR="$prefix/home" HOME="$prefix/home" "$prefix/example" --tokenize "Hello world" 2>&1) || fail "via the connection file: $ids"
[ "$ids" = "19556 905" ] || fail "tokenize via the connection file: '$ids'"
echo "ok   the C client finds serve by its connection file: $ids"
bad=$("$prefix/example" "${login[@]}" --temperature -1 "Hi" 2>&1) && fail "temperature -1 was accepted"
case "$bad" in *INVALID_ARGUMENT*temperature*) ;; *) fail "the error does not name the field: $bad" ;; esac
echo "ok   the engine's error reaches the C client with its field: $bad"
echo "5 passed, 0 failed"

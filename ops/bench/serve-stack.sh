# Sourced by the ops/bench scripts that measure one `llmbus serve` stack: starts it on free
# ports with the model $M from $B (its log in $tmp/serve.log), stops it and removes $tmp on exit,
# waits for /health, and sets http (the HTTP port) and wport (the gpu worker's metrics port).
# Needs B, M, PY (a Python with nothing but the standard library is enough) set by the caller;
# SERVE_FLAGS (optional) are passed to `llmbus serve` (e.g. "--stream-interval 4").
tmp=$(mktemp -d)
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port)
mport=$(( ($(free_port) % 20000) + 30000 ))
# shellcheck disable=SC2086 # SERVE_FLAGS: words
"$B/llmbus" serve --model "$M" --http "127.0.0.1:$http" --metrics-port "$mport" ${SERVE_FLAGS:-} >"$tmp/serve.log" 2>&1 &
stack=$!
trap 'kill -TERM $stack 2>/dev/null; wait $stack 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 1 240); do
  curl -sf "http://127.0.0.1:$http/health" >/dev/null 2>&1 && break
  sleep 0.5
done
wport=$(grep -o 'gpu[-_]worker[^ ]*=[0-9]*' "$tmp/serve.log" | head -1 | sed 's/.*=//')
[ -n "$wport" ] || { echo "no gpu worker metrics port in the serve log" >&2; tail "$tmp/serve.log" >&2; exit 1; }

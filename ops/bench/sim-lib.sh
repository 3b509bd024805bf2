# Sourced by the sim benchmarks (sim-scale.sh, sim-routing.sh, sim-faults.sh): a nats-server of
# their own and `llmbus serve --nats URL --device sim --engines N` on it.
# The caller sets root, build, model, work (a directory) and log(); these set and use
# nats_pid, serve_pid, nats_url, mon_port, http_port.
nats_pid="" serve_pid="" http_port=""
nats_port=${NATS_PORT:-$((20000 + RANDOM % 20000))}
mon_port=$((nats_port + 1))
nats_url=nats://127.0.0.1:$nats_port

sim_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# sim_start_nats NAME: nats-server with JetStream (a fresh store) and monitoring, log in $work.
sim_start_nats() {
  rm -rf "$work/js"
  nats-server -a 127.0.0.1 -p "$nats_port" -m "$mon_port" -js -sd "$work/js" >"$work/nats-$1.log" 2>&1 &
  nats_pid=$!
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$nats_port") 2>/dev/null && return 0; sleep 0.1; done
  log "nats-server did not start (see $work/nats-$1.log)"
  return 1
}

# sim_engines_seen: how many engines `llmbus status` hears on the bus.
sim_engines_seen() {
  "$build/cmd/llmbus" status --nats "$nats_url" --json --wait-ms "${1:-1200}" 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["engines"]))' 2>/dev/null || echo 0
}

# sim_start_serve NAME N [serve flags...]: N sim engines on the bus, HTTP on $http_port; waits
# for /health and for all N engines' stats (600 x 0.5 s at most).
sim_start_serve() {
  local name=$1 n=$2
  shift 2
  http_port=$(sim_free_port)
  "$build/cmd/llmbus" serve --nats "$nats_url" --model "$model" --http "127.0.0.1:$http_port" --metrics-port 0 \
    --device sim --engines "$n" "$@" >"$work/serve-$name.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$http_port/health" >/dev/null 2>&1 && [ "$(sim_engines_seen)" -ge "$n" ]; then
      return 0
    fi
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.5
  done
  log "$name: stack not ready (see $work/serve-$name.log)"
  return 1
}

sim_stop() {
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  serve_pid=""
  [ -n "$nats_pid" ] && kill -TERM "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null
  nats_pid=""
}

# sim_bench ARGS...: llmbus-bench serve against the stack (random prompts of the model's tokenizer).
sim_bench() {
  "$build/cmd/llmbus-bench" serve --base-url "http://127.0.0.1:$http_port" --model "$model" --no-progress \
    --no-memory "$@"
}

# sim_cpu_by_kind: CPU seconds (user + system) of serve's process tree and nats-server, by
# process kind, as one JSON object (ops/bench/proc_cpu.py).
sim_cpu_by_kind() {
  python3 "$root/ops/bench/proc_cpu.py" --tree "${serve_pid:-0}" --named "nats-server=${nats_pid:-0}"
}

#!/usr/bin/env python3
"""Where a batch-1 request's first token spends its time, per actor, from the engine's traces.

    ops/bench/ttft_timeline.py [--repeats N] [--requests N] [--threads T] [--out DIR] [--autogroup-nice N]

Each repeat starts `llmbus serve --device cpu` (with --step-log), fits the sim's step-time
model to its steps (llmbus-kernel-bench --fit-steps, as sim-validate.sh --fit-served does),
then `llmbus serve --device sim --sim-cost` that fit; both export their spans (OTLP/HTTP) to an
in-process receiver. Against each stack the client sends
--requests streamed /v1/completions one at a time (a ~16-token prompt, 128 tokens,
ignore_eos), each with its own traceparent, and records when it sent the request and when the
first chunk with text arrived. Per request, every span's start and end relative to the client's
send (the first span of each name: the first step's scheduler.step, gpu_worker.execute, ...),
the client's TTFT, and for each step the time from the worker's span end (the step done, its
reply about to leave) to the scheduler's execute span end (the reply taken); printed per device
as medians over all requests (the first token's path in segments, and the reply hand-off of the
first step against the later ones), the raw rows written to OUT/timeline.json.
--autogroup-nice N: as sim-validate.sh's, everything in a session of its own whose CFS
autogroup gets nice N. Env: BUILD_DIR (default build-release).
"""
import argparse
import http.client
import http.server
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

PROMPT = "The quick brown fox jumps over the lazy dog while seven wizards quietly count"


class Receiver:
    """OTLP/HTTP JSON spans (POST /v1/traces), kept as {name, trace_id, start_ns, end_ns}."""

    def __init__(self):
        self.spans, self.errors, self.lock = [], [], threading.Lock()
        rx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    rx._add(json.loads(body))
                except (ValueError, KeyError, TypeError) as e:
                    with rx.lock:
                        rx.errors.append(str(e))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _add(self, doc):
        out = []
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    out.append({"name": s["name"], "trace_id": s["traceId"], "start_ns": int(s["startTimeUnixNano"]),
                                "end_ns": int(s["endTimeUnixNano"])})
        with self.lock:
            self.spans.extend(out)

    def trace(self, trace_id):
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stack(build, model, device, threads, otlp, extra, log_path):
    port = free_port()
    cmd = [os.path.join(build, "cmd", "llmbus"), "serve", "--model", model, "--http", f"127.0.0.1:{port}",
           "--metrics-port", "0", "--max-num-batched-tokens", "256", "--max-model-len", "2048",
           "--device", device, "--threads", str(threads), "--otlp-endpoint", otlp] + extra
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise RuntimeError(f"{device} stack not healthy: see {log_path}")


def stop_stack(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_request(port, model_id, max_tokens):
    """Sends one streamed completion; returns (trace_id, send_ns, first_text_ns, end_ns)."""
    trace_id = secrets.token_hex(16)
    body = json.dumps({"model": model_id, "prompt": PROMPT, "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    send_ns = time.time_ns()
    c.request("POST", "/v1/completions", body, headers)
    r = c.getresponse()
    first = None
    for line in r:
        if first is None and line.startswith(b"data: {") and b'"text":""' not in line:
            first = time.time_ns()
    end_ns = time.time_ns()
    c.close()
    return trace_id, send_ns, first, end_ns


def model_id_of(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


def timeline(rx, trace_id, send_ns, first_ns):
    """{span name: (start_ms, end_ms)} of the first span of each name, relative to send."""
    out = {}
    for s in sorted(rx.trace(trace_id), key=lambda s: s["start_ns"]):
        key = s["name"]
        if key in out:
            continue
        out[key] = ((s["start_ns"] - send_ns) / 1e6, (s["end_ns"] - send_ns) / 1e6)
    out["client.first_token"] = ((first_ns - send_ns) / 1e6,) * 2
    return out


def reply_gaps(rx, trace_id):
    """Per step of the request, in order: ms from the worker's execute span's end (the step done,
    its reply about to leave) to the end of the scheduler's execute span (the reply taken)."""
    spans = rx.trace(trace_id)
    worker = sorted(s["end_ns"] for s in spans if s["name"] == "gpu_worker.execute")
    sched = sorted(s["end_ns"] for s in spans if s["name"] == "scheduler.execute")
    return [(b - a) / 1e6 for a, b in zip(worker, sched)]


def run_device(a, device, rep, rx, work, extra):
    proc, port = start_stack(a.build, a.model, device, a.threads, rx.url, extra,
                             os.path.join(work, f"serve-{device}-{rep}.log"))
    rows = []
    try:
        mid = model_id_of(port)
        one_request(port, mid, 8)  # warm-up, as the first request of a stack is not batch-1 decode's
        time.sleep(0.5)
        sent = []
        for _ in range(a.requests):
            sent.append(one_request(port, mid, a.max_tokens))
            time.sleep(a.gap_s)
        time.sleep(3.0)  # the exporters flush
        for tid, send_ns, first_ns, end_ns in sent:
            rows.append({"device": device, "repeat": rep, "trace_id": tid, "ttft_ms": (first_ns - send_ns) / 1e6,
                         "e2e_ms": (end_ns - send_ns) / 1e6, "spans": timeline(rx, tid, send_ns, first_ns),
                         "reply_gaps_ms": reply_gaps(rx, tid)})
    finally:
        stop_stack(proc)
    return rows


SEGMENTS = [  # the first token's path: (label, from, to), each a (span name, 0 start / 1 end)
    ("client send -> scheduler.queue end", None, ("scheduler.queue", 1)),
    ("-> gpu_worker.execute start", ("scheduler.queue", 1), ("gpu_worker.execute", 0)),
    ("first step (gpu_worker.execute)", ("gpu_worker.execute", 0), ("gpu_worker.execute", 1)),
    ("-> scheduler has the reply", ("gpu_worker.execute", 1), ("scheduler.execute", 1)),
    ("-> output_processor.reply end", ("scheduler.execute", 1), ("output_processor.reply", 1)),
    ("-> client has the first token", ("output_processor.reply", 1), ("client.first_token", 0)),
]


def segment_ms(spans, frm, to):
    a = 0.0 if frm is None else spans[frm[0]][frm[1]]
    return spans[to[0]][to[1]] - a


def report(rows):
    for device in ("cpu", "sim"):
        rs = [r for r in rows if r["device"] == device]
        if not rs:
            continue
        print(f"\n{device}: {len(rs)} requests, median TTFT {statistics.median(r['ttft_ms'] for r in rs):.2f} ms")
        first = [r["reply_gaps_ms"][0] for r in rs if r["reply_gaps_ms"]]
        later = [g for r in rs for g in r["reply_gaps_ms"][1:]]
        if first and later:
            print(f"  worker step end -> scheduler has the reply: first step median {statistics.median(first):.3f} ms, "
                  f"later steps median {statistics.median(later):.3f} ms, p90 {sorted(later)[len(later) * 9 // 10]:.3f}")
        for label, frm, to in SEGMENTS:
            xs = [segment_ms(r["spans"], frm, to) for r in rs
                  if all(k is None or k[0] in r["spans"] for k in (frm, to))]
            if xs:
                print(f"  {label:<40} median {statistics.median(xs):8.3f} ms")
        names = {}
        for r in rs:
            for k, (s, e) in r["spans"].items():
                names.setdefault(k, []).append((s, e))
        for k, v in sorted(names.items(), key=lambda kv: statistics.median(x[0] for x in kv[1])):
            s = statistics.median(x[0] for x in v)
            e = statistics.median(x[1] for x in v)
            print(f"  {k:<32} start {s:9.3f}  end {e:9.3f}  dur {statistics.median(x[1] - x[0] for x in v):8.3f}"
                  f"  (n={len(v)})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--gap-s", type=float, default=0.3, help="idle time between requests")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--sim-cost", default=None, help="use this model instead of fitting each repeat's steps")
    ap.add_argument("--autogroup-nice", type=int, default=None)
    a = ap.parse_args()
    if a.autogroup_nice is not None:
        if not os.environ.get("LLB_TTFT_TIMELINE_SESSION"):  # a session of its own, then its nice
            os.execvpe("setsid", ["setsid", "--wait", sys.executable] + sys.argv,
                       dict(os.environ, LLB_TTFT_TIMELINE_SESSION="1"))
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(a.autogroup_nice))
    a.build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build-release"))
    work = a.out or tempfile.mkdtemp(prefix="llb-ttft-timeline.")
    os.makedirs(work, exist_ok=True)
    rows = []
    with Receiver() as rx:
        for rep in range(1, a.repeats + 1):
            steps = os.path.join(work, f"steps-{rep}.jsonl")
            rows += run_device(a, "cpu", rep, rx, work, ["--step-log", steps])
            cost = a.sim_cost
            if not cost:
                cost = os.path.join(work, f"cost-{rep}.json")
                subprocess.run([os.path.join(a.build, "cmd", "llmbus-kernel-bench"), "--fit-steps", steps, "--fit", cost],
                               stdout=open(os.path.join(work, f"fit-{rep}.txt"), "w"), stderr=subprocess.STDOUT,
                               check=True)
            rows += run_device(a, "sim", rep, rx, work, ["--sim-cost", cost])
        if rx.errors:
            print(f"invalid exports: {rx.errors[:3]}", file=sys.stderr)
    with open(os.path.join(work, "timeline.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"load average {os.getloadavg()[0]:.2f}; session autogroup nice "
          f"{'unchanged' if a.autogroup_nice is None else a.autogroup_nice}; raw rows in {work}/timeline.json")
    report(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A real Prometheus (Debian's `prometheus`) scrapes a live `llmbus serve` stack under load,
with the shipped scrape config (ops/prometheus/prometheus.yml, ports moved to free ones), and
PromQL over its HTTP API shows what an operator relies on: every actor is up, the key vLLM
series exist and move (tokens, TTFT / ITL / e2e quantiles finite, running requests, KV usage,
prefix cache, finish reasons), requests sent over NATS are counted like HTTP ones, the bus
histograms fill, and every query of the Grafana dashboard (ops/grafana/llmbus.json) answers
with data. Also: every actor log line names its engine and instance, the scheduler writes
engine_stats lines, and a NATS URL's password never reaches a log line.
Skips (77) with the reason when prometheus is not installed (ops/install-deps.sh installs it)."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse

from api_stack import Stack, dumps, free_port, free_port_run, http_get, metric, metrics, run_cases, skip

ACTORS = ["kv_manager", "gpu_worker", "scheduler", "output_processor", "input_processor", "api_server",
          "encoder_cache"]
SRC = os.environ.get("LLMBUS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def post(base, path, body, timeout=120):
    import urllib.request
    req = urllib.request.Request(base + path, data=dumps(body), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


class Prometheus:
    def __init__(self, metrics_base, tmp):
        self.bin = shutil.which("prometheus")
        with open(os.path.join(SRC, "ops", "prometheus", "prometheus.yml")) as f:
            cfg = f.read()
        for i in range(len(ACTORS)):
            assert f"127.0.0.1:{9460 + i}" in cfg, f"shipped config lacks port {9460 + i}"
            cfg = cfg.replace(f"127.0.0.1:{9460 + i}", f"127.0.0.1:{metrics_base + i}")
        cfg = cfg.replace("scrape_interval: 5s", "scrape_interval: 1s")
        self.cfg = os.path.join(tmp, "prometheus.yml")
        with open(self.cfg, "w") as f:
            f.write(cfg)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [self.bin, f"--config.file={self.cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if http_get(self.base + "/-/ready")[0] == 200:
                return
            assert self.proc.poll() is None, f"prometheus exited: see {self.log.name}"
            time.sleep(0.2)
        raise AssertionError("prometheus not ready within 60 s")

    def query(self, expr):
        status, body = http_get(self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10)
        assert status == 200, f"{expr}: HTTP {status} {body[:300]!r}"
        doc = json.loads(body)
        assert doc["status"] == "success", f"{expr}: {doc}"
        return doc["data"]["result"]

    def values(self, expr):
        return [(r["metric"], float(r["value"][1])) for r in self.query(expr)]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def load(st, stop, counts):
    """Streamed and non-streamed completions ending by length, until stop is set."""
    i = 0
    while not stop.is_set():
        stream = i % 2 == 0
        body = {"model": st.model_name, "prompt": f"Count slowly, round {i}: one, two,", "max_tokens": 12,
                "ignore_eos": True, "temperature": 0, "stream": stream}
        status, _ = post(st.base, "/v1/completions", body)
        assert status == 200
        counts["http"] += 1
        i += 1


def main():
    if not shutil.which("prometheus"):
        skip("prometheus is not installed (ops/install-deps.sh installs Debian's prometheus)")
    base = free_port_run(len(ACTORS))
    tmp = tempfile.mkdtemp(prefix="llmbus-prom-")
    with Stack(args=["--metrics-port", str(base), "--log-stats-interval-ms", "2000"]) as st:
        prom = Prometheus(base, tmp)
        stop, counts = threading.Event(), {"http": 0, "nats": 0}
        workers = [threading.Thread(target=load, args=(st, stop, counts)) for _ in range(3)]
        for w in workers:
            w.start()
        nats_args = st.nats_cli_args()
        llmbus = st.llmbus
        for _ in range(3):  # requests over NATS, not through the api server
            out = subprocess.run([llmbus, "generate"] + nats_args + ["--max-tokens", "6", "--temperature", "0",
                                  "Name a color."], capture_output=True, timeout=120)
            assert out.returncode == 0, out.stderr[-500:]
            counts["nats"] += 1
        time.sleep(12)  # load under 1 s scrapes
        stop.set()
        for w in workers:
            w.join()
        sent = counts["http"] + counts["nats"]
        time.sleep(3)  # the last requests' series scraped

        def every_actor_is_up():
            up = {m["actor"]: v for m, v in prom.values('up{job="llmbus"}')}
            assert sorted(up) == sorted(ACTORS) and all(v == 1 for v in up.values()), up

        def tokens_move():
            for name in ("generation_tokens_total", "prompt_tokens_total"):
                v = prom.values(f"sum(rate(llmbus:{name}[20s]))")
                assert v and v[0][1] > 0, (name, v)

        def latency_quantiles_are_finite():
            for name in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                         "e2e_request_latency_seconds", "request_queue_time_seconds",
                         "request_prefill_time_seconds", "request_decode_time_seconds"):
                v = prom.values(f"histogram_quantile(0.9, sum by (le) (rate(llmbus:{name}_bucket[30s])))")
                assert v and 0 <= v[0][1] < 1e4, (name, v)  # not NaN, not +Inf

        def engine_state_was_seen():
            v = prom.values("max_over_time(llmbus:num_requests_running[60s])")
            assert v and v[0][1] >= 1, v
            v = prom.values("max_over_time(llmbus:kv_cache_usage_perc[60s])")
            assert v and v[0][1] > 0, v
            assert prom.values("llmbus:num_requests_waiting"), "no waiting gauge"
            v = prom.values("llmbus:prefix_cache_queries_total")
            assert v and v[0][1] > 0, v
            v = prom.values("sum(increase(llmbus:iteration_tokens_total_count[60s]))")
            assert v and v[0][1] > 0, v

        def nats_requests_count_like_http_ones():
            engine = metric(metrics(f"http://127.0.0.1:{base + 3}"), "llmbus:request_success_total")
            front = metric(metrics(st.base), "llmbus:request_success_total")
            assert engine == sent, f"engine counted {engine}, sent {sent} ({counts})"
            assert front == counts["http"], f"api server counted {front} of {counts['http']} HTTP requests"
            v = prom.values('sum(llmbus:request_success_total{finished_reason="length"})')
            assert v and v[0][1] == sent, (v, sent)  # streamed ones too end by "length"

        def bus_histograms_fill():
            v = prom.values('sum by (subject) (llmbus:bus_request_latency_seconds_count{actor="scheduler"})')
            subjects = {m["subject"]: c for m, c in v}
            assert subjects.get("llm.engine.0.execute", 0) > 0 and subjects.get("llm.engine.0.kv", 0) > 0, subjects
            v = prom.values('llmbus:bus_receive_latency_seconds_count{actor="output_processor",subject="llm.engine.0.outputs"}')
            assert v and v[0][1] > 0, v
            v = prom.values('histogram_quantile(0.99, sum by (le) (rate(llmbus:bus_receive_latency_seconds_bucket'
                            '{subject="llm.engine.0.outputs"}[30s])))')
            assert v and v[0][1] < 60, v

        def process_metrics_per_actor():
            for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds",
                         "process_open_fds"):
                v = prom.values(f'{name}{{job="llmbus"}}')
                assert sorted(m["actor"] for m, _ in v) == sorted(ACTORS) and all(x > 0 for _, x in v), (name, v)

        def dashboard_queries_answer():
            with open(os.path.join(SRC, "ops", "grafana", "llmbus.json")) as f:
                dash = json.load(f)
            exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
            assert len(exprs) >= 15
            for e in exprs:
                res = prom.query(e.replace("$__rate_interval", "30s"))
                assert res, f"dashboard query without data: {e}"

        def logs_name_engine_and_instance():
            lines = [l for l in st.tail(100000).splitlines() if l.startswith("ts=") and " actor=supervisor " not in l]
            assert lines
            bad = [l for l in lines if " engine=0 instance=" not in l]
            assert not bad, bad[:3]
            stats = [l for l in lines if "event=engine_stats" in l and "generation_throughput_tok_s=" in l]
            assert stats, "no engine_stats line"

        failures = run_cases([
            ("every actor is up", every_actor_is_up),
            ("tokens move", tokens_move),
            ("latency quantiles are finite", latency_quantiles_are_finite),
            ("engine state was seen", engine_state_was_seen),
            ("NATS requests count like HTTP ones", nats_requests_count_like_http_ones),
            ("bus histograms fill", bus_histograms_fill),
            ("process metrics per actor", process_metrics_per_actor),
            ("dashboard queries answer", dashboard_queries_answer),
            ("logs name engine and instance", logs_name_engine_and_instance),
        ])
        prom.stop()
    failures += run_cases([("NATS credentials never logged", credentials_never_logged)])
    shutil.rmtree(tmp, ignore_errors=True)
    raise SystemExit(1 if failures else 0)


def credentials_never_logged():
    build = os.environ.get("LLMBUS_BUILD_DIR", os.path.join(SRC, "build"))
    port = free_port()  # nothing listens there
    out = subprocess.run([os.path.join(build, "cmd", "llmbus-kv-manager"), "--nats",
                          f"nats://alice:s3cr3t-pw@127.0.0.1:{port}"], capture_output=True, timeout=60)
    text = (out.stdout + out.stderr).decode(errors="replace")
    assert out.returncode == 1, text[-500:]
    assert "connect_failed" in text and f"nats://***@127.0.0.1:{port}" in text, text[-500:]
    assert "s3cr3t" not in text and "alice" not in text, text[-500:]


if __name__ == "__main__":
    main()

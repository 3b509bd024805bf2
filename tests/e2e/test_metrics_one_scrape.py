"""One scrape for the whole stack: with no per-actor metrics port (`llmbus serve --metrics-port 0`),
a vLLM-style Prometheus job — one target, the API port — sees every engine actor's series.

Debian's `prometheus` scrapes only the api server's /metrics while requests run; PromQL over its
HTTP API then finds the target up, every actor's process series told apart by `actor` (and the two
input processors by `actor_instance`), the scheduler's KV usage, the output processor's token
counter and TTFT histogram, each request counted once (the api server's own view of those series
yields to the engine's); `promtool check metrics` finds the text well-formed (one HELP / TYPE
per family, whichever actors its samples come from). Skips (77) with the reason when prometheus
is not installed (ops/install-deps.sh installs it)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

from api_stack import Stack, dumps, free_port, http_get, run_cases, skip

ENGINE_ACTORS = ["kv_manager", "gpu_worker", "scheduler", "output_processor", "input_processor", "encoder_cache"]


def post(base, path, body, timeout=120):
    import urllib.request
    req = urllib.request.Request(base + path, data=dumps(body), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def main():
    prom_bin, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom_bin or not promtool:
        skip("prometheus / promtool not installed (ops/install-deps.sh)")
    tmp = tempfile.mkdtemp(prefix="llmbus-one-scrape-")
    with Stack(args=["--metrics-port", "0"]) as st:  # no actor has a metrics port of its own
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:  # what a vLLM user already has: one job, the API port
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                    f"  - job_name: vllm\n    static_configs:\n      - targets: ['127.0.0.1:{st.port}']\n")
        port = free_port()
        prom = f"http://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        proc = subprocess.Popen([prom_bin, f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            failures = scrape_cases(st, prom, promtool, tmp)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    sys.exit(1 if failures else 0)


def scrape_cases(st, prom, promtool, tmp):
    deadline = time.monotonic() + 60
    while http_get(prom + "/-/ready")[0] != 200:
        assert time.monotonic() < deadline, "prometheus not ready within 60 s"
        time.sleep(0.2)
    for i in range(4):  # tokens, TTFT, KV use to count
        status, _ = post(st.base, "/v1/completions", {"model": st.model_name, "prompt": f"Count to {i + 3}:",
                                                      "max_tokens": 8, "temperature": 0})
        assert status == 200

    def query(expr):
        status, body = http_get(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10)
        assert status == 200, (expr, body[:300])
        return json.loads(body)["data"]["result"]

    def eventually(expr, ok, what, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while True:
            r = query(expr)
            if ok(r):
                return r
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: {expr} gave {r}")
            time.sleep(0.5)

    def the_api_port_is_one_target_that_is_up():
        eventually('up{job="vllm"}', lambda r: len(r) == 1 and r[0]["value"][1] == "1", "target up")

    def every_engine_actors_process_series_is_in_the_one_scrape():
        r = eventually("count by (actor) (process_resident_memory_bytes)",
                       lambda r: set(ENGINE_ACTORS) <= {s["metric"].get("actor", "") for s in r}, "every actor")
        per_actor = {s["metric"].get("actor", ""): int(s["value"][1]) for s in r}
        assert per_actor["input_processor"] == 2, per_actor  # told apart by actor_instance
        assert "" in per_actor, "the api server's own series, unlabelled"

    def engine_series_of_vllms_names_move():
        eventually('llmbus:kv_cache_usage_perc{actor="scheduler"}', lambda r: len(r) >= 1, "KV usage")
        eventually('sum(llmbus:generation_tokens_total{actor="output_processor"})',
                   lambda r: r and float(r[0]["value"][1]) >= 4 * 8 - 4, "generation tokens")
        eventually('sum(llmbus:time_to_first_token_seconds_count{actor="output_processor"})',
                   lambda r: r and float(r[0]["value"][1]) >= 4, "TTFT histogram")

    def a_sum_over_the_scrape_counts_each_request_once():
        # the api server's own view of the same series (its HTTP requests) yields to the engine's:
        # a vLLM dashboard's sum(...) does not count a request twice
        eventually("sum(llmbus:request_success_total)", lambda r: r and float(r[0]["value"][1]) == 4,
                   "four requests, counted once")
        r = query("count by (actor) (llmbus:time_to_first_token_seconds_count)")
        assert [s["metric"].get("actor") for s in r] == ["output_processor"], r

    def promtool_finds_the_merged_text_well_formed():
        status, body = http_get(st.base + "/metrics")
        assert status == 200
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
        problems = [l for l in (r.stdout + r.stderr).decode().splitlines()
                    if "error" in l.lower() or "duplicate" in l.lower() or "parse" in l.lower()]
        assert not problems, problems[:10]  # naming lint (':' in names, as vLLM's) is not a problem
        text = body.decode()
        families = [l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")]
        assert len(families) == len(set(families)), "a family's TYPE line twice"

    return run_cases([
        ("the_api_port_is_one_target_that_is_up", the_api_port_is_one_target_that_is_up),
        ("every_engine_actors_process_series_is_in_the_one_scrape", every_engine_actors_process_series_is_in_the_one_scrape),
        ("engine_series_of_vllms_names_move", engine_series_of_vllms_names_move),
        ("a_sum_over_the_scrape_counts_each_request_once", a_sum_over_the_scrape_counts_each_request_once),
        ("promtool_finds_the_merged_text_well_formed", promtool_finds_the_merged_text_well_formed),
    ])


if __name__ == "__main__":
    main()

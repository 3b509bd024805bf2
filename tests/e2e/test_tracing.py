"""One trace per request across every actor, exported as OTLP/HTTP JSON to a real receiver.

Starts `llmbus serve --otlp-endpoint <receiver>` and checks, for a request over HTTP (with a
client `traceparent`), one over NATS with a traceparent (`llmbus generate --nats`) and one
over NATS without any header (nats-py: the input processor starts the trace):
  - every export parses as an opentelemetry-proto ExportTraceServiceRequest (otlp_receiver);
  - the request is one trace id across api_server (HTTP only), input_processor, scheduler,
    gpu_worker and output_processor, with the expected spans;
  - nesting: every parent id is in the trace (only the root's remote parent is not), and each
    child lies inside its parent's time range;
  - durations add up: the root span is within 10% of the client's end-to-end time, and the
    request span's children (queue, steps, detokenize) cover its duration within 10%;
  - the client's traceparent is continued (same trace id) and the response carries it.
"""
import asyncio
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_stack import Stack, dumps, run_cases  # noqa: E402
from otlp_receiver import Receiver  # noqa: E402

ENGINE_ACTORS = {"input_processor", "scheduler", "gpu_worker", "output_processor"}


def wait_for(receiver, trace_id, pred, timeout_s=15.0):
    """The trace's spans once `pred` holds and no span came for 0.6 s (each actor exports every
    200 ms, at its own time): the trace is then complete."""
    deadline = time.monotonic() + timeout_s
    spans, seen, since = [], -1, time.monotonic()
    while time.monotonic() < deadline:
        spans = receiver.trace(trace_id)
        if len(spans) != seen:
            seen, since = len(spans), time.monotonic()
        elif pred(spans) and time.monotonic() - since >= 0.6:
            break
        time.sleep(0.1)
    return spans


def check_tree(spans, remote_parent):
    """Nesting: parents present (the root's may be remote), children inside parents."""
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans), "duplicate span ids"
    roots = [s for s in spans if s["parent_span_id"] not in by_id]
    assert len(roots) == 1, f"{len(roots)} spans without their parent: {[(r['name'], r['service']) for r in roots]}"
    root = roots[0]
    assert root["parent_span_id"] == remote_parent, f"root's parent {root['parent_span_id']!r}, want {remote_parent!r}"
    for s in spans:
        assert s["end_ns"] >= s["start_ns"] > 0, f"{s['name']}: bad times"
        p = by_id.get(s["parent_span_id"])
        if p is None:
            continue
        assert p["start_ns"] <= s["start_ns"] and s["end_ns"] <= p["end_ns"], (
            f"{s['service']}/{s['name']} [{s['start_ns']}, {s['end_ns']}] outside its parent "
            f"{p['service']}/{p['name']} [{p['start_ns']}, {p['end_ns']}]")
    return root, by_id


def covered_ns(intervals):
    """(ns covered by the union of [a, b) intervals, the largest hole between them in ns)."""
    total, end, hole = 0, None, 0
    for a, b in sorted(intervals):
        if end is None or a > end:
            hole = max(hole, a - end) if end is not None else 0
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total, hole


def check_request_span(spans, by_id):
    """The engine's spans under llm_request: expected names, step attributes, coverage."""
    reqs = [s for s in spans if s["name"] == "llm_request"]
    assert len(reqs) == 1, f"{len(reqs)} llm_request spans"
    r = reqs[0]
    names = {s["name"] for s in spans}
    for want in ("input_processor.process", "scheduler.queue", "scheduler.step", "scheduler.execute",
                 "gpu_worker.execute", "output_processor.detokenize", "output_processor.reply"):
        assert want in names, f"no {want} span (have {sorted(names)})"
    services = {s["service"] for s in spans}
    assert ENGINE_ACTORS <= services, f"services {services}"
    steps = [s for s in spans if s["name"] == "scheduler.step"]
    for s in steps:
        a = s["attributes"]
        assert a.get("llmbus.step", 0) > 0 and a.get("llmbus.batch_size", 0) >= 1, a
        assert a.get("llmbus.phase") in ("prefill", "decode"), a
        assert by_id[s["parent_span_id"]] is r
    assert any(s["attributes"]["llmbus.phase"] == "prefill" for s in steps)
    assert any(s["attributes"]["llmbus.phase"] == "decode" for s in steps)
    workers = [s for s in spans if s["name"] == "gpu_worker.execute"]
    assert all(by_id[w["parent_span_id"]]["name"] == "scheduler.step" for w in workers)
    assert len(workers) == len(steps), f"{len(workers)} worker spans for {len(steps)} steps"
    kids = [(s["start_ns"], s["end_ns"]) for s in spans if s["parent_span_id"] == r["span_id"]]
    dur = r["end_ns"] - r["start_ns"]
    cov, hole = covered_ns(kids)
    gaps = sorted((b["start_ns"] - a["end_ns"], a["name"], b["name"]) for a, b in zip(
        sorted((s for s in spans if s["parent_span_id"] == r["span_id"]), key=lambda s: s["end_ns"]),
        sorted((s for s in spans if s["parent_span_id"] == r["span_id"]), key=lambda s: s["start_ns"])[1:]))[-3:]
    assert cov >= 0.9 * dur, (f"children cover {cov / 1e6:.1f} of llm_request's {dur / 1e6:.1f} ms "
                              f"(largest hole {hole / 1e6:.1f} ms; {gaps})")
    return r, len(steps)


def build_generate_request(prompt):
    import flatbuffers
    from llmbus import GenerateRequest as GR, SamplingParams as SP
    b = flatbuffers.Builder(256)
    SP.SamplingParamsStart(b)
    SP.SamplingParamsAddTemperature(b, 0.0)
    SP.SamplingParamsAddMaxTokens(b, 6)
    sp = SP.SamplingParamsEnd(b)
    rid, text = b.CreateString("trace-py"), b.CreateString(prompt)
    GR.GenerateRequestStart(b)
    GR.GenerateRequestAddVersion(b, 1)
    GR.GenerateRequestAddRequestId(b, rid)
    GR.GenerateRequestAddPrompt(b, text)
    GR.GenerateRequestAddSamplingParams(b, sp)
    b.FinishSizePrefixed(GR.GenerateRequestEnd(b), file_identifier=b"LGRQ")
    return bytes(b.Output())


async def nats_request_without_headers(url, data, timeout_s=60, user=None, password=None):
    """Publishes `data` on llm.generate.default with a reply inbox and no headers; returns the
    traceparent headers of the replies, until one arrives that ends the request (the last
    reply: the engine's llm_request span is recorded after it)."""
    import nats
    from llmbus.RequestOutput import RequestOutput
    nc = await nats.connect(url, user=user, password=password)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("llm.generate.default", data, reply=inbox)
        headers = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = await sub.next_msg(timeout=deadline - time.monotonic())
            headers.append((msg.headers or {}).get("traceparent", ""))
            if RequestOutput.GetRootAs(msg.data, 4).Finished():
                return headers
        raise AssertionError("no final RequestOutput")
    finally:
        await nc.close()


def main():
    with Receiver() as rx, Stack(args=["--otlp-endpoint", rx.url]) as stack:
        def http_request_is_one_trace():
            trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
            body = {"model": stack.model_name, "prompt": "The capital of France is", "max_tokens": 12,
                    "temperature": 0}
            # a first request warms every actor up (threads, pages), so the measured one is typical
            with urllib.request.urlopen(urllib.request.Request(
                    stack.base + "/v1/completions", data=dumps(body), method="POST",
                    headers={"Content-Type": "application/json"}), timeout=120) as r:
                r.read()
            req = urllib.request.Request(stack.base + "/v1/completions", data=dumps(body), method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "traceparent": f"00-{trace_id}-{client_span}-01"})
            t0 = time.monotonic_ns()
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
                back = r.headers.get("traceparent", "")
            e2e_ns = time.monotonic_ns() - t0
            assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", back), f"response traceparent {back!r}"
            assert back.split("-")[1] == trace_id, f"response carries {back}, not trace {trace_id}"
            spans = wait_for(rx, trace_id, lambda ss: {"http", "llm_request"} <= {s["name"] for s in ss})
            root, by_id = check_tree(spans, client_span)
            assert root["name"] == "http" and root["service"] == "api_server", root
            assert back.split("-")[2] == root["span_id"]
            r, num_steps = check_request_span(spans, by_id)
            assert by_id[r["parent_span_id"]] is root
            http_ns = root["end_ns"] - root["start_ns"]
            assert abs(http_ns - e2e_ns) <= 0.1 * e2e_ns, f"http span {http_ns / 1e6:.1f} ms, client {e2e_ns / 1e6:.1f} ms"
            assert r["end_ns"] - r["start_ns"] >= 0.9 * http_ns
            print(f"     http trace {trace_id}: {len(spans)} spans, {num_steps} steps, client {e2e_ns / 1e6:.1f} ms,"
                  f" http {http_ns / 1e6:.1f} ms, llm_request {(r['end_ns'] - r['start_ns']) / 1e6:.1f} ms")

        def nats_request_is_one_trace():
            nats_args = stack.nats_cli_args()
            with rx.lock:
                before = {s["trace_id"] for s in rx.spans}
            t0 = time.monotonic_ns()
            out = subprocess.run([stack.llmbus, "generate"] + nats_args + ["--temperature", "0",
                                  "--max-tokens", "8", "Hello"], capture_output=True, timeout=120)
            e2e_ns = time.monotonic_ns() - t0
            assert out.returncode == 0, out.stderr.decode()[-500:]
            deadline = time.monotonic() + 15
            new = set()
            while time.monotonic() < deadline:
                with rx.lock:
                    new = {s["trace_id"] for s in rx.spans if s["name"] == "llm_request"} - before
                if new:
                    break
                time.sleep(0.1)
            assert len(new) == 1, f"{len(new)} new request traces"
            trace_id = new.pop()
            spans = wait_for(rx, trace_id, lambda ss: ENGINE_ACTORS <= {s["service"] for s in ss})
            assert "api_server" not in {s["service"] for s in spans}
            r = next(s for s in spans if s["name"] == "llm_request")
            root, by_id = check_tree(spans, r["parent_span_id"])  # the CLI's span is the remote parent
            assert root is r and len(r["parent_span_id"]) == 16
            check_request_span(spans, by_id)
            assert r["end_ns"] - r["start_ns"] <= 1.1 * e2e_ns

        def nats_request_without_traceparent_starts_a_trace():
            sys.path.insert(0, os.path.join(os.path.dirname(stack.llmbus), "..", "schemas", "python"))
            url, user, pw_file = stack.nats_login()
            with open(pw_file) as f:
                password = f.read().strip()
            headers = asyncio.run(nats_request_without_headers(url, build_generate_request("Hello there"),
                                                               user=user, password=password))
            ids = {h.split("-")[1] for h in headers if h}
            assert len(ids) == 1 and len(headers) == len([h for h in headers if h]), f"reply traceparents {headers}"
            trace_id = ids.pop()
            spans = wait_for(rx, trace_id, lambda ss: "llm_request" in {s["name"] for s in ss}
                             and ENGINE_ACTORS <= {s["service"] for s in ss})
            root, by_id = check_tree(spans, "")
            assert root["name"] == "llm_request" and root["service"] == "output_processor", root
            check_request_span(spans, by_id)
            replies = {h.split("-")[2] for h in headers}
            assert all(by_id.get(r, {}).get("name") == "output_processor.reply" for r in replies), replies

        def every_export_was_valid():
            assert rx.exports > 0, "nothing exported"
            assert not rx.errors, f"invalid exports: {rx.errors[:3]}"

        failures = run_cases([
            ("http request: one trace across every actor, nested, adds up", http_request_is_one_trace),
            ("nats request: one trace across the engine's actors", nats_request_is_one_trace),
            ("nats request without traceparent: its own trace, replies carry it",
             nats_request_without_traceparent_starts_a_trace),
            ("every export is a valid ExportTraceServiceRequest", every_export_was_valid),
        ])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

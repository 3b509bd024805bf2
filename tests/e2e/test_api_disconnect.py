"""A client that disconnects mid-stream aborts its request: the engine stops running it and
its KV blocks are freed (engine gauges of /metrics: the api server's copy from SchedulerStats,
and the scheduler's own series merged into the API port's /metrics)."""
import json
import socket
import sys
import time

from api_stack import Stack, metric, metrics


def wait_for(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        ok, last = pred()
        if ok:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: still {last} after {timeout_s} s")


def engine_state(base):
    v = metrics(base)
    return (metric(v, "llmbus:num_requests_running_engine"), metric(v, "llmbus:kv_cache_usage_perc"),
            metric(v, "llmbus:num_requests_running"))


def main():
    with Stack() as st:
        # Engine gauges arrive with the first SchedulerStats (every second).
        wait_for(lambda: (engine_state(st.base)[1] is not None, engine_state(st.base)), 10, "engine stats")
        body = json.dumps({"model": st.model_name, "prompt": "Count from one to one thousand: one, two,",
                           "max_tokens": 3000, "ignore_eos": True, "temperature": 0, "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", st.port), timeout=120)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 5:
            chunk = s.recv(65536)
            assert chunk, f"stream ended early: {got[:500]!r}"
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        running, usage, here = wait_for(  # the scheduler's series come every heartbeat (2 s)
            lambda: ((lambda e: (e[0] == 1 and e[1] > 0 and e[2] == 1, e))(engine_state(st.base))), 10,
            "engine running the streamed request")
        print(f"streaming: engine running={running} kv_cache_usage={usage} scheduler running={here}")
        s.close()  # the client goes away mid-stream
        t0 = time.monotonic()
        running, usage, here = wait_for(
            lambda: ((lambda e: (e[0] == 0 and e[1] == 0 and e[2] == 0, e))(engine_state(st.base))), 15,
            "request aborted and blocks freed")
        print(f"ok   disconnect freed the request in {time.monotonic() - t0:.1f} s: "
              f"engine running={running} kv_cache_usage={usage} scheduler running={here}")

        # Non-streaming: nothing is written before the end, the server must notice anyway.
        body = json.dumps({"model": st.model_name, "prompt": "Count: one, two,", "max_tokens": 3000,
                           "ignore_eos": True, "temperature": 0}).encode()
        s = socket.create_connection(("127.0.0.1", st.port), timeout=120)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_for(lambda: ((lambda e: (e[0] == 1 and e[1] > 0, e))(engine_state(st.base))), 10,
                 "engine running the non-streamed request")
        s.close()
        t0 = time.monotonic()
        wait_for(lambda: ((lambda e: (e[0] == 0 and e[1] == 0 and e[2] == 0, e))(engine_state(st.base))), 15,
                 "non-streamed request aborted and blocks freed")
        print(f"ok   non-streaming disconnect freed the request in {time.monotonic() - t0:.1f} s")
    sys.exit(0)


if __name__ == "__main__":
    main()

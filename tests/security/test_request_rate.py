"""A tenant's HTTP request rate (the tenants file's requests_per_s / burst_requests, checked by
the api server on a request's headers before its body is read): `llmbus serve --tenants` with
tenant `flood requests_per_s=0.01 burst_requests=2` (two requests, then one per 100 s) beside
tenants a and b without a rate, an API key each.

- flood's first two requests pass; the third is a 429 with Retry-After and OpenAI's
  rate_limit_exceeded code;
- the 429 comes from the headers: a request announcing a 900 KB body that never comes is
  answered at once (without the gate the server would wait for the body);
- a and b, at any pace meanwhile, are never refused;
- tenant `busy max_concurrent=1`: while its one generation streams, its next is answered 429
  (max_concurrent, Retry-After: 1) from the headers (a 900 KB body announced and never sent),
  the answer held by the api server (api_server_gate.h) while b's request is served meanwhile; once the
  stream ends, busy's next request passes;
- busy's request of a costly body (>= 64 KiB, a prompt over the context) refused by the engine as
  its error: the 400 is held like a 429 (a flooder of such bodies gets one a hold per
  max_concurrent, not as many as the server can parse and refuse), while b is served meanwhile;
  so is one the api server refuses itself (malformed JSON at the end of 120 KB).

usage: test_request_rate.py --pydir DIR   (LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR from ctest)
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import api_stack  # noqa: E402
from test_security import KEY_A, KEY_B, SecureStack, http  # noqa: E402

KEY_FLOOD = "sk-tenant-flood-7777777777777"
KEY_BUSY = "sk-tenant-busy-88888888888888"


class RateStack(SecureStack):
    def __init__(self, work):
        super().__init__(work)
        with open(os.path.join(work, "tenants"), "w") as f:  # replaces SecureStack's
            f.write("default\na\nb\nflood requests_per_s=0.01 burst_requests=2\nbusy max_concurrent=1\n")
        with open(os.path.join(work, "api-keys"), "w") as f:  # the same 0600 file, two keys more
            f.write(f"{KEY_A} a\n{KEY_B} b\n{KEY_FLOOD} flood\n{KEY_BUSY} busy\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pydir", required=True, help="flatc's Python output (unused: the stack's own helpers)")
    ap.parse_args()
    model = os.environ.get("LLMBUS_MODEL") or os.path.join(os.environ.get("LLMBUS_SOURCE_DIR", "."),
                                                           "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        api_stack.skip(f"model {model} missing (run ops/fetch-model.sh)")
    with tempfile.TemporaryDirectory(prefix="llmbus-request-rate-") as work:
        with RateStack(work) as stack:
            body = json.dumps({"model": stack.model_name, "prompt": "Hi", "max_tokens": 2,
                               "temperature": 0}).encode()

            def over_its_rate_a_tenant_gets_429_with_retry_after():
                for i in range(2):
                    status, _, out = http("GET", stack.base + "/v1/models", key=KEY_FLOOD)
                    assert status == 200, (i, status, out[:200])
                status, headers, out = http("POST", stack.base + "/v1/completions", body, key=KEY_FLOOD)
                assert status == 429, (status, out[:200])
                assert int(headers.get("Retry-After", "0")) >= 1, headers
                err = json.loads(out)["error"]
                assert err["code"] == "rate_limit_exceeded" and "requests_per_s" in err["message"], err

            def the_429_comes_before_the_body_is_read():
                u = urllib.parse.urlparse(stack.base)
                with socket.create_connection((u.hostname, u.port), timeout=10) as s:
                    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                               f"Authorization: Bearer {KEY_FLOOD}\r\nContent-Type: application/json\r\n"
                               "Content-Length: 900000\r\n\r\n").encode())
                    head = s.recv(4096)  # within the timeout: the body was never sent
                assert head.startswith(b"HTTP/1.1 429"), head[:200]

            def other_tenants_are_never_refused():
                for key in (KEY_A, KEY_B) * 4:
                    status, _, out = http("GET", stack.base + "/v1/models", key=key)
                    assert status == 200, (status, out[:200])
                status, _, out = http("POST", stack.base + "/v1/completions", body, key=KEY_B)
                assert status == 200, (status, out[:200])

            def at_its_max_concurrent_a_tenant_is_refused_on_headers_and_held_while_another_is_served():
                import http.client as http_client
                import threading
                u = urllib.parse.urlparse(stack.base)
                conn = http_client.HTTPConnection(u.hostname, u.port, timeout=120)
                long_body = json.dumps({"model": stack.model_name, "prompt": "Hi", "max_tokens": 300,
                                        "temperature": 0, "ignore_eos": True, "stream": True}).encode()
                conn.request("POST", "/v1/completions", long_body, {"Content-Type": "application/json",
                                                                   "Authorization": f"Bearer {KEY_BUSY}"})
                resp = conn.getresponse()
                assert resp.status == 200, resp.status
                assert resp.readline().startswith(b"data:")  # in flight
                got = {}

                def refused():
                    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
                        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                   f"Authorization: Bearer {KEY_BUSY}\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 900000\r\n\r\n").encode())
                        got["head"] = s.recv(4096)  # the body was never sent: only the headers answer
                t = threading.Thread(target=refused)
                t.start()
                status, _, out = http("POST", stack.base + "/v1/completions", body, key=KEY_B)
                assert status == 200, (status, out[:200])
                t.join(60)
                head = got.get("head", b"")
                assert head.startswith(b"HTTP/1.1 429"), head[:300]
                assert b"max_concurrent" in head and b"Retry-After: 1" in head, head[:400]
                rest = resp.read()
                conn.close()
                assert rest.rstrip().endswith(b"data: [DONE]"), rest[-200:]
                # the input processor learns that the stream ended a moment after the client has
                # its [DONE] (test_security.py's `limited`): until then its slot is still taken
                for _ in range(30):
                    status, _, out = http("POST", stack.base + "/v1/completions", body, key=KEY_BUSY)
                    if status != 429:
                        break
                assert status == 200, (status, out[:200])

            def a_costly_body_refused_as_the_clients_error_is_held_while_another_is_served():
                import threading
                import time
                big = json.dumps({"model": stack.model_name, "prompt": "hello " * 20000, "max_tokens": 2,
                                  "temperature": 0}).encode()
                assert len(big) >= 64 * 1024
                got = {}

                def costly():
                    t0 = time.monotonic()
                    got["status"], _, got["out"] = http("POST", stack.base + "/v1/completions", big, key=KEY_BUSY)
                    got["s"] = time.monotonic() - t0
                t = threading.Thread(target=costly)
                t.start()
                status, _, out = http("POST", stack.base + "/v1/completions", body, key=KEY_B)
                assert status == 200, (status, out[:200])
                t.join(60)
                assert got.get("status") == 400, (got.get("status"), got.get("out", b"")[:200])
                assert b"context" in got["out"] or b"max_model_len" in got["out"], got["out"][:300]
                # held (API_SERVER_GATE_HOLD_MS = 1 s): a lower bound, which load cannot break
                assert got["s"] >= 0.9, got["s"]
                # a costly body the api server refuses itself (not JSON at its end): held the same way
                t0 = time.monotonic()
                status, _, out = http("POST", stack.base + "/v1/completions", big[:-1] + b",", key=KEY_BUSY)
                assert status == 400, (status, out[:200])
                assert time.monotonic() - t0 >= 0.9

            failures = api_stack.run_cases([
                ("over_its_rate_a_tenant_gets_429_with_retry_after", over_its_rate_a_tenant_gets_429_with_retry_after),
                ("the_429_comes_before_the_body_is_read", the_429_comes_before_the_body_is_read),
                ("other_tenants_are_never_refused", other_tenants_are_never_refused),
                ("at_its_max_concurrent_a_tenant_is_refused_on_headers_and_held_while_another_is_served",
                 at_its_max_concurrent_a_tenant_is_refused_on_headers_and_held_while_another_is_served),
                ("a_costly_body_refused_as_the_clients_error_is_held_while_another_is_served",
                 a_costly_body_refused_as_the_clients_error_is_held_while_another_is_served),
            ])
            if failures:
                print(f"--- serve log (tail) ---\n{stack.tail(60)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

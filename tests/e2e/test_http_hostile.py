"""Malformed and hostile HTTP requests against `llmbus serve`: each gets the right 4xx (in
OpenAI's error object where the api server answers itself), and the server keeps serving."""
import json
import socket
import sys
import threading
import time

from api_stack import Stack, http_get, skip

TIMEOUT_S = 10  # llmbus-api-server --request-timeout-s default


def raw(port, data, read_timeout=30.0, pause_after=None):
    """Sends `data` (bytes, or a list of bytes sent with `pause_after` seconds between) and
    returns (status, headers+body text); status 0 when the server closed without answering."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        parts = data if isinstance(data, list) else [data]
        for i, p in enumerate(parts):
            try:
                s.sendall(p)
            except (BrokenPipeError, ConnectionResetError):
                break
            if pause_after and i + 1 < len(parts):
                time.sleep(pause_after)
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            buf += chunk
            if b"\r\n\r\n" in buf:
                head, _, body = buf.partition(b"\r\n\r\n")
                cl = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
                if cl and len(body) >= int(cl[0].split(b":")[1]):
                    break
        text = buf.decode(errors="replace")
        status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/1.") else 0
        return status, text
    finally:
        s.close()


def post(path, body, extra_headers=b""):
    if isinstance(body, str):
        body = body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            extra_headers + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def main():
    with Stack() as st:
        m = st.model_name
        ok = json.dumps({"model": m, "prompt": "Hello", "max_tokens": 2, "temperature": 0})

        def c(**fields):
            body = {"model": m, "prompt": "Hello", "max_tokens": 2}
            body.update(fields)
            return post("/v1/completions", json.dumps(body))

        def chat(messages, **fields):
            body = {"model": m, "messages": messages, "max_tokens": 2}
            body.update(fields)
            return post("/v1/chat/completions", json.dumps(body))

        big = 2 * 1024 * 1024
        # (name, request bytes, expected status, field the error must name or None, json error?)
        cases = [
            ("malformed JSON", post("/v1/completions", '{"model": "' + m + '", "prompt": '), 400, None, True),
            ("body is an array", post("/v1/completions", "[1, 2]"), 400, None, True),
            ("empty body", post("/v1/completions", ""), 400, None, True),
            ("duplicate keys", post("/v1/completions", '{"model":"%s","model":"%s","prompt":"x"}' % (m, m)),
             400, None, True),
            ("temperature is a string", c(temperature="hot"), 400, "temperature", True),
            ("negative max_tokens", c(max_tokens=-5), 400, "max_tokens", True),
            ("fractional max_tokens", c(max_tokens=2.5), 400, "max_tokens", True),
            ("negative n", c(n=-1), 400, "n", True),
            ("negative top_k below -1", c(top_k=-7), 400, "top_k", True),
            ("logprobs too many", c(logprobs=50), 400, "logprobs", True),
            ("unknown field", c(frobnicate=True), 400, "frobnicate", True),
            ("unknown model", c(model="gpt-9"), 404, "model", True),
            ("negative token id", c(prompt=[1, -2, 3]), 400, "prompt[1]", True),
            ("token id beyond the vocabulary", c(prompt=[1, 2 ** 30]), 400, None, True),
            ("NUL inside the prompt", c(prompt="a\u0000b"), 400, None, True),
            ("101 stop strings", c(stop=["x%d" % i for i in range(101)]), 400, "stop", True),
            ("stream_options without stream", c(stream_options={"include_usage": True}), 400, "stream_options",
             True),
            ("max_tokens beyond the context", c(max_tokens=10 ** 7), 400, None, True),
            ("chat role unknown", chat([{"role": "wizard", "content": "x"}]), 400, "messages[0].role", True),
            ("chat messages not a list", chat("hi"), 400, "messages", True),
            ("chat image part without image_url", chat([{"role": "user", "content": [{"type": "image_url"}]}]), 400,
             "messages[0].content[0].image_url", True),
            # absent fields once crashed the server (SIGSEGV), cutting every other stream
            ("chat message without role", chat([{"content": "x"}]), 400, "messages[0].role", True),
            ("chat empty message", chat([{}]), 400, "messages[0].role", True),
            ("chat part without type", chat([{"role": "user", "content": [{"text": "x"}]}]), 400,
             "messages[0].content[0].type", True),
            ("chat part without text", chat([{"role": "user", "content": [{"type": "text"}]}]), 400,
             "messages[0].content[0].text", True),
            ("deeply nested JSON", post("/v1/completions", "[" * 100000 + "]" * 100000), 400, None, True),
            ("invalid UTF-8", post("/v1/completions", b'{"model":"' + m.encode() + b'","prompt":"\xff\xfe"}'), 400,
             None, True),
            ("body over the limit", post("/v1/completions", '{"prompt":"' + "a" * big + '"}'), 413, None, True),
            ("body far over the limit", post("/v1/completions", "a" * (8 * 1024 * 1024)), 413, None, False),
            ("declared 10 GB body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n",
             413, None, False),
            ("GET on a POST route", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, None, True),
            ("unknown route", b"GET /v2/everything HTTP/1.1\r\nHost: x\r\n\r\n", 404, None, True),
            ("garbage request line", b"HELLO\r\n\r\n", 400, None, False),
        ]
        failures = 0
        for name, req, want, field, is_json in cases:
            try:
                status, text = raw(st.port, req)
                assert status == want, f"status {status}, want {want}: {text[:300]!r}"
                if is_json:
                    body = json.loads(text.partition("\r\n\r\n")[2])
                    err = body["error"]
                    assert err["message"], body
                    if field:
                        assert err["param"] == field, f"param {err['param']!r}, want {field!r}"
                print(f"ok   {name}: {status}")
            except Exception as e:  # noqa: BLE001 - report every case
                failures += 1
                print(f"FAIL {name}: {e}")

        # Slow loris: headers that never finish, and a body that stalls; the connection is
        # dropped after the inactivity limit while other clients are served meanwhile.
        def slow(name, parts):
            nonlocal failures
            t0 = time.monotonic()
            s = socket.create_connection(("127.0.0.1", st.port), timeout=TIMEOUT_S * 4)
            try:
                s.sendall(parts)
                served, _ = http_get(st.base + "/v1/models")
                assert served == 200, f"/v1/models answered {served} during the slow client"
                data = s.recv(4096)
                waited = time.monotonic() - t0
                text = data.decode(errors="replace")
                status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/1.") else 0
                assert status in (0, 400, 408), f"answered {status}: {text[:200]!r}"
                assert waited < TIMEOUT_S * 3, f"held for {waited:.1f} s"
                print(f"ok   {name}: closed after {waited:.1f} s (status {status or 'none'})")
            except Exception as e:  # noqa: BLE001
                failures += 1
                print(f"FAIL {name}: {e}")
            finally:
                s.close()

        slow("slow-loris headers", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow("stalled body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo")

        # Trickle: a byte every 2 s keeps evhttp's inactivity timeout from firing, so only a
        # whole-request deadline closes these (before it, they stayed open as long as the
        # client kept trickling). Both run at once; each gives up after 3 x the timeout.
        results = {}

        def trickle(name, head, every_s=2.0):
            t0 = time.monotonic()
            s = socket.create_connection(("127.0.0.1", st.port), timeout=every_s)
            try:
                s.sendall(head)
                while time.monotonic() - t0 < TIMEOUT_S * 3:
                    try:
                        if s.recv(4096) == b"":
                            break  # closed by the server (any answer would come before EOF)
                    except socket.timeout:
                        pass
                    except ConnectionResetError:
                        break
                    try:
                        s.sendall(b"a")
                    except (BrokenPipeError, ConnectionResetError):
                        break
                results[name] = time.monotonic() - t0
            finally:
                s.close()

        trickles = (
            ("trickled headers", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "),
            ("trickled body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"),
            # a kept-alive connection: one request answered, then the next one trickled
            ("trickled second request", b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                                        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "),
        )
        threads = [threading.Thread(target=trickle, args=a) for a in trickles]
        for t in threads:
            t.start()
        served, _ = http_get(st.base + "/v1/models")
        for t in threads:
            t.join()
        for name, _ in trickles:
            waited = results.get(name, TIMEOUT_S * 3)
            if served == 200 and TIMEOUT_S * 0.8 <= waited < TIMEOUT_S + 5:
                print(f"ok   {name}: closed after {waited:.1f} s")
            else:
                failures += 1
                print(f"FAIL {name}: closed after {waited:.1f} s (want about {TIMEOUT_S} s); /v1/models {served}")

        status, _ = http_get(st.base + "/health")
        status2, text = raw(st.port, post("/v1/completions", ok))
        if status != 200 or status2 != 200:
            failures += 1
            print(f"FAIL server still serving: /health {status}, completion {status2}: {text[:300]!r}")
        else:
            print("ok   server still serving after the hostile table")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if sys.version_info < (3, 8):
        skip("python >= 3.8 needed")
    main()

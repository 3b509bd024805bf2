"""A small OTLP/HTTP JSON trace receiver for the tests (POST /v1/traces).

Every export is validated against opentelemetry-proto: the JSON is parsed with
google.protobuf.json_format into ExportTraceServiceRequest (unknown fields, wrong types or
malformed values fail), after checking that traceId / spanId / parentSpanId are the hex
strings the OTLP JSON encoding requires (32 / 16 lowercase hex digits; protobuf's own JSON
mapping would take base64). An invalid export is answered 400 and recorded in `errors`.
Accepted spans are kept as dicts: service, name, trace_id, span_id, parent_span_id (hex or
""), start_ns, end_ns (ints), attributes {key: value}.
"""
import base64
import http.server
import json
import re
import threading

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _validate(doc):
    """Converts the hex ids to protobuf JSON's base64 (checking them) and parses the export;
    returns the ExportTraceServiceRequest or raises ValueError."""
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                for key, rx in (("traceId", HEX32), ("spanId", HEX16), ("parentSpanId", HEX16)):
                    if key not in s:
                        if key != "parentSpanId":
                            raise ValueError(f"span without {key}")
                        continue
                    if not isinstance(s[key], str) or not rx.match(s[key]):
                        raise ValueError(f"{key} {s[key]!r} is not lowercase hex of the right length")
                    if set(s[key]) == {"0"}:
                        raise ValueError(f"{key} is all zero")
                    s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    msg = ExportTraceServiceRequest()
    json_format.ParseDict(doc, msg)  # raises ParseError on anything outside the schema
    return msg


def _attr_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    def __init__(self, validate=True):
        self.validate = validate  # False: count the bytes only (a cheap sink for benchmarks)
        self.bytes = 0
        self.spans = []
        self.errors = []
        self.exports = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as collectors do

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    if self.path != "/v1/traces":
                        raise ValueError(f"path {self.path}")
                    if not self.headers.get("Content-Type", "").startswith("application/json"):
                        raise ValueError(f"Content-Type {self.headers.get('Content-Type')}")
                    if receiver.validate:
                        receiver._add(_validate(json.loads(body)))
                    else:
                        with receiver.lock:
                            receiver.exports += 1
                            receiver.bytes += len(body)
                    code, out = 200, b"{}"
                except Exception as e:  # noqa: BLE001 - every invalid export is a test failure
                    with receiver.lock:
                        receiver.errors.append(f"{type(e).__name__}: {e}")
                    code, out = 400, json.dumps({"error": str(e)}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _add(self, msg):
        out = []
        for rs in msg.resource_spans:
            res = {a.key: _attr_value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append({
                        "service": res.get("service.name"),
                        "instance": res.get("service.instance.id"),
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "error": s.status.code == 2,
                        "attributes": {a.key: _attr_value(a.value) for a in s.attributes},
                    })
        with self.lock:
            self.exports += 1
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


def main():
    """Standalone: `python tests/e2e/otlp_receiver.py [--port 4318] [--quiet]` receives exports
    until SIGINT / SIGTERM, printing one line per span (trace id, service, name, duration,
    parent) unless --quiet, then a summary line (exports, spans, invalid exports)."""
    import argparse
    import signal
    import sys
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--port", type=int, default=4318)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--no-validate", action="store_true", help="only count exports (a cheap sink)")
    a = ap.parse_args()
    rx = Receiver(validate=not a.no_validate)
    rx.server.server_close()
    rx.server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), rx.server.RequestHandlerClass)
    rx.thread = threading.Thread(target=rx.server.serve_forever, daemon=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    printed = 0
    with rx:
        print(f"listening on http://127.0.0.1:{a.port}/v1/traces", flush=True)
        while not done.wait(0.2):
            with rx.lock:
                new, printed = rx.spans[printed:], len(rx.spans)
            for s in [] if a.quiet else new:
                print(f"{s['trace_id']} {s['service']:<16} {s['name']:<28} "
                      f"{(s['end_ns'] - s['start_ns']) / 1e6:9.3f} ms  span {s['span_id']} parent "
                      f"{s['parent_span_id'] or '-'}", flush=True)
    print(f"exports={rx.exports} spans={len(rx.spans)} bytes={rx.bytes} invalid_exports={len(rx.errors)}",
          flush=True)
    for e in rx.errors[:5]:
        print(f"invalid: {e}", file=sys.stderr)
    return 1 if rx.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Counts every message on a NATS server for a while, by kind (nats-py; ops/bench/sim-bus-rates.sh).

    bus_tap.py --nats URL --seconds S [--prefix llm]

Subscribes `>` (everything of the account: run it against a server without accounts, e.g.
`llmbus serve --no-nats-auth` or the benchmarks' own nats-server) and prints one JSON object:
{"seconds": S, "kinds": {kind: {"msgs": n, "bytes": b}}}. A kind is the subject with its
variable tokens replaced: engine.*.<kind> (engine.*.health.<actor> for an engine's heartbeats),
health.<actor>, generate, abort, tokenize, trace.<actor>, $JS.API.<op>, $JS.ACK; replies (on
_INBOX.… and _R_.…) by the FlatBuffers file identifier of their payload ("reply LMRO" =
ModelRunnerOutput, "reply LRQO" = RequestOutput, ...). Bytes are payload plus headers. The tap
is one more subscriber: the server sends everything once more, which its own counters show.
"""
import argparse
import asyncio
import json
import sys
import time


def ident(data):
    """The 4-character FlatBuffers file identifier of a (size-prefixed or plain) buffer, or '?'."""
    for off in (8, 4):
        tag = data[off:off + 4]
        if len(tag) == 4 and all(0x41 <= c <= 0x5A for c in tag):
            return tag.decode()
    return "?"


def kind(subject, prefix, data):
    if subject.startswith("_INBOX.") or subject.startswith("_R_."):
        return "reply " + ident(data)
    if subject.startswith("$JS.ACK."):
        return "$JS.ACK"
    if subject.startswith("$JS.API."):
        return ".".join(subject.split(".")[:4])
    if not subject.startswith(prefix + "."):
        return "other"
    t = subject[len(prefix) + 1:].split(".")
    if t[0] == "engine" and len(t) >= 3:
        return "engine.*." + ".".join(t[2:])
    if t[0] in ("health", "trace") and len(t) >= 2:
        return t[0] + "." + t[1]
    return t[0]


async def tap(url, seconds, prefix):
    import nats
    nc = await nats.connect(url, name="llmbus-bus-tap", max_reconnect_attempts=0,
                            pending_size=64 * 1024 * 1024)
    counts = {}

    async def on_msg(m):
        k = kind(m.subject, prefix, m.data)
        c = counts.setdefault(k, [0, 0])
        c[0] += 1
        c[1] += len(m.data) + sum(len(h) + len(v) + 4 for h, v in (m.headers or {}).items())
    await nc.subscribe(">", cb=on_msg, pending_msgs_limit=1_000_000, pending_bytes_limit=512 * 1024 * 1024)
    await nc.flush()
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - t0
    await nc.drain()
    return {"seconds": elapsed, "kinds": {k: {"msgs": v[0], "bytes": v[1]} for k, v in sorted(counts.items())}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nats", required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--prefix", default="llm")
    a = ap.parse_args()
    json.dump(asyncio.run(tap(a.nats, a.seconds, a.prefix)), sys.stdout)
    print()


if __name__ == "__main__":
    main()

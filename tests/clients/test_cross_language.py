"""Cross-language check of the wire contract: a Python client (flatc's Python output +
nats-py) sends a GenerateRequest to the C responder (bus/ + schemas/ C API), which decodes
it and streams RequestOutput messages back; Python decodes them and checks that every field
it sent came back as the responder's rules say (see cross_responder.c). Also: the W3C
traceparent travels through (same trace id, new span id), and a buffer that is not a
GenerateRequest gets an error reply naming the problem.

usage: test_cross_language.py --responder PATH --pydir DIR [--nats-server PATH]
Exit codes: 0 pass, 1 fail, 77 skipped (a prerequisite is missing; the reason is printed).
"""
import argparse
import asyncio
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
TIMEOUT_S = 30.0  # generous: a loaded 2-core machine


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(SKIP)


def start_nats(binary, workdir):
    proc = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", workdir],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "nats.log"), "wb"))
    deadline = time.monotonic() + TIMEOUT_S
    ports_file = os.path.join(workdir, f"nats-server_{proc.pid}.ports")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited early ({proc.returncode})")
        try:
            with open(ports_file) as f:
                m = re.search(r"nats://127\.0\.0\.1:(\d+)", f.read())
            if m:
                return proc, f"nats://127.0.0.1:{m.group(1)}"
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    proc.kill()
    raise RuntimeError("nats-server did not write its ports file")


def build_generate_request(prompt_text):
    import flatbuffers
    from llmbus import GenerateRequest as GR, SamplingParams as SP
    b = flatbuffers.Builder(256)
    stop0 = b.CreateString("END")
    SP.SamplingParamsStartStopVector(b, 1)
    b.PrependUOffsetTRelative(stop0)
    stops = b.EndVector()
    SP.SamplingParamsStart(b)
    SP.SamplingParamsAddTemperature(b, 0.25)
    SP.SamplingParamsAddMaxTokens(b, 3)
    SP.SamplingParamsAddStop(b, stops)
    sp = SP.SamplingParamsEnd(b)
    rid = b.CreateString("py-1")
    prompt = b.CreateString(prompt_text)
    ids = [5, 10, 15]
    GR.GenerateRequestStartPromptTokenIdsVector(b, len(ids))
    for t in reversed(ids):
        b.PrependInt32(t)
    ids_vec = b.EndVector()
    GR.GenerateRequestStart(b)
    GR.GenerateRequestAddVersion(b, 1)
    GR.GenerateRequestAddRequestId(b, rid)
    GR.GenerateRequestAddPrompt(b, prompt)
    GR.GenerateRequestAddPromptTokenIds(b, ids_vec)
    GR.GenerateRequestAddSamplingParams(b, sp)
    root = GR.GenerateRequestEnd(b)
    b.FinishSizePrefixed(root, file_identifier=b"LGRQ")
    return bytes(b.Output())


def parse_traceparent(value):
    m = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})", value or "")
    return (m.group(1), m.group(2)) if m else None


async def run(url):
    import nats
    from llmbus import RequestOutput as RO, FinishReason
    nc = await nats.connect(url, connect_timeout=5)
    try:
        health = await nc.subscribe("llm.health.cross-responder.0")
        await health.next_msg(timeout=TIMEOUT_S)  # the responder is up

        prompt = "héllo wörld ✓"
        payload = build_generate_request(prompt)
        trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("llm.generate.default", payload, reply=inbox,
                         headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
        outs = []
        while True:
            msg = await sub.next_msg(timeout=TIMEOUT_S)
            tp = parse_traceparent((msg.headers or {}).get("traceparent"))
            assert tp is not None, f"reply without a valid traceparent: {msg.headers}"
            assert tp[0] == trace_id, f"trace id changed: {tp[0]} != {trace_id}"
            assert tp[1] != span_id, "reply reused the client's span id"
            buf = msg.data
            assert buf[8:12] == b"LRQO", f"identifier {buf[8:12]!r}"
            ro = RO.RequestOutput.GetRootAs(buf, 4)
            outs.append(ro)
            if ro.Finished():
                break
        assert len(outs) == 3, f"{len(outs)} replies, expected max_tokens = 3"
        for i, ro in enumerate(outs):
            assert ro.Version() == 1
            assert ro.RequestId().decode() == "py-1"
            assert ro.Prompt().decode("utf-8") == prompt
            assert [ro.PromptTokenIds(j) for j in range(ro.PromptTokenIdsLength())] == [5, 10, 15]
            assert ro.OutputsLength() == 1
            co = ro.Outputs(0)
            assert co.Text().decode("utf-8") == "ECHO:" + prompt
            assert [co.TokenIds(j) for j in range(co.TokenIdsLength())] == [6, 11, 16][: i + 1]
            assert abs(co.CumulativeLogprob() + 0.25) < 1e-6, co.CumulativeLogprob()
            assert co.StopReason().decode() == "END"
            last = i == len(outs) - 1
            assert ro.Finished() == last
            want = FinishReason.FinishReason.Length if last else FinishReason.FinishReason.None_
            assert co.FinishReason() == want, (co.FinishReason(), want)
            assert ro.Metrics().NumPromptTokens() == 3
            assert ro.Metrics().NumGenerationTokens() == i + 1
            assert ro.Error() is None
        print(f"ok: {len(outs)} RequestOutput replies decoded, trace {trace_id} kept")

        # A buffer that is not a GenerateRequest: an error reply, not silence.
        await nc.publish("llm.generate.default", b"this is not a flatbuffer", reply=inbox)
        msg = await sub.next_msg(timeout=TIMEOUT_S)
        ro = RO.RequestOutput.GetRootAs(msg.data, 4)
        assert ro.Finished()
        err = ro.Error()
        assert err is not None and err.Code() != 0, "no error in the reply"
        text = err.Message().decode()
        assert text, "empty error message"
        print(f"ok: malformed request answered with error code {err.Code()}: {text}")
    finally:
        await nc.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--responder", required=True)
    ap.add_argument("--pydir", required=True)
    ap.add_argument("--nats-server", default=shutil.which("nats-server") or "/usr/sbin/nats-server")
    a = ap.parse_args()
    try:
        import flatbuffers  # noqa: F401
        import nats  # noqa: F401
    except ImportError as e:
        skip(f"python module missing ({e}); run `make venv`")
    if not os.path.isfile(os.path.join(a.pydir, "llmbus", "GenerateRequest.py")):
        skip(f"generated Python schemas not found in {a.pydir} (build target llmbus_schemas_py)")
    if not os.access(a.nats_server, os.X_OK):
        skip("no nats-server binary")
    sys.path.insert(0, a.pydir)

    work = tempfile.mkdtemp(prefix="llmbus-clients-")
    server = responder = None
    try:
        server, url = start_nats(a.nats_server, work)
        responder = subprocess.Popen([a.responder, "--nats", url])
        asyncio.run(run(url))
        responder.send_signal(signal.SIGTERM)
        rc = responder.wait(timeout=TIMEOUT_S)
        assert rc == 0, f"responder exited {rc} after SIGTERM"
        responder = None
        print("ok: responder drained and exited 0")
        return 0
    finally:
        if responder is not None:
            responder.kill()
            responder.wait()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Attacks on `llmbus serve` in its locked-down mode, each of which must now fail to do harm.

One stack: `llmbus serve --tenants` (tenants default, a, b) with `--api-keys` (a key for a, one
for b) and the real model. Over NATS (nats-py) and HTTP, as a hostile client would:
- a client without credentials, or with a wrong password, cannot connect;
- tenant a cannot subscribe to everything, to b's subjects, to the engine's subjects or to
  reply subjects other than its own; it cannot publish on b's generate/abort/tokenize
  subjects nor on any engine subject (forged EngineCoreRequest, SchedulerOutput, KV reset);
  the server answers each with a permissions violation, and no actor ever sees the bytes
  (no `*_malformed` line in the stack's log);
- an engine actor's user cannot step outside its row of the subject table (the output
  processor cannot publish to `.execute`, the kv_manager cannot read it) and the front door's
  users cannot publish on engine subjects;
- HTTP without a key, or with a wrong one, is 401 in OpenAI's shape on every route
  (/metrics and /health included); with a's key a completion answers;
- meanwhile tenant b's stream runs to the end, token for token what it is alone.

usage: test_security.py --pydir DIR   (LLMBUS_BUILD_DIR, LLMBUS_SOURCE_DIR from ctest)
"""
import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import api_stack  # noqa: E402  (tests/e2e/api_stack.py: serve on a free port, skip rules)

KEY_A = "sk-tenant-a-0123456789abcdef"
KEY_B = "sk-tenant-b-fedcba9876543210"
KEY_LIMITED = "sk-tenant-limited-5555555555"
LIMITS = "limited max_concurrent=1 tokens_per_s=1 burst_tokens=200"
TIMEOUT_S = 60
PROMPT = "Name three primary colors."


def http(method, url, body=None, key=None, timeout=60.0):
    """(status, headers, body bytes) of one HTTP call."""
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class SecureStack(api_stack.Stack):
    """api_stack.Stack with tenants and API keys; /health needs a key, the log names the
    NATS URL and the per-run credentials directory."""

    def __init__(self, work):
        tenants = os.path.join(work, "tenants")
        with open(tenants, "w") as f:
            f.write(f"# tenants of the security test\ndefault\na\nb\n{LIMITS}\n")
        keys = os.path.join(work, "api-keys")
        fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{KEY_A} a\n{KEY_B} b\n{KEY_LIMITED} limited\n")
        # one input processor: limits are counted per replica (a tenant gets R x its limits
        # through R replicas), and this test checks the limit itself
        super().__init__(args=["--tenants", tenants, "--api-keys", keys, "--input-processors", "1"])

    def __enter__(self):
        if self.external:
            api_stack.skip("needs its own stack (LLMBUS_API_BASE is set)")
        import subprocess
        self.proc = subprocess.Popen(
            [self.llmbus, "serve", "--model", self.model, "--http", f"127.0.0.1:{self.port}"] + self.args,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"llmbus serve exited with {self.proc.returncode}")
            try:
                status, _, _ = http("GET", self.base + "/health", key=KEY_A, timeout=2)
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.25)
        else:
            self.fail(f"/health not 200 within {self.ready_timeout_s} s")
        text = self.log_text()
        m = re.search(r"event=nats_ready url=(nats://127\.0\.0\.1:\d+)", text)
        d = re.search(r"event=nats_auth_generated dir=(\S+)", text)
        if not m or not d:
            self.fail("no nats_ready / nats_auth_generated line in the serve log")
        self.nats_url, self.auth_dir = m.group(1), d.group(1)
        return self

    def log_text(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def password(self, user):
        with open(os.path.join(self.auth_dir, f"{user}.password")) as f:
            return f.read().strip()


def generate_request(rid, temperature=0.0, prompt=PROMPT):
    import flatbuffers
    from llmbus import GenerateRequest as GR, OutputKind, SamplingParams as SP
    b = flatbuffers.Builder(256)
    SP.SamplingParamsStart(b)
    SP.SamplingParamsAddTemperature(b, temperature)
    SP.SamplingParamsAddMaxTokens(b, 24)
    SP.SamplingParamsAddIgnoreEos(b, True)
    SP.SamplingParamsAddOutputKind(b, OutputKind.OutputKind.Delta)
    sp = SP.SamplingParamsEnd(b)
    rid_s = b.CreateString(rid)
    prompt = b.CreateString(prompt)
    GR.GenerateRequestStart(b)
    GR.GenerateRequestAddVersion(b, 1)
    GR.GenerateRequestAddRequestId(b, rid_s)
    GR.GenerateRequestAddPrompt(b, prompt)
    GR.GenerateRequestAddSamplingParams(b, sp)
    root = GR.GenerateRequestEnd(b)
    b.FinishSizePrefixed(root, file_identifier=b"LGRQ")
    return bytes(b.Output())


class Client:
    """One nats-py connection that records the server's asynchronous errors (permissions
    violations arrive that way)."""

    def __init__(self):
        self.errors = []
        self.nc = None

    async def connect(self, url, user=None, password=None):
        import nats

        async def on_error(e):
            self.errors.append(str(e))

        kw = {"user": user, "password": password} if user else {}
        self.nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False, connect_timeout=5,
                                     max_reconnect_attempts=0, **kw)
        return self

    def violations(self):
        return [e for e in self.errors if "permissions violation" in e.lower()]

    async def close(self):
        if self.nc and not self.nc.is_closed:
            await self.nc.close()


async def generate(nc, subject, rid):
    """Token ids and text of one greedy request on `subject`, to the end (finished)."""
    from llmbus import RequestOutput as RO
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, generate_request(rid), reply=inbox)
    ids, text = [], ""
    while True:
        msg = await sub.next_msg(timeout=TIMEOUT_S)
        ro = RO.RequestOutput.GetRootAs(msg.data, 4)
        assert ro.Error() is None, f"engine error: {ro.Error().Message()}"
        co = ro.Outputs(0)
        ids += [co.TokenIds(j) for j in range(co.TokenIdsLength())]
        text += (co.Text() or b"").decode()
        if ro.Finished():
            break
    await sub.unsubscribe()
    return ids, text


def abort_request(rid):
    import flatbuffers
    from llmbus import AbortRequest as AR
    b = flatbuffers.Builder(64)
    rid_s = b.CreateString(rid)
    AR.AbortRequestStart(b)
    AR.AbortRequestAddVersion(b, 1)
    AR.AbortRequestAddRequestId(b, rid_s)
    root = AR.AbortRequestEnd(b)
    b.FinishSizePrefixed(root, file_identifier=b"LABR")
    return bytes(b.Output())


async def generate_leaking_id(nc, subject, rid, on_id):
    """generate(), but awaits on_id(<the engine's request id>) at the first output (an id a
    client of that tenant sees and another tenant could learn)."""
    from llmbus import RequestOutput as RO
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, generate_request(rid), reply=inbox)
    ids, first = [], True
    while True:
        msg = await sub.next_msg(timeout=TIMEOUT_S)
        ro = RO.RequestOutput.GetRootAs(msg.data, 4)
        assert ro.Error() is None, f"engine error: {ro.Error().Message()}"
        if first:
            first = False
            await on_id(ro.RequestId().decode())
        co = ro.Outputs(0)
        ids += [co.TokenIds(j) for j in range(co.TokenIdsLength())]
        if ro.Finished():
            assert co.FinishReason() != 3, "the request was aborted"  # FinishReason.Abort
            break
    await sub.unsubscribe()
    return ids


async def expect_no_connect(url, **kw):
    try:
        c = await Client().connect(url, **kw)
    except Exception as e:  # noqa: BLE001 - any refusal will do; report what it was
        return str(e) or type(e).__name__
    await c.close()
    raise AssertionError(f"connected with {kw or 'no credentials'}")


async def attacks(stack, results):
    url = stack.nats_url

    async def case(name, fn):
        t0 = time.monotonic()
        try:
            await fn()
            print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            results.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    b = await Client().connect(url, "tenant-b", stack.password("tenant-b"))
    alone_ids, alone_text = await generate(b.nc, "llm.generate.b", "b-alone")
    assert alone_ids, "tenant b got no tokens"
    victim = asyncio.ensure_future(generate(b.nc, "llm.generate.b", "b-victim"))

    async def no_credentials():
        why = await expect_no_connect(url)
        print(f"     refused: {why}")

    async def wrong_password():
        await expect_no_connect(url, user="scheduler", password="not-the-password")
        await expect_no_connect(url, user="tenant-a", password=stack.password("tenant-b"))

    a = await Client().connect(url, "tenant-a", stack.password("tenant-a"))

    async def tenant_cannot_listen():
        seen = []

        async def record(m):
            seen.append(m.subject)

        for subject in (">", "llm.>", "llm.generate.b", "llm.engine.*.outputs", "llm.engine.0.execute", "_R_.>",
                        "llm.health.>"):
            await a.nc.subscribe(subject, cb=record)
        await a.nc.flush()
        await generate(b.nc, "llm.generate.b", "b-observed")
        await asyncio.sleep(0.3)
        assert not seen, f"tenant a received {seen[:5]}"
        assert len(a.violations()) >= 7, f"expected 7 subscription violations, got {a.errors}"

    async def tenant_cannot_publish_elsewhere():
        before = len(a.violations())
        forged = b"\x00" * 64
        for subject in ("llm.generate.b", "llm.abort.b", "llm.tokenize.b", "llm.engine.0.requests",
                        "llm.engine.0.abort", "llm.engine.0.execute", "llm.engine.0.kv", "llm.engine.0.outputs",
                        "llm.health.gpu_worker.x"):
            await a.nc.publish(subject, forged, reply=a.nc.new_inbox())
        await a.nc.flush()
        await asyncio.sleep(0.3)
        got = len(a.violations()) - before
        assert got >= 9, f"{got} publish violations for 9 forged messages: {a.errors[-9:]}"
        # and its own tenant still works
        ids, _ = await generate(a.nc, "llm.generate.a", "a-own")
        assert ids == alone_ids, "tenant a's own request differs from b's identical one"

    async def tenant_cannot_abort_another_tenants_request():
        leaked = []

        async def abort_it(rid):
            leaked.append(rid)
            for _ in range(3):  # on a's own abort subject, which a may use
                await a.nc.publish("llm.abort.a", abort_request(rid))
            await a.nc.flush()

        ids = await generate_leaking_id(b.nc, "llm.generate.b", "b-abort-target", abort_it)
        assert ids == alone_ids, "b's request changed after a's abort"
        refused = [ln for ln in stack.log_text().splitlines() if "abort_refused" in ln and leaked[0] in ln]
        assert refused, f"no abort_refused line for {leaked[0]}"

    async def tenant_cannot_take_over_another_tenants_request():
        # a resend names the request it replaces (Llmbus-Resume-Of) and takes over its outputs:
        # a names b's request, learned somehow; the input processor refuses (not a's id) and b's
        # request runs on untouched
        leaked = []

        async def take_it(rid):
            leaked.append(rid)
            await a.nc.publish("llm.generate.a", generate_request("a-thief"), reply=a.nc.new_inbox(),
                               headers={"Llmbus-Resume-Of": rid})
            await a.nc.flush()

        ids = await generate_leaking_id(b.nc, "llm.generate.b", "b-takeover-target", take_it)
        assert ids == alone_ids, "b's request changed after a's resend naming it"
        refused = [ln for ln in stack.log_text().splitlines() if "resume_refused" in ln and leaked[0] in ln]
        assert refused, f"no resume_refused line for {leaked[0]}"
        taken = [ln for ln in stack.log_text().splitlines() if "request_taken_over" in ln and leaked[0] in ln]
        assert not taken, f"b's request was taken over: {taken}"

    async def tenant_takes_over_its_own_request():
        # the other side of the above: b's own resend of its running request takes it over
        # (the scheduler checks both ids' tags under the deployment's key) and the resend's
        # reply carries the whole answer from position 0
        from llmbus import RequestOutput as RO
        first_inbox, resend_inbox = b.nc.new_inbox(), b.nc.new_inbox()
        first = await b.nc.subscribe(first_inbox)
        resend = await b.nc.subscribe(resend_inbox)
        await b.nc.publish("llm.generate.b", generate_request("b-own-resend"), reply=first_inbox)
        msg = await first.next_msg(timeout=TIMEOUT_S)
        rid = RO.RequestOutput.GetRootAs(msg.data, 4).RequestId().decode()
        await b.nc.publish("llm.generate.b", generate_request("b-own-resend"), reply=resend_inbox,
                           headers={"Llmbus-Resume-Of": rid})
        ids = []
        while True:
            ro = RO.RequestOutput.GetRootAs((await resend.next_msg(timeout=TIMEOUT_S)).data, 4)
            assert ro.Error() is None, f"engine error: {ro.Error().Message()}"
            co = ro.Outputs(0)
            ids += [co.TokenIds(j) for j in range(co.TokenIdsLength())]
            if ro.Finished():
                break
        await first.unsubscribe()
        await resend.unsubscribe()
        assert ids == alone_ids, "the resend's answer differs from the request alone"
        taken = [ln for ln in stack.log_text().splitlines() if "request_taken_over" in ln and rid in ln]
        assert taken, f"b's resend of its own {rid} did not take it over"

    async def actors_stay_in_their_row():
        out = await Client().connect(url, "output-processor", stack.password("output-processor"))
        kv = await Client().connect(url, "kv-manager", stack.password("kv-manager"))
        api = await Client().connect(url, "api-server", stack.password("api-server"))
        try:
            await out.nc.publish("llm.engine.0.execute", b"forged SchedulerOutput")
            await out.nc.publish("llm.engine.0.kv", b"forged KVStep reset")
            await kv.nc.subscribe("llm.engine.0.execute")
            await kv.nc.subscribe("llm.engine.0.requests")
            await api.nc.publish("llm.engine.0.requests", b"forged EngineCoreRequest")
            for c in (out, kv, api):
                await c.nc.flush()
            await asyncio.sleep(0.3)
            assert len(out.violations()) >= 2, out.errors
            assert len(kv.violations()) >= 2, kv.errors
            assert len(api.violations()) >= 1, api.errors
        finally:
            for c in (out, kv, api):
                await c.close()

    async def victim_untouched():
        ids, text = await victim
        assert ids == alone_ids, f"b's stream changed under attack: {text!r} vs {alone_text!r}"
        bad = [ln for ln in stack.log_text().splitlines() if "_malformed" in ln]
        assert not bad, f"forged bytes reached an actor: {bad[:3]}"

    async def secrets_never_shown():
        secrets = [stack.password(u) for u in ("scheduler", "gpu-worker", "api-server", "tenant-a", "tenant-b")]
        log = stack.log_text()
        assert not [s for s in secrets if s in log], "a NATS password is in the serve log"
        shown = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            shown += [pid for s in secrets if s in cmd]
        assert not shown, f"a NATS password is on the command line of pids {shown}"
        mode = os.stat(stack.auth_dir).st_mode & 0o777
        assert mode == 0o700, f"credentials directory mode {mode:o}"
        for name in os.listdir(stack.auth_dir):
            m = os.stat(os.path.join(stack.auth_dir, name)).st_mode & 0o777
            assert m == 0o600, f"{name} mode {m:o}"

    async def nats_conf_holds_bcrypt_hashes_only():
        with open(os.path.join(stack.auth_dir, "nats.conf")) as f:
            conf = f.read()
        pw = re.findall(r'password: "([^"]*)"', conf)
        assert pw and all(p.startswith("$2b$06$") for p in pw), f"passwords not bcrypt hashes: {pw[:2]}"
        users = [n[: -len(".password")] for n in os.listdir(stack.auth_dir) if n.endswith(".password")]
        leaked = [u for u in users if stack.password(u) in conf]
        assert not leaked, f"plain passwords in nats.conf: {leaked}"
        assert conf.count("jetstream: disabled") >= 3, "tenant accounts with JetStream"

    async def tenant_connections_are_limited_others_go_on():
        extra, refused = [], None
        for i in range(80):  # the account allows 64 (serve_nats_config.h): a's own is one of them
            try:
                extra.append(await Client().connect(url, "tenant-a", stack.password("tenant-a")))
            except Exception as e:  # noqa: BLE001
                refused = str(e)
                break
        n = len(extra)
        for c in extra:
            await c.close()
        assert refused is not None and "connections" in refused.lower(), f"{n} connections, none refused"
        assert n <= 63, f"{n} more connections accepted"
        ids, _ = await generate(b.nc, "llm.generate.b", "b-after-connections")
        assert ids == alone_ids

    async def tenant_subscriptions_are_limited_others_go_on():
        c = await Client().connect(url, "tenant-a", stack.password("tenant-a"))
        try:
            for i in range(300):  # the account allows 256
                await c.nc.subscribe(f"_INBOX.sub{i}")
            await c.nc.flush(timeout=5)
        except Exception:  # noqa: BLE001 - the server closes the connection
            pass
        await asyncio.sleep(0.3)
        said = c.errors + [str(c.nc.last_error)]
        assert any("subscriptions" in e.lower() for e in said), f"no subscription limit: {said[-3:]}"
        await c.close()
        ids, _ = await generate(b.nc, "llm.generate.b", "b-after-subscriptions")
        assert ids == alone_ids

    async def tenant_payload_over_the_limit_is_refused_by_the_server():
        # nats-py refuses too large a message itself: speak the protocol to the server directly
        host, port = url[len("nats://"):].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        info = json.loads((await reader.readline())[5:])
        assert info["max_payload"] <= 1 << 20, info["max_payload"]
        connect = {"user": "tenant-a", "pass": stack.password("tenant-a"), "verbose": False, "pedantic": False}
        big = 1 << 20
        writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        writer.write(b"PUB llm.generate.a %d\r\n" % (big + 1) + b"x" * (big + 1) + b"\r\n")
        await writer.drain()
        got = b""
        try:
            while b"-ERR" not in got:
                chunk = await asyncio.wait_for(reader.read(4096), TIMEOUT_S)
                if not chunk:
                    break
                got += chunk
        finally:
            writer.close()
        assert b"Maximum Payload" in got, got[:200]

    async def tenant_flood_is_queued_per_tenant_and_others_complete():
        # a floods its generate subject as fast as it can (requests refused at once: a bad
        # temperature), while b's request runs: b's stream is the same as alone
        from llmbus import RequestOutput as RO
        codes = {}

        async def count(m):
            ro = RO.RequestOutput.GetRootAs(m.data, 4)
            code = ro.Error().Code() if ro.Error() else 0
            codes[code] = codes.get(code, 0) + 1

        inbox = a.nc.new_inbox()
        await a.nc.subscribe(inbox + ".*", cb=count)
        bad = generate_request("a-flood", temperature=-1.0)
        victim_b = asyncio.ensure_future(generate(b.nc, "llm.generate.b", "b-under-flood"))
        for i in range(3000):
            await a.nc.publish("llm.generate.a", bad, reply=f"{inbox}.{i}")
        await a.nc.flush(timeout=30)
        ids, _ = await victim_b
        assert ids == alone_ids, "b's stream changed under a's flood"
        deadline = time.monotonic() + TIMEOUT_S
        while sum(codes.values()) < 3000 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert sum(codes.values()) == 3000, f"a got {sum(codes.values())} answers of 3000: {codes}"
        print(f"     a's flood answered: {codes} (status codes; 0 = none)")

    async def tenant_big_message_flood_drops_none_of_the_others_messages():
        # a publishes near-max_payload requests (1,000,000-byte prompts, refused at once: a bad
        # temperature) from 4 connections as fast as they go, 240 MB in all, while b runs three
        # requests. The input processor's subscription keeps up: NATS drops no message as a
        # slow consumer (no bus_slow_consumer line, every one of a's requests answered) and b's
        # streams are what they are alone.
        from llmbus import RequestOutput as RO
        per_conn, n_conn = 60, 4
        big = generate_request("a-big", temperature=-1.0, prompt="x" * 1_000_000)
        conns = [await Client().connect(url, "tenant-a", stack.password("tenant-a")) for _ in range(n_conn)]
        codes = {}

        async def count(m):
            ro = RO.RequestOutput.GetRootAs(m.data, 4)
            code = ro.Error().Code() if ro.Error() else 0
            codes[code] = codes.get(code, 0) + 1

        log_before = len(stack.log_text())

        async def flood(c, k):
            inbox = c.nc.new_inbox()
            await c.nc.subscribe(inbox + ".*", cb=count)
            for i in range(per_conn):
                await c.nc.publish("llm.generate.a", big, reply=f"{inbox}.{k}-{i}")
            await c.nc.flush(timeout=60)

        async def victim():
            return [await generate(b.nc, "llm.generate.b", f"b-under-big-flood-{i}") for i in range(3)]

        try:
            got = await asyncio.gather(victim(), *[flood(c, k) for k, c in enumerate(conns)])
            for ids, _ in got[0]:
                assert ids == alone_ids, "b's stream changed under a's flood of large messages"
            deadline = time.monotonic() + TIMEOUT_S
            while sum(codes.values()) < per_conn * n_conn and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        finally:
            for c in conns:
                await c.close()
        slow = [ln for ln in stack.log_text()[log_before:].splitlines() if "slow_consumer" in ln or "slow consumer" in ln.lower()]
        assert not slow, f"messages dropped as a slow consumer: {slow[:2]}"
        assert sum(codes.values()) == per_conn * n_conn, f"a got {sum(codes.values())} answers of {per_conn * n_conn}"
        print(f"     a's large-message flood answered: {codes} (status codes)")

    async def tenant_cannot_reach_jetstream_and_front_door_keeps_to_its_row():
        before = len(a.violations())
        await a.nc.publish("$JS.API.INFO", b"", reply=a.nc.new_inbox())
        await a.nc.flush()
        api = await Client().connect(url, "api-server", stack.password("api-server"))
        try:
            for subject in ("llm.engine.0.outputs", "llm.trace.>", "llm.health.>"):
                await api.nc.subscribe(subject)
            await api.nc.flush()
            await asyncio.sleep(0.3)
            assert len(api.violations()) >= 3, api.errors
        finally:
            await api.close()
        assert len(a.violations()) > before, a.errors[-3:]

    await case("nats_conf_holds_bcrypt_hashes_only", nats_conf_holds_bcrypt_hashes_only)
    await case("tenant_connections_are_limited_others_go_on", tenant_connections_are_limited_others_go_on)
    await case("tenant_subscriptions_are_limited_others_go_on", tenant_subscriptions_are_limited_others_go_on)
    await case("tenant_payload_over_the_limit_is_refused_by_the_server",
               tenant_payload_over_the_limit_is_refused_by_the_server)
    await case("tenant_flood_is_queued_per_tenant_and_others_complete",
               tenant_flood_is_queued_per_tenant_and_others_complete)
    await case("tenant_big_message_flood_drops_none_of_the_others_messages",
               tenant_big_message_flood_drops_none_of_the_others_messages)
    await case("tenant_cannot_reach_jetstream_and_front_door_keeps_to_its_row",
               tenant_cannot_reach_jetstream_and_front_door_keeps_to_its_row)
    await case("credentials_never_in_logs_or_command_lines_and_private", secrets_never_shown)
    await case("plain_client_without_credentials_cannot_connect", no_credentials)
    await case("wrong_password_cannot_connect", wrong_password)
    await case("tenant_cannot_subscribe_to_other_tenants_engine_or_replies", tenant_cannot_listen)
    await case("tenant_cannot_publish_on_other_tenant_or_engine_subjects", tenant_cannot_publish_elsewhere)
    await case("tenant_cannot_abort_another_tenants_request_by_id", tenant_cannot_abort_another_tenants_request)
    await case("tenant_cannot_take_over_another_tenants_request_by_id", tenant_cannot_take_over_another_tenants_request)
    await case("tenant_takes_over_its_own_request_by_resend", tenant_takes_over_its_own_request)
    await case("engine_actor_users_keep_to_their_subjects", actors_stay_in_their_row)
    await case("victim_stream_complete_and_identical_and_no_forged_bytes_delivered", victim_untouched)
    await a.close()
    await b.close()


def http_cases(stack, results):
    base = stack.base
    body = json.dumps({"model": stack.model_name, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}).encode()

    def unauthorized():
        for method, path, data, key in (("POST", "/v1/completions", body, None),
                                        ("POST", "/v1/completions", body, "sk-wrong-key-000000000"),
                                        ("POST", "/v1/completions", body, KEY_A + "x"),
                                        ("GET", "/metrics", None, None), ("GET", "/health", None, None),
                                        ("GET", "/v1/models", None, "short")):
            status, headers, out = http(method, base + path, data, key)
            assert status == 401, f"{method} {path} key={key!r}: {status}"
            err = json.loads(out)["error"]
            assert err["code"] == "invalid_api_key" and err["message"], err
            assert headers.get("WWW-Authenticate") == "Bearer", headers

    def cors_preflight_needs_no_key_but_the_request_does():
        # browsers send no Authorization on a preflight: it is answered before authentication,
        # and reveals nothing; the request that follows still needs its key
        req = urllib.request.Request(base + "/v1/completions", method="OPTIONS", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200 and r.headers.get("Access-Control-Allow-Origin") == "*", (r.status, dict(r.headers))
            assert r.read() == b""
        status, _, _ = http("POST", base + "/v1/completions", body, None)
        assert status == 401, status

    def authorized():
        status, _, out = http("POST", base + "/v1/completions", body, KEY_A)
        assert status == 200, f"{status}: {out[:200]!r}"
        assert json.loads(out)["choices"][0]["text"], out
        status, _, _ = http("GET", base + "/metrics", None, KEY_B)
        assert status == 200, status

    def limited():
        """`limited`: 1 request in flight, 1 token/s with a bucket of 200 (prompt + max_tokens)."""
        import http.client as http_client

        def completion(max_tokens, out):
            b = json.dumps({"model": stack.model_name, "prompt": PROMPT, "max_tokens": max_tokens,
                            "temperature": 0, "ignore_eos": True}).encode()
            out.append(http("POST", base + "/v1/completions", b, KEY_LIMITED))

        # the first streams: once its first event is here it is surely in flight
        conn = http_client.HTTPConnection("127.0.0.1", stack.port, timeout=60)
        b = json.dumps({"model": stack.model_name, "prompt": PROMPT, "max_tokens": 150, "temperature": 0,
                        "ignore_eos": True, "stream": True}).encode()
        conn.request("POST", "/v1/completions", b, {"Content-Type": "application/json",
                                                    "Authorization": f"Bearer {KEY_LIMITED}"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        assert resp.readline().startswith(b"data:")
        second = []
        completion(4, second)
        rest = resp.read()
        conn.close()
        assert rest.rstrip().endswith(b"data: [DONE]"), rest[-200:]
        first = [(200,)]
        assert first[0][0] == 200, first[0][:1]
        status, headers, out = second[0]
        assert status == 429, (status, out[:200])
        assert "max_concurrent" in json.loads(out)["error"]["message"], out
        assert headers.get("Retry-After") == "1", headers
        # the first took ~158 of 200 tokens: another 158 now waits for the bucket, and says how long
        # (the input processor learns that the first ended from the engine's outputs, a moment
        # after the client has its [DONE]: until then the slot is still taken)
        third = []
        for _ in range(100):
            third.clear()
            completion(150, third)
            if third[0][0] != 429 or "max_concurrent" not in json.loads(third[0][2])["error"]["message"]:
                break
            time.sleep(0.05)
        status, headers, out = third[0]
        assert status == 429, (status, out[:200])
        assert "tokens_per_s" in json.loads(out)["error"]["message"], out
        assert int(headers.get("Retry-After", "0")) >= 2, headers
        # more than the bucket can ever hold: 400, not a 429 to retry forever
        fourth = []
        completion(400, fourth)
        assert fourth[0][0] == 400, fourth[0][:1]
        assert "burst_tokens" in json.loads(fourth[0][2])["error"]["message"]
        # and the other tenants are not limited by it
        status, _, _ = http("POST", base + "/v1/completions", body, KEY_B)
        assert status == 200, status

    def key_checked_before_the_body():
        # headers announcing 10 MB, then nothing: the 401 comes from the headers alone
        import socket
        with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 10000000\r\nAuthorization: Bearer sk-not-a-key-000000\r\n\r\n")
            got = sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 401"), got[:100]
        assert b"invalid_api_key" in got, got[:300]

    for name, fn in (("http_without_or_with_wrong_key_is_401_everywhere", unauthorized),
                     ("http_key_is_checked_on_the_headers_before_the_body", key_checked_before_the_body),
                     ("http_with_a_key_is_served", authorized),
                     ("cors_preflight_needs_no_key_but_the_request_does", cors_preflight_needs_no_key_but_the_request_does),
                     ("per_tenant_limits_answer_429_with_retry_after", limited)):
        t0 = time.monotonic()
        try:
            fn()
            print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")
        except Exception as e:  # noqa: BLE001
            results.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")


class DefaultStack(SecureStack):
    """`llmbus serve --model --http` and nothing else: the default, single-tenant mode."""

    def __init__(self):
        api_stack.Stack.__init__(self)

    def __enter__(self):
        api_stack.Stack.__enter__(self)
        text = self.log_text()
        m = re.search(r"event=nats_ready url=(nats://127\.0\.0\.1:\d+)", text)
        d = re.search(r"event=nats_auth_generated dir=(\S+)", text)
        if not m or not d:
            self.fail("default mode: no nats_ready / nats_auth_generated line in the serve log")
        self.nats_url, self.auth_dir = m.group(1), d.group(1)
        return self


async def default_mode_attacks(stack, results):
    """The default mode is locked down too: one tenant, `default`, and every actor its own user."""
    url = stack.nats_url
    try:
        why = await expect_no_connect(url)
        print(f"ok   default_mode_plain_client_cannot_connect ({why})")
        t = await Client().connect(url, "tenant-default", stack.password("tenant-default"))
        ids, _ = await generate(t.nc, "llm.generate.default", "default-1")
        assert ids, "tenant default got no tokens"
        for subject in (">", "llm.engine.0.outputs"):
            await t.nc.subscribe(subject)
        for subject in ("llm.engine.0.requests", "llm.engine.0.execute", "llm.engine.0.kv", "llm.generate.other"):
            await t.nc.publish(subject, b"\x00" * 64)
        await t.nc.flush()
        await asyncio.sleep(0.3)
        assert len(t.violations()) >= 6, t.errors
        ids2, _ = await generate(t.nc, "llm.generate.default", "default-2")
        assert ids2 == ids, "the engine answered differently after the forged messages"
        assert not [ln for ln in stack.log_text().splitlines() if "_malformed" in ln]
        await t.close()
        print("ok   default_mode_tenant_cannot_reach_engine_subjects")
    except Exception as e:  # noqa: BLE001
        results.append("default_mode")
        print(f"FAIL default_mode: {type(e).__name__}: {e}")


def check_case(results, name, fn):
    t0 = time.monotonic()
    try:
        fn()
        print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")
    except Exception as e:  # noqa: BLE001
        results.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def run_dirs(log):
    """The private directories of a serve run, from its log: credentials, hash key, and the
    embedded server's directory (ports file, log, JetStream store)."""
    dirs = re.findall(r"event=nats_auth_generated dir=(\S+)", log)
    dirs += [os.path.dirname(f) for f in re.findall(r"event=hash_key_generated file=(\S+) scope=run", log)]
    dirs += [os.path.dirname(d) for d in re.findall(r"event=nats_ready .*store=(\S+)", log)]
    return sorted(set(dirs))


def kill_serve(stack):
    """SIGKILL to serve alone (its children follow: PR_SET_PDEATHSIG); nothing is cleaned up."""
    stack.proc.kill()
    stack.proc.wait()
    time.sleep(1.0)  # the children's death signals
    stack.proc = None


def swept(left, log):
    assert len(left) == 3, f"expected the credentials, hash-key and server directories, got {left}"
    modes = {d: os.stat(d).st_mode & 0o777 for d in left if os.path.isdir(d)}
    assert len(modes) == 0 or all(m == 0o700 for m in modes.values()), modes
    remaining = [d for d in left if os.path.exists(d)]
    assert not remaining, f"a killed serve's directories survived the next serve: {remaining}"
    removed = re.findall(r"event=stale_run_dir_removed dir=(\S+)", log)
    assert set(left) <= set(removed), f"not logged as removed: {set(left) - set(removed)}"


def names_refused_before_start(results):
    """Configuration syntax in a name never reaches nats.conf, a subject or a file: serve and
    the actors refuse it at once, naming the flag, before starting anything."""
    import subprocess
    stack = api_stack.Stack()
    if stack.external:
        return

    def run(args):
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def cases():
        llmbus, cmd = stack.llmbus, os.path.dirname(stack.llmbus)
        for flag, value in (("--prefix", 'llm"}, accounts: {X: {}'), ("--engine-id", "e\"0"),
                            ("--prefix", "a b"), ("--engine-id", "../e")):
            rc, out = run([llmbus, "serve", "--model", stack.model, flag, value])
            assert rc != 0 and flag in out, f"serve {flag} {value!r}: rc {rc}, {out[-300:]}"
            assert "nats_ready" not in out, "nats-server was started"
        rc, out = run([os.path.join(cmd, "llmbus-api-server"), "--model", stack.model, "--model-name", 'm"x',
                       "--nats", "nats://127.0.0.1:1"])
        assert rc == 2 and "model-name" in out, f"api server: rc {rc}, {out[-300:]}"
        rc, out = run([os.path.join(cmd, "llmbus-scheduler"), "--model", stack.model, "--prefix", "llm}",
                       "--nats", "nats://127.0.0.1:1"])
        assert rc == 2 and "--prefix" in out, f"scheduler: rc {rc}, {out[-300:]}"

    check_case(results, "names_with_syntax_are_refused_before_anything_starts", cases)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pydir", required=True, help="flatc's Python output (llmbus package)")
    args = ap.parse_args()
    try:
        import flatbuffers  # noqa: F401
        import nats  # noqa: F401
    except ImportError as e:
        api_stack.skip(f"python module missing: {e}")
    sys.path.insert(0, args.pydir)
    failures = []
    with tempfile.TemporaryDirectory(prefix="llmbus-security-") as work:
        names_refused_before_start(failures)
        with SecureStack(work) as stack:
            asyncio.run(attacks(stack, failures))
            http_cases(stack, failures)
            alive = stack.proc.poll() is None
            if not alive:
                failures.append("serve_still_running")
            if failures:
                print(f"--- serve log (tail) ---\n{stack.tail(60)}")
            left = run_dirs(stack.log_text())
            kill_serve(stack)  # SIGKILL: serve itself can remove nothing now
        n = len(failures)
        with DefaultStack() as stack:
            asyncio.run(default_mode_attacks(stack, failures))
            check_case(failures, "secrets_and_store_of_a_killed_serve_are_removed_by_the_next",
                       lambda: swept(left, stack.log_text()))
            if len(failures) > n:
                print(f"--- serve log (tail) ---\n{stack.tail(60)}")
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} failing: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

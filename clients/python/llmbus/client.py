"""The llmbus client: generate (a stream of RequestOutputs), tokenize, detokenize, abort and
status over NATS, with the subjects of docs/design.md §2 and the messages of schemas/*.fbs."""
import asyncio
import dataclasses
import secrets

import nats
import nats.errors

from . import connection as connfile
from . import wire
from .errors import (LlmbusError, NoEngineError, RateLimitError, RequestError, RequestTimeoutError,
                     STATUS_NAMES)
from .types import SamplingParams, Status

STATE_LOST = STATUS_NAMES.index("STATE_LOST")
NO_RESPONDER_TRIES = 7      # 50 ms doubling to 1 s: about 5 s for an input processor to come back
STATE_LOST_TRIES = 3        # an output processor that lost a request's end: send it again


def _error(err, request_id):
    code, message, field, retry_after_ms = err
    retry_after = retry_after_ms / 1000.0 if retry_after_ms > 0 else None
    cls = RateLimitError if retry_after else RequestError
    return cls(code, message, field, retry_after, request_id)


async def _next(queue, timeout):
    """The next message of queue within timeout seconds (asyncio.TimeoutError otherwise).
    asyncio.timeout where there is one: Python 3.11's wait_for (which nats-py's next_msg uses)
    can swallow a cancellation that arrives with the message, and a cancelled generate() must
    always abort its request."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            return await queue.get()
    return await asyncio.wait_for(queue.get(), timeout)


async def _subscribe(nc, subject):
    """(subscription, queue of its messages): a callback subscription feeding our own queue."""
    queue = asyncio.Queue()

    async def put(msg):
        queue.put_nowait(msg)

    return await nc.subscribe(subject, cb=put), queue


def _no_responders(msg):
    """NATS' "no responders" status (an empty message with header Status 503)."""
    status = (msg.headers or {}).get("Status") if msg.headers else None
    return status == "503" or (not msg.data and status is not None)


class Client:
    """A connection to one llmbus deployment as one tenant.

    With no url, the newest running `llmbus serve` on this machine is used (its connection
    file, llmbus/connection.py; `connection="NAME"` picks one). With url=, give user= and
    password= or password_file= as `llmbus serve` generated them (its credentials folder), or
    none for a bus without authentication. tenant defaults to the one of the user name
    ("tenant-acme" → "acme"), else "default". timeout: seconds without any output after which
    a request is aborted and RequestTimeoutError raised.

        async with llmbus.Client() as c:
            async for out in c.generate("Hello", max_tokens=16):
                print(out.outputs[0].text)
    """

    def __init__(self, url=None, *, user=None, password=None, password_file=None, tenant=None,
                 connection=None, prefix=None, timeout=60.0, connect_timeout=5.0):
        self._operator = None  # (user, password) of the operator, from a connection file
        if url is None:
            c = connfile.find(connection)
            url, user = c.nats_url, c.user
            if c.operator_user and c.operator_password_file:
                self._operator = (c.operator_user, c.password("operator_password_file"))
            password = c.password() if password is None else password
            tenant = tenant or c.tenant
            prefix = prefix or c.prefix
        elif password is None and password_file:
            password = connfile.Connection(url, password_file=password_file, path=password_file).password()
        if tenant is None:
            tenant = user[len("tenant-"):] if user and user.startswith("tenant-") else "default"
        self.url, self.user, self._password = url, user, password
        self.tenant, self.prefix = tenant, prefix or "llm"
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._nc = None
        self._async_errors = []
        self._pending_aborts = set()

    async def connect(self):
        """Opens the NATS connection; raises LlmbusError when the server cannot be reached."""
        if self._nc is not None:
            return self

        async def on_error(exc):
            self._async_errors.append(exc)

        try:
            self._nc = await nats.connect(self.url, user=self.user, password=self._password,
                                          connect_timeout=self.connect_timeout, allow_reconnect=True,
                                          max_reconnect_attempts=-1, error_cb=on_error)
        except Exception as exc:  # nats-py raises several kinds (OSError, NoServersError, auth)
            raise LlmbusError(f"cannot connect to {self.url} as {self.user or 'anonymous'}: {exc}") from exc
        return self

    async def close(self):
        """Waits for pending aborts, then drains and closes the connection."""
        if self._pending_aborts:
            await asyncio.gather(*self._pending_aborts, return_exceptions=True)
        if self._nc is not None:
            await self._nc.drain()
            self._nc = None

    async def __aenter__(self):
        return await self.connect()

    async def __aexit__(self, *exc):
        await self.close()

    def _subject(self, kind):
        return f"{self.prefix}.{kind}.{self.tenant}"

    async def abort(self, request_id):
        """Asks the engine to stop request_id (the id of its RequestOutputs); its stream then
        ends with finish_reason "abort". An id of another tenant is refused by the engine."""
        await self._nc.publish(self._subject("abort"), wire.encode_abort_request(request_id))
        await self._nc.flush()

    async def generate(self, prompt=None, *, messages=None, prompt_token_ids=None, sampling_params=None,
                       request_id=None, priority=0, cache_salt=None, add_generation_prompt=True,
                       **sampling):
        """Yields the RequestOutputs of one request until the one with `finished`.

        The input is prompt (text; the model's chat template is not applied), messages (OpenAI
        chat messages, templated by the engine) or prompt_token_ids. Sampling: a SamplingParams,
        or its fields as keywords (max_tokens=32, temperature=0, output_kind="delta", ...).
        Cancelling the consuming task, or closing the generator early, aborts the request on
        the engine (AbortRequest on llm.abort.<tenant>). Errors: RequestError (RateLimitError
        with retry_after), NoEngineError, RequestTimeoutError."""
        if self._nc is None:
            await self.connect()
        sp = dataclasses.replace(sampling_params) if sampling_params else SamplingParams(**sampling)
        if sampling_params and sampling:
            sp = dataclasses.replace(sp, **sampling)
        if sp.seed is None:  # a request sent again must repeat the same tokens
            sp.seed = secrets.randbits(63)
        payload = wire.encode_generate_request(prompt, messages, prompt_token_ids, sp, request_id or "",
                                               add_generation_prompt, priority, cache_salt)
        stream = _Stream(self, payload, sp.output_kind == "delta")
        try:
            async for out in stream.outputs():
                yield out
        finally:
            await stream.end()

    async def _request(self, kind, payload):
        if self._nc is None:
            await self.connect()
        try:
            msg = await self._nc.request(self._subject(kind), payload, timeout=self.timeout)
        except nats.errors.NoRespondersError as exc:
            raise NoEngineError(f"no input processor listens on {self._subject(kind)} "
                                "(is `llmbus serve` running?)") from exc
        except nats.errors.TimeoutError as exc:
            raise RequestTimeoutError(f"no answer on {self._subject(kind)} within {self.timeout} s") from exc
        out, err, _, extra = wire.decode_request_output(msg.data)
        if err:
            raise _error(err, out.request_id)
        return out, extra

    async def tokenize(self, prompt=None, *, messages=None, add_generation_prompt=True):
        """The token ids the engine would give prompt (text) or messages (chat, templated),
        exactly as a generate request would get them."""
        payload = wire.encode_generate_request(prompt, messages, None, None, "", add_generation_prompt)
        out, _ = await self._request("tokenize", payload)
        return out.prompt_token_ids

    async def detokenize(self, token_ids):
        """The text of token_ids (special tokens rendered)."""
        payload = wire.encode_generate_request(prompt_token_ids=list(token_ids))
        _, extra = await self._request("tokenize", payload)
        return extra["prompt"] or ""

    async def max_model_len(self):
        """The engine's context length in tokens."""
        _, extra = await self._request("tokenize", wire.encode_generate_request())
        return extra["max_model_len"]

    async def status(self, wait=2.5):
        """The engines (their SchedulerStats) and actors (their Heartbeats) heard within wait
        seconds. Needs credentials that may read <prefix>.engine.*.stats and <prefix>.health.>:
        the operator's (taken from the connection file when it names them: a second, short
        connection), or an open bus; a tenant's are refused."""
        if self._operator and self._operator[0] != self.user:
            op = Client(self.url, user=self._operator[0], password=self._operator[1], tenant=self.tenant,
                        prefix=self.prefix, timeout=self.timeout, connect_timeout=self.connect_timeout)
            async with op:
                return await op.status(wait)
        if self._nc is None:
            await self.connect()
        engines, actors = {}, {}

        async def on_stats(msg):
            try:
                e = wire.decode_scheduler_stats(msg.data)
                engines[e.engine_id] = e
            except Exception:  # noqa: BLE001 - a malformed beat is skipped, as the actors do
                pass

        async def on_health(msg):
            try:
                a = wire.decode_heartbeat(msg.data)
                actors[(a.actor, a.instance)] = a
            except Exception:  # noqa: BLE001
                pass

        seen_errors = len(self._async_errors)
        subs = [await self._nc.subscribe(f"{self.prefix}.engine.*.stats", cb=on_stats),
                await self._nc.subscribe(f"{self.prefix}.health.>", cb=on_health)]
        try:
            await self._nc.flush()
            await asyncio.sleep(wait)
        finally:
            for s in subs:
                await s.unsubscribe()
        refused = [e for e in self._async_errors[seen_errors:] if "permission" in str(e).lower()]
        if refused and not engines and not actors:
            raise LlmbusError(f"status: {self.user or 'this user'} may not read the engines' stats "
                              f"and heartbeats ({refused[0]}); use the operator's credentials")
        return Status(engines=sorted(engines.values(), key=lambda e: e.engine_id),
                      actors=sorted(actors.values(), key=lambda a: (a.actor, a.instance)))


class _Stream:
    """One generate request's reply stream: resends on no responders / STATE_LOST, trims what a
    DELTA client already has after a resync or a resend, aborts when left unfinished."""

    def __init__(self, client, payload, delta):
        self.c, self.payload, self.delta = client, payload, delta
        self.request_id, self.finished, self.sub, self.queue = None, False, None, None
        self.have = {}   # index -> (text, number of token ids) delivered so far (DELTA)
        self.skip = {}   # index -> (chars, tokens) a resent request repeats before anything new

    async def outputs(self):
        nc = self.c._nc
        self.sub, self.queue = await _subscribe(nc, nc.new_inbox())
        no_responders = lost = 0
        await self._send()
        while True:
            try:
                msg = await _next(self.queue, self.c.timeout)
            except asyncio.TimeoutError as exc:
                raise RequestTimeoutError(f"no output from the engine within {self.c.timeout} s"
                                          + (f"; aborted {self.request_id}" if self.request_id else "")) from exc
            if _no_responders(msg):
                if no_responders >= NO_RESPONDER_TRIES:
                    raise NoEngineError(f"no input processor listens on {self.c._subject('generate')} "
                                        "(is `llmbus serve` running?)")
                await asyncio.sleep(min(0.05 * (1 << no_responders), 1.0))
                no_responders += 1
                await self._send()
                continue
            out, err, resync, _ = wire.decode_request_output(msg.data)
            self.request_id = self.request_id or out.request_id or None
            if err and err[0] == STATE_LOST and lost < STATE_LOST_TRIES:
                lost += 1   # the output processor lost this request's end: send it again
                self.skip = {i: (len(t), n) for i, (t, n) in self.have.items()}
                self.request_id = None
                await self._send()
                continue
            if err:
                self.finished = True
                raise _error(err, out.request_id)
            if self.delta:
                self._trim(out, resync)
            self.finished = out.finished
            yield out
            if self.finished:
                return

    async def _send(self):
        await self.c._nc.publish(self.c._subject("generate"), self.payload, reply=self.sub.subject)

    def _trim(self, out, resync):
        """DELTA: an output marked resync repeats its completion from the start, and a resent
        request repeats what was delivered: keep only what is new."""
        for c, again in zip(out.outputs, resync):
            text, ntok = self.have.get(c.index, ("", 0))
            if again:
                c.text, c.token_ids = c.text[len(text):], c.token_ids[ntok:]
                self.skip.pop(c.index, None)
            elif c.index in self.skip:
                chars, toks = self.skip[c.index]
                cut_c, cut_t = min(chars, len(c.text)), min(toks, len(c.token_ids))
                c.text, c.token_ids = c.text[cut_c:], c.token_ids[cut_t:]
                chars, toks = chars - cut_c, toks - cut_t
                if chars or toks:
                    self.skip[c.index] = (chars, toks)
                else:
                    del self.skip[c.index]
            self.have[c.index] = (text + c.text, ntok + len(c.token_ids))

    async def end(self):
        """Aborts an unfinished request (at once when its id is known, else as soon as its first
        output names it) and drops the subscription."""
        if self.sub is None:
            return
        if self.finished:
            await self.sub.unsubscribe()
            return
        if self.request_id:
            await self.c.abort(self.request_id)
            await self.sub.unsubscribe()
            return
        task = asyncio.ensure_future(self._abort_when_named())
        self.c._pending_aborts.add(task)
        task.add_done_callback(self.c._pending_aborts.discard)

    async def _abort_when_named(self):
        try:
            msg = await _next(self.queue, self.c.timeout)
            if not _no_responders(msg):
                out, _, _, _ = wire.decode_request_output(msg.data)
                if out.request_id and not out.finished:
                    await self.c.abort(out.request_id)
        except (asyncio.TimeoutError, LlmbusError):
            pass
        finally:
            await self.sub.unsubscribe()

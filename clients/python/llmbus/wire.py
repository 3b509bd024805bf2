"""Encoding and decoding with the code flatc generated from schemas/*.fbs (built into this
package by setup.py). Buffers are size-prefixed with the file identifiers of schemas/README.md.
Python's FlatBuffers has no verifier: decoding checks the size prefix and identifier, and a
malformed buffer raises an error of the runtime, which the caller turns into LlmbusError."""
import importlib
import struct

import flatbuffers

from . import types
from .errors import LlmbusError

GENERATE_REQUEST_ID = b"LGRQ"
ABORT_REQUEST_ID = b"LABR"
REQUEST_OUTPUT_ID = b"LRQO"
HEARTBEAT_ID = b"LHBT"
SCHEDULER_STATS_ID = b"LSST"


def _gen(name):
    """A module flatc generated (llmbus.GenerateRequest, ...). Imported by its full name: the
    package's own attributes must never shadow or be shadowed by a generated module."""
    return importlib.import_module("llmbus." + name)


def _strings_vector(b, start_vector, values):
    offsets = [b.CreateString(v) for v in values]
    start_vector(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _ints_vector(b, start_vector, values):
    start_vector(b, len(values))
    for v in reversed(values):
        b.PrependInt32(int(v))
    return b.EndVector()


def _sampling_params(b, sp):
    SP = _gen("SamplingParams")
    stop = _strings_vector(b, SP.StartStopVector, sp.stop) if sp.stop else None
    stop_ids = _ints_vector(b, SP.StartStopTokenIdsVector, sp.stop_token_ids) if sp.stop_token_ids else None
    if sp.output_kind not in types.OUTPUT_KINDS:
        raise ValueError(f"output_kind must be one of {sorted(types.OUTPUT_KINDS)}")
    SP.Start(b)
    SP.AddN(b, sp.n)
    SP.AddTemperature(b, sp.temperature)
    SP.AddTopK(b, sp.top_k)
    SP.AddTopP(b, sp.top_p)
    SP.AddMinP(b, sp.min_p)
    if sp.seed is not None:
        SP.AddSeed(b, sp.seed)
    SP.AddPresencePenalty(b, sp.presence_penalty)
    SP.AddFrequencyPenalty(b, sp.frequency_penalty)
    SP.AddRepetitionPenalty(b, sp.repetition_penalty)
    SP.AddMaxTokens(b, sp.max_tokens)
    SP.AddMinTokens(b, sp.min_tokens)
    if stop is not None:
        SP.AddStop(b, stop)
    if stop_ids is not None:
        SP.AddStopTokenIds(b, stop_ids)
    SP.AddIgnoreEos(b, sp.ignore_eos)
    SP.AddIncludeStopStrInOutput(b, sp.include_stop_str_in_output)
    SP.AddSkipSpecialTokens(b, sp.skip_special_tokens)
    SP.AddLogprobs(b, -1 if sp.logprobs is None else sp.logprobs)
    SP.AddOutputKind(b, types.OUTPUT_KINDS[sp.output_kind])
    SP.AddTruncatePromptTokens(b, sp.truncate_prompt_tokens)
    return SP.End(b)


def _messages(b, messages):
    CM = _gen("ChatMessage")
    G = _gen("GenerateRequest")
    offsets = []
    for m in messages:
        role = b.CreateString(m["role"])
        content = m.get("content")
        text = b.CreateString(content if content is not None else "")
        CM.Start(b)
        CM.AddRole(b, role)
        CM.AddContent(b, text)
        CM.AddContentIsNull(b, content is None)
        offsets.append(CM.End(b))
    G.StartMessagesVector(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def encode_generate_request(prompt=None, messages=None, prompt_token_ids=None, sampling_params=None,
                            request_id="", add_generation_prompt=True, priority=0, cache_salt=None):
    """A size-prefixed GenerateRequest. Exactly one of prompt (text, used as it is: `raw`),
    messages (OpenAI chat messages, dicts with role and content: the model's chat template
    applies) or prompt_token_ids carries the input; sampling_params
    None sends none (the engine's defaults)."""
    G = _gen("GenerateRequest")
    if sum(x is not None for x in (prompt, messages, prompt_token_ids)) > 1:
        raise ValueError("give one of prompt, messages or prompt_token_ids")
    b = flatbuffers.Builder(256)
    rid = b.CreateString(request_id or "")
    text = b.CreateString(prompt) if prompt is not None else None
    msgs = _messages(b, messages) if messages is not None else None
    ids = _ints_vector(b, G.StartPromptTokenIdsVector, prompt_token_ids) if prompt_token_ids is not None else None
    salt = b.CreateString(cache_salt) if cache_salt else None
    sp = _sampling_params(b, sampling_params) if sampling_params is not None else None
    G.Start(b)
    G.AddVersion(b, 1)
    G.AddRequestId(b, rid)
    if text is not None:
        G.AddPrompt(b, text)
    if msgs is not None:
        G.AddMessages(b, msgs)
    if ids is not None:
        G.AddPromptTokenIds(b, ids)
    G.AddAddGenerationPrompt(b, add_generation_prompt)
    if prompt is not None:
        G.AddRaw(b, True)  # a prompt is text as it is (vLLM's generate); messages get the template
    if sp is not None:
        G.AddSamplingParams(b, sp)
    G.AddPriority(b, priority)
    if salt is not None:
        G.AddCacheSalt(b, salt)
    b.FinishSizePrefixed(G.End(b), file_identifier=GENERATE_REQUEST_ID)
    return bytes(b.Output())


def encode_abort_request(request_id):
    """A size-prefixed AbortRequest for llm.abort.<tenant> (identifier LABR)."""
    A = _gen("AbortRequest")
    b = flatbuffers.Builder(64)
    rid = b.CreateString(request_id)
    A.Start(b)
    A.AddVersion(b, 1)
    A.AddRequestId(b, rid)
    b.FinishSizePrefixed(A.End(b), file_identifier=ABORT_REQUEST_ID)
    return bytes(b.Output())


def _root(data, identifier, what):
    """Offset of the root table of a size-prefixed buffer, after checking size and identifier."""
    if len(data) < 12:
        raise LlmbusError(f"{what}: {len(data)} bytes is too short for a message")
    (size,) = struct.unpack_from("<I", data, 0)
    if size != len(data) - 4:
        raise LlmbusError(f"{what}: size prefix {size} does not match {len(data) - 4} bytes")
    if bytes(data[8:12]) != identifier:
        raise LlmbusError(f"{what}: identifier {bytes(data[8:12])!r}, expected {identifier!r}")
    return 4


def _s(v):
    return v.decode("utf-8", "replace") if v is not None else None


def _logprob(lp):
    top = [types.Logprob(t.TokenId(), t.Logprob(), 0, _s(t.Decoded()) or "")
           for t in (lp.Top(j) for j in range(lp.TopLength()))]
    return types.Logprob(lp.TokenId(), lp.Logprob(), lp.Rank(), _s(lp.Decoded()) or "", top)


def decode_request_output(data):
    """(RequestOutput, ErrorInfo or None, resync flags per output) from a size-prefixed buffer.
    ErrorInfo is returned as a tuple (code, message, field, retry_after_ms)."""
    RO = _gen("RequestOutput").RequestOutput
    try:
        ro = RO.GetRootAs(data, _root(data, REQUEST_OUTPUT_ID, "RequestOutput"))
        outputs, resync = [], []
        for i in range(ro.OutputsLength()):
            c = ro.Outputs(i)
            lps = [_logprob(c.Logprobs(j)) for j in range(c.LogprobsLength())]
            outputs.append(types.CompletionOutput(
                index=c.Index(), text=_s(c.Text()) or "",
                token_ids=[c.TokenIds(j) for j in range(c.TokenIdsLength())],
                cumulative_logprob=c.CumulativeLogprob(), logprobs=lps,
                finish_reason=types.FINISH_REASONS.get(c.FinishReason()), stop_reason=_s(c.StopReason())))
            resync.append(bool(c.Resync()))
        m = ro.Metrics()
        metrics = None if m is None else types.RequestMetrics(
            m.ArrivalTime(), m.FirstScheduledTime(), m.FirstTokenTime(), m.LastTokenTime(),
            m.FinishedTime(), m.NumCachedTokens(), m.NumPromptTokens(), m.NumGenerationTokens())
        out = types.RequestOutput(
            request_id=_s(ro.RequestId()) or "",
            prompt_token_ids=[ro.PromptTokenIds(j) for j in range(ro.PromptTokenIdsLength())],
            outputs=outputs, finished=ro.Finished(), metrics=metrics)
        e = ro.Error()
        err = None if e is None or e.Code() == 0 else (e.Code(), _s(e.Message()) or "", _s(e.Field()),
                                                        e.RetryAfterMs())
        extra = {"prompt": _s(ro.Prompt()), "max_model_len": ro.MaxModelLen()}
        return out, err, resync, extra
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise LlmbusError(f"malformed RequestOutput: {exc}") from exc


def decode_heartbeat(data):
    H = _gen("Heartbeat").Heartbeat
    h = H.GetRootAs(data, _root(data, HEARTBEAT_ID, "Heartbeat"))
    return types.ActorStatus(actor=_s(h.Actor()) or "", instance=_s(h.Instance()) or "",
                             engine_id=_s(h.EngineId()) or "", pid=h.Pid(), host=_s(h.Host()) or "",
                             ready=h.Ready(), inflight=h.Inflight(), uptime_s=h.UptimeS())


def decode_scheduler_stats(data):
    SS = _gen("SchedulerStats").SchedulerStats
    s = SS.GetRootAs(data, _root(data, SCHEDULER_STATS_ID, "SchedulerStats"))
    return types.EngineStatus(engine_id=_s(s.EngineId()) or "", model=_s(s.Model()) or "",
                              num_running_reqs=s.NumRunningReqs(), num_waiting_reqs=s.NumWaitingReqs(),
                              kv_cache_usage=s.KvCacheUsage(), num_free_blocks=s.NumFreeBlocks(),
                              num_total_blocks=s.NumTotalBlocks(), max_model_len=s.MaxModelLen(),
                              step=s.Step(), draining=s.Draining())

// Codecs of engine_core_outputs.fbs (EngineCoreOutputs) and request_output.fbs
// (RequestOutput).
#include "engine_core_outputs_generated.h"
#include "request_output_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/request_output.h"

using namespace llb_codec;

extern "C" const char *llb_finish_reason_name(enum llb_finish_reason r) {
  switch (r) {
  case LLB_FINISH_REASON_STOP: return "stop";
  case LLB_FINISH_REASON_LENGTH: return "length";
  case LLB_FINISH_REASON_ABORT: return "abort";
  case LLB_FINISH_REASON_ERROR: return "error";
  default: return nullptr;
  }
}

extern "C" void llb_engine_core_output_init(struct llb_engine_core_output *o) {
  *o = llb_engine_core_output{};
  o->stop_token_id = -1;
}

static bool enc_finish_reason(Enc &e, enum llb_finish_reason r) {
  if ((unsigned)r > LLB_FINISH_REASON_ERROR)
    return e.fail(LLB_STATUS_INVALID_ARGUMENT, "finish_reason", "unknown value %d", (int)r);
  return true;
}

static bool dec_finish_reason(Dec &d, llmbus::FinishReason r, enum llb_finish_reason *out) {
  int v = (int)r;
  if (v < 0 || v > LLB_FINISH_REASON_ERROR)
    return d.fail(LLB_STATUS_MALFORMED, "finish_reason", "unknown value %d", v);
  *out = (enum llb_finish_reason)v;
  return true;
}

// ---- EngineCoreOutputs -------------------------------------------------------------------

static fb::Offset<llmbus::EngineCoreOutput> enc_output(Enc &e, const llb_engine_core_output &o) {
  enc_finish_reason(e, o.finish_reason);
  if (o.first_output_pos < 0)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "first_output_pos", "negative (%d)", o.first_output_pos);
  if (o.new_logprobs.num_tokens != 0 && o.new_logprobs.num_tokens != o.num_new_token_ids)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "new_logprobs", "%d rows for %d new tokens",
           o.new_logprobs.num_tokens, o.num_new_token_ids);
  auto id = e.str(o.request_id, "request_id", true);
  auto tok = e.vec(o.new_token_ids, o.num_new_token_ids, "new_token_ids");
  auto stop = e.str(o.stop_reason, "stop_reason");
  auto lp = enc_logprobs(e, o.new_logprobs, "new_logprobs");
  auto reply = e.str(o.reply_to, "reply_to");
  auto ext = e.str(o.external_id, "external_id");
  auto prompt = e.vec(o.prompt_token_ids, o.num_prompt_token_ids, "prompt_token_ids");
  auto sp = enc_sampling(e, o.sampling_params, "sampling_params", false);
  auto parent = e.str(o.parent_request_id, "parent_request_id");
  auto err = enc_error(e, o.error, "error");
  auto tp = e.str(o.traceparent, "traceparent");
  auto tpp = e.str(o.trace_parent_span_id, "trace_parent_span_id");
  auto pool = enc_pooled(e, o.pooling_output, o.num_pooling_output, "pooling_output");
  auto plp = enc_logprobs(e, o.prompt_logprobs, "prompt_logprobs");
  auto handed = e.str(o.handed_off_to, "handed_off_to");
  auto handed_ids = e.vec(o.handed_off_token_ids, o.num_handed_off_token_ids, "handed_off_token_ids");
  if (!e.ok())
    return 0;
  llmbus::EngineCoreOutputBuilder t(e.b);
  t.add_request_id(id);
  t.add_new_token_ids(tok);
  t.add_first_output_pos(o.first_output_pos);
  t.add_finish_reason(static_cast<llmbus::FinishReason>(o.finish_reason));
  t.add_stop_reason(stop);
  t.add_stop_token_id(o.stop_token_id);
  t.add_new_logprobs(lp);
  t.add_num_cached_tokens(o.num_cached_tokens);
  t.add_reply_to(reply);
  t.add_external_id(ext);
  t.add_arrival_time(o.arrival_time);
  t.add_queued_time_ns(o.queued_time_ns);
  t.add_scheduled_time_ns(o.scheduled_time_ns);
  t.add_first_token_time_ns(o.first_token_time_ns);
  t.add_num_preemptions(o.num_preemptions);
  t.add_prompt_token_ids(prompt);
  t.add_sampling_params(sp);
  t.add_parent_request_id(parent);
  t.add_index(o.index);
  t.add_error(err);
  t.add_traceparent(tp);
  t.add_trace_parent_span_id(tpp);
  t.add_trace_start_time_ns(o.trace_start_time_ns);
  t.add_resync(o.resync);
  t.add_pooling_output(pool);
  t.add_prompt_logprobs(plp);
  t.add_handed_off_to(handed);
  t.add_handed_off_token_ids(handed_ids);
  return t.Finish();
}

static fb::Offset<void> build_engine_core_outputs(Enc &e, const llb_engine_core_outputs &m) {
  auto engine = e.str(m.engine_id, "engine_id");
  auto outs = e.tables<llmbus::EngineCoreOutput>(m.outputs, m.num_outputs, "outputs", enc_output);
  if (!e.ok())
    return 0;
  return llmbus::CreateEngineCoreOutputs(e.b, LLB_SCHEMA_VERSION, engine, m.step, m.timestamp,
                                         outs)
      .Union();
}

static bool dec_output(Dec &d, const llmbus::EngineCoreOutput &t, llb_engine_core_output &o) {
  o.first_output_pos = t.first_output_pos();
  o.stop_token_id = t.stop_token_id();
  o.num_cached_tokens = t.num_cached_tokens();
  o.arrival_time = t.arrival_time();
  o.queued_time_ns = t.queued_time_ns();
  o.scheduled_time_ns = t.scheduled_time_ns();
  o.first_token_time_ns = t.first_token_time_ns();
  o.num_preemptions = t.num_preemptions();
  o.index = t.index();
  o.trace_start_time_ns = t.trace_start_time_ns();
  o.resync = t.resync();
  if (o.first_output_pos < 0)
    return d.fail(LLB_STATUS_MALFORMED, "first_output_pos", "negative (%d)", o.first_output_pos);
  if (!dec_finish_reason(d, t.finish_reason(), &o.finish_reason) ||
      !d.str(t.request_id(), &o.request_id, "request_id", true) ||
      !d.vec(t.new_token_ids(), &o.new_token_ids, &o.num_new_token_ids, "new_token_ids") ||
      !d.str(t.stop_reason(), &o.stop_reason, "stop_reason") ||
      !dec_logprobs(d, t.new_logprobs(), &o.new_logprobs, "new_logprobs") ||
      !d.str(t.reply_to(), &o.reply_to, "reply_to") ||
      !d.str(t.external_id(), &o.external_id, "external_id") ||
      !d.vec(t.prompt_token_ids(), &o.prompt_token_ids, &o.num_prompt_token_ids,
             "prompt_token_ids") ||
      !d.str(t.parent_request_id(), &o.parent_request_id, "parent_request_id") ||
      !dec_error(d, t.error(), &o.error, "error") ||
      !d.str(t.traceparent(), &o.traceparent, "traceparent") ||
      !d.str(t.trace_parent_span_id(), &o.trace_parent_span_id, "trace_parent_span_id") ||
      !dec_pooled(d, t.pooling_output(), &o.pooling_output, &o.num_pooling_output,
                  "pooling_output") ||
      !dec_logprobs(d, t.prompt_logprobs(), &o.prompt_logprobs, "prompt_logprobs") ||
      !d.str(t.handed_off_to(), &o.handed_off_to, "handed_off_to") ||
      !d.vec(t.handed_off_token_ids(), &o.handed_off_token_ids, &o.num_handed_off_token_ids,
             "handed_off_token_ids"))
    return false;
  if (o.new_logprobs.num_tokens != 0 && o.new_logprobs.num_tokens != o.num_new_token_ids)
    return d.fail(LLB_STATUS_MALFORMED, "new_logprobs", "%d rows for %d new tokens",
                  o.new_logprobs.num_tokens, o.num_new_token_ids);
  if (t.sampling_params())
    return dec_sampling(d, t.sampling_params(), &o.sampling_params, "sampling_params", false);
  return true;
}

static bool read_engine_core_outputs(Dec &d, const llmbus::EngineCoreOutputs &t,
                                     llb_engine_core_outputs &m) {
  m.step = t.step();
  m.timestamp = t.timestamp();
  return d.str(t.engine_id(), &m.engine_id, "engine_id") &&
         d.tables(t.outputs(), &m.outputs, &m.num_outputs, "outputs", dec_output);
}

LLB_CODEC_DEFINE(engine_core_outputs, EngineCoreOutputs, LLB_MESSAGE_KIND_ENGINE_CORE_OUTPUTS)

// ---- RequestOutput -----------------------------------------------------------------------

static fb::Offset<llmbus::TokenLogprobs> enc_token_logprobs(Enc &e, const llb_token_logprobs &l) {
  if (l.num_top > LLB_MAX_LOGPROBS)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "top", "%d entries, at most %d", l.num_top,
           LLB_MAX_LOGPROBS);
  auto decoded = e.str(l.decoded, "decoded");
  auto top = e.tables<llmbus::TopLogprob>(l.top, l.num_top, "top",
                                          [](Enc &e, const llb_top_logprob &p) {
                                            auto s = e.str(p.decoded, "decoded");
                                            return e.ok() ? llmbus::CreateTopLogprob(
                                                                e.b, p.token_id, p.logprob, s)
                                                          : fb::Offset<llmbus::TopLogprob>(0);
                                          });
  if (!e.ok())
    return 0;
  return llmbus::CreateTokenLogprobs(e.b, l.token_id, l.logprob, l.rank, decoded, top);
}

static fb::Offset<llmbus::CompletionOutput> enc_completion(Enc &e,
                                                           const llb_completion_output &c) {
  enc_finish_reason(e, c.finish_reason);
  if (c.num_logprobs != 0 && c.num_logprobs != c.num_token_ids)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "logprobs", "%d entries for %d tokens", c.num_logprobs,
           c.num_token_ids);
  auto text = e.str(c.text, "text");
  auto ids = e.vec(c.token_ids, c.num_token_ids, "token_ids");
  auto lps = e.tables<llmbus::TokenLogprobs>(c.logprobs, c.num_logprobs, "logprobs",
                                             enc_token_logprobs);
  auto stop = e.str(c.stop_reason, "stop_reason");
  if (!e.ok())
    return 0;
  return llmbus::CreateCompletionOutput(e.b, c.index, text, ids, c.cumulative_logprob, lps,
                                        static_cast<llmbus::FinishReason>(c.finish_reason),
                                        stop, c.resync);
}

static fb::Offset<void> build_request_output(Enc &e, const llb_request_output &m) {
  auto id = e.str(m.request_id, "request_id", true);
  auto ids = e.vec(m.prompt_token_ids, m.num_prompt_token_ids, "prompt_token_ids");
  auto prompt = e.str(m.prompt, "prompt");
  auto outs = e.tables<llmbus::CompletionOutput>(m.outputs, m.num_outputs, "outputs",
                                                 enc_completion);
  const llb_request_metrics &x = m.metrics;
  auto metrics = llmbus::CreateRequestMetrics(e.b, x.arrival_time, x.first_scheduled_time,
                                              x.first_token_time, x.last_token_time,
                                              x.finished_time, x.num_cached_tokens,
                                              x.num_prompt_tokens, x.num_generation_tokens);
  auto err = enc_error(e, m.error, "error");
  auto pool = enc_pooled(e, m.pooling_output, m.num_pooling_output, "pooling_output");
  auto plp = e.tables<llmbus::TokenLogprobs>(m.prompt_logprobs, m.num_prompt_logprobs, "prompt_logprobs",
                                             enc_token_logprobs);
  if (!e.ok())
    return 0;
  return llmbus::CreateRequestOutput(e.b, LLB_SCHEMA_VERSION, id, ids, prompt, outs, m.finished,
                                     metrics, err, m.max_model_len, pool, plp)
      .Union();
}

static bool dec_token_logprobs(Dec &d, const llmbus::TokenLogprobs &t, llb_token_logprobs &l) {
  l.token_id = t.token_id();
  l.logprob = t.logprob();
  l.rank = t.rank();
  if (t.top() && t.top()->size() > LLB_MAX_LOGPROBS)
    return d.fail(LLB_STATUS_MALFORMED, "top", "%u entries, at most %d", t.top()->size(),
                  LLB_MAX_LOGPROBS);
  return d.str(t.decoded(), &l.decoded, "decoded") &&
         d.tables(t.top(), &l.top, &l.num_top, "top",
                  [](Dec &d, const llmbus::TopLogprob &p, llb_top_logprob &o) {
                    o.token_id = p.token_id();
                    o.logprob = p.logprob();
                    return d.str(p.decoded(), &o.decoded, "decoded");
                  });
}

static bool dec_completion(Dec &d, const llmbus::CompletionOutput &t, llb_completion_output &c) {
  c.index = t.index();
  c.resync = t.resync();
  c.cumulative_logprob = t.cumulative_logprob();
  if (!dec_finish_reason(d, t.finish_reason(), &c.finish_reason) ||
      !d.str(t.text(), &c.text, "text") ||
      !d.vec(t.token_ids(), &c.token_ids, &c.num_token_ids, "token_ids") ||
      !d.tables(t.logprobs(), &c.logprobs, &c.num_logprobs, "logprobs", dec_token_logprobs) ||
      !d.str(t.stop_reason(), &c.stop_reason, "stop_reason"))
    return false;
  if (c.num_logprobs != 0 && c.num_logprobs != c.num_token_ids)
    return d.fail(LLB_STATUS_MALFORMED, "logprobs", "%d entries for %d tokens", c.num_logprobs,
                  c.num_token_ids);
  return true;
}

static bool read_request_output(Dec &d, const llmbus::RequestOutput &t, llb_request_output &m) {
  m.finished = t.finished();
  m.max_model_len = t.max_model_len();
  if (m.max_model_len < 0)
    return d.fail(LLB_STATUS_MALFORMED, "max_model_len", "%d is negative", m.max_model_len);
  if (const llmbus::RequestMetrics *x = t.metrics())
    m.metrics = llb_request_metrics{x->arrival_time(),      x->first_scheduled_time(),
                                    x->first_token_time(),  x->last_token_time(),
                                    x->finished_time(),     x->num_cached_tokens(),
                                    x->num_prompt_tokens(), x->num_generation_tokens()};
  return d.str(t.request_id(), &m.request_id, "request_id", true) &&
         d.vec(t.prompt_token_ids(), &m.prompt_token_ids, &m.num_prompt_token_ids,
               "prompt_token_ids") &&
         d.str(t.prompt(), &m.prompt, "prompt") &&
         d.tables(t.outputs(), &m.outputs, &m.num_outputs, "outputs", dec_completion) &&
         dec_error(d, t.error(), &m.error, "error") &&
         dec_pooled(d, t.pooling_output(), &m.pooling_output, &m.num_pooling_output,
                    "pooling_output") &&
         d.tables(t.prompt_logprobs(), &m.prompt_logprobs, &m.num_prompt_logprobs, "prompt_logprobs",
                  dec_token_logprobs);
}

LLB_CODEC_DEFINE(request_output, RequestOutput, LLB_MESSAGE_KIND_REQUEST_OUTPUT)

// Codecs of the step boundaries: scheduler_output.fbs, kv_step.fbs, encoder_step.fbs,
// model_runner_output.fbs.
#include "encoder_step_generated.h"
#include "kv_step_generated.h"
#include "model_runner_output_generated.h"
#include "scheduler_output_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/encoder_step.h"
#include "schemas/kv_step.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

using namespace llb_codec;

// ---- SchedulerOutput ---------------------------------------------------------------------

static fb::Offset<llmbus::CachedRequestData> enc_cached(Enc &e, const llb_cached_request_data &c) {
  if (c.num_reqs == 0)
    return 0;
  Scope s(e, "scheduled_cached_reqs", 0);
  int32_t n = c.num_reqs, sum_tok = 0, sum_blk = 0;
  if (c.new_token_counts && !sum_counts(e, c.new_token_counts, n, "new_token_counts", &sum_tok))
    return 0;
  if (c.new_block_counts && !sum_counts(e, c.new_block_counts, n, "new_block_counts", &sum_blk))
    return 0;
  if (sum_tok != c.num_new_token_ids || sum_blk != c.num_new_block_ids) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, sum_tok != c.num_new_token_ids ? "new_token_ids"
                                                                       : "new_block_ids",
           "count does not match the sum of the per-request counts");
    return 0;
  }
  if (!c.resumed_from_preemption || !c.num_computed_tokens || !c.num_output_tokens) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_computed_tokens",
           "resumed_from_preemption, num_computed_tokens, num_output_tokens are required");
    return 0;
  }
  auto ids = e.strs(c.req_ids, n, "req_ids");
  auto resumed = e.bools(c.resumed_from_preemption, n, "resumed_from_preemption");
  auto tok = e.vec(c.new_token_ids, c.num_new_token_ids, "new_token_ids");
  auto tok_n = c.new_token_counts ? e.vec(c.new_token_counts, n, "new_token_counts") : 0;
  auto blk = e.vec(c.new_block_ids, c.num_new_block_ids, "new_block_ids");
  auto blk_n = c.new_block_counts ? e.vec(c.new_block_counts, n, "new_block_counts") : 0;
  auto computed = e.vec(c.num_computed_tokens, n, "num_computed_tokens");
  auto outputs = e.vec(c.num_output_tokens, n, "num_output_tokens");
  if (!e.ok())
    return 0;
  return llmbus::CreateCachedRequestData(e.b, ids, resumed, tok, tok_n, blk, blk_n, computed,
                                         outputs);
}

static fb::Offset<void> build_scheduler_output(Enc &e, const llb_scheduler_output &m) {
  auto news = e.tables<llmbus::NewRequestData>(
      m.scheduled_new_reqs, m.num_scheduled_new_reqs, "scheduled_new_reqs",
      [](Enc &e, const llb_new_request_data &r) {
        auto id = e.str(r.req_id, "req_id", true);
        auto prompt = e.vec(r.prompt_token_ids, r.num_prompt_token_ids, "prompt_token_ids");
        auto sp = enc_sampling(e, r.sampling_params, "sampling_params", true);
        auto blocks = e.vec(r.block_ids, r.num_block_ids, "block_ids");
        auto mm = enc_mm_features(e, r.mm_features, r.num_mm_features, "mm_features");
        auto outputs = e.vec(r.output_token_ids, r.num_output_token_ids, "output_token_ids");
        auto so = enc_structured_outputs(e, r.structured_outputs, "structured_outputs");
        auto pool = enc_pooling_params(e, r.pooling_params, "pooling_params");
        auto lora = enc_lora_request(e, r.lora_request, 1, "lora_request");
        return e.ok() ? llmbus::CreateNewRequestData(e.b, id, prompt, sp, blocks,
                                                     r.num_computed_tokens, mm, outputs, so, pool,
                                                     lora)
                      : fb::Offset<llmbus::NewRequestData>(0);
      });
  auto cached = enc_cached(e, m.scheduled_cached_reqs);
  auto sched = e.tables<llmbus::ScheduledTokens>(
      m.num_scheduled_tokens, m.num_scheduled_reqs, "num_scheduled_tokens",
      [](Enc &e, const llb_scheduled_tokens &s) {
        auto id = e.str(s.req_id, "req_id", true);
        auto tp = e.str(s.traceparent, "traceparent");
        if (e.ok() && (s.num_spec_token_ids < 0 || s.num_spec_token_ids > LLB_MAX_SPEC_TOKENS ||
                       (s.num_spec_token_ids > 0 && s.num_spec_token_ids >= s.num_tokens)))
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "scheduled_spec_decode_tokens",
                 "%d drafts in %d tokens (at most %d, fewer than num_tokens)", s.num_spec_token_ids,
                 s.num_tokens, LLB_MAX_SPEC_TOKENS);
        auto spec = s.num_spec_token_ids > 0
                        ? e.vec(s.spec_token_ids, s.num_spec_token_ids, "scheduled_spec_decode_tokens")
                        : 0;
        return e.ok() ? llmbus::CreateScheduledTokens(e.b, id, s.num_tokens, tp, spec)
                      : fb::Offset<llmbus::ScheduledTokens>(0);
      });
  auto enc_inputs = e.tables<llmbus::ScheduledEncoderInput>(
      m.scheduled_encoder_inputs, m.num_scheduled_encoder_inputs, "scheduled_encoder_inputs",
      [](Enc &e, const llb_scheduled_encoder_input &s) {
        auto id = e.str(s.req_id, "req_id", true);
        auto in = e.vec(s.input_ids, s.num_input_ids, "input_ids");
        auto mm = enc_mm_features(e, s.mm_features, s.num_mm_features, "mm_features");
        if (e.ok() && s.num_mm_features != 0 && s.num_mm_features != s.num_input_ids)
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "mm_features", "%d entries for %d input_ids",
                 s.num_mm_features, s.num_input_ids);
        return e.ok() ? llmbus::CreateScheduledEncoderInput(e.b, id, in, mm)
                      : fb::Offset<llmbus::ScheduledEncoderInput>(0);
      });
  auto finished = e.strs(m.finished_req_ids, m.num_finished_req_ids, "finished_req_ids");
  auto free_mm = e.strs(m.free_encoder_mm_hashes, m.num_free_encoder_mm_hashes,
                        "free_encoder_mm_hashes");
  auto preempted = e.strs(m.preempted_req_ids, m.num_preempted_req_ids, "preempted_req_ids");
  if (e.ok() && m.block_size < 1)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "block_size", "%d, must be >= 1", m.block_size);
  auto kv_meta = e.ok() ? enc_kv_metadata(e, m.kv_connector_metadata, m.block_size, "kv_connector_metadata") : 0;
  if (!e.ok())
    return 0;
  llmbus::SchedulerOutputBuilder t(e.b);
  t.add_version(LLB_SCHEMA_VERSION);
  t.add_step(m.step);
  t.add_scheduled_new_reqs(news);
  t.add_scheduled_cached_reqs(cached);
  t.add_num_scheduled_tokens(sched);
  t.add_total_num_scheduled_tokens(m.total_num_scheduled_tokens);
  t.add_scheduled_encoder_inputs(enc_inputs);
  t.add_finished_req_ids(finished);
  t.add_free_encoder_mm_hashes(free_mm);
  t.add_preempted_req_ids(preempted);
  t.add_block_size(m.block_size);
  t.add_kv_connector_metadata(kv_meta);
  return t.Finish().Union();
}

static bool dec_cached(Dec &d, const llmbus::CachedRequestData *t, llb_cached_request_data &c) {
  if (!t)
    return true;
  Scope s(d, "scheduled_cached_reqs", 0);
  if (!d.strs(t->req_ids(), &c.req_ids, &c.num_reqs, "req_ids"))
    return false;
  int32_t n = c.num_reqs, got = 0, sum = 0;
  auto len = [](const auto *v) { return v ? (size_t)v->size() : (size_t)0; };
  if (!check_len(d, len(t->resumed_from_preemption()), n, "resumed_from_preemption", "num_reqs") ||
      !check_len(d, len(t->num_computed_tokens()), n, "num_computed_tokens", "num_reqs") ||
      !check_len(d, len(t->num_output_tokens()), n, "num_output_tokens", "num_reqs") ||
      !d.bools(t->resumed_from_preemption(), &c.resumed_from_preemption, &got,
               "resumed_from_preemption") ||
      !d.vec(t->num_computed_tokens(), &c.num_computed_tokens, &got, "num_computed_tokens") ||
      !d.vec(t->num_output_tokens(), &c.num_output_tokens, &got, "num_output_tokens") ||
      !d.vec(t->new_token_ids(), &c.new_token_ids, &c.num_new_token_ids, "new_token_ids") ||
      !d.vec(t->new_block_ids(), &c.new_block_ids, &c.num_new_block_ids, "new_block_ids"))
    return false;
  // Per-request counts: absent means all zero; present must cover num_reqs and sum up.
  struct {
    const fb::Vector<int32_t> *v;
    const int32_t **out;
    int32_t total;
    const char *name;
  } counts[2] = {{t->new_token_counts(), &c.new_token_counts, c.num_new_token_ids,
                  "new_token_counts"},
                 {t->new_block_counts(), &c.new_block_counts, c.num_new_block_ids,
                  "new_block_counts"}};
  for (auto &k : counts) {
    if (!k.v) {
      int32_t *z = d.alloc<int32_t>((size_t)n, k.name);
      if (!z)
        return false;
      memset(z, 0, (size_t)n * sizeof *z);
      *k.out = z;
    } else if (!check_len(d, k.v->size(), n, k.name, "num_reqs") ||
               !d.vec(k.v, k.out, &got, k.name)) {
      return false;
    }
    if (!sum_counts(d, *k.out, n, k.name, &sum))
      return false;
    if (sum != k.total)
      return d.fail(LLB_STATUS_MALFORMED, k.name, "sum %d, the flattened array has %d", sum,
                    k.total);
  }
  return true;
}

static bool read_scheduler_output(Dec &d, const llmbus::SchedulerOutput &t,
                                  llb_scheduler_output &m) {
  m.step = t.step();
  m.total_num_scheduled_tokens = t.total_num_scheduled_tokens();
  m.block_size = t.block_size();
  if (m.block_size < 1)
    return d.fail(LLB_STATUS_MALFORMED, "block_size", "%d, must be >= 1", m.block_size);
  bool ok =
      d.tables(t.scheduled_new_reqs(), &m.scheduled_new_reqs, &m.num_scheduled_new_reqs,
               "scheduled_new_reqs",
               [](Dec &d, const llmbus::NewRequestData &r, llb_new_request_data &o) {
                 o.num_computed_tokens = r.num_computed_tokens();
                 return d.str(r.req_id(), &o.req_id, "req_id", true) &&
                        d.vec(r.prompt_token_ids(), &o.prompt_token_ids,
                              &o.num_prompt_token_ids, "prompt_token_ids") &&
                        dec_sampling(d, r.sampling_params(), &o.sampling_params,
                                     "sampling_params", true) &&
                        d.vec(r.block_ids(), &o.block_ids, &o.num_block_ids, "block_ids") &&
                        dec_mm_features(d, r.mm_features(), &o.mm_features, &o.num_mm_features,
                                        "mm_features") &&
                        d.vec(r.output_token_ids(), &o.output_token_ids,
                              &o.num_output_token_ids, "output_token_ids") &&
                        dec_structured_outputs(d, r.structured_outputs(), &o.structured_outputs,
                                               "structured_outputs") &&
                        dec_pooling_params(d, r.pooling_params(), &o.pooling_params,
                                           "pooling_params") &&
                        dec_lora_request(d, r.lora_request(), 1, &o.lora_request, "lora_request");
               }) &&
      dec_cached(d, t.scheduled_cached_reqs(), m.scheduled_cached_reqs) &&
      d.tables(t.num_scheduled_tokens(), &m.num_scheduled_tokens, &m.num_scheduled_reqs,
               "num_scheduled_tokens",
               [](Dec &d, const llmbus::ScheduledTokens &s, llb_scheduled_tokens &o) {
                 o.num_tokens = s.num_tokens();
                 if (o.num_tokens < 0)
                   return d.fail(LLB_STATUS_MALFORMED, "num_tokens", "negative (%d)",
                                 o.num_tokens);
                 if (!(d.str(s.req_id(), &o.req_id, "req_id", true) &&
                       d.str(s.traceparent(), &o.traceparent, "traceparent") &&
                       d.vec(s.scheduled_spec_decode_tokens(), &o.spec_token_ids,
                             &o.num_spec_token_ids, "scheduled_spec_decode_tokens")))
                   return false;
                 if (o.num_spec_token_ids > LLB_MAX_SPEC_TOKENS ||
                     (o.num_spec_token_ids > 0 && o.num_spec_token_ids >= o.num_tokens))
                   return d.fail(LLB_STATUS_MALFORMED, "scheduled_spec_decode_tokens",
                                 "%d drafts in %d tokens (at most %d, fewer than num_tokens)",
                                 o.num_spec_token_ids, o.num_tokens, LLB_MAX_SPEC_TOKENS);
                 return true;
               }) &&
      d.tables(t.scheduled_encoder_inputs(), &m.scheduled_encoder_inputs,
               &m.num_scheduled_encoder_inputs, "scheduled_encoder_inputs",
               [](Dec &d, const llmbus::ScheduledEncoderInput &s, llb_scheduled_encoder_input &o) {
                 if (!(d.str(s.req_id(), &o.req_id, "req_id", true) &&
                       d.vec(s.input_ids(), &o.input_ids, &o.num_input_ids, "input_ids") &&
                       dec_mm_features(d, s.mm_features(), &o.mm_features, &o.num_mm_features,
                                       "mm_features")))
                   return false;
                 if (o.num_mm_features != 0 && o.num_mm_features != o.num_input_ids)
                   return d.fail(LLB_STATUS_MALFORMED, "mm_features", "%d entries for %d input_ids",
                                 o.num_mm_features, o.num_input_ids);
                 return true;
               }) &&
      d.strs(t.finished_req_ids(), &m.finished_req_ids, &m.num_finished_req_ids,
             "finished_req_ids") &&
      d.strs(t.free_encoder_mm_hashes(), &m.free_encoder_mm_hashes,
             &m.num_free_encoder_mm_hashes, "free_encoder_mm_hashes") &&
      d.strs(t.preempted_req_ids(), &m.preempted_req_ids, &m.num_preempted_req_ids,
             "preempted_req_ids") &&
      dec_kv_metadata(d, t.kv_connector_metadata(), m.block_size, &m.kv_connector_metadata,
                      "kv_connector_metadata");
  if (!ok)
    return false;
  int64_t total = 0;
  for (int32_t i = 0; i < m.num_scheduled_reqs; i++)
    total += m.num_scheduled_tokens[i].num_tokens;
  if (total != m.total_num_scheduled_tokens)
    return d.fail(LLB_STATUS_MALFORMED, "total_num_scheduled_tokens",
                  "%d, but num_scheduled_tokens sum to %lld", m.total_num_scheduled_tokens,
                  (long long)total);
  return true;
}

LLB_CODEC_DEFINE(scheduler_output, SchedulerOutput, LLB_MESSAGE_KIND_SCHEDULER_OUTPUT)

// ---- KVStep / KVStepResult ---------------------------------------------------------------

static fb::Offset<void> build_kv_step(Enc &e, const llb_kv_step &m) {
  auto ops = e.tables<llmbus::KVOp>(m.ops, m.num_ops, "ops", [](Enc &e, const llb_kv_op &o) {
    if ((unsigned)o.kind > LLB_KV_OP_KIND_RELEASE)
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "kind", "unknown value %d", (int)o.kind);
    auto id = e.str(o.req_id, "req_id", o.kind == LLB_KV_OP_KIND_ALLOCATE);
    auto hashes = e.vec(o.block_hashes, o.num_block_hashes, "block_hashes");
    auto ids = e.vec(o.block_ids, o.num_block_ids, "block_ids");
    return e.ok() ? llmbus::CreateKVOp(e.b, static_cast<llmbus::KVOpKind>(o.kind), id,
                                       o.num_tokens, hashes, o.num_computed_tokens, o.lookup,
                                       ids, o.num_held_blocks)
                  : fb::Offset<llmbus::KVOp>(0);
  });
  auto held = e.vec(m.held_block_ids, m.num_held_block_ids, "held_block_ids");
  if (!e.ok())
    return 0;
  return llmbus::CreateKVStep(e.b, m.version ? m.version : LLB_KV_STEP_VERSION, m.step, ops,
                              m.reset, held, m.resync)
      .Union();
}

// Both sides of the kv boundary refuse an older peer: version 1 kept the block tables in the
// kv_manager (docs/design.md §4), and neither side can serve the other's meaning.
static bool kv_version_ok(Dec &d, uint16_t version, const char *peer) {
  if (version >= LLB_KV_STEP_VERSION)
    return true;
  return d.fail(LLB_STATUS_MALFORMED, "version",
                "%u from a version-1 %s (blocks by request id); this peer speaks version %d "
                "(block ids, the scheduler owns the block state)",
                (unsigned)version, peer, LLB_KV_STEP_VERSION);
}

static bool ids_non_negative(Dec &d, const int32_t *ids, int32_t n, const char *field) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0)
      return d.fail(LLB_STATUS_MALFORMED, field, "[%d] = %d: a block id is >= 0", i, ids[i]);
  return true;
}

static bool read_kv_op(Dec &d, const llmbus::KVOp &o, llb_kv_op &v) {
  int kind = (int)o.kind();
  if (kind == LLB_KV_OP_KIND_FREE)
    return d.fail(LLB_STATUS_MALFORMED, "kind",
                  "Free (by request id) is version 1: since version 2 the scheduler sends "
                  "Release with block ids");
  if (kind < 0 || kind > LLB_KV_OP_KIND_RELEASE)
    return d.fail(LLB_STATUS_MALFORMED, "kind", "unknown value %d", kind);
  v.kind = (llb_kv_op_kind)kind;
  v.num_tokens = o.num_tokens();
  v.num_computed_tokens = o.num_computed_tokens();
  v.num_held_blocks = o.num_held_blocks();
  v.lookup = o.lookup();
  if (v.num_tokens < 0 || v.num_computed_tokens < 0 || v.num_held_blocks < 0)
    return d.fail(LLB_STATUS_MALFORMED, "num_tokens",
                  "negative count (tokens %d, computed %d, held blocks %d)", v.num_tokens,
                  v.num_computed_tokens, v.num_held_blocks);
  if (!d.str(o.req_id(), &v.req_id, "req_id", v.kind == LLB_KV_OP_KIND_ALLOCATE) ||
      !d.vec(o.block_hashes(), &v.block_hashes, &v.num_block_hashes, "block_hashes") ||
      !d.vec(o.block_ids(), &v.block_ids, &v.num_block_ids, "block_ids") ||
      !ids_non_negative(d, v.block_ids, v.num_block_ids, "block_ids"))
    return false;
  if (v.kind == LLB_KV_OP_KIND_CACHE && v.num_block_ids != v.num_block_hashes)
    return d.fail(LLB_STATUS_MALFORMED, "block_ids", "%d ids for %d hashes: Cache pairs them",
                  v.num_block_ids, v.num_block_hashes);
  return true;
}

static bool read_kv_step(Dec &d, const llmbus::KVStep &t, llb_kv_step &m) {
  if (!kv_version_ok(d, t.version(), "scheduler"))
    return false;
  m.step = t.step();
  m.reset = t.reset();
  m.resync = t.resync();
  if (!d.vec(t.held_block_ids(), &m.held_block_ids, &m.num_held_block_ids, "held_block_ids") ||
      !ids_non_negative(d, m.held_block_ids, m.num_held_block_ids, "held_block_ids"))
    return false;
  if (m.num_held_block_ids > 0 && !m.resync && !m.reset)
    return d.fail(LLB_STATUS_MALFORMED, "held_block_ids",
                  "%d ids without resync or reset: the list means nothing alone",
                  m.num_held_block_ids);
  return d.tables(t.ops(), &m.ops, &m.num_ops, "ops", read_kv_op);
}

LLB_CODEC_DEFINE(kv_step, KVStep, LLB_MESSAGE_KIND_KV_STEP)

static fb::Offset<void> build_kv_step_result(Enc &e, const llb_kv_step_result &m) {
  auto results = e.tables<llmbus::KVOpResult>(
      m.results, m.num_results, "results", [](Enc &e, const llb_kv_op_result &r) {
        if (r.status < 0 || r.status >= LLB_STATUS_COUNT)
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "status", "%d is not an llb_status", r.status);
        auto id = e.str(r.req_id, "req_id");
        auto blocks = e.vec(r.block_ids, r.num_block_ids, "block_ids");
        return e.ok() ? llmbus::CreateKVOpResult(e.b, id, r.status, r.num_cached_tokens, blocks)
                      : fb::Offset<llmbus::KVOpResult>(0);
      });
  auto err = enc_error(e, m.error, "error");
  if (!e.ok())
    return 0;
  return llmbus::CreateKVStepResult(e.b, m.version ? m.version : LLB_KV_STEP_VERSION, m.step,
                                    results, m.num_free_blocks, m.num_total_blocks,
                                    m.prefix_cache_queries, m.prefix_cache_hits, err)
      .Union();
}

static bool read_kv_step_result(Dec &d, const llmbus::KVStepResult &t, llb_kv_step_result &m) {
  if (!kv_version_ok(d, t.version(), "kv_manager"))
    return false;
  m.step = t.step();
  m.num_free_blocks = t.num_free_blocks();
  m.num_total_blocks = t.num_total_blocks();
  m.prefix_cache_queries = t.prefix_cache_queries();
  m.prefix_cache_hits = t.prefix_cache_hits();
  return d.tables(t.results(), &m.results, &m.num_results, "results",
                  [](Dec &d, const llmbus::KVOpResult &r, llb_kv_op_result &v) {
                    v.status = r.status();
                    v.num_cached_tokens = r.num_cached_tokens();
                    if (v.status < 0 || v.status >= LLB_STATUS_COUNT)
                      return d.fail(LLB_STATUS_MALFORMED, "status", "%d is not an llb_status",
                                    v.status);
                    return d.str(r.req_id(), &v.req_id, "req_id") &&
                           d.vec(r.block_ids(), &v.block_ids, &v.num_block_ids, "block_ids");
                  }) &&
         dec_error(d, t.error(), &m.error, "error");
}

LLB_CODEC_DEFINE(kv_step_result, KVStepResult, LLB_MESSAGE_KIND_KV_STEP_RESULT)

// ---- EncoderStep / EncoderStepResult -----------------------------------------------------

static fb::Offset<void> build_encoder_step(Enc &e, const llb_encoder_step &m) {
  auto ops = e.tables<llmbus::EncoderOp>(
      m.ops, m.num_ops, "ops", [](Enc &e, const llb_encoder_op &o) {
        if ((unsigned)o.kind > LLB_ENCODER_OP_KIND_FREE_REQUEST)
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "kind", "unknown value %d", (int)o.kind);
        auto id = e.str(o.req_id, "req_id", true);
        auto hash = e.str(o.mm_hash, "mm_hash", o.kind != LLB_ENCODER_OP_KIND_FREE_REQUEST);
        return e.ok() ? llmbus::CreateEncoderOp(e.b, static_cast<llmbus::EncoderOpKind>(o.kind),
                                                id, hash, o.input_id, o.num_embeds,
                                                o.encoder_compute_budget,
                                                o.num_embeds_to_schedule)
                      : fb::Offset<llmbus::EncoderOp>(0);
      });
  if (!e.ok())
    return 0;
  return llmbus::CreateEncoderStep(e.b, LLB_SCHEMA_VERSION, m.step, ops, m.reset).Union();
}

static bool read_encoder_step(Dec &d, const llmbus::EncoderStep &t, llb_encoder_step &m) {
  m.step = t.step();
  m.reset = t.reset();
  return d.tables(t.ops(), &m.ops, &m.num_ops, "ops",
                  [](Dec &d, const llmbus::EncoderOp &o, llb_encoder_op &v) {
                    int kind = (int)o.kind();
                    if (kind < 0 || kind > LLB_ENCODER_OP_KIND_FREE_REQUEST)
                      return d.fail(LLB_STATUS_MALFORMED, "kind", "unknown value %d", kind);
                    v.kind = (llb_encoder_op_kind)kind;
                    v.input_id = o.input_id();
                    v.num_embeds = o.num_embeds();
                    v.encoder_compute_budget = o.encoder_compute_budget();
                    v.num_embeds_to_schedule = o.num_embeds_to_schedule();
                    if (v.num_embeds < 0)
                      return d.fail(LLB_STATUS_MALFORMED, "num_embeds", "negative (%d)",
                                    v.num_embeds);
                    return d.str(o.req_id(), &v.req_id, "req_id", true) &&
                           d.str(o.mm_hash(), &v.mm_hash, "mm_hash",
                                 kind != LLB_ENCODER_OP_KIND_FREE_REQUEST);
                  });
}

LLB_CODEC_DEFINE(encoder_step, EncoderStep, LLB_MESSAGE_KIND_ENCODER_STEP)

static fb::Offset<void> build_encoder_step_result(Enc &e, const llb_encoder_step_result &m) {
  auto results = e.tables<llmbus::EncoderOpResult>(
      m.results, m.num_results, "results",
      [](Enc &e, const bool &ok) { return llmbus::CreateEncoderOpResult(e.b, ok); });
  auto freed = e.strs(m.freed_mm_hashes, m.num_freed_mm_hashes, "freed_mm_hashes");
  auto err = enc_error(e, m.error, "error");
  if (!e.ok())
    return 0;
  return llmbus::CreateEncoderStepResult(e.b, LLB_SCHEMA_VERSION, m.step, results, freed,
                                         m.num_free_slots, err)
      .Union();
}

static bool read_encoder_step_result(Dec &d, const llmbus::EncoderStepResult &t,
                                     llb_encoder_step_result &m) {
  m.step = t.step();
  m.num_free_slots = t.num_free_slots();
  return d.tables(t.results(), &m.results, &m.num_results, "results",
                  [](Dec &, const llmbus::EncoderOpResult &r, bool &ok) {
                    ok = r.ok();
                    return true;
                  }) &&
         d.strs(t.freed_mm_hashes(), &m.freed_mm_hashes, &m.num_freed_mm_hashes,
                "freed_mm_hashes") &&
         dec_error(d, t.error(), &m.error, "error");
}

LLB_CODEC_DEFINE(encoder_step_result, EncoderStepResult, LLB_MESSAGE_KIND_ENCODER_STEP_RESULT)

// ---- ModelRunnerOutput -------------------------------------------------------------------

static fb::Offset<void> build_model_runner_output(Enc &e, const llb_model_runner_output &m) {
  int32_t sum = 0;
  if (e.count(m.num_sampled, m.num_reqs, "num_sampled") &&
      sum_counts(e, m.num_sampled, m.num_reqs, "num_sampled", &sum) &&
      sum != m.num_sampled_token_ids)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_sampled_token_ids",
           "%d, but num_sampled sum to %d", m.num_sampled_token_ids, sum);
  auto ids = e.strs(m.req_ids, m.num_reqs, "req_ids");
  auto tok = e.vec(m.sampled_token_ids, m.num_sampled_token_ids, "sampled_token_ids");
  auto counts = e.vec(m.num_sampled, m.num_reqs, "num_sampled");
  auto lp = enc_logprobs(e, m.logprobs, "logprobs");
  auto err = enc_error(e, m.error, "error");
  auto failed = e.str(m.failed_req_id, "failed_req_id");
  int32_t pooled = 0;
  if (m.num_pooled && e.ok() && sum_counts(e, m.num_pooled, m.num_reqs, "num_pooled", &pooled) &&
      pooled != m.num_pooler_output)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_pooler_output", "%d, but num_pooled sum to %d",
           m.num_pooler_output, pooled);
  if (!m.num_pooled && m.num_pooler_output != 0)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_pooled", "missing for %d floats", m.num_pooler_output);
  for (int32_t i = 0; m.num_pooled && e.ok() && i < m.num_reqs; i++)
    if (m.num_pooled[i] > LLB_MAX_POOLED_DIMS)
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_pooled", "[%d] = %d, at most %d", i,
             m.num_pooled[i], LLB_MAX_POOLED_DIMS);
  fb::Offset<fb::Vector<float>> pout = 0;
  fb::Offset<fb::Vector<int32_t>> pcounts = 0;
  if (e.ok() && m.num_pooler_output > 0) {
    pout = e.vec(m.pooler_output, m.num_pooler_output, "pooler_output");
    pcounts = e.vec(m.num_pooled, m.num_reqs, "num_pooled");
  }
  const bool plp = m.prompt_logprobs.num_tokens > 0;
  int32_t plp_sum = 0;
  if (plp && sum_counts(e, m.num_prompt_logprobs, m.num_reqs, "num_prompt_logprobs", &plp_sum) &&
      plp_sum != m.prompt_logprobs.num_tokens)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_prompt_logprobs", "sum %d for %d prompt_logprobs rows",
           plp_sum, m.prompt_logprobs.num_tokens);
  auto plp_lists = enc_logprobs(e, m.prompt_logprobs, "prompt_logprobs");
  auto plp_counts = plp ? e.vec(m.num_prompt_logprobs, m.num_reqs, "num_prompt_logprobs") : 0;
  auto plp_start = plp ? e.vec(m.prompt_logprobs_start, m.num_reqs, "prompt_logprobs_start") : 0;
  fb::Offset<fb::Vector<int32_t>> spec = 0, spec_counts = 0;
  if (e.ok() && m.num_spec_tokens) {
    int32_t spec_sum = 0;
    for (int32_t i = 0; i < m.num_reqs && e.ok(); i++)
      if (m.num_spec_tokens[i] < 0 || m.num_spec_tokens[i] > LLB_MAX_SPEC_TOKENS)
        e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_spec_tokens", "[%d] = %d, not in [0, %d]", i,
               m.num_spec_tokens[i], LLB_MAX_SPEC_TOKENS);
    if (e.ok() && sum_counts(e, m.num_spec_tokens, m.num_reqs, "num_spec_tokens", &spec_sum) &&
        spec_sum != m.num_spec_token_ids)
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_spec_token_ids", "%d, but num_spec_tokens sum to %d",
             m.num_spec_token_ids, spec_sum);
    spec = e.vec(m.spec_token_ids, m.num_spec_token_ids, "spec_token_ids");
    spec_counts = e.vec(m.num_spec_tokens, m.num_reqs, "num_spec_tokens");
  } else if (m.num_spec_token_ids != 0) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_spec_tokens", "missing for %d drafts", m.num_spec_token_ids);
  }
  auto kv_out = e.ok() ? enc_kv_output(e, m.kv_connector_output, "kv_connector_output") : 0;
  if (!e.ok())
    return 0;
  return llmbus::CreateModelRunnerOutput(e.b, LLB_SCHEMA_VERSION, m.step, ids, tok, counts, lp,
                                         err, failed, pout, pcounts, plp_lists, plp_counts, plp_start,
                                         spec, spec_counts, kv_out)
      .Union();
}

static bool read_model_runner_output(Dec &d, const llmbus::ModelRunnerOutput &t,
                                     llb_model_runner_output &m) {
  m.step = t.step();
  int32_t n = 0, sum = 0;
  if (!d.strs(t.req_ids(), &m.req_ids, &m.num_reqs, "req_ids") ||
      !check_len(d, t.num_sampled() ? t.num_sampled()->size() : 0, m.num_reqs, "num_sampled",
                 "num_reqs") ||
      !d.vec(t.num_sampled(), &m.num_sampled, &n, "num_sampled") ||
      !d.vec(t.sampled_token_ids(), &m.sampled_token_ids, &m.num_sampled_token_ids,
             "sampled_token_ids") ||
      !sum_counts(d, m.num_sampled, m.num_reqs, "num_sampled", &sum))
    return false;
  if (sum != m.num_sampled_token_ids)
    return d.fail(LLB_STATUS_MALFORMED, "num_sampled", "sum %d, sampled_token_ids has %d", sum,
                  m.num_sampled_token_ids);
  if (t.num_pooled()) {
    if (!check_len(d, t.num_pooled()->size(), m.num_reqs, "num_pooled", "num_reqs") ||
        !d.vec(t.num_pooled(), &m.num_pooled, &n, "num_pooled") ||
        !sum_counts(d, m.num_pooled, m.num_reqs, "num_pooled", &sum) ||
        !d.vec(t.pooler_output(), &m.pooler_output, &m.num_pooler_output, "pooler_output"))
      return false;
    if (sum != m.num_pooler_output)
      return d.fail(LLB_STATUS_MALFORMED, "num_pooled", "sum %d, pooler_output has %d", sum,
                    m.num_pooler_output);
    for (int32_t i = 0; i < m.num_reqs; i++)
      if (m.num_pooled[i] > LLB_MAX_POOLED_DIMS)
        return d.fail(LLB_STATUS_MALFORMED, "num_pooled", "[%d] = %d, at most %d", i,
                      m.num_pooled[i], LLB_MAX_POOLED_DIMS);
  } else if (t.pooler_output() && t.pooler_output()->size() > 0) {
    return d.fail(LLB_STATUS_MALFORMED, "num_pooled", "missing for %u floats",
                  t.pooler_output()->size());
  }
  if (t.num_spec_tokens()) {
    if (!check_len(d, t.num_spec_tokens()->size(), m.num_reqs, "num_spec_tokens", "num_reqs") ||
        !d.vec(t.num_spec_tokens(), &m.num_spec_tokens, &n, "num_spec_tokens") ||
        !d.vec(t.spec_token_ids(), &m.spec_token_ids, &m.num_spec_token_ids, "spec_token_ids"))
      return false;
    for (int32_t i = 0; i < m.num_reqs; i++)
      if (m.num_spec_tokens[i] < 0 || m.num_spec_tokens[i] > LLB_MAX_SPEC_TOKENS)
        return d.fail(LLB_STATUS_MALFORMED, "num_spec_tokens", "[%d] = %d, not in [0, %d]", i,
                      m.num_spec_tokens[i], LLB_MAX_SPEC_TOKENS);
    if (!sum_counts(d, m.num_spec_tokens, m.num_reqs, "num_spec_tokens", &sum))
      return false;
    if (sum != m.num_spec_token_ids)
      return d.fail(LLB_STATUS_MALFORMED, "num_spec_tokens", "sum %d, spec_token_ids has %d", sum,
                    m.num_spec_token_ids);
  } else if (t.spec_token_ids() && t.spec_token_ids()->size() > 0) {
    return d.fail(LLB_STATUS_MALFORMED, "num_spec_tokens", "missing for %u drafts",
                  t.spec_token_ids()->size());
  }
  if (!dec_logprobs(d, t.logprobs(), &m.logprobs, "logprobs") ||
      !dec_error(d, t.error(), &m.error, "error") ||
      !d.str(t.failed_req_id(), &m.failed_req_id, "failed_req_id") ||
      !dec_logprobs(d, t.prompt_logprobs(), &m.prompt_logprobs, "prompt_logprobs") ||
      !dec_kv_output(d, t.kv_connector_output(), &m.kv_connector_output, "kv_connector_output"))
    return false;
  if (m.prompt_logprobs.num_tokens == 0)
    return true;
  int32_t plp_sum = 0;
  if (!check_len(d, t.num_prompt_logprobs() ? t.num_prompt_logprobs()->size() : 0, m.num_reqs,
                 "num_prompt_logprobs", "num_reqs") ||
      !check_len(d, t.prompt_logprobs_start() ? t.prompt_logprobs_start()->size() : 0, m.num_reqs,
                 "prompt_logprobs_start", "num_reqs") ||
      !d.vec(t.num_prompt_logprobs(), &m.num_prompt_logprobs, &n, "num_prompt_logprobs") ||
      !d.vec(t.prompt_logprobs_start(), &m.prompt_logprobs_start, &n, "prompt_logprobs_start") ||
      !sum_counts(d, m.num_prompt_logprobs, m.num_reqs, "num_prompt_logprobs", &plp_sum))
    return false;
  if (plp_sum != m.prompt_logprobs.num_tokens)
    return d.fail(LLB_STATUS_MALFORMED, "num_prompt_logprobs", "sum %d, prompt_logprobs has %d rows",
                  plp_sum, m.prompt_logprobs.num_tokens);
  for (int32_t i = 0; i < m.num_reqs; i++)
    if (m.prompt_logprobs_start[i] < 1)
      return d.fail(LLB_STATUS_MALFORMED, "prompt_logprobs_start", "[%d] = %d (prompt index >= 1)", i,
                    m.prompt_logprobs_start[i]);
  return true;
}

LLB_CODEC_DEFINE(model_runner_output, ModelRunnerOutput, LLB_MESSAGE_KIND_MODEL_RUNNER_OUTPUT)

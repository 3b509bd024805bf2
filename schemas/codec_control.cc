// Codecs of control.fbs: Heartbeat, SchedulerStats, ErrorReply.
#include "control_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/control.h"

using namespace llb_codec;

// ---- Heartbeat ---------------------------------------------------------------------------

static fb::Offset<void> build_heartbeat(Enc &e, const llb_heartbeat &m) {
  auto actor = e.str(m.actor, "actor", true);
  auto instance = e.str(m.instance, "instance");
  auto host = e.str(m.host, "host");
  auto engine = e.str(m.engine_id, "engine_id");
  if (e.ok() && m.num_lora_adapters > LLB_MAX_LORA_ADAPTERS)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "lora_adapters", "%d, at most %d", m.num_lora_adapters,
           LLB_MAX_LORA_ADAPTERS);
  auto loras = e.tables<llmbus::LoRAAdapter>(
      m.lora_adapters, m.num_lora_adapters, "lora_adapters", [](Enc &e, const llb_lora_adapter &a) {
        if (lora_check(e, LLB_STATUS_INVALID_ARGUMENT, a.lora_name, a.lora_int_id, 1, "lora_name") &&
            a.rank < 1)
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "rank", "%d, must be >= 1", a.rank);
        if (e.ok() && a.dynamic)
          lora_dynamic_check(e, LLB_STATUS_INVALID_ARGUMENT, a.lora_path, a.tenant);
        auto name = e.str(a.lora_name, "lora_name", true);
        auto path = a.dynamic ? e.str(a.lora_path, "lora_path") : 0;
        auto tenant = a.dynamic ? e.str(a.tenant, "tenant") : 0;
        return e.ok() ? llmbus::CreateLoRAAdapter(e.b, name, a.lora_int_id, a.rank, a.dynamic, path, tenant)
                      : fb::Offset<llmbus::LoRAAdapter>(0);
      });
  if (!e.ok())
    return 0;
  return llmbus::CreateHeartbeat(e.b, LLB_SCHEMA_VERSION, actor, instance, host, m.pid,
                                 m.uptime_s, m.seq, m.timestamp, m.ready, m.inflight, engine,
                                 m.num_gpu_blocks, m.block_size, loras)
      .Union();
}

static bool read_heartbeat(Dec &d, const llmbus::Heartbeat &t, llb_heartbeat &m) {
  m.pid = t.pid();
  m.uptime_s = t.uptime_s();
  m.seq = t.seq();
  m.timestamp = t.timestamp();
  m.ready = t.ready();
  m.inflight = t.inflight();
  m.num_gpu_blocks = t.num_gpu_blocks();
  m.block_size = t.block_size();
  if (t.lora_adapters() && t.lora_adapters()->size() > LLB_MAX_LORA_ADAPTERS)
    return d.fail(LLB_STATUS_MALFORMED, "lora_adapters", "%u, at most %d",
                  (unsigned)t.lora_adapters()->size(), LLB_MAX_LORA_ADAPTERS);
  return d.tables(t.lora_adapters(), &m.lora_adapters, &m.num_lora_adapters, "lora_adapters",
                  [](Dec &d, const llmbus::LoRAAdapter &a, llb_lora_adapter &o) {
                    o.lora_int_id = a.lora_int_id();
                    o.rank = a.rank();
                    o.dynamic = a.dynamic();
                    if (!d.str(a.lora_name(), &o.lora_name, "lora_name", true) ||
                        !lora_check(d, LLB_STATUS_MALFORMED, o.lora_name, o.lora_int_id, 1,
                                    "lora_name") ||
                        !d.str(a.lora_path(), &o.lora_path, "lora_path") ||
                        !d.str(a.tenant(), &o.tenant, "tenant") ||
                        (o.dynamic &&
                         !lora_dynamic_check(d, LLB_STATUS_MALFORMED, o.lora_path, o.tenant)))
                      return false;
                    return o.rank >= 1 ||
                           d.fail(LLB_STATUS_MALFORMED, "rank", "%d, must be >= 1", o.rank);
                  }) &&
         d.str(t.actor(), &m.actor, "actor", true) &&
         d.str(t.instance(), &m.instance, "instance") && d.str(t.host(), &m.host, "host") &&
         d.str(t.engine_id(), &m.engine_id, "engine_id");
}

LLB_CODEC_DEFINE(heartbeat, Heartbeat, LLB_MESSAGE_KIND_HEARTBEAT)

// ---- SchedulerStats ----------------------------------------------------------------------

static fb::Offset<void> build_scheduler_stats(Enc &e, const llb_scheduler_stats &m) {
  auto engine = e.str(m.engine_id, "engine_id");
  auto model = e.str(m.model, "model");
  auto instance = e.str(m.instance, "instance");
  if (m.role < LLB_ENGINE_ROLE_BOTH || m.role > LLB_ENGINE_ROLE_DECODE)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "role", "out of range (%d)", (int)m.role);
  if (!e.ok())
    return 0;
  llmbus::SchedulerStatsBuilder t(e.b);
  t.add_version(LLB_SCHEMA_VERSION);
  t.add_engine_id(engine);
  t.add_step(m.step);
  t.add_timestamp(m.timestamp);
  t.add_num_running_reqs(m.num_running_reqs);
  t.add_num_waiting_reqs(m.num_waiting_reqs);
  t.add_kv_cache_usage(m.kv_cache_usage);
  t.add_num_free_blocks(m.num_free_blocks);
  t.add_num_total_blocks(m.num_total_blocks);
  t.add_prefix_cache_queries(m.prefix_cache_queries);
  t.add_prefix_cache_hits(m.prefix_cache_hits);
  t.add_num_preemptions(m.num_preemptions);
  t.add_prompt_tokens_total(m.prompt_tokens_total);
  t.add_generation_tokens_total(m.generation_tokens_total);
  t.add_encoder_cache_queries(m.encoder_cache_queries);
  t.add_encoder_cache_hits(m.encoder_cache_hits);
  t.add_encoder_inputs_computed(m.encoder_inputs_computed);
  t.add_encoder_embeds_computed(m.encoder_embeds_computed);
  t.add_model(model);
  t.add_block_size(m.block_size);
  t.add_max_num_seqs(m.max_num_seqs);
  t.add_max_num_batched_tokens(m.max_num_batched_tokens);
  t.add_max_model_len(m.max_model_len);
  t.add_stats_interval_ms(m.stats_interval_ms);
  t.add_instance(instance);
  t.add_draining(m.draining);
  t.add_role(static_cast<llmbus::EngineRole>(m.role));
  return t.Finish().Union();
}

static bool read_scheduler_stats(Dec &d, const llmbus::SchedulerStats &t,
                                 llb_scheduler_stats &m) {
  m.step = t.step();
  m.timestamp = t.timestamp();
  m.num_running_reqs = t.num_running_reqs();
  m.num_waiting_reqs = t.num_waiting_reqs();
  m.kv_cache_usage = t.kv_cache_usage();
  m.num_free_blocks = t.num_free_blocks();
  m.num_total_blocks = t.num_total_blocks();
  m.prefix_cache_queries = t.prefix_cache_queries();
  m.prefix_cache_hits = t.prefix_cache_hits();
  m.num_preemptions = t.num_preemptions();
  m.prompt_tokens_total = t.prompt_tokens_total();
  m.generation_tokens_total = t.generation_tokens_total();
  m.encoder_cache_queries = t.encoder_cache_queries();
  m.encoder_cache_hits = t.encoder_cache_hits();
  m.encoder_inputs_computed = t.encoder_inputs_computed();
  m.encoder_embeds_computed = t.encoder_embeds_computed();
  m.block_size = t.block_size();
  m.max_num_seqs = t.max_num_seqs();
  m.max_num_batched_tokens = t.max_num_batched_tokens();
  m.max_model_len = t.max_model_len();
  m.stats_interval_ms = t.stats_interval_ms();
  m.draining = t.draining();
  const int role = static_cast<int>(t.role());
  if (role < LLB_ENGINE_ROLE_BOTH || role > LLB_ENGINE_ROLE_DECODE)
    return d.fail(LLB_STATUS_MALFORMED, "role", "unknown engine role %d", role);
  m.role = static_cast<llb_engine_role>(role);
  return d.str(t.engine_id(), &m.engine_id, "engine_id") && d.str(t.model(), &m.model, "model") &&
         d.str(t.instance(), &m.instance, "instance");
}

LLB_CODEC_DEFINE(scheduler_stats, SchedulerStats, LLB_MESSAGE_KIND_SCHEDULER_STATS)

static const char *const engine_role_names[] = {"both", "prefill", "decode"};

extern "C" const char *llb_engine_role_name(enum llb_engine_role r) {
  return r >= LLB_ENGINE_ROLE_BOTH && r <= LLB_ENGINE_ROLE_DECODE ? engine_role_names[r] : nullptr;
}

extern "C" llb_status llb_engine_role_parse(const char *name, enum llb_engine_role *out) {
  for (int i = 0; name && i < 3; i++)
    if (strcmp(name, engine_role_names[i]) == 0) {
      *out = static_cast<llb_engine_role>(i);
      return LLB_STATUS_OK;
    }
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine role '%s': prefill, decode or both", name ? name : "");
}

// ---- ErrorReply --------------------------------------------------------------------------

static fb::Offset<void> build_error_reply(Enc &e, const llb_error_reply &m) {
  if (m.error.code == 0)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "error", "code 0 is not an error");
  auto err = enc_error(e, m.error, "error");
  auto id = e.str(m.request_id, "request_id");
  if (!e.ok())
    return 0;
  return llmbus::CreateErrorReply(e.b, LLB_SCHEMA_VERSION, err, id).Union();
}

static bool read_error_reply(Dec &d, const llmbus::ErrorReply &t, llb_error_reply &m) {
  if (!t.error() || t.error()->code() == 0)
    return d.fail(LLB_STATUS_MALFORMED, "error", "required, missing or code 0");
  return dec_error(d, t.error(), &m.error, "error") &&
         d.str(t.request_id(), &m.request_id, "request_id");
}

LLB_CODEC_DEFINE(error_reply, ErrorReply, LLB_MESSAGE_KIND_ERROR_REPLY)

extern "C" llb_status llb_error_reply_encode_status(llb_status status, const char *request_id,
                                                    const char *field, struct llb_buf *out) {
  char message[512];
  snprintf(message, sizeof message, "%s", llb_err_last()); // copy: encoding may set errors
  if (message[0] == '\0')
    snprintf(message, sizeof message, "%s", llb_strerror(status));
  llb_error_reply r{};
  r.error.code = status == LLB_STATUS_OK ? LLB_STATUS_INTERNAL : status;
  r.error.message = llb_str_c(message);
  r.error.field = llb_str_c(field);
  r.request_id = llb_str_c(request_id);
  return llb_error_reply_encode_buf(&r, out);
}

// Codecs of generate_request.fbs (GenerateRequest, AbortRequest) and engine_core_request.fbs
// (EngineCoreRequest, AbortRequests).
#include "engine_core_request_generated.h"
#include "generate_request_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"

using namespace llb_codec;

extern "C" void llb_generate_request_init(struct llb_generate_request *m) {
  *m = llb_generate_request{};
  m->add_generation_prompt = true;
}

// ---- GenerateRequest ---------------------------------------------------------------------

static fb::Offset<void> build_generate_request(Enc &e, const llb_generate_request &m) {
  auto request_id = e.str(m.request_id, "request_id");
  auto prompt = e.str(m.prompt, "prompt");
  auto messages = e.tables<llmbus::ChatMessage>(
      m.messages, m.num_messages, "messages", [](Enc &e, const llb_chat_message &c) {
        auto role = e.str(c.role, "role", true);
        auto content = e.str(c.content, "content");
        auto tool_calls = e.str(c.tool_calls, "tool_calls");
        auto tool_call_id = e.str(c.tool_call_id, "tool_call_id");
        auto name = e.str(c.name, "name");
        auto image_offsets = e.vec(c.image_offsets, c.num_image_offsets, "image_offsets");
        return e.ok() ? llmbus::CreateChatMessage(e.b, role, content, tool_calls, tool_call_id,
                                                  name, c.content_is_null, image_offsets)
                      : fb::Offset<llmbus::ChatMessage>(0);
      });
  auto ids = e.vec(m.prompt_token_ids, m.num_prompt_token_ids, "prompt_token_ids");
  auto tmpl = e.str(m.chat_template, "chat_template");
  auto sp = enc_sampling(e, m.sampling_params, "sampling_params", false);
  auto salt = e.str(m.cache_salt, "cache_salt");
  auto so = enc_structured_outputs(e, m.structured_outputs, "structured_outputs");
  auto tools = e.str(m.tools, "tools");
  auto kwargs = e.str(m.chat_template_kwargs, "chat_template_kwargs");
  auto pool = enc_pooling_params(e, m.pooling_params, "pooling_params");
  auto lora = enc_lora_request(e, m.lora_request, 0, "lora_request");
  auto items = e.tables<llmbus::MultiModalItem>(
      m.mm_items, m.num_mm_items, "mm_items", [](Enc &e, const llb_mm_item &it) {
        fb::Offset<llmbus::MultiModalItem> none = 0;
        if (it.data_bytes < 0 || it.data_bytes > INT32_MAX) {
          e.fail(LLB_STATUS_INVALID_ARGUMENT, "data_bytes", "%lld out of range",
                 (long long)it.data_bytes);
          return none;
        }
        if (!check_mm_data(e, LLB_STATUS_INVALID_ARGUMENT, it.dtype, it.num_rows, it.num_cols,
                           it.data_bytes, "data"))
          return none;
        auto modality = e.str(it.modality, "modality", true);
        auto data = e.vec(it.data, (int32_t)it.data_bytes, "data");
        auto dtype = e.str(it.dtype, "dtype");
        if (!e.ok())
          return none;
        return llmbus::CreateMultiModalItem(e.b, modality, data, dtype, it.num_rows, it.num_cols,
                                            it.placeholder_offset);
      });
  if (!e.ok())
    return 0;
  llmbus::GenerateRequestBuilder t(e.b);
  t.add_version(LLB_SCHEMA_VERSION);
  t.add_request_id(request_id);
  t.add_prompt(prompt);
  t.add_messages(messages);
  t.add_prompt_token_ids(ids);
  t.add_chat_template(tmpl);
  t.add_add_generation_prompt(m.add_generation_prompt);
  t.add_raw(m.raw);
  t.add_sampling_params(sp);
  t.add_priority(m.priority);
  t.add_cache_salt(salt);
  t.add_mm_items(items);
  t.add_structured_outputs(so);
  t.add_tools(tools);
  t.add_chat_template_kwargs(kwargs);
  t.add_continue_final_message(m.continue_final_message);
  t.add_pooling_params(pool);
  t.add_lora_request(lora);
  return t.Finish().Union();
}

static bool read_generate_request(Dec &d, const llmbus::GenerateRequest &t,
                                  llb_generate_request &m) {
  m.add_generation_prompt = t.add_generation_prompt();
  m.raw = t.raw();
  m.priority = t.priority();
  m.continue_final_message = t.continue_final_message();
  return d.str(t.request_id(), &m.request_id, "request_id") &&
         dec_pooling_params(d, t.pooling_params(), &m.pooling_params, "pooling_params") &&
         dec_lora_request(d, t.lora_request(), 0, &m.lora_request, "lora_request") &&
         dec_structured_outputs(d, t.structured_outputs(), &m.structured_outputs,
                                "structured_outputs") &&
         d.str(t.tools(), &m.tools, "tools") &&
         d.str(t.chat_template_kwargs(), &m.chat_template_kwargs, "chat_template_kwargs") &&
         d.str(t.prompt(), &m.prompt, "prompt") &&
         d.tables(t.messages(), &m.messages, &m.num_messages, "messages",
                  [](Dec &d, const llmbus::ChatMessage &c, llb_chat_message &o) {
                    o.content_is_null = c.content_is_null();
                    return d.str(c.role(), &o.role, "role", true) &&
                           d.str(c.content(), &o.content, "content") &&
                           d.str(c.tool_calls(), &o.tool_calls, "tool_calls") &&
                           d.str(c.tool_call_id(), &o.tool_call_id, "tool_call_id") &&
                           d.str(c.name(), &o.name, "name") &&
                           d.vec(c.image_offsets(), &o.image_offsets, &o.num_image_offsets,
                                 "image_offsets");
                  }) &&
         d.vec(t.prompt_token_ids(), &m.prompt_token_ids, &m.num_prompt_token_ids,
               "prompt_token_ids") &&
         d.str(t.chat_template(), &m.chat_template, "chat_template") &&
         dec_sampling(d, t.sampling_params(), &m.sampling_params, "sampling_params", false) &&
         d.str(t.cache_salt(), &m.cache_salt, "cache_salt") &&
         d.tables(t.mm_items(), &m.mm_items, &m.num_mm_items, "mm_items",
                  [](Dec &d, const llmbus::MultiModalItem &it, llb_mm_item &o) {
                    int32_t bytes = 0;
                    if (!d.str(it.modality(), &o.modality, "modality", true) ||
                        !d.vec(it.data(), &o.data, &bytes, "data") ||
                        !d.str(it.dtype(), &o.dtype, "dtype"))
                      return false;
                    o.data_bytes = bytes;
                    o.num_rows = it.num_rows();
                    o.num_cols = it.num_cols();
                    o.placeholder_offset = it.placeholder_offset();
                    if (o.placeholder_offset < 0)
                      return d.fail(LLB_STATUS_MALFORMED, "placeholder_offset", "negative (%d)",
                                    o.placeholder_offset);
                    return check_mm_data(d, LLB_STATUS_MALFORMED, o.dtype, o.num_rows,
                                         o.num_cols, o.data_bytes, "data");
                  });
}

LLB_CODEC_DEFINE(generate_request, GenerateRequest, LLB_MESSAGE_KIND_GENERATE_REQUEST)

// ---- AbortRequest ------------------------------------------------------------------------

static fb::Offset<void> build_abort_request(Enc &e, const llb_abort_request &m) {
  auto id = e.str(m.request_id, "request_id", true);
  if (!e.ok())
    return 0;
  return llmbus::CreateAbortRequest(e.b, LLB_SCHEMA_VERSION, id).Union();
}

static bool read_abort_request(Dec &d, const llmbus::AbortRequest &t, llb_abort_request &m) {
  return d.str(t.request_id(), &m.request_id, "request_id", true);
}

LLB_CODEC_DEFINE(abort_request, AbortRequest, LLB_MESSAGE_KIND_ABORT_REQUEST)

// ---- EngineCoreRequest -------------------------------------------------------------------

static fb::Offset<llmbus::KVTransferParams> enc_kv_transfer_params(Enc &e, const llb_engine_core_request &m) {
  if (!m.has_kv_transfer_params)
    return 0;
  const llb_kv_transfer_params &k = m.kv_transfer_params;
  auto eid = e.str(k.remote_engine_id, "kv_transfer_params.remote_engine_id");
  auto rid = e.str(k.remote_request_id, "kv_transfer_params.remote_request_id");
  if (!e.ok())
    return 0;
  return llmbus::CreateKVTransferParams(e.b, k.do_remote_decode, k.do_remote_prefill, eid, rid,
                                        k.remote_num_blocks, k.num_tokens);
}

static bool dec_kv_transfer_params(Dec &d, const llmbus::KVTransferParams *t, llb_engine_core_request &m) {
  m.has_kv_transfer_params = t != nullptr;
  if (!t)
    return true;
  llb_kv_transfer_params &k = m.kv_transfer_params;
  k.do_remote_decode = t->do_remote_decode();
  k.do_remote_prefill = t->do_remote_prefill();
  k.remote_num_blocks = t->remote_num_blocks();
  k.num_tokens = t->num_tokens();
  return d.str(t->remote_engine_id(), &k.remote_engine_id, "kv_transfer_params.remote_engine_id") &&
         d.str(t->remote_request_id(), &k.remote_request_id, "kv_transfer_params.remote_request_id");
}

static fb::Offset<void> build_engine_core_request(Enc &e, const llb_engine_core_request &m) {
  auto request_id = e.str(m.request_id, "request_id", true);
  auto external_id = e.str(m.external_id, "external_id");
  if (e.ok() && m.num_prompt_token_ids == 0)
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "prompt_token_ids", "required, empty");
  auto ids = e.vec(m.prompt_token_ids, m.num_prompt_token_ids, "prompt_token_ids");
  auto sp = enc_sampling(e, m.sampling_params, "sampling_params", true);
  auto salt = e.str(m.cache_salt, "cache_salt");
  auto mm = enc_mm_features(e, m.mm_features, m.num_mm_features, "mm_features");
  auto reply_to = e.str(m.reply_to, "reply_to");
  auto parent = e.str(m.parent_request_id, "parent_request_id");
  auto tp = e.str(m.traceparent, "traceparent");
  auto tpp = e.str(m.trace_parent_span_id, "trace_parent_span_id");
  auto so = enc_structured_outputs(e, m.structured_outputs, "structured_outputs");
  auto pool = enc_pooling_params(e, m.pooling_params, "pooling_params");
  auto resume = e.str(m.resume_request_id, "resume_request_id");
  auto lora = enc_lora_request(e, m.lora_request, 1, "lora_request");
  auto kvt = enc_kv_transfer_params(e, m);
  auto outs = m.num_output_token_ids > 0 ? e.vec(m.output_token_ids, m.num_output_token_ids, "output_token_ids")
                                         : fb::Offset<fb::Vector<int32_t>>();
  if (!e.ok())
    return 0;
  llmbus::EngineCoreRequestBuilder t(e.b);
  t.add_version(LLB_SCHEMA_VERSION);
  t.add_request_id(request_id);
  t.add_external_id(external_id);
  t.add_prompt_token_ids(ids);
  t.add_sampling_params(sp);
  t.add_eos_token_id(m.eos_token_id);
  t.add_arrival_time(m.arrival_time);
  t.add_priority(m.priority);
  t.add_cache_salt(salt);
  t.add_mm_features(mm);
  t.add_reply_to(reply_to);
  t.add_client_index(m.client_index);
  t.add_parent_request_id(parent);
  t.add_traceparent(tp);
  t.add_trace_parent_span_id(tpp);
  t.add_trace_start_time_ns(m.trace_start_time_ns);
  t.add_structured_outputs(so);
  t.add_pooling_params(pool);
  t.add_resume_request_id(resume);
  t.add_lora_request(lora);
  t.add_kv_transfer_params(kvt);
  t.add_output_token_ids(outs);
  return t.Finish().Union();
}

static bool read_engine_core_request(Dec &d, const llmbus::EngineCoreRequest &t,
                                     llb_engine_core_request &m) {
  m.eos_token_id = t.eos_token_id();
  m.arrival_time = t.arrival_time();
  m.priority = t.priority();
  m.client_index = t.client_index();
  m.trace_start_time_ns = t.trace_start_time_ns();
  if (!t.prompt_token_ids() || t.prompt_token_ids()->size() == 0)
    return d.fail(LLB_STATUS_MALFORMED, "prompt_token_ids", "required, missing or empty");
  return d.str(t.request_id(), &m.request_id, "request_id", true) &&
         dec_pooling_params(d, t.pooling_params(), &m.pooling_params, "pooling_params") &&
         dec_lora_request(d, t.lora_request(), 1, &m.lora_request, "lora_request") &&
         d.str(t.external_id(), &m.external_id, "external_id") &&
         d.vec(t.prompt_token_ids(), &m.prompt_token_ids, &m.num_prompt_token_ids,
               "prompt_token_ids") &&
         dec_sampling(d, t.sampling_params(), &m.sampling_params, "sampling_params", true) &&
         d.str(t.cache_salt(), &m.cache_salt, "cache_salt") &&
         d.str(t.resume_request_id(), &m.resume_request_id, "resume_request_id") &&
         dec_mm_features(d, t.mm_features(), &m.mm_features, &m.num_mm_features,
                         "mm_features") &&
         d.str(t.reply_to(), &m.reply_to, "reply_to") &&
         d.str(t.parent_request_id(), &m.parent_request_id, "parent_request_id") &&
         d.str(t.traceparent(), &m.traceparent, "traceparent") &&
         d.str(t.trace_parent_span_id(), &m.trace_parent_span_id, "trace_parent_span_id") &&
         dec_structured_outputs(d, t.structured_outputs(), &m.structured_outputs,
                                "structured_outputs") &&
         dec_kv_transfer_params(d, t.kv_transfer_params(), m) &&
         d.vec(t.output_token_ids(), &m.output_token_ids, &m.num_output_token_ids, "output_token_ids");
}

LLB_CODEC_DEFINE(engine_core_request, EngineCoreRequest, LLB_MESSAGE_KIND_ENGINE_CORE_REQUEST)

// ---- AbortRequests -----------------------------------------------------------------------

static fb::Offset<void> build_abort_requests(Enc &e, const llb_abort_requests &m) {
  auto ids = e.strs(m.request_ids, m.num_request_ids, "request_ids");
  if (!e.ok())
    return 0;
  return llmbus::CreateAbortRequests(e.b, LLB_SCHEMA_VERSION, ids).Union();
}

static bool read_abort_requests(Dec &d, const llmbus::AbortRequests &t, llb_abort_requests &m) {
  return d.strs(t.request_ids(), &m.request_ids, &m.num_request_ids, "request_ids");
}

LLB_CODEC_DEFINE(abort_requests, AbortRequests, LLB_MESSAGE_KIND_ABORT_REQUESTS)

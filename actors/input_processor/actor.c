/* Input processor actor: requests, tokenize calls, aborts and stats (see actor.h); the life
 * cycle is actor_setup.c. */
#include "actors/input_processor/actor.h"
#include "actors/input_processor/actor_internal.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/engine_router.h"
#include "actors/input_processor/input_processor.h"
#include "actors/input_processor/structured_check.h"
#include "actors/input_processor/pooling_check.h"
#include "actors/input_processor/tenant_limits.h"
#include "base/log.h"
#include "bus/span.h"
#include "bus/jetstream.h"
#include "actors/input_processor/chat_render.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

static const char *subject_tenant(const char *subject) {
  const char *dot = strrchr(subject, '.');
  return dot ? dot + 1 : subject;
}

/* Answers `msg` with a final RequestOutput carrying an error (code, message, field). Without
 * a reply subject the error is only counted and logged. */
static void reply_error_retry(struct inproc_actor *a, const struct bus_msg *msg, const char *request_id,
                              llb_status code, const char *message, const char *field, int64_t retry_after_ms) {
  char q[320];
  if (!msg->reply || !msg->reply[0]) {
    atomic_fetch_add(&a->no_reply, 1);
    LLB_LOG_WARN("generate_error_no_reply", "subject=%s request_id=%s field=%s error=%s", msg->subject,
                 request_id, field, llb_log_quote(q, sizeof q, message));
    return;
  }
  struct llb_request_output ro = {0};
  ro.request_id = llb_str_c(request_id && request_id[0] ? request_id : MALFORMED_REQUEST_ID);
  ro.finished = true;
  ro.metrics.finished_time = (double)llb_wall_ns() / 1e9;
  ro.error.code = (int32_t)(code != LLB_STATUS_OK ? code : LLB_STATUS_INTERNAL);
  ro.error.message = llb_str_c(message);
  ro.error.field = llb_str_c(field);
  ro.error.retry_after_ms = retry_after_ms > 0 ? retry_after_ms : 0;
  struct llb_buf buf = {0};
  llb_status st = llb_request_output_encode_buf(&ro, &buf);
  if (st == LLB_STATUS_OK) st = bus_respond(a->bus, msg, buf.data, buf.len, NULL);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->publish_errors, 1);
    LLB_LOG_ERROR("error_reply_failed", "reply=%s error=%s", msg->reply,
                  llb_log_quote(q, sizeof q, llb_err_last()));
  }
  llb_buf_free(&buf);
}

static void reply_error(struct inproc_actor *a, const struct bus_msg *msg, const char *request_id,
                        llb_status code, const char *message, const char *field) {
  reply_error_retry(a, msg, request_id, code, message, field, 0);
}

/* Publishes AbortRequests{ids} on engine `eid`'s abort subject. */
static llb_status publish_aborts(struct inproc_actor *a, const char *eid, const struct llb_str *ids, int32_t n,
                                 const struct bus_trace_ctx *trace) {
  struct llb_abort_requests ab = {.request_ids = ids, .num_request_ids = n};
  struct llb_buf buf = {0};
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(bus_prefix(a->bus), eid, "abort", subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = llb_abort_requests_encode_buf(&ab, &buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, subject, buf.data, buf.len, trace);
  if (st != LLB_STATUS_OK) atomic_fetch_add(&a->publish_errors, 1);
  llb_buf_free(&buf);
  return st;
}

/* GenerateRequest view → the logic's request. Strings of `gr` are NUL-terminated (decoded);
 * arrays and the composed cache salt live in `arena`. Returns the offending field name on a
 * request the logic cannot express, else NULL. */
static const char *to_inproc_request(const struct llb_generate_request *gr, const char *tenant,
                                     const char *reply_to, struct llb_arena *arena,
                                     struct inproc_generate_request *req) {
  memset(req, 0, sizeof *req);
  req->request_id = gr->request_id.len ? gr->request_id.data : DEFAULT_EXTERNAL_ID;
  if (gr->prompt.len) req->prompt = gr->prompt.data;
  if (gr->num_messages > 0) {
    struct chat_message *msgs = llb_arena_alloc(arena, (size_t)gr->num_messages * sizeof *msgs,
                                                _Alignof(struct chat_message));
    if (!msgs) return "messages";
    struct chat_message_extra *extras = llb_arena_alloc(arena, (size_t)gr->num_messages * sizeof *extras,
                                                        _Alignof(struct chat_message_extra));
    if (!extras) return "messages";
    for (int32_t i = 0; i < gr->num_messages; i++) {
      const struct llb_chat_message *m = &gr->messages[i];
      msgs[i].role = m->role.data;
      msgs[i].content = m->content.data;
      extras[i] = (struct chat_message_extra){.tool_calls_json = m->tool_calls.len ? m->tool_calls.data : NULL,
                                              .tool_call_id = m->tool_call_id.len ? m->tool_call_id.data : NULL,
                                              .name = m->name.len ? m->name.data : NULL,
                                              .image_offsets = m->image_offsets,
                                              .num_image_offsets = m->num_image_offsets};
    }
    req->messages = msgs;
    req->message_extras = extras;
    req->num_messages = (size_t)gr->num_messages;
  }
  if (gr->num_prompt_token_ids > 0) {
    req->prompt_token_ids = gr->prompt_token_ids;
    req->num_prompt_token_ids = gr->num_prompt_token_ids;
  }
  if (gr->chat_template.len) req->chat_template = gr->chat_template.data;
  req->raw = gr->raw;
  req->no_generation_prompt = !gr->add_generation_prompt;
  if (gr->tools.len) req->tools_json = gr->tools.data;
  if (gr->chat_template_kwargs.len) req->chat_template_kwargs_json = gr->chat_template_kwargs.data;
  req->continue_final_message = gr->continue_final_message;
  req->sampling_params = *gr->sampling_params;
  req->priority = gr->priority;
  /* Per-tenant prefix-cache salt (DESIGN.md §7): no tenant can hit another's blocks. */
  size_t salt_cap = strlen(tenant) + gr->cache_salt.len + 48;
  char *salt = llb_arena_alloc(arena, salt_cap, 1);
  if (!salt) return "cache_salt";
  if (inproc_cache_salt_compose(tenant, gr->cache_salt.data, gr->cache_salt.len, salt, salt_cap) >= salt_cap)
    return "cache_salt";
  req->cache_salt = salt;
  req->tenant = tenant;
  req->reply_to = reply_to;
  req->structured_outputs = gr->structured_outputs;
  if (gr->num_mm_items > 0) {
    struct inproc_mm_item *items = llb_arena_alloc(arena, (size_t)gr->num_mm_items * sizeof *items,
                                                   _Alignof(struct inproc_mm_item));
    if (!items) return "mm_items";
    for (int32_t i = 0; i < gr->num_mm_items; i++) {
      const struct llb_mm_item *m = &gr->mm_items[i];
      items[i] = (struct inproc_mm_item){.modality = m->modality.data, .data = m->data,
                                         .data_bytes = m->data_bytes, .dtype = m->dtype.data,
                                         .num_rows = m->num_rows, .num_cols = m->num_cols,
                                         .placeholder_offset = m->placeholder_offset};
    }
    req->mm_items = items;
    req->num_mm_items = gr->num_mm_items;
  }
  return NULL;
}

/* Compiles the request's structured-output spec once (structured_check.h): a spec the engine
 * cannot enforce is a 400 now, naming structured_outputs. False: answered. */
static bool check_structured(struct inproc_actor *a, const struct bus_msg *msg, const char *ext_id,
                             const struct llb_structured_outputs *so) {
  char text[512];
  llb_status st = inproc_structured_check(so, text, sizeof text);
  if (st == LLB_STATUS_OK) return true;
  atomic_fetch_add(&a->rejected, 1);
  char q[320];
  LLB_LOG_INFO("generate_rejected", "request_id=%s field=structured_outputs error=%s", ext_id,
               llb_log_quote(q, sizeof q, text));
  reply_error(a, msg, ext_id, st, text, "structured_outputs");
  return false;
}

/* The request span ("llm_request") of a traced request: its context, parent and start go
 * into every EngineCoreRequest; the output processor records it when the request ends. */
struct request_trace {
  bool on;
  char traceparent[BUS_TRACEPARENT_LEN + 1];
  char parent_span_id[17];
  int64_t start_ns;
};

/* Publishes every child of `pr` to engine `eid`. On a failed publish the children already
 * sent are aborted and the error is returned. */

/* One EngineCoreRequest to `subject` (the engine's requests subject): durable (stored in the
 * requests stream, confirmed by JetStream, so a scheduler that dies later still gets it;
 * retried through a leader election with the engine request id as Nats-Msg-Id, so it is
 * stored once) or a plain publish. */
static llb_status publish_engine_request(struct inproc_actor *a, const char *subject, const char *request_id,
                                         const void *data, size_t len, const struct bus_trace_ctx *span) {
  if (!a->durable) return bus_publish(a->bus, subject, data, len, span);
  const struct bus_out_msg m = {.subject = subject, .data = data, .len = len, .trace = span};
  return bus_js_publish(a->bus, &m, request_id, INPROC_DURABLE_PUBLISH_TIMEOUT_MS, NULL);
}

static llb_status publish_children(struct inproc_actor *a, const char *eid, const struct inproc_generate_request *req,
                                   const struct inproc_processed *pr, const struct bus_trace_ctx *span,
                                   const struct request_trace *rt, const struct llb_pooling_params *pool,
                                   const char *resume_of) {
  char subject[BUS_SUBJECT_MAX];
  llb_status sst = bus_subject_engine(bus_prefix(a->bus), eid, "requests", subject, sizeof subject);
  if (sst != LLB_STATUS_OK) return sst;
  struct llb_mm_feature mm[INPROC_MAX_MM_ITEMS];
  for (int32_t k = 0; k < pr->num_mm_features && k < INPROC_MAX_MM_ITEMS; k++) {
    const struct inproc_mm_feature *f = &pr->mm_features[k];
    const struct inproc_mm_item *it = &req->mm_items[f->item];
    mm[k] = (struct llb_mm_feature){.modality = llb_str_c(it->modality), .mm_hash = llb_str_c(f->mm_hash),
                                    .offset = f->offset, .length = f->length, .data = it->data,
                                    .data_bytes = it->data_bytes, .dtype = llb_str_c(it->dtype),
                                    .num_cols = f->is_embed ? a->hidden_size : it->num_cols,
                                    .is_embed = f->is_embed, .num_is_embed = f->is_embed ? f->length : 0};
  }
  struct llb_buf buf = {0};
  llb_status st = LLB_STATUS_OK;
  int32_t sent = 0;
  for (; sent < pr->num_requests; sent++) {
    const struct inproc_engine_request *e = &pr->requests[sent];
    struct llb_sampling_params sp = e->sampling_params;
    /* The engine draws child i from stream 0 of its own seed: seed + i keeps the children
     * apart and reproducible (vLLM parent_req.py). n tells the output processor how many
     * children to wait for; the engine runs one sequence per request whatever n says. */
    sp.seed = e->sampling_params.seed + (uint64_t)e->child_index;
    sp.n = e->num_children;
    struct llb_engine_core_request m = {
        .request_id = llb_str_c(e->request_id),
        .external_id = llb_str_c(e->external_request_id),
        .prompt_token_ids = e->prompt_token_ids,
        .num_prompt_token_ids = (int32_t)e->num_prompt_tokens,
        .sampling_params = &sp,
        .eos_token_id = e->eos_token_id,
        .arrival_time = (double)e->arrival_time_ns / 1e9,
        .priority = e->priority,
        .cache_salt = llb_str_c(e->cache_salt),
        .reply_to = llb_str_c(e->reply_to),
        .client_index = e->child_index,
        .parent_request_id = llb_str_c(e->parent_request_id),
        .mm_features = pr->num_mm_features > 0 ? mm : NULL,
        .num_mm_features = pr->num_mm_features,
        .traceparent = llb_str_c(rt->on ? rt->traceparent : ""),
        .trace_parent_span_id = llb_str_c(rt->on ? rt->parent_span_id : ""),
        .trace_start_time_ns = rt->on ? rt->start_ns : 0,
        .resume_request_id = llb_str_c(pr->num_requests == 1 && resume_of ? resume_of : ""),
        .structured_outputs = req->structured_outputs,
        .pooling_params = *pool,
    };
    st = llb_engine_core_request_encode_buf(&m, &buf);
    if (st == LLB_STATUS_OK) st = publish_engine_request(a, subject, e->request_id, buf.data, buf.len, span);
    if (st != LLB_STATUS_OK) break;
    atomic_fetch_add(&a->engine_requests, 1);
  }
  llb_buf_free(&buf);
  if (st == LLB_STATUS_OK) return st;
  atomic_fetch_add(&a->publish_errors, 1);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", llb_err_last());
  struct llb_str ids[INPROC_ACTOR_MAX_N];
  for (int32_t i = 0; i < sent && i < INPROC_ACTOR_MAX_N; i++) ids[i] = llb_str_c(pr->requests[i].request_id);
  if (sent > 0) (void)publish_aborts(a, eid, ids, sent < INPROC_ACTOR_MAX_N ? sent : INPROC_ACTOR_MAX_N, span);
  return LLB_ERRF(st, "publishing to %s: %s", subject, msg);
}

/* The engine request ids of pr's children (at most INPROC_ACTOR_MAX_N). */
static int32_t child_ids(const struct inproc_processed *pr, const char **ids) {
  int32_t n = pr->num_requests < INPROC_ACTOR_MAX_N ? pr->num_requests : INPROC_ACTOR_MAX_N;
  for (int32_t i = 0; i < n; i++) ids[i] = pr->requests[i].request_id;
  return n;
}

/* Answers a request a per-tenant limit refused (429, or 400 for TOO_LARGE). */
static void refuse(struct inproc_actor *a, const struct bus_msg *msg, const char *tenant, const char *request_id,
                   llb_status st, int64_t retry_after_ms) {
  atomic_fetch_add(&a->limited, 1);
  char q[320];
  LLB_LOG_INFO("tenant_limited", "tenant=%s request_id=%s retry_after_ms=%lld error=%s", tenant, request_id,
               (long long)retry_after_ms, llb_log_quote(q, sizeof q, llb_err_last()));
  reply_error_retry(a, msg, request_id, st, llb_err_last(), "", retry_after_ms);
}

/* Before tokenizing: a tenant at its max_concurrent / max_queued is refused at once. */
static bool precheck(struct inproc_actor *a, const struct bus_msg *msg, const char *tenant, const char *request_id,
                     int32_t n) {
  if (!a->limits) return true;
  int64_t retry_after_ms = 0;
  llb_status st = tenant_limits_precheck(a->limits, tenant, n, llb_now_ns() / 1000000, &retry_after_ms);
  if (st == LLB_STATUS_OK) return true;
  refuse(a, msg, tenant, request_id, st, retry_after_ms);
  return false;
}

/* Per-tenant limits (tenant_limits.h): true when pr may go to the engine; otherwise the
 * client got its 429 (or 400) already. A request counts its prompt and max_tokens per child. */
static bool admit(struct inproc_actor *a, const struct bus_msg *msg, const char *tenant,
                  const struct inproc_processed *pr) {
  if (!a->limits) return true;
  const char *ids[INPROC_ACTOR_MAX_N];
  int32_t n = child_ids(pr, ids);
  double cost = 0;
  for (int32_t i = 0; i < n; i++)
    cost += (double)pr->num_prompt_tokens + (double)pr->requests[i].sampling_params.max_tokens;
  int64_t retry_after_ms = 0;
  llb_status st = tenant_limits_admit(a->limits, tenant, ids, n, cost, llb_now_ns() / 1000000, &retry_after_ms);
  if (st == LLB_STATUS_OK) return true;
  refuse(a, msg, tenant, pr->requests[0].parent_request_id, st, retry_after_ms);
  return false;
}

static void release(struct inproc_actor *a, const struct inproc_processed *pr) {
  const char *ids[INPROC_ACTOR_MAX_N];
  tenant_limits_release(a->limits, ids, child_ids(pr, ids));
}

/* <prefix>.engine.<eid>.outputs, only with limits: a child's first token and its end. */
void inproc_on_engine_outputs(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct inproc_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_engine_core_outputs eo;
  if (llb_engine_core_outputs_decode(msg->data, msg->len, &arena, &eo) == LLB_STATUS_OK) {
    int64_t now_ms = llb_now_ns() / 1000000;
    for (int32_t i = 0; i < eo.num_outputs; i++) {
      const struct llb_engine_core_output *o = &eo.outputs[i];
      tenant_limits_on_output(a->limits, o->request_id.data, o->num_new_token_ids > 0,
                              o->finish_reason != LLB_FINISH_REASON_NONE, now_ms);
    }
  } /* a bad one is the output processor's to report: it reads the same subject */
  llb_arena_destroy(&arena);
}

/* Opens the request span R under the sender's span (a NATS request without a traceparent:
 * R is the root of the trace bus_msg started, sampled by the head-sampling ratio) and this
 * actor's own span under R, both starting now. */
static void trace_begin(struct bus *bus, const struct bus_msg *msg, struct request_trace *rt,
                        struct bus_span *r, struct bus_span *proc) {
  memset(rt, 0, sizeof *rt);
  bus_span_begin(r, &msg->trace, "llm_request", BUS_SPAN_KIND_SERVER);
  if (!msg->trace_received) r->parent_span_id[0] = '\0';
  rt->on = bus_span_recording(bus, &r->ctx);
  rt->start_ns = r->start_unix_ns;
  bus_traceparent_format(&r->ctx, rt->traceparent, sizeof rt->traceparent);
  memcpy(rt->parent_span_id, r->parent_span_id, sizeof rt->parent_span_id);
  bus_span_begin(proc, &r->ctx, "input_processor.process", BUS_SPAN_KIND_INTERNAL);
  proc->start_unix_ns = r->start_unix_ns;
}

static bool id_printable(struct llb_str id);
static int abort_everywhere(struct inproc_actor *a, const struct llb_str *ids, int32_t n,
                            const struct bus_trace_ctx *span, llb_status *st);

/* A client's resend (the api server after a nats-server restart lost its reply route): the
 * GenerateRequest carries the id of the engine request it replaces in the header
 * Llmbus-Resume-Of. Honoured only for an id of this tenant, of an engine this router knows,
 * for n = 1: the new request goes to that engine, which takes over the old one's outputs
 * (EngineCoreRequest.resume_request_id); anything else is a new request as usual, and the
 * replaced request of this tenant that cannot be taken over is aborted (its outputs can reach
 * nobody). Copies the id into out[cap] and its engine into eid; false when not honoured. */
static bool resume_target(struct inproc_actor *a, const struct bus_msg *msg, const char *tenant, int32_t n,
                          char *out, size_t cap, char *eid, size_t eid_cap) {
  const char *id = bus_msg_header(msg, "Llmbus-Resume-Of");
  if (!id || !id[0]) return false;
  const struct llb_str s = llb_str_c(id);
  const bool owned = s.len + 8 <= INPROC_MAX_ID_BYTES && s.len < cap && id_printable(s) &&
                     inproc_id_owned_by(id, s.len, tenant);
  const bool routed = owned && inproc_engine_of_id(id, s.len, eid, eid_cap) && engine_router_known(a->router, eid);
  if (!(owned && routed && n == 1)) {
    LLB_LOG_WARN("resume_refused", "resume_of=%.*s tenant=%s n=%d owned=%d", (int)(s.len < 200 ? s.len : 200), id,
                 tenant, n, owned);
    if (owned) { /* ours, but not to be taken over here: stop it */
      llb_status st = LLB_STATUS_OK;
      (void)abort_everywhere(a, &s, 1, &msg->trace, &st);
    }
    return false;
  }
  memcpy(out, id, s.len + 1);
  return true;
}

void inproc_on_generate(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct inproc_actor *a = user;
  struct request_trace rt;
  struct bus_span req_span, proc;
  bool accepted = false;
  trace_begin(bus, msg, &rt, &req_span, &proc);
  const char *tenant = subject_tenant(msg->subject);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  struct inproc_processed pr = {0};
  char q[320];
  llb_status st = llb_generate_request_decode(msg->data, msg->len, &arena, &gr);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->malformed, 1);
    LLB_LOG_WARN("generate_malformed", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
    char text[512];
    snprintf(text, sizeof text, "malformed GenerateRequest: %s", llb_err_last());
    reply_error(a, msg, NULL, st, text, "");
    goto done;
  }
  const char *ext_id = gr.request_id.len ? gr.request_id.data : DEFAULT_EXTERNAL_ID;
  if (!msg->reply || !msg->reply[0]) {
    reply_error(a, msg, ext_id, LLB_STATUS_INVALID_ARGUMENT,
                "a GenerateRequest needs a reply subject (send it as a NATS request)", "reply_to");
    goto done;
  }
  if (!precheck(a, msg, tenant, ext_id, gr.sampling_params ? gr.sampling_params->n : 1)) goto done;
  struct inproc_generate_request req;
  if (!check_structured(a, msg, ext_id, &gr.structured_outputs)) goto done;
  const char *bad = NULL;
  char pool_msg[256];
  if ((st = inproc_pooling_check(&gr, &bad, pool_msg, sizeof pool_msg))) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, st, pool_msg, bad);
    goto done;
  }
  bad = to_inproc_request(&gr, tenant, msg->reply, &arena, &req);
  if (bad) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, LLB_STATUS_OUT_OF_MEMORY, "out of memory", bad);
    goto done;
  }
  struct inproc_errors errs;
  st = inproc_process(a->proc, &req, &pr, &errs);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    char text[1024];
    const char *field = "";
    if (st == LLB_STATUS_INVALID_ARGUMENT && errs.num_errors > 0) {
      inproc_errors_format(&errs, text, sizeof text);
      field = errs.errors[0].field;
    } else {
      snprintf(text, sizeof text, "%s", llb_err_last());
    }
    LLB_LOG_INFO("generate_rejected", "request_id=%s field=%s error=%s", ext_id, field,
                 llb_log_quote(q, sizeof q, text));
    reply_error(a, msg, ext_id, st, text, field);
    goto done;
  }
  struct engine_router_choice choice;
  engine_router_choose(a->router, pr.prompt_token_ids, pr.num_prompt_tokens, req.cache_salt, llb_now_ns(), &choice);
  char resume_of[INPROC_MAX_ID_BYTES], resume_eid[BUS_TOKEN_MAX + 1];
  const bool resuming = resume_target(a, msg, tenant, pr.num_requests, resume_of, sizeof resume_of, resume_eid,
                                      sizeof resume_eid);
  if (resuming) snprintf(choice.engine_id, sizeof choice.engine_id, "%s", resume_eid);
  if (choice.by_prefix) atomic_fetch_add(&a->routed_by_prefix, 1);
  if (choice.fallback) atomic_fetch_add(&a->routed_fallback, 1);
  st = inproc_processed_set_engine(&pr, choice.engine_id);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, st, llb_err_last(), "request_id");
    goto done;
  }
  if (!admit(a, msg, tenant, &pr)) goto done;
  bus_span_attr_str(&proc, "llmbus.request_id", pr.requests[0].parent_request_id);
  bus_span_attr_int(&proc, "llmbus.num_prompt_tokens", pr.num_prompt_tokens);
  bus_span_attr_int(&proc, "llmbus.n", pr.num_requests);
  bus_span_attr_str(&proc, "llmbus.engine_id", choice.engine_id);
  /* the work is done when the request is handed to the engine, which may answer before
   * publish returns: ending here keeps this span inside the request span */
  proc.end_unix_ns = llb_wall_ns();
  st = publish_children(a, choice.engine_id, &req, &pr, &proc.ctx, &rt, &gr.pooling_params,
                        resuming ? resume_of : NULL);
  if (st != LLB_STATUS_OK) {
    release(a, &pr);
    LLB_LOG_ERROR("engine_publish_failed", "request_id=%s error=%s", pr.requests[0].parent_request_id,
                  llb_log_quote(q, sizeof q, llb_err_last()));
    reply_error(a, msg, pr.requests[0].parent_request_id, st, llb_err_last(), "");
    goto done;
  }
  atomic_fetch_add(&a->requests, 1);
  accepted = true;
  LLB_LOG_DEBUG("generate_accepted", "request_id=%s tenant=%s n=%d prompt_tokens=%" PRId64 " engine=%s "
                "matched_blocks=%d/%d by_prefix=%d trace_id=%s", pr.requests[0].parent_request_id, tenant,
                pr.num_requests, pr.num_prompt_tokens, choice.engine_id, choice.matched_blocks,
                choice.prompt_blocks, choice.by_prefix, proc.ctx.trace_id);
done:
  proc.error = !accepted;
  bus_span_end(bus, &proc);
  if (!accepted) { /* answered here: the request span ends here too */
    req_span.error = true;
    bus_span_end(bus, &req_span);
  }
  inproc_processed_free(&pr);
  llb_arena_destroy(&arena);
}

/* Answers a tokenize request with prompt_token_ids / prompt and the context length. */
static void reply_tokenized(struct inproc_actor *a, const struct bus_msg *msg, const char *request_id,
                            const int32_t *ids, int64_t n, const char *text, size_t text_len) {
  struct llb_request_output ro = {0};
  ro.request_id = llb_str_c(request_id);
  ro.prompt_token_ids = ids;
  ro.num_prompt_token_ids = (int32_t)n;
  ro.prompt = (struct llb_str){text ? text : "", text ? text_len : 0};
  ro.finished = true;
  ro.max_model_len = a->max_model_len;
  struct llb_buf buf = {0};
  llb_status st = llb_request_output_encode_buf(&ro, &buf);
  if (st == LLB_STATUS_OK) st = bus_respond(a->bus, msg, buf.data, buf.len, NULL);
  llb_buf_free(&buf);
  if (st == LLB_STATUS_OK) {
    atomic_fetch_add(&a->tokenize, 1);
    return;
  }
  atomic_fetch_add(&a->publish_errors, 1);
  char q[320];
  LLB_LOG_ERROR("tokenize_reply_failed", "reply=%s error=%s", msg->reply, llb_log_quote(q, sizeof q, llb_err_last()));
  /* too large for the bus, most likely: say so instead of leaving the client waiting */
  reply_error(a, msg, request_id, st, llb_err_last(), "");
}

/* <prefix>.tokenize.<tenant>: tokenize (prompt / messages), detokenize (prompt_token_ids) or
 * only the context length (no input); see actor.h. */
void inproc_on_tokenize(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct inproc_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  char q[320];
  int32_t *ids = NULL;
  char *text = NULL;
  llb_status st = llb_generate_request_decode(msg->data, msg->len, &arena, &gr);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->malformed, 1);
    char e[512];
    snprintf(e, sizeof e, "malformed GenerateRequest: %s", llb_err_last());
    reply_error(a, msg, NULL, st, e, "");
    goto done;
  }
  const char *ext_id = gr.request_id.len ? gr.request_id.data : DEFAULT_EXTERNAL_ID;
  if (!msg->reply || !msg->reply[0]) {
    reply_error(a, msg, ext_id, LLB_STATUS_INVALID_ARGUMENT, "a tokenize request needs a reply subject", "reply_to");
    goto done;
  }
  struct inproc_errors errs = {0};
  if (!gr.prompt.len && gr.num_messages == 0 && gr.num_prompt_token_ids == 0) {
    reply_tokenized(a, msg, ext_id, NULL, 0, NULL, 0);
    goto done;
  }
  size_t text_len = 0;
  int64_t n = 0;
  if (!gr.prompt.len && gr.num_messages == 0) {
    st = inproc_detokenize(a->proc, gr.prompt_token_ids, gr.num_prompt_token_ids, &text, &text_len, &errs);
    if (st == LLB_STATUS_OK) reply_tokenized(a, msg, ext_id, gr.prompt_token_ids, gr.num_prompt_token_ids, text, text_len);
  } else {
    struct inproc_generate_request req;
    const char *bad = to_inproc_request(&gr, subject_tenant(msg->subject), msg->reply, &arena, &req);
    if (bad) {
      reply_error(a, msg, ext_id, LLB_STATUS_OUT_OF_MEMORY, "out of memory", bad);
      goto done;
    }
    st = inproc_tokenize(a->proc, &req, &ids, &n, &errs);
    if (st == LLB_STATUS_OK) reply_tokenized(a, msg, ext_id, ids, n, NULL, 0);
  }
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    char e[1024];
    const char *field = "";
    if (st == LLB_STATUS_INVALID_ARGUMENT && errs.num_errors > 0) {
      inproc_errors_format(&errs, e, sizeof e);
      field = errs.errors[0].field;
    } else {
      snprintf(e, sizeof e, "%s", llb_err_last());
    }
    LLB_LOG_INFO("tokenize_rejected", "request_id=%s field=%s error=%s", ext_id, field, llb_log_quote(q, sizeof q, e));
    reply_error(a, msg, ext_id, st, e, field);
  }
done:
  free(ids);
  free(text);
  llb_arena_destroy(&arena);
}

/* True when every byte of `id` is printable ASCII other than space (ids we hand out). */
static bool id_printable(struct llb_str id) {
  for (size_t i = 0; i < id.len; i++)
    if ((uint8_t)id.data[i] <= 0x20 || (uint8_t)id.data[i] >= 0x7F) return false;
  return true;
}

/* An abort whose id names no engine we know (an id from before routing, or an engine that has
 * not announced itself to this replica yet): every known engine and the default one get it;
 * the engines ignore ids they do not run. Returns the number of engines; *st the first error. */
static int abort_everywhere(struct inproc_actor *a, const struct llb_str *ids, int32_t n,
                            const struct bus_trace_ctx *span, llb_status *st) {
  enum { MAX_FANOUT = 64 };
  struct engine_router_engine rows[MAX_FANOUT];
  int total = engine_router_list(a->router, llb_now_ns(), rows, MAX_FANOUT);
  if (total > MAX_FANOUT) total = MAX_FANOUT;
  *st = publish_aborts(a, a->engine_id, ids, n, span);
  int sent = 1;
  for (int i = 0; i < total; i++) {
    if (strcmp(rows[i].engine_id, a->engine_id) == 0) continue;
    llb_status s2 = publish_aborts(a, rows[i].engine_id, ids, n, span);
    if (*st == LLB_STATUS_OK) *st = s2;
    sent++;
  }
  return sent;
}

/* <prefix>.engine.<eid>.stats: an engine announcing itself and its load (routing input). */
void inproc_on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct inproc_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_scheduler_stats s;
  llb_status st = llb_scheduler_stats_decode(msg->data, msg->len, &arena, &s);
  /* the subject's <eid> must be the one the message names: llm.engine.<eid>.stats */
  char eid[BUS_TOKEN_MAX + 1] = "";
  const char *end = strrchr(msg->subject, '.'), *begin = end;
  while (begin && begin > msg->subject && begin[-1] != '.') begin--;
  if (begin && end && end > begin && (size_t)(end - begin) < sizeof eid) {
    memcpy(eid, begin, (size_t)(end - begin));
    eid[end - begin] = '\0';
  }
  if (st == LLB_STATUS_OK && strcmp(eid, s.engine_id.data ? s.engine_id.data : "") != 0)
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "engine_id \"%s\" on the stats subject of engine \"%s\"",
                  s.engine_id.data ? s.engine_id.data : "", eid);
  if (st == LLB_STATUS_OK) {
    struct engine_router_stats rs = {
        .engine_id = eid, .model = s.model.data, .instance = s.instance.data,
        .num_running_reqs = s.num_running_reqs, .num_waiting_reqs = s.num_waiting_reqs,
        .kv_cache_usage = s.kv_cache_usage, .num_free_blocks = s.num_free_blocks,
        .num_total_blocks = s.num_total_blocks, .block_size = s.block_size, .max_num_seqs = s.max_num_seqs,
        .max_model_len = s.max_model_len, .stats_interval_ms = s.stats_interval_ms,
        .prefix_cache_queries = s.prefix_cache_queries, .prefix_cache_hits = s.prefix_cache_hits,
        .generation_tokens_total = s.generation_tokens_total, .draining = s.draining};
    st = engine_router_update(a->router, &rs, llb_now_ns());
  }
  if (st != LLB_STATUS_OK) {
    char q[320];
    if (atomic_fetch_add(&a->stats_malformed, 1) % 100 == 0) /* one line per 100: a flood stays quiet */
      LLB_LOG_WARN("stats_rejected", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                   llb_log_quote(q, sizeof q, llb_err_last()));
  }
  llb_arena_destroy(&arena);
}

void inproc_on_abort(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct inproc_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_abort_request ar;
  char q[320];
  llb_status st = llb_abort_request_decode(msg->data, msg->len, &arena, &ar);
  /* Internal ids are "<external>-<16 hex>", children "<i>_<that>": bounded, no spaces. */
  if (st == LLB_STATUS_OK && (ar.request_id.len + 8 > INPROC_MAX_ID_BYTES || !id_printable(ar.request_id))) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "AbortRequest.request_id: not a request id of ours (%zu bytes)",
                  ar.request_id.len);
  }
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->malformed, 1);
    LLB_LOG_WARN("abort_malformed", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
    goto done;
  }
  const char *tenant = subject_tenant(msg->subject);
  if (!inproc_id_owned_by(ar.request_id.data, ar.request_id.len, tenant)) {
    atomic_fetch_add(&a->aborts_refused, 1);
    LLB_LOG_WARN("abort_refused", "subject=%s request_id=%s reason=\"not a request of tenant %s\"",
                 msg->subject, ar.request_id.data, tenant);
    goto done;
  }
  /* The processor keeps no state: abort the id itself (n = 1) and every child id it could
   * have (n > 1: "<i>_<id>"); the engine ignores those it does not run. */
  char child_ids[INPROC_ACTOR_MAX_N][INPROC_MAX_ID_BYTES];
  struct llb_str ids[INPROC_ACTOR_MAX_N + 1];
  ids[0] = ar.request_id;
  for (int32_t i = 0; i < INPROC_ACTOR_MAX_N; i++) {
    snprintf(child_ids[i], sizeof child_ids[i], "%d_%s", i, ar.request_id.data);
    ids[i + 1] = llb_str_c(child_ids[i]);
  }
  struct bus_trace_ctx span;
  bus_trace_child(&msg->trace, &span);
  char eid[BUS_TOKEN_MAX + 1];
  int engines = 0;
  if (inproc_engine_of_id(ar.request_id.data, ar.request_id.len, eid, sizeof eid) &&
      engine_router_known(a->router, eid)) {
    st = publish_aborts(a, eid, ids, INPROC_ACTOR_MAX_N + 1, &span);
    engines = 1;
  } else {
    engines = abort_everywhere(a, ids, INPROC_ACTOR_MAX_N + 1, &span, &st);
  }
  if (st != LLB_STATUS_OK) {
    LLB_LOG_ERROR("abort_publish_failed", "request_id=%s error=%s", ar.request_id.data,
                  llb_log_quote(q, sizeof q, llb_err_last()));
    goto done;
  }
  atomic_fetch_add(&a->aborts, 1);
  LLB_LOG_INFO("abort_forwarded", "request_id=%s tenant=%s engines=%d", ar.request_id.data,
               subject_tenant(msg->subject), engines);
done:
  llb_arena_destroy(&arena);
}

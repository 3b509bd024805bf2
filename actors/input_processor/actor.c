/* Input processor actor; see actor.h. */
#include "actors/input_processor/actor.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/input_processor.h"
#include "base/log.h"
#include "bus/jetstream.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define DEFAULT_MAX_MODEL_LEN 4096
#define DEFAULT_EXTERNAL_ID "req" /* a GenerateRequest without request_id */
#define MALFORMED_REQUEST_ID "malformed"
#define INPROC_DURABLE_PUBLISH_TIMEOUT_MS 5000 /* JetStream's confirmation */
#define INPROC_DURABLE_START_TIMEOUT_MS 10000  /* the requests stream at start */

struct inproc_actor {
  struct tokenizer *tok;
  struct inproc_t *proc;
  struct bus *bus;
  int32_t max_model_len;
  char tenant[BUS_TOKEN_MAX + 1];
  char engine_id[BUS_TOKEN_MAX + 1];
  char requests_subject[BUS_SUBJECT_MAX];
  char abort_subject[BUS_SUBJECT_MAX];
  bool durable;
  atomic_uint_fast64_t requests, engine_requests, rejected, malformed, no_reply, aborts,
      publish_errors, tokenize;
};

/* Context length of the model: "<general.architecture>.context_length", capped at 4096.
 * A vocab-only GGUF may lack it: then 4096. */
static int32_t default_max_model_len(const struct gguf_file *f) {
  struct gguf_str arch;
  int64_t ctx = 0;
  if (gguf_get_str(f, "general.architecture", &arch) == LLB_STATUS_OK && arch.len < 64) {
    char key[96];
    snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.data);
    if (gguf_get_int(f, key, &ctx) != LLB_STATUS_OK) ctx = 0;
  }
  return ctx > 0 && ctx < DEFAULT_MAX_MODEL_LEN ? (int32_t)ctx : DEFAULT_MAX_MODEL_LEN;
}

/* "<general.architecture>.embedding_length": columns of "embeds" items; 0 if absent. */
static int32_t model_hidden_size(const struct gguf_file *f) {
  struct gguf_str arch;
  int64_t v = 0;
  if (gguf_get_str(f, "general.architecture", &arch) == LLB_STATUS_OK && arch.len < 64) {
    char key[96];
    snprintf(key, sizeof key, "%.*s.embedding_length", (int)arch.len, arch.data);
    if (gguf_get_int(f, key, &v) != LLB_STATUS_OK) v = 0;
  }
  return v > 0 && v < (1 << 20) ? (int32_t)v : 0;
}

llb_status inproc_actor_create(const struct inproc_actor_options *o, struct inproc_actor **out) {
  *out = NULL;
  if (!o || !o->model_path) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "input processor: model path required");
  const char *tenant = o->tenant ? o->tenant : "*";
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (strcmp(tenant, "*") != 0 && !bus_token_valid(tenant))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant \"%s\" is not one subject token (or *)", tenant);
  if (!bus_token_valid(eid)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", eid);
  if (o->max_model_len < 0 || o->max_model_len == 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_model_len must be >= 2 (or 0 = the model's), got %d",
                    o->max_model_len);

  struct inproc_actor *a = calloc(1, sizeof *a);
  struct gguf_file *f = NULL;
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "input processor actor");
  snprintf(a->tenant, sizeof a->tenant, "%s", tenant);
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  a->durable = o->durable;
  llb_status st = gguf_open(o->model_path, &f);
  if (st != LLB_STATUS_OK) goto fail;
  st = tokenizer_load(f, &a->tok);
  if (st != LLB_STATUS_OK) goto fail;
  struct inproc_config cfg = {0};
  cfg.max_model_len = o->max_model_len ? o->max_model_len : default_max_model_len(f);
  cfg.max_n = INPROC_ACTOR_MAX_N;
  cfg.has_chat_template = chat_template_from_gguf(f, &cfg.chat_template) == LLB_STATUS_OK;
  cfg.hidden_size = model_hidden_size(f);
  a->max_model_len = cfg.max_model_len;
  st = inproc_create(a->tok, &cfg, &a->proc);
  if (st != LLB_STATUS_OK) goto fail;
  gguf_close(f);
  LLB_LOG_INFO("input_processor_ready", "model=%s max_model_len=%d chat_template=%s vocab=%d",
               o->model_path, a->max_model_len, cfg.has_chat_template ? "yes" : "no",
               tokenizer_vocab_size(a->tok));
  *out = a;
  return LLB_STATUS_OK;
fail:
  gguf_close(f);
  inproc_actor_destroy(a);
  return st;
}

void inproc_actor_destroy(struct inproc_actor *a) {
  if (!a) return;
  inproc_destroy(a->proc);
  tokenizer_destroy(a->tok);
  free(a);
}

int32_t inproc_actor_max_model_len(const struct inproc_actor *a) { return a->max_model_len; }

void inproc_actor_get_stats(const struct inproc_actor *a, struct inproc_actor_stats *out) {
  struct inproc_actor *m = (struct inproc_actor *)a; /* atomics: loads only */
  out->requests = atomic_load(&m->requests);
  out->engine_requests = atomic_load(&m->engine_requests);
  out->rejected = atomic_load(&m->rejected);
  out->malformed = atomic_load(&m->malformed);
  out->no_reply = atomic_load(&m->no_reply);
  out->aborts = atomic_load(&m->aborts);
  out->publish_errors = atomic_load(&m->publish_errors);
  out->tokenize = atomic_load(&m->tokenize);
}

/* The tenant of a generate/abort subject: its last token. */
static const char *subject_tenant(const char *subject) {
  const char *dot = strrchr(subject, '.');
  return dot ? dot + 1 : subject;
}

/* Answers `msg` with a final RequestOutput carrying an error (code, message, field). Without
 * a reply subject the error is only counted and logged. */
static void reply_error(struct inproc_actor *a, const struct bus_msg *msg, const char *request_id,
                        llb_status code, const char *message, const char *field) {
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

/* Publishes AbortRequests{ids} on the engine's abort subject. */
static llb_status publish_aborts(struct inproc_actor *a, const struct llb_str *ids, int32_t n,
                                 const struct bus_trace_ctx *trace) {
  struct llb_abort_requests ab = {.request_ids = ids, .num_request_ids = n};
  struct llb_buf buf = {0};
  llb_status st = llb_abort_requests_encode_buf(&ab, &buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->abort_subject, buf.data, buf.len, trace);
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
    for (int32_t i = 0; i < gr->num_messages; i++) {
      msgs[i].role = gr->messages[i].role.data;
      msgs[i].content = gr->messages[i].content.data;
    }
    req->messages = msgs;
    req->num_messages = (size_t)gr->num_messages;
  }
  if (gr->num_prompt_token_ids > 0) {
    req->prompt_token_ids = gr->prompt_token_ids;
    req->num_prompt_token_ids = gr->num_prompt_token_ids;
  }
  if (gr->chat_template.len) req->chat_template = gr->chat_template.data;
  req->raw = gr->raw;
  req->no_generation_prompt = !gr->add_generation_prompt;
  req->sampling_params = *gr->sampling_params;
  req->priority = gr->priority;
  /* Per-tenant prefix-cache salt (DESIGN.md §7): no tenant can hit another's blocks. */
  size_t salt_cap = strlen(tenant) + gr->cache_salt.len + 48;
  char *salt = llb_arena_alloc(arena, salt_cap, 1);
  if (!salt) return "cache_salt";
  if (inproc_cache_salt_compose(tenant, gr->cache_salt.data, gr->cache_salt.len, salt, salt_cap) >= salt_cap)
    return "cache_salt";
  req->cache_salt = salt;
  req->reply_to = reply_to;
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

/* Publishes every child of `pr` to the engine. On a failed publish the children already
 * sent are aborted and the error is returned. */

/* One EngineCoreRequest to the engine: durable (stored in the requests stream, confirmed by
 * JetStream, so a scheduler that dies later still gets it) or a plain publish. */
static llb_status publish_engine_request(struct inproc_actor *a, const void *data, size_t len,
                                         const struct bus_trace_ctx *span) {
  if (!a->durable) return bus_publish(a->bus, a->requests_subject, data, len, span);
  const struct bus_out_msg m = {.subject = a->requests_subject, .data = data, .len = len, .trace = span};
  return bus_js_publish(a->bus, &m, INPROC_DURABLE_PUBLISH_TIMEOUT_MS, NULL);
}

static llb_status publish_children(struct inproc_actor *a, const struct inproc_generate_request *req,
                                   const struct inproc_processed *pr, const struct bus_trace_ctx *span) {
  struct llb_mm_feature mm[INPROC_MAX_MM_ITEMS];
  for (int32_t k = 0; k < pr->num_mm_features && k < INPROC_MAX_MM_ITEMS; k++) {
    const struct inproc_mm_feature *f = &pr->mm_features[k];
    const struct inproc_mm_item *it = &req->mm_items[f->item];
    mm[k] = (struct llb_mm_feature){.modality = llb_str_c(it->modality), .mm_hash = llb_str_c(f->mm_hash),
                                    .offset = f->offset, .length = f->length, .data = it->data,
                                    .data_bytes = it->data_bytes, .dtype = llb_str_c(it->dtype),
                                    .num_cols = it->num_cols};
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
    };
    st = llb_engine_core_request_encode_buf(&m, &buf);
    if (st == LLB_STATUS_OK) st = publish_engine_request(a, buf.data, buf.len, span);
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
  if (sent > 0) (void)publish_aborts(a, ids, sent < INPROC_ACTOR_MAX_N ? sent : INPROC_ACTOR_MAX_N, span);
  return LLB_ERRF(st, "publishing to %s: %s", a->requests_subject, msg);
}

static void on_generate(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct inproc_actor *a = user;
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
  struct inproc_generate_request req;
  const char *bad = to_inproc_request(&gr, tenant, msg->reply, &arena, &req);
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
  struct bus_trace_ctx span;
  bus_trace_child(&msg->trace, &span);
  st = publish_children(a, &req, &pr, &span);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_ERROR("engine_publish_failed", "request_id=%s error=%s", pr.requests[0].parent_request_id,
                  llb_log_quote(q, sizeof q, llb_err_last()));
    reply_error(a, msg, pr.requests[0].parent_request_id, st, llb_err_last(), "");
    goto done;
  }
  atomic_fetch_add(&a->requests, 1);
  LLB_LOG_DEBUG("generate_accepted", "request_id=%s tenant=%s n=%d prompt_tokens=%" PRId64 " trace_id=%s",
                pr.requests[0].parent_request_id, tenant, pr.num_requests, pr.num_prompt_tokens,
                span.trace_id);
done:
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
static void on_tokenize(struct bus *bus, const struct bus_msg *msg, void *user) {
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

static void on_abort(struct bus *bus, const struct bus_msg *msg, void *user) {
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
  st = publish_aborts(a, ids, INPROC_ACTOR_MAX_N + 1, &span);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_ERROR("abort_publish_failed", "request_id=%s error=%s", ar.request_id.data,
                  llb_log_quote(q, sizeof q, llb_err_last()));
    goto done;
  }
  atomic_fetch_add(&a->aborts, 1);
  LLB_LOG_INFO("abort_forwarded", "request_id=%s tenant=%s", ar.request_id.data, subject_tenant(msg->subject));
done:
  llb_arena_destroy(&arena);
}

llb_status inproc_actor_start(struct inproc_actor *a, struct bus *bus) {
  a->bus = bus;
  int64_t maxp = bus_max_payload(bus);
  /* An item travels whole in an EngineCoreRequest and a SchedulerOutput: leave room for
   * the rest of either message. */
  if (maxp > 0) inproc_set_max_mm_item_bytes(a->proc, maxp > 256 * 1024 ? maxp - 128 * 1024 : maxp / 2);
  const char *prefix = bus_prefix(bus);
  llb_status st = bus_subject_engine(prefix, a->engine_id, "requests", a->requests_subject,
                                     sizeof a->requests_subject);
  if (st == LLB_STATUS_OK)
    st = bus_subject_engine(prefix, a->engine_id, "abort", a->abort_subject, sizeof a->abort_subject);
  if (st != LLB_STATUS_OK) return st;
  if (a->durable && (st = bus_js_requests_stream_ensure(bus, 0, INPROC_DURABLE_START_TIMEOUT_MS)))
    return st;
  char gen[BUS_SUBJECT_MAX], abort_subj[BUS_SUBJECT_MAX], tok_subj[BUS_SUBJECT_MAX];
  snprintf(tok_subj, sizeof tok_subj, "%s.tokenize.%s", prefix, a->tenant);
  if (strcmp(a->tenant, "*") == 0) {
    snprintf(gen, sizeof gen, "%s.generate.*", prefix);
    snprintf(abort_subj, sizeof abort_subj, "%s.abort.*", prefix);
  } else {
    st = bus_subject_generate(prefix, a->tenant, gen, sizeof gen);
    if (st == LLB_STATUS_OK) st = bus_subject_abort(prefix, a->tenant, abort_subj, sizeof abort_subj);
    if (st != LLB_STATUS_OK) return st;
  }
  st = bus_subscribe(bus, gen, INPROC_ACTOR_QUEUE_GROUP, on_generate, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, abort_subj, INPROC_ACTOR_QUEUE_GROUP, on_abort, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, tok_subj, INPROC_ACTOR_QUEUE_GROUP, on_tokenize, a, NULL);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("input_processor_subscribed", "generate=%s abort=%s tokenize=%s requests=%s engine_abort=%s", gen,
               abort_subj, tok_subj, a->requests_subject, a->abort_subject);
  return LLB_STATUS_OK;
}

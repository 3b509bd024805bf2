/* Input processor actor: requests, tokenize calls, aborts and stats on the bus, and its life
 * cycle (see actor.h). The logic is input_processor.c over plain structs, the wire
 * translation actor_wire.c, the model's facts model_info.c. */
#include "actors/input_processor/actor.h"
#include "schemas/control.h"
#include "schemas/lora_registry.h"

#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/input_processor/abort_fanout.h"
#include "actors/input_processor/actor_wire.h"
#include "model/template/chat_render.h"
#include "actors/input_processor/engine_router.h"
#include "actors/input_processor/input_processor.h"
#include "actors/input_processor/intake_queue.h"
#include "actors/input_processor/intake_workers.h"
#include "actors/input_processor/model_info.h"
#include "actors/input_processor/pooling_check.h"
#include "actors/input_processor/structured_check.h"
#include "actors/input_processor/tenant_limits.h"
#include "base/log.h"
#include "bus/jetstream.h"
#include "bus/span.h"
#include "model/template/chat_template.h"
#include "model/vision/clip.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define DEFAULT_MAX_MODEL_LEN 4096
#define MALFORMED_REQUEST_ID "malformed"
#define DEFAULT_TENANT_LIMIT_TTL_MS (30 * 60 * 1000)
/* JetStream's confirmation, retries included: a stream leader election after a cluster node
 * died took 2-8 s in tests/cluster/ (nats-server 2.9, a loaded 2-core host) */
#define INPUT_PROCESSOR_DURABLE_PUBLISH_TIMEOUT_MS 20000
#define INPUT_PROCESSOR_DURABLE_START_TIMEOUT_MS 10000  /* the requests stream at start */
#define INPUT_PROCESSOR_DEFAULT_INTAKE_THREADS 2
#define INPUT_PROCESSOR_LORA_TTL_NS (20LL * 1000 * 1000 * 1000) /* a worker silent this long serves no adapter */
#define INPUT_PROCESSOR_INTAKE_ITEM_OVERHEAD 1024    /* cost of a queued request beside its bytes */
#define INPUT_PROCESSOR_INTAKE_RETRY_AFTER_MS 1000   /* a full intake queue's Retry-After */
#define INPUT_PROCESSOR_IMAGE_ESTIMATE_TOKENS 64     /* an image before it is planned (estimate_tokens) */
/* A request's intake CPU time after which its thread yields the cores to the engine (nice 19,
 * intake_workers.h): above what a prompt of a few thousand tokens costs to template and tokenize,
 * far below an 800 KB chat or a real vision model's images. */
#define INPUT_PROCESSOR_INTAKE_DEMOTE_AFTER_NS (10 * 1000 * 1000LL)

struct input_processor_actor {
  struct tokenizer *tok;
  struct input_processor *proc;
  struct bus *bus;
  int32_t max_model_len;
  char tenant[BUS_TOKEN_MAX + 1];
  char engine_id[BUS_TOKEN_MAX + 1]; /* the default engine (docs/design.md §9: routed otherwise) */
  struct engine_router *router;
  bool durable;
  int32_t stream_replicas; /* of the requests stream, if this actor creates it */
  atomic_uint_fast64_t requests, engine_requests, rejected, malformed, no_reply, aborts, aborts_refused,
      publish_errors, tokenize, stats_malformed, routed_by_prefix, routed_fallback, limited,
      routed_disaggregated;
  char outputs_subject[BUS_SUBJECT_MAX];
  struct tenant_limits *limits; /* NULL = no per-tenant limits */
  struct jinja_template *jinja; /* the model's chat template; NULL = the named kind */
  char *bos_text, *eos_text;    /* bos_token / eos_token for it ("" when none) */
  int32_t hidden_size;          /* the model's embedding_length: num_cols of image features */
  struct clip_model *clip;      /* --mmproj, for clip_image_plan only; NULL = no images */
  char mmproj_id[96];           /* "<file name>:<bytes>": enters the images' mm_hash */
  struct llb_hash_key hash_key; /* the deployment's (input_processor_actor_options.hash_key) */
  struct intake_queue *intake;  /* per-tenant queues (intake_queue.h) */
  struct intake_workers *workers; /* NULL before start and after stop */
  int32_t intake_threads;
  atomic_uint_fast64_t intake_full, grammars_compiled;
  struct input_processor_so_cache *so_cache; /* verdicts of the grammars compiled (structured_check.h) */
  struct lora_registry *loras;  /* adapters the workers announce, per tenant (schemas/lora_registry.h) */
};

static const char *subject_tenant(const char *subject) {
  const char *dot = strrchr(subject, '.');
  return dot ? dot + 1 : subject;
}

/* Answers `msg` with a final RequestOutput carrying an error (code, message, field). Without
 * a reply subject the error is only counted and logged. */
static void reply_error_retry(struct input_processor_actor *a, const struct bus_msg *msg, const char *request_id,
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

static void reply_error(struct input_processor_actor *a, const struct bus_msg *msg, const char *request_id,
                        llb_status code, const char *message, const char *field) {
  reply_error_retry(a, msg, request_id, code, message, field, 0);
}

/* The abort fan-out of this actor (abort_fanout.h): its bus, router and default engine. */
static struct abort_fanout fanout_of(struct input_processor_actor *a) {
  return (struct abort_fanout){.bus = a->bus, .router = a->router, .default_engine_id = a->engine_id,
                               .publish_errors = &a->publish_errors};
}

/* Compiles the request's structured-output spec once (structured_check.h): a spec the engine
 * cannot enforce is a 400 now, naming structured_outputs. False: answered. */
static bool check_structured(struct input_processor_actor *a, const struct bus_msg *msg, const char *ext_id,
                             const struct llb_structured_outputs *so) {
  char text[512];
  bool compiled = false;
  llb_status st = input_processor_structured_check_cached(a->so_cache, so, text, sizeof text, &compiled);
  if (compiled) atomic_fetch_add(&a->grammars_compiled, 1);
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
static llb_status publish_engine_request(struct input_processor_actor *a, const char *subject, const char *request_id,
                                         const void *data, size_t len, const struct bus_trace_ctx *span) {
  if (!a->durable) return bus_publish(a->bus, subject, data, len, span);
  const struct bus_out_msg m = {.subject = subject, .data = data, .len = len, .trace = span};
  return bus_js_publish(a->bus, &m, request_id, INPUT_PROCESSOR_DURABLE_PUBLISH_TIMEOUT_MS, NULL);
}

static llb_status publish_children(struct input_processor_actor *a, const char *eid, const struct input_processor_generate_request *req,
                                   const struct input_processor_processed *pr, const struct bus_trace_ctx *span,
                                   const struct request_trace *rt, const struct llb_pooling_params *pool,
                                   const char *resume_of, const char *decode_eid) {
  char subject[BUS_SUBJECT_MAX];
  llb_status sst = bus_subject_engine(bus_prefix(a->bus), eid, "requests", subject, sizeof subject);
  if (sst != LLB_STATUS_OK) return sst;
  struct llb_mm_feature mm[INPUT_PROCESSOR_MAX_MM_ITEMS];
  const int32_t num_mm = input_processor_wire_mm_features(pr, req, a->hidden_size, mm);
  struct llb_buf buf = {0};
  llb_status st = LLB_STATUS_OK;
  int32_t sent = 0;
  for (; sent < pr->num_requests; sent++) {
    const struct input_processor_engine_request *e = &pr->requests[sent];
    /* The engine draws child i from stream 0 of its own seed: seed + i keeps the children
     * apart and reproducible (vLLM parent_req.py). n tells the output processor how many
     * children to wait for; the engine runs one sequence per request whatever n says. A
     * single child's params are the processed ones as they are (seed + 0, n = 1): no copy. */
    const struct llb_sampling_params *sp = e->sampling_params;
    struct llb_sampling_params child;
    if (e->num_children > 1) {
      child = *sp;
      child.seed = sp->seed + (uint64_t)e->child_index;
      child.n = e->num_children;
      sp = &child;
    }
    struct llb_engine_core_request m = input_processor_wire_engine_request(e, req, sp, mm, num_mm, pool);
    m.traceparent = llb_str_c(rt->on ? rt->traceparent : "");
    m.trace_parent_span_id = llb_str_c(rt->on ? rt->parent_span_id : "");
    m.trace_start_time_ns = rt->on ? rt->start_ns : 0;
    m.resume_request_id = llb_str_c(pr->num_requests == 1 && resume_of ? resume_of : "");
    if (decode_eid) { /* disaggregated: prefill here, then the decode engine (handoff.h) */
      m.has_kv_transfer_params = true;
      m.kv_transfer_params = (struct llb_kv_transfer_params){.do_remote_decode = true,
                                                             .remote_engine_id = llb_str_c(decode_eid)};
    }
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
  struct llb_str ids[INPUT_PROCESSOR_ACTOR_MAX_N];
  for (int32_t i = 0; i < sent && i < INPUT_PROCESSOR_ACTOR_MAX_N; i++) ids[i] = llb_str_c(pr->requests[i].request_id);
  const struct abort_fanout f = fanout_of(a);
  if (sent > 0)
    (void)abort_fanout_publish(&f, eid, ids, sent < INPUT_PROCESSOR_ACTOR_MAX_N ? sent : INPUT_PROCESSOR_ACTOR_MAX_N, span);
  return LLB_ERRF(st, "publishing to %s: %s", subject, msg);
}

/* The engine request ids of pr's children (at most INPUT_PROCESSOR_ACTOR_MAX_N). */
static int32_t child_ids(const struct input_processor_processed *pr, const char **ids) {
  int32_t n = pr->num_requests < INPUT_PROCESSOR_ACTOR_MAX_N ? pr->num_requests : INPUT_PROCESSOR_ACTOR_MAX_N;
  for (int32_t i = 0; i < n; i++) ids[i] = pr->requests[i].request_id;
  return n;
}

/* Answers a request a per-tenant limit refused (429, or 400 for TOO_LARGE). */
static void refuse(struct input_processor_actor *a, const struct bus_msg *msg, const char *tenant, const char *request_id,
                   llb_status st, int64_t retry_after_ms) {
  atomic_fetch_add(&a->limited, 1);
  char q[320];
  LLB_LOG_INFO("tenant_limited", "tenant=%s request_id=%s retry_after_ms=%lld error=%s", tenant, request_id,
               (long long)retry_after_ms, llb_log_quote(q, sizeof q, llb_err_last()));
  reply_error_retry(a, msg, request_id, st, llb_err_last(), "", retry_after_ms);
}

/* A request's prompt in tokens before it is tokenized: its text as bytes / 4 (about the tokens
 * of English; what the tokenizer really makes is settled at admission), its token ids,
 * INPUT_PROCESSOR_IMAGE_ESTIMATE_TOKENS an image. */
static double estimate_prompt_tokens(const struct llb_generate_request *gr) {
  size_t text = gr->prompt.len + gr->tools.len + gr->chat_template_kwargs.len;
  for (int32_t i = 0; i < gr->num_messages; i++)
    text += gr->messages[i].content.len + gr->messages[i].tool_calls.len + gr->messages[i].name.len;
  return ceil((double)text / 4.0) + gr->num_prompt_token_ids + (double)gr->num_mm_items * INPUT_PROCESSOR_IMAGE_ESTIMATE_TOKENS;
}

/* What a request is counted in tokens before any work on it (tenant_limits_precharge): its
 * prompt's estimate and max_tokens per child, and its structured-output spec as bytes / 4, also
 * into *grammar_tokens: the compile is work whether or not the request is admitted, so that part
 * is never given back. */
static double estimate_tokens(const struct llb_generate_request *gr, double *grammar_tokens) {
  const struct llb_sampling_params *sp = gr->sampling_params;
  /* n over the limit is validation's to refuse, with its own message */
  const int32_t n = sp && sp->n > 1 ? (sp->n < INPUT_PROCESSOR_ACTOR_MAX_N ? sp->n : INPUT_PROCESSOR_ACTOR_MAX_N) : 1;
  const double max_tokens = sp && sp->max_tokens > 0 ? sp->max_tokens : 0;
  *grammar_tokens = ceil((double)gr->structured_outputs.spec.len / 4.0);
  return n * (estimate_prompt_tokens(gr) + max_tokens) + *grammar_tokens;
}

/* Before any costly work (template, tokenizer, images, grammar): a tenant at its max_concurrent /
 * max_queued, or whose bucket lacks the estimate, is refused at once; else the estimate is
 * charged. */
static bool precharge(struct input_processor_actor *a, const struct bus_msg *msg, const char *tenant, const char *request_id,
                      int32_t n, double estimate) {
  if (!a->limits) return true;
  int64_t retry_after_ms = 0;
  llb_status st = tenant_limits_precharge(a->limits, tenant, n, estimate, llb_now_ns() / 1000000, &retry_after_ms);
  if (st == LLB_STATUS_OK) return true;
  refuse(a, msg, tenant, request_id, st, retry_after_ms);
  return false;
}

/* Per-tenant limits (tenant_limits.h): true when pr may go to the engine; otherwise the
 * client got its 429 (or 400) already. A request counts its prompt and max_tokens per child
 * and its grammar; `precharged` of that was taken before the work. */
static bool admit(struct input_processor_actor *a, const struct bus_msg *msg, const char *tenant,
                  const struct input_processor_processed *pr, double precharged, double grammar_tokens) {
  if (!a->limits) return true;
  const char *ids[INPUT_PROCESSOR_ACTOR_MAX_N];
  int32_t n = child_ids(pr, ids);
  double cost = grammar_tokens;
  for (int32_t i = 0; i < n; i++)
    cost += (double)pr->num_prompt_tokens + (double)pr->requests[i].sampling_params->max_tokens;
  int64_t retry_after_ms = 0;
  llb_status st =
      tenant_limits_admit(a->limits, tenant, ids, n, cost, precharged, llb_now_ns() / 1000000, &retry_after_ms);
  if (st == LLB_STATUS_OK) return true;
  refuse(a, msg, tenant, pr->requests[0].parent_request_id, st, retry_after_ms);
  return false;
}

static void release(struct input_processor_actor *a, const struct input_processor_processed *pr) {
  const char *ids[INPUT_PROCESSOR_ACTOR_MAX_N];
  tenant_limits_release(a->limits, ids, child_ids(pr, ids));
}

/* <prefix>.engine.<eid>.outputs, only with limits: a child's first token and its end. */
static void input_processor_on_engine_outputs(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct input_processor_actor *a = user;
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

/* A client's resend (the api server after a nats-server restart lost its reply route): the
 * GenerateRequest carries the id of the engine request it replaces in the header
 * Llmbus-Resume-Of. Honoured only for an id of this tenant, of an engine this router knows,
 * for n = 1: the new request goes to that engine, which takes over the old one's outputs
 * (EngineCoreRequest.resume_request_id); anything else is a new request as usual, and the
 * replaced request of this tenant that cannot be taken over is aborted (its outputs can reach
 * nobody). Copies the id into out[cap] and its engine into eid; false when not honoured. */
static bool resume_target(struct input_processor_actor *a, const struct bus_msg *msg, const char *tenant, int32_t n,
                          char *out, size_t cap, char *eid, size_t eid_cap) {
  const char *id = bus_msg_header(msg, "Llmbus-Resume-Of");
  if (!id || !id[0]) return false;
  const struct llb_str s = llb_str_c(id);
  const bool owned = s.len + 8 <= INPUT_PROCESSOR_MAX_ID_BYTES && s.len < cap && id_printable(s) &&
                     input_processor_id_owned_by(&a->hash_key, id, s.len, tenant);
  const bool routed = owned && input_processor_engine_of_id(id, s.len, eid, eid_cap) && engine_router_known(a->router, eid);
  if (!(owned && routed && n == 1)) {
    LLB_LOG_WARN("resume_refused", "resume_of=%.*s tenant=%s n=%d owned=%d", (int)(s.len < 200 ? s.len : 200), id,
                 tenant, n, owned);
    if (owned) { /* ours, but not to be taken over here: stop it */
      llb_status st = LLB_STATUS_OK;
      const struct abort_fanout f = fanout_of(a);
      (void)abort_fanout_everywhere(&f, &s, 1, &msg->trace, &st);
    }
    return false;
  }
  memcpy(out, id, s.len + 1);
  return true;
}

/* One GenerateRequest, on an intake worker (or the delivery thread once intake stopped). */
static void process_generate(struct input_processor_actor *a, const struct bus_msg *msg) {
  struct bus *bus = a->bus;
  struct request_trace rt;
  struct bus_span req_span, proc;
  bool accepted = false;
  trace_begin(bus, msg, &rt, &req_span, &proc);
  const char *tenant = subject_tenant(msg->subject);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  struct input_processor_processed pr = {0};
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
  const char *ext_id = gr.request_id.len ? gr.request_id.data : INPUT_PROCESSOR_DEFAULT_EXTERNAL_ID;
  if (!msg->reply || !msg->reply[0]) {
    reply_error(a, msg, ext_id, LLB_STATUS_INVALID_ARGUMENT,
                "a GenerateRequest needs a reply subject (send it as a NATS request)", "reply_to");
    goto done;
  }
  int32_t lora_int_id = 0; /* a client's id is ignored: the name is resolved here */
  if (gr.lora_request.lora_name.len &&
      !(lora_int_id = lora_registry_lookup(a->loras, gr.lora_request.lora_name.data, tenant, llb_now_ns()))) {
    /* another tenant's adapter is answered as an unknown one (docs/design.md §7) */
    char text[256];
    snprintf(text, sizeof text, "The model `%.200s` does not exist.", gr.lora_request.lora_name.data);
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, LLB_STATUS_NOT_FOUND, text, "model");
    goto done;
  }
  double grammar_tokens = 0;
  const double estimate = estimate_tokens(&gr, &grammar_tokens);
  if (!precharge(a, msg, tenant, ext_id, gr.sampling_params ? gr.sampling_params->n : 1, estimate)) goto done;
  struct input_processor_generate_request req;
  if (!check_structured(a, msg, ext_id, &gr.structured_outputs)) goto done;
  const char *bad = NULL;
  char pool_msg[256];
  if ((st = input_processor_pooling_check(&gr, &bad, pool_msg, sizeof pool_msg))) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, st, pool_msg, bad);
    goto done;
  }
  bad = input_processor_wire_generate_request(&gr, tenant, msg->reply, &arena, &req);
  req.lora_request = (struct llb_lora_request){gr.lora_request.lora_name, lora_int_id};
  if (bad) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, LLB_STATUS_OUT_OF_MEMORY, "out of memory", bad);
    goto done;
  }
  struct input_processor_errors errs;
  st = input_processor_process(a->proc, &req, &pr, &errs);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    char text[1024];
    const char *field = "";
    if (st == LLB_STATUS_INVALID_ARGUMENT && errs.num_errors > 0) {
      input_processor_errors_format(&errs, text, sizeof text);
      field = errs.errors[0].field;
    } else {
      snprintf(text, sizeof text, "%s", llb_err_last());
    }
    LLB_LOG_INFO("generate_rejected", "request_id=%s field=%s error=%s", ext_id, field,
                 llb_log_quote(q, sizeof q, text));
    reply_error(a, msg, ext_id, st, text, field);
    goto done;
  }
  char resume_of[INPUT_PROCESSOR_MAX_ID_BYTES], resume_eid[BUS_TOKEN_MAX + 1];
  const bool resuming = resume_target(a, msg, tenant, pr.num_requests, resume_of, sizeof resume_of, resume_eid,
                                      sizeof resume_eid);
  /* one text sequence that samples: the only kind handed from a prefill to a decode engine
   * (n > 1 children would finish on two output processors; multimodal and pooling requests stay
   * where their encoder inputs and vectors are) */
  const bool may_disaggregate = !resuming && pr.num_requests == 1 && pr.num_mm_features == 0 &&
                                gr.pooling_params.pooling_type == LLB_POOLING_NONE;
  /* An adapter's KV is its own on the engines (its name is in every block hash), so the router's
   * prefix table keeps it apart too: the adapter joins the salt it hashes with (router-local). */
  char route_salt[INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES + LLB_LORA_NAME_MAX + 8];
  const char *salt = req.cache_salt ? req.cache_salt : "";
  if (lora_int_id > 0) {
    snprintf(route_salt, sizeof route_salt, "%s\x1flora=%.*s", salt, (int)gr.lora_request.lora_name.len,
             gr.lora_request.lora_name.data);
    salt = route_salt;
  }
  struct engine_router_choice choice;
  engine_router_choose_pd(a->router, pr.prompt_token_ids, pr.num_prompt_tokens, salt, may_disaggregate, llb_now_ns(),
                          &choice);
  if (resuming) snprintf(choice.engine_id, sizeof choice.engine_id, "%s", resume_eid);
  if (choice.disaggregated) atomic_fetch_add(&a->routed_disaggregated, 1);
  if (choice.by_prefix) atomic_fetch_add(&a->routed_by_prefix, 1);
  if (choice.fallback) atomic_fetch_add(&a->routed_fallback, 1);
  st = input_processor_processed_set_engine(&pr, choice.engine_id);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    reply_error(a, msg, ext_id, st, llb_err_last(), "request_id");
    goto done;
  }
  if (!admit(a, msg, tenant, &pr, estimate, grammar_tokens)) goto done;
  bus_span_attr_str(&proc, "llmbus.request_id", pr.requests[0].parent_request_id);
  bus_span_attr_int(&proc, "llmbus.num_prompt_tokens", pr.num_prompt_tokens);
  bus_span_attr_int(&proc, "llmbus.n", pr.num_requests);
  bus_span_attr_str(&proc, "llmbus.engine_id", choice.engine_id);
  /* the work is done when the request is handed to the engine, which may answer before
   * publish returns: ending here keeps this span inside the request span */
  proc.end_unix_ns = llb_wall_ns();
  st = publish_children(a, choice.engine_id, &req, &pr, &proc.ctx, &rt, &gr.pooling_params,
                        resuming ? resume_of : NULL, choice.disaggregated ? choice.decode_engine_id : NULL);
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
                "decode_engine=%s matched_blocks=%d/%d by_prefix=%d trace_id=%s", pr.requests[0].parent_request_id,
                tenant, pr.num_requests, pr.num_prompt_tokens, choice.engine_id, choice.decode_engine_id,
                choice.matched_blocks, choice.prompt_blocks, choice.by_prefix, proc.ctx.trace_id);
done:
  proc.error = !accepted;
  bus_span_end(bus, &proc);
  if (!accepted) { /* answered here: the request span ends here too */
    req_span.error = true;
    bus_span_end(bus, &req_span);
  }
  input_processor_processed_free(&pr);
  llb_arena_destroy(&arena);
}

/* Answers a tokenize request with prompt_token_ids / prompt and the context length. */
static void reply_tokenized(struct input_processor_actor *a, const struct bus_msg *msg, const char *request_id,
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
static void process_tokenize(struct input_processor_actor *a, const struct bus_msg *msg) {
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
  const char *ext_id = gr.request_id.len ? gr.request_id.data : INPUT_PROCESSOR_DEFAULT_EXTERNAL_ID;
  if (!msg->reply || !msg->reply[0]) {
    reply_error(a, msg, ext_id, LLB_STATUS_INVALID_ARGUMENT, "a tokenize request needs a reply subject", "reply_to");
    goto done;
  }
  struct input_processor_errors errs = {0};
  if (!gr.prompt.len && gr.num_messages == 0 && gr.num_prompt_token_ids == 0) {
    reply_tokenized(a, msg, ext_id, NULL, 0, NULL, 0);
    goto done;
  }
  /* /tokenize is template and tokenizer work too: counted as a request's prompt would be */
  const char *tenant = subject_tenant(msg->subject);
  const double estimate = estimate_prompt_tokens(&gr);
  if (!precharge(a, msg, tenant, ext_id, 0, estimate)) goto done;
  size_t text_len = 0;
  int64_t n = 0;
  if (!gr.prompt.len && gr.num_messages == 0) {
    st = input_processor_detokenize(a->proc, gr.prompt_token_ids, gr.num_prompt_token_ids, &text, &text_len, &errs);
    if (st == LLB_STATUS_OK) reply_tokenized(a, msg, ext_id, gr.prompt_token_ids, gr.num_prompt_token_ids, text, text_len);
  } else {
    struct input_processor_generate_request req;
    const char *bad = input_processor_wire_generate_request(&gr, subject_tenant(msg->subject), msg->reply, &arena, &req);
    if (bad) {
      reply_error(a, msg, ext_id, LLB_STATUS_OUT_OF_MEMORY, "out of memory", bad);
      goto done;
    }
    st = input_processor_tokenize(a->proc, &req, &ids, &n, &errs);
    if (st == LLB_STATUS_OK) reply_tokenized(a, msg, ext_id, ids, n, NULL, 0);
    if (st == LLB_STATUS_OK && a->limits) tenant_limits_settle(a->limits, tenant, (double)n - estimate, llb_now_ns() / 1000000);
  }
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->rejected, 1);
    char e[1024];
    const char *field = "";
    if (st == LLB_STATUS_INVALID_ARGUMENT && errs.num_errors > 0) {
      input_processor_errors_format(&errs, e, sizeof e);
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

/* ---- fair intake (intake_queue.h) ---- */

/* A request waiting in its tenant's intake queue: the message, kept past its handler. */
struct intake_item {
  struct bus_msg *msg;
  bool tokenize;
};

static void process(struct input_processor_actor *a, const struct bus_msg *msg, bool tokenize) {
  if (tokenize) process_tokenize(a, msg);
  else process_generate(a, msg);
}

/* On an intake worker: one request, in the order the queues give. */
static void intake_work(void *user, void *item) {
  struct intake_item *it = item;
  process(user, it->msg, it->tokenize);
  bus_msg_destroy(it->msg);
  free(it);
}

/* On the delivery thread: only what costs nothing — the tenant is the subject's last token, the
 * message goes into that tenant's queue (its cost: its bytes). A full queue is a 429 at once; a
 * stopped intake (the drain) or no memory leaves the work to this thread, as before. */
static void intake(struct input_processor_actor *a, const struct bus_msg *msg, bool tokenize) {
  struct intake_item *it = a->intake ? malloc(sizeof *it) : NULL;
  struct bus_msg *kept = it ? bus_msg_keep(msg) : NULL;
  if (!kept) {
    free(it);
    process(a, msg, tokenize);
    return;
  }
  *it = (struct intake_item){.msg = kept, .tokenize = tokenize};
  const char *tenant = subject_tenant(kept->subject);
  llb_status st = intake_queue_push(a->intake, tenant, it, (int64_t)kept->len + INPUT_PROCESSOR_INTAKE_ITEM_OVERHEAD);
  if (st == LLB_STATUS_OK) return;
  if (st == LLB_STATUS_QUEUE_FULL) {
    atomic_fetch_add(&a->limited, 1);
    if (atomic_fetch_add(&a->intake_full, 1) % 100 == 0) { /* one line per 100: a flood stays quiet */
      char q[320];
      LLB_LOG_WARN("intake_queue_full", "tenant=%s error=%s", tenant, llb_log_quote(q, sizeof q, llb_err_last()));
    }
    reply_error_retry(a, kept, "", st, llb_err_last(), "", INPUT_PROCESSOR_INTAKE_RETRY_AFTER_MS);
  } else {
    process(a, kept, tokenize);
  }
  bus_msg_destroy(kept);
  free(it);
}

static void input_processor_on_generate(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  intake(user, msg, false);
}

static void input_processor_on_tokenize(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  intake(user, msg, true);
}

/* True when every byte of `id` is printable ASCII other than space (ids we hand out). */
static bool id_printable(struct llb_str id) {
  for (size_t i = 0; i < id.len; i++)
    if ((uint8_t)id.data[i] <= 0x20 || (uint8_t)id.data[i] >= 0x7F) return false;
  return true;
}

/* <prefix>.engine.<eid>.stats: an engine announcing itself and its load (routing input). */
static void input_processor_on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct input_processor_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_scheduler_stats s;
  llb_status st = llb_scheduler_stats_decode(msg->data, msg->len, &arena, &s);
  char eid[BUS_TOKEN_MAX + 1];
  struct engine_router_stats rs;
  if (st == LLB_STATUS_OK) st = input_processor_wire_engine_stats(&s, msg->subject, eid, sizeof eid, &rs);
  if (st == LLB_STATUS_OK) { /* the snapshot's age, bounded: its timestamp is the sender's claim */
    const double age_s = (double)llb_wall_ns() / 1e9 - s.timestamp;
    const double max_s = (s.stats_interval_ms > 0 ? s.stats_interval_ms : 5000) / 1000.0;
    rs.age_ns = age_s > 0 && age_s == age_s ? (int64_t)((age_s < max_s ? age_s : max_s) * 1e9) : 0;
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

/* <prefix>.health.input_processor.<instance>: the routers sharing the engines (this one too);
 * each weighs its own pending sends by their number (engine_router.h). Only the subject is read. */
static void input_processor_on_router_beat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct input_processor_actor *a = user;
  const char *dot = strrchr(msg->subject, '.');
  if (dot) engine_router_router_seen(a->router, dot + 1, llb_now_ns());
}

/* <prefix>.health.gpu_worker.*: the LoRA adapters each worker serves (a request's `model`). */
static void input_processor_on_worker_beat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct input_processor_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_heartbeat hb;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) == LLB_STATUS_OK)
    lora_registry_on_heartbeat(a->loras, &hb, llb_now_ns());
  else
    atomic_fetch_add(&a->malformed, 1);
  llb_arena_destroy(&arena);
}

static void input_processor_on_abort(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct input_processor_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_abort_request ar;
  char q[320];
  llb_status st = llb_abort_request_decode(msg->data, msg->len, &arena, &ar);
  /* Internal ids are "<external>-<16 hex>", children "<i>_<that>": bounded, no spaces. */
  if (st == LLB_STATUS_OK && (ar.request_id.len + 8 > INPUT_PROCESSOR_MAX_ID_BYTES || !id_printable(ar.request_id))) {
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
  if (!input_processor_id_owned_by(&a->hash_key, ar.request_id.data, ar.request_id.len, tenant)) {
    atomic_fetch_add(&a->aborts_refused, 1);
    LLB_LOG_WARN("abort_refused", "subject=%s request_id=%s reason=\"not a request of tenant %s\"",
                 msg->subject, ar.request_id.data, tenant);
    goto done;
  }
  /* The processor keeps no state: the id itself (n = 1) and every child id it could have
   * (n > 1), where the id may run (abort_fanout_request) */
  struct bus_trace_ctx span;
  bus_trace_child(&msg->trace, &span);
  const struct abort_fanout f = fanout_of(a);
  const int engines = abort_fanout_request(&f, ar.request_id, &span, &st);
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

/* ---- life cycle ---- */

llb_status input_processor_actor_create(const struct input_processor_actor_options *o,
                                        struct input_processor_actor **out) {
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

  struct input_processor_actor *a = calloc(1, sizeof *a);
  struct gguf_file *f = NULL;
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "input processor actor");
  snprintf(a->tenant, sizeof a->tenant, "%s", tenant);
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  if (o->hash_key) a->hash_key = *o->hash_key;
  else llb_hash_key_generate(&a->hash_key);
  struct engine_router_config rc;
  engine_router_config_init(&rc);
  rc.default_engine_id = a->engine_id;
  rc.instance = o->instance;
  if (o->disagg_min_prompt_tokens >= 0) rc.disagg_min_prompt_tokens = o->disagg_min_prompt_tokens;
  const char *slash = strrchr(o->model_path, '/');
  rc.model = slash ? slash + 1 : o->model_path; /* engines announce their model's file name */
  a->durable = o->durable;
  a->stream_replicas = o->stream_replicas == 0 ? 1 : o->stream_replicas; /* checked by the stream */
  llb_status st = LLB_STATUS_OK;
  if (!o->router || strcmp(o->router, "cache-aware") == 0) rc.policy = ENGINE_ROUTER_CACHE_AWARE;
  else if (strcmp(o->router, "least-loaded") == 0) rc.policy = ENGINE_ROUTER_LEAST_LOADED;
  else if (strcmp(o->router, "random") == 0) rc.policy = ENGINE_ROUTER_RANDOM;
  else st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--router '%s': expected cache-aware|least-loaded|random", o->router);
  if (o->max_prefill_queue_size >= 0) rc.max_prefill_queue_size = o->max_prefill_queue_size;
  rc.transfer_bytes_per_s = o->disagg_transfer_bytes_per_s;
  rc.prefill_tokens_per_s = o->disagg_prefill_tokens_per_s;
  if (st == LLB_STATUS_OK) st = gguf_open(o->model_path, &f);
  if (st == LLB_STATUS_OK) { /* the KV a hand-off moves: the model's fp16 cache unless told */
    rc.kv_bytes_per_token = o->disagg_kv_bytes_per_token > 0 ? o->disagg_kv_bytes_per_token
                                                              : input_processor_model_kv_bytes_per_token(f);
    st = engine_router_create(&rc, &a->router);
  }
  if (st != LLB_STATUS_OK) goto fail;
  st = tokenizer_load(f, &a->tok);
  if (st != LLB_STATUS_OK) goto fail;
  struct input_processor_config cfg = {0};
  cfg.max_model_len = o->max_model_len ? o->max_model_len : input_processor_model_max_model_len(f, DEFAULT_MAX_MODEL_LEN);
  cfg.max_n = INPUT_PROCESSOR_ACTOR_MAX_N;
  cfg.hash_key = a->hash_key;
  cfg.has_chat_template = chat_template_from_gguf(f, &cfg.chat_template) == LLB_STATUS_OK;
  const char *tmpl = o->chat_template_file;
  const bool builtin = tmpl && access(tmpl, F_OK) != 0 && chat_template_from_name(tmpl, &cfg.chat_template) == LLB_STATUS_OK;
  if (builtin) { /* a built-in name, as llama-server's --chat-template NAME: its official Jinja source */
    cfg.has_chat_template = true;
    LLB_LOG_INFO("chat_template", "builtin=%s", chat_template_name(cfg.chat_template));
  } else if ((st = chat_render_load(f, tmpl, &a->jinja)) != LLB_STATUS_OK && (tmpl || st != LLB_STATUS_NOT_FOUND)) {
    if (tmpl) goto fail; /* an explicit template must work */
    LLB_LOG_WARN("chat_template_unusable", "model=%s err=\"%s\" fallback=%s", o->model_path, llb_err_last(),
                 cfg.has_chat_template ? chat_template_name(cfg.chat_template) : "none");
  }
  cfg.jinja_template = a->jinja;
  a->bos_text = input_processor_model_token_text(a->tok, tokenizer_bos_id(a->tok));
  a->eos_text = input_processor_model_token_text(a->tok, tokenizer_eos_id(a->tok));
  if (!a->bos_text || !a->eos_text) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token texts");
    goto fail;
  }
  cfg.bos_token = a->bos_text;
  cfg.eos_token = a->eos_text;
  cfg.hidden_size = input_processor_model_hidden_size(f);
  a->hidden_size = cfg.hidden_size;
  if (o->mmproj_path && o->mmproj_path[0] &&
      (st = input_processor_model_load_mmproj(o->mmproj_path, cfg.hidden_size, &a->clip, a->mmproj_id, sizeof a->mmproj_id,
                                     &cfg.image)) != LLB_STATUS_OK)
    goto fail;
  a->max_model_len = cfg.max_model_len;
  st = input_processor_create(a->tok, &cfg, &a->proc);
  if (st != LLB_STATUS_OK) goto fail;
  a->intake_threads = o->intake_threads > 0 ? o->intake_threads : INPUT_PROCESSOR_DEFAULT_INTAKE_THREADS;
  struct intake_queue_config iq;
  intake_queue_config_init(&iq);
  /* one worker is always left to the other tenants: a flood never holds them all */
  iq.max_in_service_per_tenant = a->intake_threads > 1 ? a->intake_threads - 1 : 1;
  if ((st = intake_queue_create(&iq, &a->intake)) != LLB_STATUS_OK ||
      (st = input_processor_so_cache_create(&a->hash_key, &a->so_cache)) != LLB_STATUS_OK)
    goto fail;
  if ((st = lora_registry_create(INPUT_PROCESSOR_LORA_TTL_NS, &a->loras)) != LLB_STATUS_OK) goto fail;
  if (o->tenant_limits_file) {
    struct tenant_limits_config *tc = calloc(1, sizeof *tc);
    st = tc ? tenant_limits_config_load(o->tenant_limits_file, tc) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "limits");
    if (st == LLB_STATUS_OK) st = tenant_limits_restrict_loras(tc, a->loras);
    if (st == LLB_STATUS_OK)
      st = tenant_limits_create(tc, o->tenant_limit_ttl_ms > 0 ? o->tenant_limit_ttl_ms : DEFAULT_TENANT_LIMIT_TTL_MS,
                                &a->limits);
    free(tc);
    if (st != LLB_STATUS_OK) goto fail;
  }
  gguf_close(f);
  LLB_LOG_INFO("input_processor_ready", "model=%s max_model_len=%d chat_template=%s vocab=%d",
               o->model_path, a->max_model_len,
               a->jinja ? (o->chat_template_file ? "jinja-file" : "jinja") : cfg.has_chat_template ? "named" : "no",
               tokenizer_vocab_size(a->tok));
  *out = a;
  return LLB_STATUS_OK;
fail:
  gguf_close(f);
  input_processor_actor_destroy(a);
  return st;
}

void input_processor_actor_stop(struct input_processor_actor *a) {
  if (!a || !a->workers) return;
  const long long demoted = (long long)intake_workers_demoted(a->workers);
  intake_workers_stop(a->workers); /* what is queued is answered first */
  a->workers = NULL;
  LLB_LOG_INFO("intake_stopped", "grammars_compiled=%llu intake_full=%llu intake_demoted=%lld",
               (unsigned long long)atomic_load(&a->grammars_compiled), (unsigned long long)atomic_load(&a->intake_full),
               demoted);
}

/* SIGTERM: the queued requests are answered while the connection is still up; what arrives
 * during the drain is handled on its delivery thread. */
static void before_drain(void *user) { input_processor_actor_stop(user); }

void input_processor_actor_destroy(struct input_processor_actor *a) {
  if (!a) return;
  input_processor_actor_stop(a);
  intake_queue_destroy(a->intake);
  input_processor_so_cache_destroy(a->so_cache);
  lora_registry_destroy(a->loras);
  input_processor_destroy(a->proc);
  tokenizer_destroy(a->tok);
  engine_router_destroy(a->router);
  tenant_limits_destroy(a->limits);
  clip_model_destroy(a->clip);
  jinja_template_destroy(a->jinja);
  free(a->bos_text);
  free(a->eos_text);
  free(a);
}

int32_t input_processor_actor_max_model_len(const struct input_processor_actor *a) { return a->max_model_len; }

void input_processor_actor_stats(const struct input_processor_actor *a,
                                 struct input_processor_actor_stats *out) {
  struct input_processor_actor *m = (struct input_processor_actor *)a; /* atomics: loads only */
  out->requests = atomic_load(&m->requests);
  out->engine_requests = atomic_load(&m->engine_requests);
  out->rejected = atomic_load(&m->rejected);
  out->malformed = atomic_load(&m->malformed);
  out->no_reply = atomic_load(&m->no_reply);
  out->aborts = atomic_load(&m->aborts);
  out->aborts_refused = atomic_load(&m->aborts_refused);
  out->publish_errors = atomic_load(&m->publish_errors);
  out->tokenize = atomic_load(&m->tokenize);
  out->stats_malformed = atomic_load(&m->stats_malformed);
  out->routed_by_prefix = atomic_load(&m->routed_by_prefix);
  out->routed_fallback = atomic_load(&m->routed_fallback);
  out->routed_disaggregated = atomic_load(&m->routed_disaggregated);
  out->limited = atomic_load(&m->limited);
  out->intake_full = atomic_load(&m->intake_full);
  out->grammars_compiled = atomic_load(&m->grammars_compiled);
}

struct engine_router *input_processor_actor_router(struct input_processor_actor *a) { return a->router; }

llb_status input_processor_actor_start(struct input_processor_actor *a, struct bus *bus) {
  a->bus = bus;
  int64_t maxp = bus_max_payload(bus);
  /* An item travels whole in an EngineCoreRequest and a SchedulerOutput: leave room for
   * the rest of either message. */
  if (maxp > 0) input_processor_set_max_mm_item_bytes(a->proc, maxp > 256 * 1024 ? maxp - 128 * 1024 : maxp / 2);
  const char *prefix = bus_prefix(bus);
  char stats_subj[BUS_SUBJECT_MAX];
  llb_status st = bus_pattern_engines(prefix, "stats", stats_subj, sizeof stats_subj);
  if (st != LLB_STATUS_OK) return st;
  /* the stream takes <prefix>.engine.*.requests: every engine's */
  if (a->durable && (st = bus_js_requests_stream_ensure(bus, 0, a->stream_replicas,
                                                                INPUT_PROCESSOR_DURABLE_START_TIMEOUT_MS)))
    return st;
  if ((st = intake_workers_start(a->intake, a->intake_threads, INPUT_PROCESSOR_INTAKE_DEMOTE_AFTER_NS, intake_work, a,
                                 &a->workers)) != LLB_STATUS_OK)
    return st;
  bus_set_before_drain(bus, before_drain, a);
  char gen[BUS_SUBJECT_MAX], abort_subj[BUS_SUBJECT_MAX], tok_subj[BUS_SUBJECT_MAX];
  if (strcmp(a->tenant, "*") == 0) {
    st = bus_pattern_tenants(prefix, "generate", gen, sizeof gen);
    if (st == LLB_STATUS_OK) st = bus_pattern_tenants(prefix, "abort", abort_subj, sizeof abort_subj);
    if (st == LLB_STATUS_OK) st = bus_pattern_tenants(prefix, "tokenize", tok_subj, sizeof tok_subj);
  } else {
    st = bus_subject_generate(prefix, a->tenant, gen, sizeof gen);
    if (st == LLB_STATUS_OK) st = bus_subject_abort(prefix, a->tenant, abort_subj, sizeof abort_subj);
    if (st == LLB_STATUS_OK) st = bus_subject_tokenize(prefix, a->tenant, tok_subj, sizeof tok_subj);
  }
  if (st != LLB_STATUS_OK) return st;
  st = bus_subscribe(bus, gen, INPUT_PROCESSOR_ACTOR_QUEUE_GROUP, input_processor_on_generate, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, abort_subj, INPUT_PROCESSOR_ACTOR_QUEUE_GROUP, input_processor_on_abort, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, tok_subj, INPUT_PROCESSOR_ACTOR_QUEUE_GROUP, input_processor_on_tokenize, a, NULL);
  /* every replica hears every engine (no queue group): each routes on its own view */
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, stats_subj, NULL, input_processor_on_stats, a, NULL);
  char beats[BUS_SUBJECT_MAX];
  if (st == LLB_STATUS_OK) st = bus_pattern_health(prefix, "gpu_worker", beats, sizeof beats);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, beats, NULL, input_processor_on_worker_beat, a, NULL);
  char routers[BUS_SUBJECT_MAX];
  if (st == LLB_STATUS_OK) st = bus_pattern_health(prefix, "input_processor", routers, sizeof routers);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, routers, NULL, input_processor_on_router_beat, a, NULL);
  if (st == LLB_STATUS_OK && a->limits) { /* every engine's outputs: its requests' first tokens and ends */
    st = bus_pattern_engines(prefix, "outputs", a->outputs_subject, sizeof a->outputs_subject);
    if (st == LLB_STATUS_OK) st = bus_subscribe(bus, a->outputs_subject, NULL, input_processor_on_engine_outputs, a, NULL);
    if (st == LLB_STATUS_OK) LLB_LOG_INFO("tenant_limits_on", "outputs=%s", a->outputs_subject);
  }
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("input_processor_subscribed", "generate=%s abort=%s tokenize=%s stats=%s default_engine=%s", gen,
               abort_subj, tok_subj, stats_subj, a->engine_id);
  return LLB_STATUS_OK;
}

/* Output processor actor; see actor.h. */
#include "actors/output_processor/actor.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/output_processor/output_processor.h"
#include "actors/output_processor/request_metrics.h"
#include "base/log.h"
#include "bus/span.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/request_output.h"

#define REPORTED_UNKNOWN_IDS 64 /* unknown ids already answered with an error (ring) */
#define RESYNC_ASKED_IDS 256    /* unknown ids asked again from the scheduler (ring) */
#define RESYNC_REASK_NS 1000000000LL /* an ask unanswered this long is sent again */
#define ABORT_FANOUT 16         /* child ids "<i>_<parent>" aborted with a parent id */

struct output_processor_actor {
  struct tokenizer *tok;
  struct output_processor *proc;
  struct output_processor_request_metrics *metrics; /* NULL = none */
  struct bus *bus;
  struct bus_sub *outputs_sub, *history_sub; /* NULL before start and after stop */
  char engine_id[BUS_TOKEN_MAX + 1];
  char outputs_subject[BUS_SUBJECT_MAX];
  char abort_subject[BUS_SUBJECT_MAX];
  char resync_subject[BUS_SUBJECT_MAX];
  char history_subject[BUS_SUBJECT_MAX];
  pthread_mutex_t proc_mu;                   /* proc: the outputs and the history handlers */
  /* State of the one delivery thread of the outputs subscription. */
  struct output_processor_result res;
  struct output_processor_result scratch;             /* results that are not sent as they are */
  char (*aborts)[OUTPUT_PROCESSOR_MAX_ID_BYTES];      /* [num_aborts] extra engine aborts of a batch */
  int64_t num_aborts, cap_aborts;
  char reported[REPORTED_UNKNOWN_IDS][OUTPUT_PROCESSOR_MAX_ID_BYTES];
  int32_t reported_next;
  struct {
    char id[OUTPUT_PROCESSOR_MAX_ID_BYTES];
    int64_t at_ns;
  } asked[RESYNC_ASKED_IDS];
  int32_t asked_next;
  struct llb_buf buf;
  atomic_uint_fast64_t batches, engine_outputs, request_outputs, malformed, unknown,
      register_errors, num_aborted, publish_errors, resyncs_asked, resyncs, histories, handoffs_forgotten,
      handoffs_continued;
};

llb_status output_processor_actor_create(const struct output_processor_actor_options *o,
                                         struct output_processor_actor **out) {
  *out = NULL;
  if (!o || !o->model_path) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "output processor: model path required");
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (!bus_token_valid(eid)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", eid);
  struct output_processor_actor *a = calloc(1, sizeof *a);
  struct gguf_file *f = NULL;
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "output processor actor");
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  pthread_mutex_init(&a->proc_mu, NULL);
  output_processor_result_init(&a->res);
  output_processor_result_init(&a->scratch);
  llb_status st = gguf_open(o->model_path, &f);
  if (st == LLB_STATUS_OK) st = tokenizer_load(f, &a->tok);
  gguf_close(f);
  if (st == LLB_STATUS_OK) st = output_processor_create(a->tok, &a->proc);
  if (st == LLB_STATUS_OK) output_processor_set_stream_interval(a->proc, o->stream_interval);
  if (st == LLB_STATUS_OK && o->metrics) st = output_processor_request_metrics_create(o->metrics, &a->metrics);
  if (st == LLB_STATUS_OK && a->metrics) output_processor_set_stats_hooks(a->proc, output_processor_request_metrics_hooks(), a->metrics);
  if (st != LLB_STATUS_OK) {
    output_processor_actor_destroy(a);
    return st;
  }
  LLB_LOG_INFO("output_processor_ready", "model=%s vocab=%d stream_interval=%lld", o->model_path,
               tokenizer_vocab_size(a->tok), (long long)(o->stream_interval > 1 ? o->stream_interval : 1));
  *out = a;
  return LLB_STATUS_OK;
}

void output_processor_actor_destroy(struct output_processor_actor *a) {
  if (!a) return;
  output_processor_result_free(&a->res);
  output_processor_result_free(&a->scratch);
  output_processor_destroy(a->proc);
  pthread_mutex_destroy(&a->proc_mu);
  output_processor_request_metrics_destroy(a->metrics);
  tokenizer_destroy(a->tok);
  free(a->aborts);
  llb_buf_free(&a->buf);
  free(a);
}

void output_processor_actor_stats(const struct output_processor_actor *a,
                                  struct output_processor_actor_stats *out) {
  struct output_processor_actor *m = (struct output_processor_actor *)a; /* atomics: loads only */
  out->batches = atomic_load(&m->batches);
  out->engine_outputs = atomic_load(&m->engine_outputs);
  out->request_outputs = atomic_load(&m->request_outputs);
  out->malformed = atomic_load(&m->malformed);
  out->unknown = atomic_load(&m->unknown);
  out->register_errors = atomic_load(&m->register_errors);
  out->aborts = atomic_load(&m->num_aborted);
  out->publish_errors = atomic_load(&m->publish_errors);
  out->resyncs_asked = atomic_load(&m->resyncs_asked);
  out->resyncs = atomic_load(&m->resyncs);
  out->duplicates = output_processor_num_duplicates(m->proc);
  out->histories = atomic_load(&m->histories);
  out->handoffs_forgotten = atomic_load(&m->handoffs_forgotten);
  out->handoffs_continued = atomic_load(&m->handoffs_continued);
}

/* Queues an engine abort of `id` for the end of the batch. */
static void queue_abort(struct output_processor_actor *a, const char *id) {
  if (a->num_aborts == a->cap_aborts) {
    int64_t cap = a->cap_aborts ? a->cap_aborts * 2 : 16;
    void *p = realloc(a->aborts, (size_t)cap * sizeof *a->aborts);
    if (!p) {
      LLB_LOG_ERROR("abort_dropped", "request_id=%s error=out_of_memory", id);
      return;
    }
    a->aborts = p;
    a->cap_aborts = cap;
  }
  snprintf(a->aborts[a->num_aborts++], OUTPUT_PROCESSOR_MAX_ID_BYTES, "%s", id);
}

/* Publishes `ro` to `reply_to`; counts and logs a failure. */
static llb_status publish_output(struct output_processor_actor *a, const char *reply_to,
                                 const struct llb_request_output *ro, const struct bus_trace_ctx *span) {
  llb_status st = llb_request_output_encode_buf(ro, &a->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, reply_to, a->buf.data, a->buf.len, span);
  if (st == LLB_STATUS_OK) {
    atomic_fetch_add(&a->request_outputs, 1);
    return st;
  }
  char q[320];
  atomic_fetch_add(&a->publish_errors, 1);
  LLB_LOG_ERROR("request_output_publish_failed", "request_id=%s reply_to=%s error=%s", ro->request_id.data,
                reply_to, llb_log_quote(q, sizeof q, llb_err_last()));
  return st;
}

/* Sends a final RequestOutput carrying only an error to `reply_to` (when there is one). */
static void publish_error(struct output_processor_actor *a, const char *reply_to, const char *request_id,
                          llb_status code, const char *message, const struct bus_trace_ctx *span) {
  if (!reply_to || !reply_to[0]) return;
  struct llb_request_output ro = {0};
  ro.request_id = llb_str_c(request_id);
  ro.finished = true;
  ro.metrics.finished_time = (double)llb_wall_ns() / 1e9;
  ro.error.code = (int32_t)code;
  ro.error.message = llb_str_c(message);
  (void)publish_output(a, reply_to, &ro, span);
}

/* the core's logprobs of n positions → the wire's TokenLogprobs (in `arena`); NULL when out of memory. */
static struct llb_token_logprobs *positions_to_wire(const struct output_processor_position_logprobs *pls, int64_t n,
                                                    struct llb_arena *arena) {
  struct llb_token_logprobs *lp = llb_arena_alloc(arena, (size_t)n * sizeof *lp, _Alignof(struct llb_token_logprobs));
  if (!lp) return NULL;
  for (int64_t t = 0; t < n; t++) {
    const struct output_processor_position_logprobs *pl = &pls[t];
    lp[t] = (struct llb_token_logprobs){
        .token_id = pl->sampled.token_id, .logprob = pl->sampled.logprob, .rank = pl->sampled.rank,
        .decoded = {pl->sampled.text ? pl->sampled.text : "", pl->sampled.text ? pl->sampled.text_len : 0}};
    if (pl->num_top > 0) {
      struct llb_top_logprob *top = llb_arena_alloc(arena, (size_t)pl->num_top * sizeof *top,
                                                    _Alignof(struct llb_top_logprob));
      if (!top) return NULL;
      for (int32_t j = 0; j < pl->num_top; j++)
        top[j] = (struct llb_top_logprob){
            .token_id = pl->top[j].token_id, .logprob = pl->top[j].logprob,
            .decoded = {pl->top[j].text ? pl->top[j].text : "", pl->top[j].text ? pl->top[j].text_len : 0}};
      lp[t].top = top;
      lp[t].num_top = pl->num_top;
    }
  }
  return lp;
}

/* the core's RequestOutput → the wire view; arrays live in `arena`. */
static llb_status to_wire(const struct output_processor_request_output *o, struct llb_arena *arena,
                          struct llb_request_output *ro) {
  memset(ro, 0, sizeof *ro);
  ro->request_id = llb_str_c(o->request_id);
  ro->prompt_token_ids = o->prompt_token_ids;
  ro->num_prompt_token_ids = (int32_t)o->num_prompt_tokens;
  ro->finished = o->finished;
  ro->pooling_output = o->pooling_output;
  ro->num_pooling_output = o->num_pooling_output;
  struct llb_completion_output *cs =
      llb_arena_alloc(arena, (size_t)(o->num_outputs > 0 ? o->num_outputs : 1) * sizeof *cs, _Alignof(struct llb_completion_output));
  if (!cs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "completion outputs");
  for (int32_t i = 0; i < o->num_outputs; i++) {
    const struct output_processor_completion *c = &o->outputs[i];
    struct llb_completion_output *w = &cs[i];
    memset(w, 0, sizeof *w);
    w->index = c->index;
    w->text = (struct llb_str){c->text ? c->text : "", c->text ? c->text_len : 0};
    w->token_ids = c->token_ids;
    w->num_token_ids = (int32_t)c->num_token_ids;
    w->cumulative_logprob = c->cumulative_logprob;
    w->finish_reason = (enum llb_finish_reason)c->finish_reason; /* same values 0..4 */
    w->resync = c->resync;
    if (c->stop_reason_kind == OUTPUT_PROCESSOR_STOP_REASON_KIND_STRING) {
      w->stop_reason = llb_str_c(c->stop_str);
    } else if (c->stop_reason_kind == OUTPUT_PROCESSOR_STOP_REASON_KIND_TOKEN) {
      char *s = llb_arena_alloc(arena, 16, 1); /* vLLM's int stop_reason, as decimal text */
      if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "stop reason");
      snprintf(s, 16, "%d", c->stop_token_id);
      w->stop_reason = llb_str_c(s);
    }
    /* The wire wants one logprobs entry per token (a resumed request may have fewer). */
    if (c->has_logprobs && c->num_logprobs == c->num_token_ids && c->num_logprobs > 0) {
      w->logprobs = positions_to_wire(c->logprobs, c->num_logprobs, arena);
      if (!w->logprobs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "logprobs");
      w->num_logprobs = (int32_t)c->num_logprobs;
    }
  }
  ro->outputs = cs;
  ro->num_outputs = o->num_outputs;
  if (o->num_prompt_logprobs > 0) {
    ro->prompt_logprobs = positions_to_wire(o->prompt_logprobs, o->num_prompt_logprobs, arena);
    if (!ro->prompt_logprobs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs");
    ro->num_prompt_logprobs = (int32_t)o->num_prompt_logprobs;
  }
  const struct output_processor_metrics *m = &o->metrics;
  ro->metrics = (struct llb_request_metrics){
      .arrival_time = (double)m->arrival_time_ns / 1e9,
      .first_scheduled_time = (double)m->first_scheduled_time_ns / 1e9,
      .first_token_time = (double)m->first_token_time_ns / 1e9,
      .last_token_time = (double)m->last_token_time_ns / 1e9,
      .finished_time = (double)m->finished_time_ns / 1e9,
      .num_cached_tokens = m->num_cached_tokens > 0 ? m->num_cached_tokens : 0,
      .num_prompt_tokens = (int32_t)m->num_prompt_tokens,
      .num_generation_tokens = (int32_t)m->num_generation_tokens,
  };
  if (o->error[0]) {
    ro->error.code = o->error_code > LLB_STATUS_OK && o->error_code < LLB_STATUS_COUNT ? (int32_t)o->error_code
                                                                                       : LLB_STATUS_INTERNAL;
    ro->error.message = llb_str_c(o->error);
  }
  return LLB_STATUS_OK;
}

/* Registers a request from its first output. */
static llb_status register_from(struct output_processor_actor *a, const struct llb_engine_core_output *eo) {
  const struct llb_sampling_params *sp = eo->sampling_params;
  const char *parent = eo->parent_request_id.len ? eo->parent_request_id.data : eo->request_id.data;
  /* The input processor writes the client's n into the children's wire n (the engine runs
   * one sequence per request whatever it says). */
  int32_t n = sp->n > eo->index ? sp->n : eo->index + 1;
  struct output_processor_request_info info = {
      .request_id = eo->request_id.data,
      .parent_request_id = parent,
      .external_request_id = parent, /* RequestOutput.request_id: the id an abort names */
      .reply_to = eo->reply_to.data,
      .child_index = eo->index,
      .num_children = n,
      .prompt_token_ids = eo->prompt_token_ids,
      .num_prompt_tokens = eo->num_prompt_token_ids,
      .sampling_params = sp,
      .arrival_time_ns = (int64_t)(eo->arrival_time * 1e9),
      .resync = eo->resync,
  };
  if (eo->resync) {
    atomic_fetch_add(&a->resyncs, 1);
    LLB_LOG_INFO("request_resynced", "request_id=%s tokens=%d", eo->request_id.data, eo->num_new_token_ids);
  }
  /* a hand-off from a prefill engine: its outputs went out there. Not when the output carries the
   * whole history again (resync: a replay of the hand-off after this engine's scheduler died): then
   * the request is registered as any resynced one, its completion restarts from the beginning and
   * the client trims what it had, from either engine */
  if (eo->num_handed_off_token_ids > 0 && !eo->resync) {
    atomic_fetch_add(&a->handoffs_continued, 1);
    return output_processor_register_handed_off(a->proc, &info, eo->handed_off_token_ids,
                                                eo->num_handed_off_token_ids, &a->res);
  }
  return output_processor_register(a->proc, &info);
}

static bool already_reported(struct output_processor_actor *a, const char *id) {
  for (int32_t i = 0; i < REPORTED_UNKNOWN_IDS; i++)
    if (strcmp(a->reported[i], id) == 0) return true;
  snprintf(a->reported[a->reported_next], OUTPUT_PROCESSOR_MAX_ID_BYTES, "%s", id);
  a->reported_next = (a->reported_next + 1) % REPORTED_UNKNOWN_IDS;
  return false;
}

/* True when `id` was not asked for within RESYNC_REASK_NS (and records the ask now). */
static bool resync_due(struct output_processor_actor *a, const char *id, int64_t now_ns) {
  for (int32_t i = 0; i < RESYNC_ASKED_IDS; i++)
    if (strcmp(a->asked[i].id, id) == 0) {
      if (now_ns - a->asked[i].at_ns < RESYNC_REASK_NS) return false;
      a->asked[i].at_ns = now_ns;
      return true;
    }
  snprintf(a->asked[a->asked_next].id, OUTPUT_PROCESSOR_MAX_ID_BYTES, "%s", id);
  a->asked[a->asked_next].at_ns = now_ns;
  a->asked_next = (a->asked_next + 1) % RESYNC_ASKED_IDS;
  return true;
}

/* Asks the scheduler for the whole history of `id` on <prefix>.engine.<eid>.resync. */
static void ask_resync(struct output_processor_actor *a, const char *id, const struct bus_trace_ctx *span) {
  struct llb_str ids[1] = {llb_str_c(id)};
  struct llb_abort_requests m = {.request_ids = ids, .num_request_ids = 1};
  llb_status st = llb_abort_requests_encode_buf(&m, &a->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->resync_subject, a->buf.data, a->buf.len, span);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_WARN("resync_ask_failed", "request_id=%s status=%s", id, llb_strerror(st));
    return;
  }
  atomic_fetch_add(&a->resyncs_asked, 1);
  LLB_LOG_INFO("resync_asked", "request_id=%s subject=%s", id, a->resync_subject);
}

/* An output of a request this instance does not know (it restarted, or missed the request's
 * first output): while the engine still runs it, ask the scheduler for its whole history,
 * from which the request is rebuilt (docs/design.md §6); the outputs until then are dropped (the
 * history holds them). Its last output cannot be rebuilt any more: the api server is told once,
 * with STATE_LOST, and sends the (seeded) request again (api_server_resend.h). */
static void handle_unknown(struct output_processor_actor *a, const struct llb_engine_core_output *eo,
                           const struct bus_trace_ctx *span) {
  atomic_fetch_add(&a->unknown, 1);
  if (eo->finish_reason == LLB_FINISH_REASON_NONE) {
    if (resync_due(a, eo->request_id.data, llb_now_ns())) ask_resync(a, eo->request_id.data, span);
    return;
  }
  if (already_reported(a, eo->request_id.data)) return;
  LLB_LOG_WARN("unknown_request", "request_id=%s first_output_pos=%d reply_to=%s", eo->request_id.data,
               eo->first_output_pos, eo->reply_to.data);
  char msg[OUTPUT_PROCESSOR_MAX_ID_BYTES + 160];
  snprintf(msg, sizeof msg, "the output processor lost the state of request %s (restarted?) and the engine "
           "had already finished it: its end cannot be rebuilt", eo->request_id.data);
  publish_error(a, eo->reply_to.data,
                eo->parent_request_id.len ? eo->parent_request_id.data : eo->request_id.data,
                LLB_STATUS_STATE_LOST, msg, span);
}

/* The wire's LogprobsLists → the core's rows (in `arena`; column 0 the sampled or prompt token,
 * then the top-k); NULL when empty or out of memory. */
static struct output_processor_new_logprobs *lists_to_core(const struct llb_logprobs_lists *ll, struct llb_arena *arena) {
  if (ll->num_tokens <= 0 || ll->num_logprobs_per_token < 1) return NULL;
  struct output_processor_new_logprobs *lps =
      llb_arena_alloc(arena, (size_t)ll->num_tokens * sizeof *lps, _Alignof(struct output_processor_new_logprobs));
  for (int32_t r = 0; lps && r < ll->num_tokens; r++) {
    const int64_t row = (int64_t)r * ll->num_logprobs_per_token;
    int32_t num_top = ll->num_logprobs_per_token - 1;
    if (num_top > LLB_MAX_LOGPROBS) num_top = LLB_MAX_LOGPROBS;
    lps[r].token_id = ll->logprob_token_ids[row];
    lps[r].logprob = ll->logprobs[row];
    lps[r].num_top = num_top;
    for (int32_t j = 0; j < num_top; j++)
      lps[r].top[j] = (struct output_processor_candidate){ll->logprob_token_ids[row + 1 + j], ll->logprobs[row + 1 + j]};
  }
  return lps;
}

/* One EngineCoreOutput through the logic; results accumulate in a->res. */
static void handle_output(struct output_processor_actor *a, const struct llb_engine_core_outputs *outs,
                          const struct llb_engine_core_output *eo, struct llb_arena *arena,
                          const struct bus_trace_ctx *span) {
  char q[320];
  int64_t now = llb_wall_ns();
  atomic_fetch_add(&a->engine_outputs, 1);
  if (eo->sampling_params && eo->num_prompt_token_ids > 0) {
    llb_status st = register_from(a, eo);
    if (st != LLB_STATUS_OK) {
      atomic_fetch_add(&a->register_errors, 1);
      char msg[512];
      snprintf(msg, sizeof msg, "output processor: %s", llb_err_last());
      LLB_LOG_ERROR("register_failed", "request_id=%s error=%s", eo->request_id.data,
                    llb_log_quote(q, sizeof q, msg));
      publish_error(a, eo->reply_to.data,
                    eo->parent_request_id.len ? eo->parent_request_id.data : eo->request_id.data, st, msg, span);
      if (eo->finish_reason == LLB_FINISH_REASON_NONE) queue_abort(a, eo->request_id.data);
      return;
    }
  }
  if (eo->finish_reason == LLB_FINISH_REASON_ERROR) {
    const char *why = eo->error.message.len ? eo->error.message.data : "the engine failed the request";
    llb_status st = output_processor_fail(a->proc, eo->request_id.data, (llb_status)eo->error.code, why, now, &a->res);
    if (st == LLB_STATUS_NOT_FOUND) {
      atomic_fetch_add(&a->unknown, 1);
      publish_error(a, eo->reply_to.data, eo->request_id.data, eo->error.code ? eo->error.code : LLB_STATUS_INTERNAL,
                    why, span);
    }
    return;
  }
  const struct llb_logprobs_lists *ll = &eo->new_logprobs;
  struct output_processor_new_logprobs *lps =
      ll->num_tokens == eo->num_new_token_ids ? lists_to_core(ll, arena) : NULL;
  struct output_processor_new_logprobs *plp = lists_to_core(&eo->prompt_logprobs, arena);
  struct output_processor_engine_output in = {
      .request_id = eo->request_id.data,
      .new_token_ids = eo->new_token_ids,
      .num_new_tokens = eo->num_new_token_ids,
      .first_output_pos = eo->first_output_pos,
      .new_logprobs = lps,
      .finish_reason = (enum output_processor_finish_reason)eo->finish_reason,
      .stop_token_id = eo->stop_token_id,
      .num_cached_tokens = eo->num_cached_tokens,
      .scheduled_time_ns = eo->scheduled_time_ns,
      .queued_time_ns = eo->queued_time_ns,
      .timestamp_ns = outs->timestamp > 0 ? (int64_t)(outs->timestamp * 1e9) : 0,
      .handed_off = eo->handed_off_to.len > 0,
      .pooling_output = eo->pooling_output,
      .num_pooling_output = eo->num_pooling_output,
      .prompt_logprobs = plp,
      .prompt_logprob_ranks = plp ? eo->prompt_logprobs.sampled_token_ranks : NULL,
      .num_prompt_logprobs = plp ? eo->prompt_logprobs.num_tokens : 0,
  };
  int64_t unknown_before = a->res.num_unknown, resync_before = a->res.num_resync;
  llb_status st = output_processor_process(a->proc, &in, now, &a->res);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_ERROR("process_failed", "request_id=%s error=%s", eo->request_id.data,
                  llb_log_quote(q, sizeof q, llb_err_last()));
  }
  if (a->res.num_unknown > unknown_before) handle_unknown(a, eo, span);
  if (eo->handed_off_to.len > 0 && output_processor_hand_off(a->proc, eo->request_id.data) == LLB_STATUS_OK) {
    atomic_fetch_add(&a->handoffs_forgotten, 1); /* the decode engine's output processor goes on */
    LLB_LOG_DEBUG("request_handed_off", "request_id=%s decode_engine=%s", eo->request_id.data, eo->handed_off_to.data);
  }
  if (a->res.num_resync > resync_before && resync_due(a, eo->request_id.data, llb_now_ns())) {
    LLB_LOG_WARN("outputs_lost", "request_id=%s first_output_pos=%d action=resync", eo->request_id.data,
                 eo->first_output_pos);
    ask_resync(a, eo->request_id.data, span);
  }
}

/* A RequestOutput too large for the bus: fail the request with a short error instead. */
static void handle_too_large(struct output_processor_actor *a, const struct output_processor_request_output *o,
                             const struct bus_trace_ctx *span) {
  char msg[512];
  snprintf(msg, sizeof msg, "output too large for the bus: %s", llb_err_last());
  output_processor_result_clear(&a->scratch);
  (void)output_processor_fail(a->proc, o->request_id, LLB_STATUS_TOO_LARGE, msg, llb_wall_ns(), &a->scratch);
  output_processor_result_clear(&a->scratch);
  publish_error(a, o->reply_to, o->request_id, LLB_STATUS_TOO_LARGE, msg, span);
  queue_abort(a, o->request_id);
  for (int32_t i = 0; i < ABORT_FANOUT; i++) {
    char id[OUTPUT_PROCESSOR_MAX_ID_BYTES];
    snprintf(id, sizeof id, "%d_%.200s", i, o->request_id);
    queue_abort(a, id);
  }
}

/* A traced request of this batch: its request span R (from EngineCoreOutput's trace fields),
 * found by the id its RequestOutput carries (the parent's for n > 1). */
struct out_trace {
  const char *key;
  struct bus_trace_ctx ctx; /* R */
  char parent_span_id[17];  /* R's parent, "" = root */
  int64_t start_ns;         /* R's start */
};

/* R's context of `eo`, if it carries a valid, sampled one that this bus records. */
static bool out_trace_from(struct bus *bus, const struct llb_engine_core_output *eo, struct out_trace *t) {
  if (!eo->traceparent.len || bus_traceparent_parse(eo->traceparent.data, &t->ctx) != LLB_STATUS_OK) {
    llb_err_clear();
    return false;
  }
  if (!bus_span_recording(bus, &t->ctx)) return false;
  t->key = eo->parent_request_id.len ? eo->parent_request_id.data : eo->request_id.data;
  t->parent_span_id[0] = '\0';
  if (eo->trace_parent_span_id.len == 16) {
    struct bus_trace_ctx p; /* validate the id with the traceparent parser's rules */
    char tp[BUS_TRACEPARENT_LEN + 1];
    snprintf(tp, sizeof tp, "00-%s-%s-01", t->ctx.trace_id, eo->trace_parent_span_id.data);
    if (bus_traceparent_parse(tp, &p) == LLB_STATUS_OK) memcpy(t->parent_span_id, p.span_id, 17);
    else llb_err_clear();
  }
  t->start_ns = eo->trace_start_time_ns;
  return true;
}

static const struct out_trace *out_trace_find(const struct out_trace *tr, int32_t n, const char *key) {
  for (int32_t i = 0; i < n; i++)
    if (strcmp(tr[i].key, key) == 0) return &tr[i];
  return NULL;
}

/* The request span R, recorded once its last RequestOutput is out (vLLM's do_tracing). */
static void record_request_span(struct output_processor_actor *a, const struct out_trace *t,
                                const struct output_processor_request_output *o, int64_t end_ns) {
  struct bus_span r;
  memset(&r, 0, sizeof r);
  r.ctx = t->ctx;
  memcpy(r.parent_span_id, t->parent_span_id, sizeof r.parent_span_id);
  snprintf(r.name, sizeof r.name, "llm_request");
  r.kind = BUS_SPAN_KIND_SERVER;
  r.start_unix_ns = t->start_ns;
  r.end_unix_ns = end_ns;
  r.error = o->error[0] != '\0';
  bus_span_attr_str(&r, "llmbus.request_id", o->request_id);
  bus_span_attr_int(&r, "gen_ai.usage.input_tokens", o->metrics.num_prompt_tokens);
  bus_span_attr_int(&r, "gen_ai.usage.output_tokens", o->metrics.num_generation_tokens);
  bus_span_end(a->bus, &r);
}

/* Sends the batch's RequestOutputs and one AbortRequests for every engine abort. Each
 * RequestOutput of a traced request goes out under its own "output_processor.reply" span. */
static void flush_results(struct output_processor_actor *a, struct llb_arena *arena, const struct bus_trace_ctx *span,
                          const struct out_trace *tr, int32_t num_tr) {
  for (int64_t i = 0; i < a->res.num_outputs; i++) {
    const struct output_processor_request_output *o = &a->res.outputs[i];
    if (!o->reply_to[0]) {
      atomic_fetch_add(&a->publish_errors, 1);
      LLB_LOG_WARN("request_output_no_reply_to", "request_id=%s", o->request_id);
      continue;
    }
    struct llb_request_output ro;
    const struct out_trace *t = num_tr > 0 ? out_trace_find(tr, num_tr, o->request_id) : NULL;
    struct bus_span reply;
    if (t) bus_span_begin(&reply, &t->ctx, "output_processor.reply", BUS_SPAN_KIND_PRODUCER);
    llb_status st = to_wire(o, arena, &ro);
    /* The last reply ends the request span, and with it the reply span, when it is handed to
     * the bus: the client may see it (and end its own span) before publish returns. */
    const int64_t handed_ns = llb_wall_ns();
    if (st == LLB_STATUS_OK) st = publish_output(a, o->reply_to, &ro, t ? &reply.ctx : span);
    if (t) {
      reply.error = st != LLB_STATUS_OK;
      if (o->finished) reply.end_unix_ns = handed_ns > reply.start_unix_ns ? handed_ns : reply.start_unix_ns;
      bus_span_attr_int(&reply, "llmbus.finished", o->finished);
      bus_span_end(a->bus, &reply);
      if (o->finished) record_request_span(a, t, o, reply.end_unix_ns);
    }
    if (st == LLB_STATUS_TOO_LARGE && !o->finished) handle_too_large(a, o, span);
  }
  for (int64_t i = 0; i < a->res.num_abort; i++) queue_abort(a, a->res.abort_ids[i]);
  if (a->num_aborts > 0) {
    struct llb_str *ids = llb_arena_alloc(arena, (size_t)a->num_aborts * sizeof *ids, _Alignof(struct llb_str));
    if (ids) {
      for (int64_t i = 0; i < a->num_aborts; i++) ids[i] = llb_str_c(a->aborts[i]);
      struct llb_abort_requests ab = {.request_ids = ids, .num_request_ids = (int32_t)a->num_aborts};
      llb_status st = llb_abort_requests_encode_buf(&ab, &a->buf);
      if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->abort_subject, a->buf.data, a->buf.len, span);
      if (st == LLB_STATUS_OK) {
        atomic_fetch_add(&a->num_aborted, (uint64_t)a->num_aborts);
      } else {
        char q[320];
        atomic_fetch_add(&a->publish_errors, 1);
        LLB_LOG_ERROR("abort_publish_failed", "num_ids=%" PRId64 " error=%s", a->num_aborts,
                      llb_log_quote(q, sizeof q, llb_err_last()));
      }
    }
  }
  a->num_aborts = 0;
  output_processor_result_clear(&a->res);
}

static void on_outputs(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct output_processor_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_engine_core_outputs outs;
  llb_status st = llb_engine_core_outputs_decode(msg->data, msg->len, &arena, &outs);
  if (st != LLB_STATUS_OK) {
    char q[320];
    atomic_fetch_add(&a->malformed, 1);
    LLB_LOG_WARN("outputs_malformed", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
    llb_arena_destroy(&arena);
    return;
  }
  atomic_fetch_add(&a->batches, 1);
  pthread_mutex_lock(&a->proc_mu);
  struct bus_trace_ctx span;
  bus_trace_child(&msg->trace, &span);
  /* traced requests: one "output_processor.detokenize" span per output, a child of R */
  struct out_trace *tr = NULL;
  int32_t num_tr = 0;
  if (bus_tracing_enabled(bus) && outs.num_outputs > 0)
    tr = llb_arena_alloc(&arena, (size_t)outs.num_outputs * sizeof *tr, _Alignof(struct out_trace));
  for (int32_t i = 0; i < outs.num_outputs; i++) {
    const struct llb_engine_core_output *eo = &outs.outputs[i];
    bool traced = tr && out_trace_from(bus, eo, &tr[num_tr]);
    struct bus_span detok;
    if (traced) bus_span_begin(&detok, &tr[num_tr].ctx, "output_processor.detokenize", BUS_SPAN_KIND_CONSUMER);
    handle_output(a, &outs, eo, &arena, &span);
    if (traced) {
      bus_span_attr_str(&detok, "llmbus.request_id", eo->request_id.data);
      bus_span_attr_int(&detok, "llmbus.step", (int64_t)outs.step);
      bus_span_attr_int(&detok, "llmbus.num_new_tokens", eo->num_new_token_ids);
      bus_span_end(bus, &detok);
      num_tr++;
    }
  }
  flush_results(a, &arena, &span, tr, num_tr);
  pthread_mutex_unlock(&a->proc_mu);
  llb_arena_destroy(&arena);
}

/* A scheduler that restarted asks, on <prefix>.engine.<eid>.history (an AbortRequests
 * message: the ids it replays), for the outputs each request had produced: the answer is an
 * EngineCoreOutputs with one output per request known here (new_token_ids from position 0,
 * resync set); unknown ones are left out. Untrusted: at most HISTORY_MAX_IDS ids. */
#define HISTORY_MAX_IDS 4096

static void on_history(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct output_processor_actor *a = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_abort_requests ids;
  llb_status st = llb_abort_requests_decode(msg->data, msg->len, &arena, &ids);
  if (st == LLB_STATUS_OK && ids.num_request_ids > HISTORY_MAX_IDS)
    st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "%d ids (at most %d)", ids.num_request_ids, HISTORY_MAX_IDS);
  struct llb_engine_core_output *outs = NULL;
  if (st == LLB_STATUS_OK && ids.num_request_ids > 0) {
    outs = llb_arena_alloc(&arena, (size_t)ids.num_request_ids * sizeof *outs, _Alignof(struct llb_engine_core_output));
    if (!outs) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "history of %d requests", ids.num_request_ids);
  }
  if (st != LLB_STATUS_OK) {
    char q[320];
    atomic_fetch_add(&a->malformed, 1);
    LLB_LOG_WARN("history_malformed", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
    llb_arena_destroy(&arena);
    return;
  }
  struct llb_engine_core_outputs reply = {.version = 1, .engine_id = llb_str_c(a->engine_id), .outputs = outs};
  struct llb_buf buf = {0};
  pthread_mutex_lock(&a->proc_mu); /* the history points into proc until the reply is encoded */
  for (int32_t i = 0; i < ids.num_request_ids; i++) {
    const int32_t *hist = NULL;
    int64_t n = 0;
    if (output_processor_history(a->proc, ids.request_ids[i].data, &hist, &n) != LLB_STATUS_OK || n > INT32_MAX) continue;
    struct llb_engine_core_output *o = &outs[reply.num_outputs++];
    llb_engine_core_output_init(o);
    o->request_id = ids.request_ids[i];
    o->new_token_ids = hist;
    o->num_new_token_ids = (int32_t)n;
    o->resync = true;
  }
  st = llb_engine_core_outputs_encode_buf(&reply, &buf);
  pthread_mutex_unlock(&a->proc_mu);
  if (st == LLB_STATUS_OK) st = bus_respond(bus, msg, buf.data, buf.len, NULL);
  atomic_fetch_add(&a->histories, 1);
  LLB_LOG_INFO("history_sent", "asked=%d known=%d status=%s", ids.num_request_ids, reply.num_outputs,
               llb_strerror(st));
  llb_buf_free(&buf);
  llb_arena_destroy(&arena);
}

llb_status output_processor_actor_start(struct output_processor_actor *a, struct bus *bus) {
  a->bus = bus;
  const char *prefix = bus_prefix(bus);
  llb_status st = bus_subject_engine(prefix, a->engine_id, "outputs", a->outputs_subject, sizeof a->outputs_subject);
  if (st == LLB_STATUS_OK)
    st = bus_subject_engine(prefix, a->engine_id, "abort", a->abort_subject, sizeof a->abort_subject);
  if (st == LLB_STATUS_OK)
    st = bus_subject_engine(prefix, a->engine_id, "resync", a->resync_subject, sizeof a->resync_subject);
  if (st == LLB_STATUS_OK)
    st = bus_subject_engine(prefix, a->engine_id, "history", a->history_subject, sizeof a->history_subject);
  if (st == LLB_STATUS_OK) st = bus_subscribe_on_loop(bus, a->outputs_subject, NULL, on_outputs, a, &a->outputs_sub);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, a->history_subject, NULL, on_history, a, &a->history_sub);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("output_processor_subscribed", "outputs=%s abort=%s", a->outputs_subject, a->abort_subject);
  return LLB_STATUS_OK;
}

void output_processor_actor_stop(struct output_processor_actor *a) {
  if (!a) return;
  /* errors: only when the drain already ended the subscriptions */
  if (a->outputs_sub) (void)bus_unsubscribe(a->outputs_sub);
  if (a->history_sub) (void)bus_unsubscribe(a->history_sub);
  a->outputs_sub = a->history_sub = NULL;
}

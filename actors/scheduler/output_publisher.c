/* The scheduler's outputs on the bus; see output_publisher.h. */
#include "actors/scheduler/output_publisher.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/actor_wire.h"
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/step_trace.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"

struct output_publisher {
  struct output_publisher_config cfg;
  char engine_id[BUS_TOKEN_MAX + 1], model_name[128], instance[96];
  char subj_outputs[BUS_SUBJECT_MAX], subj_stats[BUS_SUBJECT_MAX];
  struct llb_engine_core_output *outs; /* [cap_outs] reused across steps */
  int64_t cap_outs;
  struct llb_buf buf;                  /* encoded messages */
  atomic_uint_fast64_t c_pub;
};

llb_status output_publisher_create(const struct output_publisher_config *c, struct output_publisher **out) {
  *out = NULL;
  if (!c->bus || !c->engine_id || !c->subj_outputs || !c->subj_stats)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "output publisher: need bus, engine id, subjects");
  struct output_publisher *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "output publisher");
  p->cfg = *c;
  snprintf(p->engine_id, sizeof p->engine_id, "%s", c->engine_id);
  snprintf(p->model_name, sizeof p->model_name, "%s", c->model_name ? c->model_name : "");
  snprintf(p->instance, sizeof p->instance, "%s", c->instance ? c->instance : "");
  snprintf(p->subj_outputs, sizeof p->subj_outputs, "%s", c->subj_outputs);
  snprintf(p->subj_stats, sizeof p->subj_stats, "%s", c->subj_stats);
  p->cfg.engine_id = p->engine_id, p->cfg.model_name = p->model_name, p->cfg.instance = p->instance;
  p->cfg.subj_outputs = p->subj_outputs, p->cfg.subj_stats = p->subj_stats;
  *out = p;
  return LLB_STATUS_OK;
}

void output_publisher_destroy(struct output_publisher *p) {
  if (!p) return;
  free(p->outs);
  llb_buf_free(&p->buf);
  free(p);
}

uint64_t output_publisher_num_published(struct output_publisher *p) { return atomic_load(&p->c_pub); }


/* The logprobs of req_id's n new tokens: its first n rows in this step's worker reply (rows
 * follow the sampled tokens, request by request). Empty when the worker sent none. */
static struct llb_logprobs_lists step_logprobs(const struct llb_model_runner_output *r, const char *req_id,
                                               int32_t n) {
  struct llb_logprobs_lists out = {0};
  if (!r || n <= 0) return out;
  const struct llb_logprobs_lists *ll = &r->logprobs;
  if (ll->num_tokens == 0 || ll->num_tokens != r->num_sampled_token_ids)
    return out;
  int64_t row = 0;
  for (int32_t i = 0; i < r->num_reqs; row += r->num_sampled[i], i++) {
    if (strcmp(r->req_ids[i].data, req_id) != 0) continue;
    if (n > r->num_sampled[i]) return out;
    const int64_t cols = ll->num_logprobs_per_token;
    out = (struct llb_logprobs_lists){.num_tokens = n, .num_logprobs_per_token = (int32_t)cols,
                                      .logprob_token_ids = ll->logprob_token_ids + row * cols,
                                      .logprobs = ll->logprobs + row * cols,
                                      .sampled_token_ranks = ll->sampled_token_ranks + row};
    return out;
  }
  return out;
}

/* A resumed request (a takeover or a replay: history_fetch.c) that finished in its first step
 * is gone from the scheduler when its only output is built: its history is the meta's
 * resume_ids, kept until then (actor.c), and this output's tokens follow it. The whole output,
 * from position 0, goes into resume_ids (the meta, and so the buffer, lives until the output is
 * published: the final output owns it). False when the history does not reach this output. */
static bool fill_resync_from_meta(struct llb_engine_core_output *o, struct req_meta *m) {
  if (!m->resume_ids || o->finish_reason == LLB_FINISH_REASON_NONE || o->first_output_pos > m->num_resume)
    return false;
  const int32_t end = o->first_output_pos + o->num_new_token_ids;
  int32_t *all = realloc(m->resume_ids, (size_t)(end > 0 ? end : 1) * sizeof *all);
  if (!all) return false;
  if (o->num_new_token_ids > 0)
    memcpy(all + o->first_output_pos, o->new_token_ids, (size_t)o->num_new_token_ids * sizeof *all);
  m->resume_ids = all;
  m->num_resume = end;
  o->new_token_ids = end > 0 ? all : NULL;
  o->num_new_token_ids = end;
  o->first_output_pos = 0;
  return true;
}

/* The output processor lost this request (intake.c) or never had its earlier outputs (a
 * takeover, a replay): this output carries its whole output so far, from position 0, with the
 * first-output fields (the prompt from the request's token buffer: the meta's copy is gone
 * after the first output). No logprobs rows (the earlier ones are not kept). A request
 * already gone from the scheduler whose history the meta does not hold stays marked: its last
 * output went out without the history. */
static void fill_resync(const struct scheduler *sched, struct llb_engine_core_output *o, struct req_meta *m) {
  const struct sched_request *r = sched_find_request(sched, m->id);
  const int32_t *prompt = m->prompt; /* a request gone in its first step: the meta still has it */
  int32_t num_prompt = m->num_prompt;
  if (!r) {
    if (!fill_resync_from_meta(o, m)) return;
  } else {
    const int32_t end = o->first_output_pos + o->num_new_token_ids;
    if (end > r->num_tokens - r->num_prompt_tokens) return;
    o->new_token_ids = end > 0 ? r->token_ids + r->num_prompt_tokens : NULL;
    o->num_new_token_ids = end;
    o->first_output_pos = 0;
    prompt = r->token_ids;
    num_prompt = r->num_prompt_tokens;
    free(m->resume_ids); /* kept only for a first output that finishes (fill_resync_from_meta) */
    m->resume_ids = NULL;
    m->num_resume = 0;
  }
  o->new_logprobs = (struct llb_logprobs_lists){0};
  o->prompt_token_ids = prompt;
  o->num_prompt_token_ids = num_prompt;
  o->sampling_params = &m->params;
  o->parent_request_id = llb_str_c(m->parent_request_id);
  o->index = m->client_index;
  o->resync = true;
  m->resync = false;
}

static void fill_output(const struct output_step *s, struct llb_engine_core_output *o,
                        const struct sched_engine_outputs *eo, int32_t i, int64_t now_ns) {
  const struct sched_engine_output *e = &eo->outputs[i];
  llb_engine_core_output_init(o);
  o->request_id = llb_str_c(sched_engine_outputs_req_id(eo, i));
  o->new_token_ids = e->num_new_tokens > 0 ? sched_engine_outputs_tokens(eo, i) : NULL;
  o->num_new_token_ids = e->num_new_tokens;
  o->first_output_pos = e->first_output_pos;
  /* a hand-off ends the request here, not the client's stream (handoff.h) */
  const bool handed_off = e->finish_reason == SCHED_FINISH_REASON_HANDED_OFF;
  o->finish_reason = handed_off ? LLB_FINISH_REASON_NONE : (enum llb_finish_reason)e->finish_reason;
  o->stop_token_id = e->stop_token_id;
  o->num_cached_tokens = e->num_cached_tokens;
  o->num_preemptions = e->num_preemptions;
  o->pooling_output = sched_engine_outputs_pooled(eo, i);
  o->num_pooling_output = e->num_pooled;
  if (eo == s->eo) o->new_logprobs = step_logprobs(s->mro, o->request_id.data, e->num_new_tokens);
  struct req_meta *m = e->user;
  if (!m) return;
  if (e->num_new_tokens > 0 && m->first_token_time_ns == 0) m->first_token_time_ns = now_ns;
  if (e->num_new_tokens > 0 && eo == s->eo)
    o->prompt_logprobs = sched_prompt_logprobs_take(&m->plp); /* once, with its first token */
  if (e->finish_reason == SCHED_FINISH_REASON_ERROR) { /* isolated by sched_step_failed */
    o->error.code = (int32_t)(m->reject_status ? m->reject_status : LLB_STATUS_INTERNAL);
    o->error.message = llb_str_c(m->reject_message[0] ? m->reject_message
                                                      : "the request failed every worker step it took part in "
                                                        "(finished so that the others go on)");
  }
  if (m->resync) fill_resync(s->sched, o, m);
  if (handed_off && m->decode_engine_id) o->handed_off_to = llb_str_c(m->decode_engine_id);
  if (m->num_handed > 0 && !m->first_sent) { /* a hand-off's first output here */
    o->handed_off_token_ids = m->handed_ids;
    o->num_handed_off_token_ids = m->num_handed;
  }
  o->reply_to = llb_str_c(m->reply_to);
  o->external_id = llb_str_c(m->external_id);
  o->arrival_time = m->arrival_time;
  o->queued_time_ns = m->queued_time_ns;
  o->scheduled_time_ns = m->scheduled_time_ns;
  o->first_token_time_ns = m->first_token_time_ns;
  step_trace_fill_output(&m->trace, o);
  if (!m->first_sent) {
    o->prompt_token_ids = m->prompt;
    o->num_prompt_token_ids = m->num_prompt;
    o->sampling_params = &m->params;
    o->parent_request_id = llb_str_c(m->parent_request_id);
    o->index = m->client_index;
  }
}

static void fill_rejected(struct llb_engine_core_output *o, struct req_meta *m) {
  llb_engine_core_output_init(o);
  o->request_id = llb_str_c(m->id);
  o->finish_reason = LLB_FINISH_REASON_ERROR;
  o->reply_to = llb_str_c(m->reply_to);
  o->external_id = llb_str_c(m->external_id);
  o->arrival_time = m->arrival_time;
  o->queued_time_ns = m->queued_time_ns;
  o->prompt_token_ids = m->prompt;
  o->num_prompt_token_ids = m->num_prompt;
  o->sampling_params = &m->params;
  o->parent_request_id = llb_str_c(m->parent_request_id);
  o->index = m->client_index;
  o->error.code = (int32_t)m->reject_status;
  o->error.message = llb_str_c(m->reject_message);
  step_trace_fill_output(&m->trace, o); /* the output processor ends the request span */
}

static void request_done(struct output_publisher *p, uint64_t stream_seq) {
  if (p->cfg.on_request_done) p->cfg.on_request_done(p->cfg.user, stream_seq);
}

int64_t output_publisher_publish(struct output_publisher *p, const struct output_step *s) {
  const uint64_t step = s->step;
  const struct sched_engine_outputs *lists[2] = {s->side, s->with_step ? s->eo : NULL};
  int64_t n = s->num_rejected + s->side->num_outputs + (s->with_step ? s->eo->num_outputs : 0);
  int64_t now = llb_wall_ns(); /* before the publish: the step spans end here (step_trace.c) */
  if (n == 0) return now;
  if (sched_wire_grow((void **)&p->outs, &p->cap_outs, n, sizeof(*p->outs)) != LLB_STATUS_OK) {
    LLB_LOG_ERROR("outputs_dropped", "step=%llu outputs=%lld reason=out_of_memory",
                  (unsigned long long)step, (long long)n);
    goto cleanup;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < s->num_rejected; i++) fill_rejected(&p->outs[k++], s->rejected[i]);
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++)
      fill_output(s, &p->outs[k++], lists[l], i, now);
  struct llb_engine_core_outputs msg = {.version = LLB_SCHEMA_VERSION,
                                        .engine_id = llb_str_c(p->engine_id), .step = step,
                                        .timestamp = (double)now / 1e9, .outputs = p->outs,
                                        .num_outputs = (int32_t)n};
  llb_status st = llb_engine_core_outputs_encode_buf(&msg, &p->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(p->cfg.bus, p->subj_outputs, p->buf.data, p->buf.len, NULL);
  if (st == LLB_STATUS_OK) {
    atomic_fetch_add(&p->c_pub, 1);
  } else {
    char q[600];
    LLB_LOG_ERROR("outputs_publish_failed", "step=%llu outputs=%lld status=%s error=%s",
                  (unsigned long long)step, (long long)n, llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
  }
cleanup:
  /* Outputs that borrow a meta first: a request aborted in this step may have a step output
   * in eo beside its final ABORT output in side, which owns the same meta. */
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++) {
      struct req_meta *m = lists[l]->outputs[i].user;
      if (!m || lists[l]->outputs[i].finish_reason != SCHED_FINISH_REASON_NONE || m->first_sent) continue;
      m->first_sent = true;
      free(m->prompt);
      m->prompt = NULL;
      free(m->handed_ids);
      m->handed_ids = NULL;
      m->num_handed = 0;
    }
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++) {
      struct req_meta *m = lists[l]->outputs[i].user;
      if (!m || lists[l]->outputs[i].finish_reason == SCHED_FINISH_REASON_NONE) continue;
      request_done(p, m->stream_seq); /* after its last output went out */
      req_meta_free(m);
      lists[l]->outputs[i].user = NULL;
    }
  for (int64_t i = 0; i < s->num_rejected; i++) {
    request_done(p, s->rejected[i]->stream_seq);
    req_meta_free(s->rejected[i]);
  }
  sched_engine_outputs_clear(s->side, step);
  sched_engine_outputs_clear(s->eo, step);
  return now;
}

void output_publisher_free_users(struct sched_engine_outputs *eo) {
  for (int32_t i = 0; i < eo->num_outputs; i++)
    if (eo->outputs[i].finish_reason != SCHED_FINISH_REASON_NONE) {
      req_meta_free(eo->outputs[i].user);
      eo->outputs[i].user = NULL;
    }
  eo->num_outputs = 0;
}

void output_publisher_announce_draining(struct output_publisher *p) {
  /* From the stopping thread while the step thread may still run: only what never changes
   * (configuration, names), in a buffer of its own. */
  const struct output_publisher_config *c = &p->cfg;
  struct llb_scheduler_stats m = {
      .version = LLB_SCHEMA_VERSION, .engine_id = llb_str_c(p->engine_id),
      .timestamp = (double)llb_wall_ns() / 1e9, .num_total_blocks = c->num_blocks,
      .model = llb_str_c(p->model_name), .block_size = c->block_size, .max_num_seqs = c->max_num_seqs,
      .max_num_batched_tokens = c->max_num_batched_tokens, .max_model_len = c->max_model_len,
      .instance = llb_str_c(p->instance), .draining = true, .role = c->role};
  struct llb_buf buf = {0};
  llb_status st = llb_scheduler_stats_encode_buf(&m, &buf);
  if (st == LLB_STATUS_OK) st = bus_publish(c->bus, p->subj_stats, buf.data, buf.len, NULL);
  if (st == LLB_STATUS_OK) st = bus_flush(c->bus, 1000);
  llb_buf_free(&buf);
  LLB_LOG_INFO("engine_draining_announced", "engine_id=%s status=%s", p->engine_id, llb_strerror(st));
}

void output_publisher_publish_stats(struct output_publisher *p, const struct sched_stats *s) {
  const struct output_publisher_config *c = &p->cfg;
  struct llb_scheduler_stats m = {
      .version = LLB_SCHEMA_VERSION, .engine_id = llb_str_c(p->engine_id), .step = s->step,
      .timestamp = (double)llb_wall_ns() / 1e9, .num_running_reqs = s->num_running,
      .num_waiting_reqs = s->num_waiting, .kv_cache_usage = (float)s->kv_cache_usage,
      .num_free_blocks = s->num_free_blocks, .num_total_blocks = c->num_blocks,
      .prefix_cache_queries = s->prefix_cache_queries, .prefix_cache_hits = s->prefix_cache_hits,
      .num_preemptions = s->num_preemptions, .prompt_tokens_total = s->num_prompt_tokens,
      .generation_tokens_total = s->num_generation_tokens,
      .encoder_cache_queries = s->encoder_cache_queries, .encoder_cache_hits = s->encoder_cache_hits,
      .encoder_inputs_computed = s->encoder_inputs_computed,
      .encoder_embeds_computed = s->encoder_embeds_computed,
      .model = llb_str_c(p->model_name), .block_size = c->block_size, .max_num_seqs = c->max_num_seqs,
      .max_num_batched_tokens = c->max_num_batched_tokens, .max_model_len = c->max_model_len,
      .stats_interval_ms = c->stats_interval_ms, .instance = llb_str_c(p->instance), .role = c->role};
  llb_status st = llb_scheduler_stats_encode_buf(&m, &p->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(c->bus, p->subj_stats, p->buf.data, p->buf.len, NULL);
  if (st != LLB_STATUS_OK) LLB_LOG_WARN("stats_publish_failed", "status=%s", llb_strerror(st));
}

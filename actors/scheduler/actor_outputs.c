/* The scheduler actor's step thread: outputs (EngineCoreOutputs and SchedulerStats publishing),
 * split from actor.c. */
#include "actors/scheduler/actor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/scheduler/actor_internal.h"
#include "actors/scheduler/actor_wire.h"
#include "actors/scheduler/sched_request.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

/* ---- step thread: outputs ---- */

/* The logprobs of req_id's n new tokens: its first n rows in this step's worker reply (rows
 * follow the sampled tokens, request by request). Empty when the worker sent none. */
static struct llb_logprobs_lists step_logprobs(const struct scheduler_actor *a, const char *req_id,
                                               int32_t n) {
  struct llb_logprobs_lists out = {0};
  const struct llb_model_runner_output *r = &a->mro;
  const struct llb_logprobs_lists *ll = &r->logprobs;
  if (!a->have_mro || n <= 0 || ll->num_tokens == 0 || ll->num_tokens != r->num_sampled_token_ids)
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

/* The output processor lost this request (actor_resync.c): this output carries its whole
 * output so far, from position 0, with the first-output fields (the prompt from the
 * request's token buffer: the meta's copy is gone after the first output). No logprobs rows
 * (the earlier ones are not kept). A request already gone from the scheduler stays marked:
 * its last output went out without the history. */
static void fill_resync(struct scheduler_actor *a, struct llb_engine_core_output *o, struct req_meta *m) {
  const struct sched_request *r = sched_find_request(a->sched, m->id);
  if (!r) return;
  const int32_t end = o->first_output_pos + o->num_new_token_ids;
  if (end > r->num_tokens - r->num_prompt_tokens) return;
  o->new_token_ids = end > 0 ? r->token_ids + r->num_prompt_tokens : NULL;
  o->num_new_token_ids = end;
  o->first_output_pos = 0;
  o->new_logprobs = (struct llb_logprobs_lists){0};
  o->prompt_token_ids = r->token_ids;
  o->num_prompt_token_ids = r->num_prompt_tokens;
  o->sampling_params = &m->params;
  o->parent_request_id = llb_str_c(m->parent_request_id);
  o->index = m->client_index;
  o->resync = true;
  m->resync = false;
}

static void fill_output(struct scheduler_actor *a, struct llb_engine_core_output *o,
                        const struct sched_engine_outputs *eo, int32_t i, int64_t now_ns) {
  const struct sched_engine_output *e = &eo->outputs[i];
  llb_engine_core_output_init(o);
  o->request_id = llb_str_c(sched_engine_outputs_req_id(eo, i));
  o->new_token_ids = e->num_new_tokens > 0 ? sched_engine_outputs_tokens(eo, i) : NULL;
  o->num_new_token_ids = e->num_new_tokens;
  o->first_output_pos = e->first_output_pos;
  o->finish_reason = (enum llb_finish_reason)e->finish_reason;
  o->stop_token_id = e->stop_token_id;
  o->num_cached_tokens = e->num_cached_tokens;
  o->num_preemptions = e->num_preemptions;
  o->pooling_output = sched_engine_outputs_pooled(eo, i);
  o->num_pooling_output = e->num_pooled;
  if (eo == &a->eo) o->new_logprobs = step_logprobs(a, o->request_id.data, e->num_new_tokens);
  struct req_meta *m = e->user;
  if (!m) return;
  if (e->num_new_tokens > 0 && m->first_token_time_ns == 0) m->first_token_time_ns = now_ns;
  if (e->num_new_tokens > 0 && eo == &a->eo)
    o->prompt_logprobs = sched_prompt_logprobs_take(&m->plp); /* once, with its first token */
  if (e->finish_reason == SCHED_FINISH_REASON_ERROR) { /* isolated by sched_step_failed */
    o->error.code = (int32_t)(m->reject_status ? m->reject_status : LLB_STATUS_INTERNAL);
    o->error.message = llb_str_c(m->reject_message[0] ? m->reject_message
                                                      : "the request failed every worker step it took part in "
                                                        "(finished so that the others go on)");
  }
  if (m->resync) fill_resync(a, o, m);
  o->reply_to = llb_str_c(m->reply_to);
  o->external_id = llb_str_c(m->external_id);
  o->arrival_time = m->arrival_time;
  o->queued_time_ns = m->queued_time_ns;
  o->scheduled_time_ns = m->scheduled_time_ns;
  o->first_token_time_ns = m->first_token_time_ns;
  sched_trace_fill_output(&m->trace, o);
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
  sched_trace_fill_output(&m->trace, o); /* the output processor ends the request span */
}

/* Publishes one EngineCoreOutputs with the rejections, the side outputs (aborts) and the
 * step's outputs; then forgets finished requests and drops first-output data. */
void sched_actor_publish_outputs(struct scheduler_actor *a, uint64_t step, bool with_step) {
  const struct sched_engine_outputs *lists[2] = {&a->eo_side, with_step ? &a->eo : NULL};
  int64_t n = a->num_rejected + a->eo_side.num_outputs + (with_step ? a->eo.num_outputs : 0);
  int64_t now = llb_wall_ns(); /* before the publish: the step spans end here (actor_trace.c) */
  if (n == 0) {
    sched_trace_steps_done(a, step, with_step, now);
    return;
  }
  if (sched_wire_grow((void **)&a->outs, &a->cap_outs, n, sizeof(*a->outs)) != LLB_STATUS_OK) {
    LLB_LOG_ERROR("outputs_dropped", "step=%llu outputs=%lld reason=out_of_memory",
                  (unsigned long long)step, (long long)n);
    goto cleanup;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < a->num_rejected; i++) fill_rejected(&a->outs[k++], a->rejected[i]);
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++)
      fill_output(a, &a->outs[k++], lists[l], i, now);
  struct llb_engine_core_outputs msg = {.version = LLB_SCHEMA_VERSION,
                                        .engine_id = llb_str_c(a->engine_id), .step = step,
                                        .timestamp = (double)now / 1e9, .outputs = a->outs,
                                        .num_outputs = (int32_t)n};
  llb_status st = llb_engine_core_outputs_encode_buf(&msg, &a->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->subj_outputs, a->buf.data, a->buf.len, NULL);
  if (st == LLB_STATUS_OK) {
    atomic_fetch_add(&a->c_pub, 1);
  } else {
    char q[600];
    LLB_LOG_ERROR("outputs_publish_failed", "step=%llu outputs=%lld status=%s error=%s",
                  (unsigned long long)step, (long long)n, llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
  }
cleanup:
  /* Outputs that borrow a meta first: a request aborted in this step may have a step output
   * in a->eo beside its final ABORT output in a->eo_side, which owns the same meta. */
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++) {
      struct req_meta *m = lists[l]->outputs[i].user;
      if (!m || lists[l]->outputs[i].finish_reason != SCHED_FINISH_REASON_NONE || m->first_sent) continue;
      m->first_sent = true;
      free(m->prompt);
      m->prompt = NULL;
    }
  for (int l = 0; l < 2; l++)
    for (int32_t i = 0; lists[l] && i < lists[l]->num_outputs; i++) {
      struct req_meta *m = lists[l]->outputs[i].user;
      if (!m || lists[l]->outputs[i].finish_reason == SCHED_FINISH_REASON_NONE) continue;
      durable_intake_done(a->durable, m->stream_seq); /* after its last output went out */
      req_meta_free(m);
      lists[l]->outputs[i].user = NULL;
    }
  for (int64_t i = 0; i < a->num_rejected; i++) {
    durable_intake_done(a->durable, a->rejected[i]->stream_seq);
    req_meta_free(a->rejected[i]);
  }
  a->num_rejected = 0;
  sched_engine_outputs_clear(&a->eo_side, step);
  sched_engine_outputs_clear(&a->eo, step);
  sched_trace_steps_done(a, step, with_step, now);
}

void sched_actor_free_output_users(struct sched_engine_outputs *eo) {
  for (int32_t i = 0; i < eo->num_outputs; i++)
    if (eo->outputs[i].finish_reason != SCHED_FINISH_REASON_NONE) {
      req_meta_free(eo->outputs[i].user);
      eo->outputs[i].user = NULL;
    }
  eo->num_outputs = 0;
}

void scheduler_actor_announce_draining(struct scheduler_actor *a) {
  if (!a) return;
  /* From the stopping thread while the step thread may still run: only what never changes
   * (configuration, names), in a buffer of its own. */
  struct llb_scheduler_stats m = {
      .version = LLB_SCHEMA_VERSION, .engine_id = llb_str_c(a->engine_id),
      .timestamp = (double)llb_wall_ns() / 1e9, .num_total_blocks = a->cfg.sched.num_blocks,
      .model = llb_str_c(a->model_name), .block_size = a->cfg.sched.block_size,
      .max_num_seqs = a->cfg.sched.max_num_seqs, .max_num_batched_tokens = a->cfg.sched.max_num_batched_tokens,
      .max_model_len = a->cfg.sched.max_model_len, .instance = llb_str_c(a->instance), .draining = true};
  struct llb_buf buf = {0};
  llb_status st = llb_scheduler_stats_encode_buf(&m, &buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->subj_stats, buf.data, buf.len, NULL);
  if (st == LLB_STATUS_OK) st = bus_flush(a->bus, 1000);
  llb_buf_free(&buf);
  LLB_LOG_INFO("engine_draining_announced", "engine_id=%s status=%s", a->engine_id, llb_strerror(st));
}

void sched_actor_publish_stats(struct scheduler_actor *a) {
  struct sched_stats s;
  sched_get_stats(a->sched, &s);
  struct llb_scheduler_stats m = {
      .version = LLB_SCHEMA_VERSION, .engine_id = llb_str_c(a->engine_id), .step = s.step,
      .timestamp = (double)llb_wall_ns() / 1e9, .num_running_reqs = s.num_running,
      .num_waiting_reqs = s.num_waiting, .kv_cache_usage = (float)s.kv_cache_usage,
      .num_free_blocks = s.num_free_blocks, .num_total_blocks = a->cfg.sched.num_blocks,
      .prefix_cache_queries = s.prefix_cache_queries, .prefix_cache_hits = s.prefix_cache_hits,
      .num_preemptions = s.num_preemptions, .prompt_tokens_total = s.num_prompt_tokens,
      .generation_tokens_total = s.num_generation_tokens,
      .encoder_cache_queries = s.encoder_cache_queries, .encoder_cache_hits = s.encoder_cache_hits,
      .encoder_inputs_computed = s.encoder_inputs_computed,
      .encoder_embeds_computed = s.encoder_embeds_computed,
      .model = llb_str_c(a->model_name), .block_size = a->cfg.sched.block_size,
      .max_num_seqs = a->cfg.sched.max_num_seqs, .max_num_batched_tokens = a->cfg.sched.max_num_batched_tokens,
      .max_model_len = a->cfg.sched.max_model_len,
      .stats_interval_ms = (int32_t)(a->cfg.stats_idle_interval_ms > a->cfg.stats_interval_ms
                                         ? a->cfg.stats_idle_interval_ms : a->cfg.stats_interval_ms),
      .instance = llb_str_c(a->instance)};
  llb_status st = llb_scheduler_stats_encode_buf(&m, &a->buf);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, a->subj_stats, a->buf.data, a->buf.len, NULL);
  if (st != LLB_STATUS_OK) LLB_LOG_WARN("stats_publish_failed", "status=%s", llb_strerror(st));
  a->last_stats_ns = llb_now_ns();
}

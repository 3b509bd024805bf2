/* What comes back for a step in flight (sched_inflight.c): its model output applied to the
 * requests of its record (vLLM v1 core/sched/scheduler.py update_from_output, async
 * scheduling as core/sched/async_scheduler.py), or its failure (a suspect counted, the
 * blamed or poisoned requests finished with ERROR, the rest preempted). Our own code. */
#include <string.h>

#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"

/* The entry of `rec` whose request is named `id`: the live request with that id when it is
 * in rec (marked by sampled_offset == -2 below), else a finished one, found by scanning. */
static struct sched_request *entry_request(struct scheduler *s, const struct sched_step_record *rec,
                                          const char *id) {
  struct sched_request *live = sched_map_get(s, id);
  if (live && live->sampled_offset == -2) return live;
  for (int32_t k = 0; k < rec->num; k++) {
    struct sched_request *r = rec->entries[k].req;
    if (sched_request_is_finished(r) && r->sampled_offset == -2 && strcmp(r->request_id, id) == 0) return r;
  }
  return NULL;
}

llb_status sched_update_from_output(struct scheduler *s, const struct sched_model_output *mo,
                                    struct sched_engine_outputs *eo) {
  if (s->kv_in_flight)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output for step %llu: kv step %llu unanswered",
                    (unsigned long long)mo->step, (unsigned long long)s->step);
  sched_commit_step(s);
  struct sched_step_record *rec = &s->inflight[s->inflight_head];
  if (s->num_inflight == 0 || mo->step != rec->step)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output for step %llu, oldest in flight: %s %llu",
                    (unsigned long long)mo->step, s->num_inflight ? "step" : "none",
                    (unsigned long long)(s->num_inflight ? rec->step : 0));
  if (mo->num_reqs < 0 || (mo->num_reqs > 0 && (!mo->req_ids || !mo->num_sampled)))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output for step %llu: bad arrays",
                    (unsigned long long)mo->step);
  sched_engine_outputs_clear(eo, mo->step);
  s->inflight_head = (s->inflight_head + 1) % 2;
  s->num_inflight--;
  sched_kv_apply_output(s, mo); /* transfers that ended (sched_kv.c) */
  /* Find each row's request (the worker's order may differ from ours). */
  for (int32_t k = 0; k < rec->num; k++) {
    rec->entries[k].req->sampled_offset = -2; /* "in this step, no row yet" */
    rec->entries[k].req->num_sampled = 0;
    rec->entries[k].req->num_pooled = 0;
  }
  int64_t off = 0, pool_off = 0, spec_off = 0;
  for (int32_t i = 0; i < mo->num_reqs; i++) {
    struct sched_request *r = mo->req_ids[i] ? entry_request(s, rec, mo->req_ids[i]) : NULL;
    const int32_t nd = mo->num_spec_tokens && mo->num_spec_tokens[i] > 0 ? mo->num_spec_tokens[i] : 0;
    if (r && nd > 0 && mo->spec_token_ids) sched_spec_set_drafts(s, r, mo->spec_token_ids + spec_off, nd);
    spec_off += nd;
    int32_t n = mo->num_sampled[i] > 0 ? mo->num_sampled[i] : 0;
    if (r && n > 0 && mo->sampled_token_ids) {
      r->sampled_offset = off;
      r->num_sampled = n;
    }
    off += n;
    const int32_t np = mo->num_pooled && mo->num_pooled[i] > 0 ? mo->num_pooled[i] : 0;
    if (r && np > 0 && mo->pooler_output) {
      r->pooled_offset = pool_off;
      r->num_pooled = np;
    }
    pool_off += np;
  }
  llb_status st = LLB_STATUS_OK;
  for (int32_t k = 0; k < rec->num; k++) {
    const struct sched_step_entry *e = &rec->entries[k];
    struct sched_request *r = e->req;
    int32_t n_sampled = r->num_sampled, n_pooled = r->num_pooled;
    int64_t sampled_at = r->sampled_offset, pooled_at = r->pooled_offset;
    r->num_sampled = r->num_pooled = 0;
    r->sampled_offset = r->pooled_offset = 0;
    r->num_inflight_steps--;
    if (e->samples) r->num_output_placeholders--;
    if (sched_request_is_finished(r)) { /* finished after this step was planned: discard */
      sched_retire(s, r);
      continue;
    }
    if (st) continue; /* keep the accounting of every entry right */
    if (e->samples && n_sampled == 0) { /* the worker owed a token: recover (preempt_all) */
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output for step %llu: no sampled token for %s",
                    (unsigned long long)mo->step, r->request_id);
      continue;
    }
    if (e->samples && (n_sampled > 1 || e->num_spec_tokens > 0) && (st = sched_spec_apply(s, e, n_sampled)))
      continue; /* more tokens than drafts + 1: recover */
    if (e->pools && n_pooled == 0) { /* the worker owed the pooled vector: recover */
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output for step %llu: no pooled output for %s",
                    (unsigned long long)mo->step, r->request_id);
      continue;
    }
    if (r->abort_pending) { /* its ABORT output went out with sched_abort_requests */
      st = sched_finish(s, r, r->abort_reason, NULL, 0, 0);
      continue;
    }
    if (e->pools) { /* the prompt is done: the request finishes with its vector (vLLM: STOP) */
      r->num_failed_steps = 0;
      st = sched_finish(s, r, SCHED_FINISH_REASON_STOP, eo, sched_request_num_output_tokens(r), 0);
      if (!st) st = sched_engine_outputs_set_pooled(eo, eo->num_outputs - 1, mo->pooler_output + pooled_at, n_pooled);
      continue;
    }
    int32_t first_pos = sched_request_num_output_tokens(r), n_new = 0;
    enum sched_finish_reason reason = SCHED_FINISH_REASON_NONE;
    if (e->samples) { /* caught up with its context: the sampled tokens are new */
      for (int32_t t = 0; t < n_sampled && reason == SCHED_FINISH_REASON_NONE; t++, n_new++)
        reason = sched_request_append_token(r, mo->sampled_token_ids[sampled_at + t],
                                            s->cfg.max_model_len);
      s->stats.num_generation_tokens += (uint64_t)n_new;
      sched_request_update_block_hashes(r, s->cfg.block_size, &s->cfg.hash_key);
    }
    r->num_failed_steps = 0; /* a step went through with it: not a suspect (any more) */
    if (reason != SCHED_FINISH_REASON_NONE) st = sched_finish(s, r, reason, eo, first_pos, n_new);
    else if (n_new > 0) st = sched_engine_outputs_add(eo, r, first_pos, n_new);
  }
  rec->num = 0;
  return st;
}

/* One more failed step for r, counted once per failure even when r is in two of its steps. */
static void count_failure(struct scheduler *s, struct sched_request *r) {
  if (r->failure_stamp == s->num_step_failures) return;
  r->failure_stamp = s->num_step_failures;
  r->num_failed_steps++;
}

static void find_poison_cb(void *ctx, const char *key, void *value) {
  (void)key;
  struct sched_request **found = ctx, *r = value;
  if (!*found && r->num_failed_steps >= SCHED_MAX_FAILED_STEPS && !r->abort_pending)
    *found = r; /* an aborted one already told its client */
}

/* The first live request (in admission order) with num_failed_steps >=
 * SCHED_MAX_FAILED_STEPS, or NULL. */
static struct sched_request *next_poison(const struct scheduler *s) {
  struct sched_request *found = NULL;
  llb_strmap_foreach(s->reqs, find_poison_cb, &found);
  return found;
}

llb_status sched_step_failed(struct scheduler *s, const char *blamed_req_id, bool count,
                             struct sched_engine_outputs *eo) {
  struct sched_request *blamed = blamed_req_id && blamed_req_id[0] ? sched_map_get(s, blamed_req_id) : NULL;
  if (!blamed && count) {
    s->num_step_failures++;
    for (int32_t k = 0; k < s->num_inflight; k++) {
      const struct sched_step_record *rec = &s->inflight[(s->inflight_head + k) % 2];
      for (int32_t i = 0; i < rec->num; i++)
        if (!sched_request_is_finished(rec->entries[i].req)) count_failure(s, rec->entries[i].req);
    }
    for (int32_t i = 0; s->planned && i < s->num_scheduled; i++) count_failure(s, s->scheduled[i]);
  }
  sched_preempt_all(s);
  blamed = blamed ? sched_map_get(s, blamed_req_id) : NULL; /* an aborted one is gone now */
  if (blamed && blamed->abort_pending) blamed = NULL;     /* or finishes with its ABORT */
  llb_status st = LLB_STATUS_OK;
  if (blamed) {
    blamed->num_failed_steps = SCHED_MAX_FAILED_STEPS;
    st = sched_finish(s, blamed, SCHED_FINISH_REASON_ERROR, eo, sched_request_num_output_tokens(blamed), 0);
  }
  for (struct sched_request *r; !st && (r = next_poison(s));) /* finishing changes the map: scan again */
    st = sched_finish(s, r, SCHED_FINISH_REASON_ERROR, eo, sched_request_num_output_tokens(r), 0);
  return st;
}

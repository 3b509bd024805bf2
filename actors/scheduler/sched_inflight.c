/* The scheduler's steps in flight: the record of a committed step, forgetting steps on
 * recovery, and which requests are in them (asynchronous scheduling, see scheduler.h; vLLM
 * v1 core/sched/async_scheduler.py, our own code). sched_update.c applies their outputs. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"

/* The planned step was sent (or had no tokens): record it for its output, advance each
 * request's num_computed_tokens by its scheduled tokens and count a placeholder for the
 * token it will sample (vLLM _update_after_schedule; async_scheduler.py). No allocation:
 * records hold max_num_seqs entries. */
void sched_commit_step(struct scheduler *s) {
  if (!s->planned) return;
  s->planned = false;
  const bool kv = s->planned_kv; /* a step of KV transfers or a poll goes out without tokens */
  s->planned_kv = false;
  if (s->num_scheduled == 0 || s->total_scheduled == 0) {
    for (int32_t i = 0; i < s->num_scheduled; i++) s->scheduled[i]->num_scheduled_tokens = 0;
    s->num_scheduled = s->total_scheduled = 0;
    if (!kv) return;
  }
  struct sched_step_record *rec = &s->inflight[(s->inflight_head + s->num_inflight) % 2];
  rec->step = s->step;
  rec->num = 0;
  for (int32_t i = 0; i < s->num_scheduled; i++) {
    struct sched_request *r = s->scheduled[i];
    int32_t n = r->num_scheduled_tokens, drafts = r->num_scheduled_spec_tokens;
    r->num_scheduled_tokens = r->num_scheduled_spec_tokens = 0;
    r->num_spec_tokens = 0; /* used now or stale: the step's output brings new ones */
    r->step_blocks_begin = r->num_block_ids;
    r->lookup = false;
    if (n <= 0) continue;
    if (r->num_computed_tokens < r->num_tokens) {
      int32_t catch_up = r->num_tokens - r->num_computed_tokens;
      s->stats.num_prompt_tokens += (uint64_t)(catch_up < n ? catch_up : n);
    }
    r->num_computed_tokens += n;
    const bool pooling = sched_request_is_pooling(r); /* samples nothing: no placeholder */
    bool samples = !pooling && r->num_computed_tokens >= r->num_tokens + r->num_output_placeholders;
    if (samples) r->num_output_placeholders++;
    r->num_inflight_steps++;
    rec->entries[rec->num++] = (struct sched_step_entry){
        .req = r, .num_scheduled_tokens = n, .samples = samples,
        .pools = pooling && r->num_computed_tokens >= r->num_prompt_tokens, .num_spec_tokens = drafts};
  }
  s->num_scheduled = s->total_scheduled = 0;
  s->num_inflight++;
}

/* Forgets the committed steps (sched_preempt_all, sched_destroy): their requests lose the
 * references and placeholders; finished ones nothing else holds are destroyed. */
void sched_drop_inflight_steps(struct scheduler *s) {
  for (int32_t k = 0; k < s->num_inflight; k++) {
    struct sched_step_record *rec = &s->inflight[(s->inflight_head + k) % 2];
    for (int32_t i = 0; i < rec->num; i++) {
      struct sched_request *r = rec->entries[i].req;
      r->num_inflight_steps--;
      if (rec->entries[i].samples) r->num_output_placeholders--;
      sched_retire(s, r);
    }
    rec->num = 0;
  }
  s->num_inflight = 0;
  s->inflight_head = 0;
}

int32_t sched_num_steps_in_flight(const struct scheduler *s) {
  return s->num_inflight + (s->planned && (s->total_scheduled > 0 || s->planned_kv) ? 1 : 0);
}

bool sched_suspect_in_flight(const struct scheduler *s) {
  for (int32_t k = 0; k < s->num_inflight; k++) {
    const struct sched_step_record *rec = &s->inflight[(s->inflight_head + k) % 2];
    for (int32_t i = 0; i < rec->num; i++)
      if (rec->entries[i].req->num_failed_steps > 0) return true;
  }
  for (int32_t i = 0; i < s->num_scheduled; i++)
    if (s->scheduled[i]->num_failed_steps > 0) return true;
  return false;
}

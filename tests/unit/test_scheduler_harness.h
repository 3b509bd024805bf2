/* Test harness for the scheduler: an in-process kv_manager (the prefix index) answers each kv
 * step directly, and a fake worker keeps the block tables the scheduler's deltas describe and
 * checks them against the scheduler's (their one owner), and samples a
 * deterministic token per (request, output position), as docs/design.md §5's sampler does, so
 * recompute after preemption must reproduce the same tokens. Included by test_scheduler*.c. */
#ifndef TEST_SCHEDULER_HARNESS_H
#define TEST_SCHEDULER_HARNESS_H

#include <stdlib.h>
#include <string.h>

#include "actors/kv_manager/kv_manager.h"
#include "base/hash.h"
#include "actors/scheduler/scheduler.h"

#define H_MAX_REQS 64
#define H_MAX_BLOCKS 256

struct h_worker_req {
  char id[32];
  int32_t blocks[H_MAX_BLOCKS];
  int32_t num_blocks;
  bool live;
};

/* Sampling params the harness keeps for its requests: the scheduler borrows them while a
 * request is live (sched_new_request.sampling_params). */
struct h_params {
  struct h_params *next;
  struct llb_sampling_params sp;
};

struct harness {
  struct scheduler *s;
  struct h_params *params; /* every h_new_params, freed by h_fini */
  struct kv_manager *kv;
  struct sched_config cfg;
  struct sched_output out;
  struct kv_step step;
  struct kv_step_result res;
  struct sched_engine_outputs eo;
  struct h_worker_req wreqs[H_MAX_REQS];
  int32_t eos;           /* token the fake sampler emits at output position eos_at, -1 never */
  int32_t eos_at;
  int32_t kv_trips;
  uint64_t kv_faults;    /* protocol faults a test provoked (h_schedule_unchecked_mirror) */
};

static inline void h_init(struct harness *h, const struct sched_config *cfg) {
  memset(h, 0, sizeof(*h));
  h->cfg = *cfg;
  assert_int_equal(sched_create(cfg, &h->s), LLB_STATUS_OK);
  struct kv_manager_config kc = {.num_blocks = cfg->num_blocks, .block_size = cfg->block_size,
                                 .enable_prefix_caching = cfg->enable_prefix_caching};
  assert_int_equal(kv_manager_create(&kc, &h->kv), LLB_STATUS_OK);
  sched_output_init(&h->out);
  kv_step_init(&h->step);
  kv_step_result_init(&h->res);
  sched_engine_outputs_init(&h->eo);
  h->eos = -1;
}

static inline void h_fini(struct harness *h) {
  sched_destroy(h->s);
  while (h->params) {
    struct h_params *n = h->params->next;
    free(h->params);
    h->params = n;
  }
  kv_manager_destroy(h->kv);
  sched_output_free(&h->out);
  kv_step_free(&h->step);
  kv_step_result_free(&h->res);
  sched_engine_outputs_free(&h->eo);
}

/* The fake sampler: a function of the request and output position only. */
static inline int32_t h_token(const struct harness *h, const char *id, int32_t pos) {
  if (h->eos >= 0 && pos == h->eos_at) return h->eos;
  const uint32_t x = (uint32_t)llb_fnv1a64_str(id);
  return (int32_t)((x ^ (uint32_t)pos * 2654435761u) % 900u) + 100;
}

/* Default sampling params that live until h_fini. */
static inline struct llb_sampling_params *h_new_params(struct harness *h) {
  struct h_params *p = calloc(1, sizeof *p);
  assert_non_null(p);
  llb_sampling_params_init(&p->sp);
  p->next = h->params;
  h->params = p;
  return &p->sp;
}

static inline void h_add(struct harness *h, const char *id, int32_t n_prompt, int32_t max_tokens,
                         int32_t priority, double arrival) {
  int32_t toks[4096];
  for (int32_t i = 0; i < n_prompt; i++) toks[i] = 7 + i % 50;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n_prompt,
                                 .eos_token_id = 2, .arrival_time = arrival, .priority = priority};
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = max_tokens;
  nr.sampling_params = sp;
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

static inline struct h_worker_req *h_wreq(struct harness *h, const char *id, bool create) {
  for (int i = 0; i < H_MAX_REQS; i++)
    if (h->wreqs[i].live && strcmp(h->wreqs[i].id, id) == 0) return &h->wreqs[i];
  if (!create) return NULL;
  for (int i = 0; i < H_MAX_REQS; i++) {
    if (h->wreqs[i].live) continue;
    memset(&h->wreqs[i], 0, sizeof(h->wreqs[i]));
    h->wreqs[i].live = true;
    strncpy(h->wreqs[i].id, id, sizeof(h->wreqs[i].id) - 1);
    return &h->wreqs[i];
  }
  fail_msg("worker table full");
  return NULL;
}

/* Worker side of a sched_output: applies finished/preempted/new/cached, checks that its
 * block tables equal the scheduler's and cover the scheduled tokens. */
static inline void h_worker_apply(struct harness *h) {
  const struct sched_output *o = &h->out;
  for (int32_t i = 0; i < o->finished_req_ids.num; i++) {
    struct h_worker_req *w = h_wreq(h, sched_str_list_get(&o->finished_req_ids, i), false);
    if (w) w->live = false;
  }
  for (int32_t i = 0; i < o->preempted_req_ids.num; i++) {
    struct h_worker_req *w = h_wreq(h, sched_str_list_get(&o->preempted_req_ids, i), false);
    assert_non_null(w);
    w->live = false;
  }
  for (int32_t i = 0; i < o->num_new_reqs; i++) {
    const struct sched_new_req_data *n = &o->new_reqs[i];
    assert_null(h_wreq(h, n->req_id, false));
    struct h_worker_req *w = h_wreq(h, n->req_id, true);
    memcpy(w->blocks, n->block_ids, (size_t)n->num_block_ids * sizeof(int32_t));
    w->num_blocks = n->num_block_ids;
  }
  for (int32_t i = 0; i < o->num_cached_reqs; i++) {
    const struct sched_cached_req_data *c = &o->cached_reqs[i];
    struct h_worker_req *w = h_wreq(h, c->req_id, false);
    assert_non_null(w);
    memcpy(w->blocks + w->num_blocks, c->new_block_ids, (size_t)c->num_new_block_ids * sizeof(int32_t));
    w->num_blocks += c->num_new_block_ids;
  }
  for (int i = 0; i < H_MAX_REQS; i++) {
    if (!h->wreqs[i].live) continue;
    const struct sched_request *r = sched_find_request(h->s, h->wreqs[i].id);
    if (!r) continue; /* finished: its id reaches the worker with the next output */
    assert_int_equal(r->num_block_ids, h->wreqs[i].num_blocks);
    for (int32_t k = 0; k < r->num_block_ids; k++) assert_int_equal(r->block_ids[k], h->wreqs[i].blocks[k]);
  }
  int32_t total = 0;
  for (int32_t i = 0; i < o->num_new_reqs; i++) {
    const struct sched_new_req_data *n = &o->new_reqs[i];
    assert_true(n->num_scheduled_tokens > 0);
    assert_true((int64_t)n->num_block_ids * h->cfg.block_size >= n->num_computed_tokens + n->num_scheduled_tokens);
    total += n->num_scheduled_tokens;
  }
  for (int32_t i = 0; i < o->num_cached_reqs; i++) {
    const struct sched_cached_req_data *c = &o->cached_reqs[i];
    struct h_worker_req *w = h_wreq(h, c->req_id, false);
    assert_true((int64_t)w->num_blocks * h->cfg.block_size >= c->num_computed_tokens + c->num_scheduled_tokens);
    total += c->num_scheduled_tokens;
  }
  assert_int_equal(total, o->total_num_scheduled_tokens);
  assert_true(total <= h->cfg.max_num_batched_tokens);
  assert_true(o->num_new_reqs + o->num_cached_reqs <= h->cfg.max_num_seqs);
}

/* The one block state and its index agree: a block is free in the kv_manager exactly when no
 * request (or export) of the scheduler references it. Holds right after a kv round trip (every
 * deferred RELEASE went with it). */
static inline void h_check_blocks(const struct harness *h) {
  const struct kv_block_pool *p = kv_manager_pool(h->kv);
  for (int32_t b = 0; b < h->cfg.num_blocks; b++)
    if ((sched_block_ref_cnt(h->s, b) > 0) == kv_block_pool_is_free(p, b))
      fail_msg("block %d: %d references in the scheduler, %s in the kv_manager", b, sched_block_ref_cnt(h->s, b),
               kv_block_pool_is_free(p, b) ? "free" : "in use");
}

/* schedule → (kv round trip) → returns whether the kv_manager was asked. */
static inline bool h_schedule(struct harness *h) {
  if (sched_schedule(h->s, &h->out, &h->step) != LLB_STATUS_OK) fail_msg("sched_schedule: %s", llb_err_last());
  if (kv_step_empty(&h->step)) return false;
  assert_int_equal(kv_manager_apply_step(h->kv, &h->step, &h->res), LLB_STATUS_OK);
  assert_int_equal(sched_apply_kv_result(h->s, &h->res, &h->out), LLB_STATUS_OK);
  assert_int_equal(kv_manager_check(h->kv), LLB_STATUS_OK);
  struct sched_stats st;
  sched_get_stats(h->s, &st);
  assert_int_equal(st.num_free_blocks, h->res.num_free_blocks); /* the check the reply carries */
  assert_int_equal(st.num_kv_protocol_faults, h->kv_faults); /* none but those a test provoked */
  h_check_blocks(h);
  h->kv_trips++;
  return true;
}

/* schedule → kv round trip without the checks (tests that break the kv_manager on purpose). */
static inline bool h_schedule_unchecked_mirror(struct harness *h) {
  assert_int_equal(sched_schedule(h->s, &h->out, &h->step), LLB_STATUS_OK);
  if (kv_step_empty(&h->step)) return false;
  assert_int_equal(kv_manager_apply_step(h->kv, &h->step, &h->res), LLB_STATUS_OK);
  assert_int_equal(sched_apply_kv_result(h->s, &h->res, &h->out), LLB_STATUS_OK);
  struct sched_stats st;
  sched_get_stats(h->s, &st);
  h->kv_faults = st.num_kv_protocol_faults;
  h->kv_trips++;
  return true;
}

/* Executes the scheduled step with the fake worker and applies the output. */
static inline void h_execute(struct harness *h) {
  h_worker_apply(h);
  if (h->out.total_num_scheduled_tokens == 0) return;
  const char *ids[128];
  int32_t num_sampled[128], sampled[128];
  int32_t n = 0;
  for (int pass = 0; pass < 2; pass++) {
    int32_t cnt = pass ? h->out.num_cached_reqs : h->out.num_new_reqs;
    for (int32_t i = 0; i < cnt; i++) {
      const char *id = pass ? h->out.cached_reqs[i].req_id : h->out.new_reqs[i].req_id;
      int32_t done = pass ? h->out.cached_reqs[i].num_computed_tokens + h->out.cached_reqs[i].num_scheduled_tokens
                          : h->out.new_reqs[i].num_computed_tokens + h->out.new_reqs[i].num_scheduled_tokens;
      const struct sched_request *r = sched_find_request(h->s, id);
      assert_non_null(r);
      ids[n] = id;
      num_sampled[n] = done >= r->num_tokens ? 1 : 0; /* partial prefill samples nothing */
      sampled[n] = num_sampled[n] ? h_token(h, id, sched_request_num_output_tokens(r)) : 0;
      n++;
    }
  }
  /* compact the flattened sampled ids */
  int32_t flat[128], k = 0;
  for (int32_t i = 0; i < n; i++)
    if (num_sampled[i]) flat[k++] = sampled[i];
  struct sched_model_output mo = {.step = h->out.step, .num_reqs = n, .req_ids = ids,
                                  .num_sampled = num_sampled, .sampled_token_ids = flat};
  assert_int_equal(sched_update_from_output(h->s, &mo, &h->eo), LLB_STATUS_OK);
}

static inline void h_step(struct harness *h) {
  h_schedule(h);
  h_execute(h);
}

#endif

/* Scheduler: pooling requests (vLLM's embed task) are prefill-only: chunked under the token
 * budget, never sampled, never served from the prefix cache, finished with the vector the
 * worker pooled once their prompt is computed, their blocks freed; they share batches with
 * generation requests (actors/scheduler). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "test_scheduler_harness.h"

#define DIMS 4

static struct sched_config pool_cfg(bool async) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = 256;
  c.num_lookahead_tokens = 0;
  c.max_num_batched_tokens = 16;
  c.async_scheduling = async;
  return c;
}

static void add_req(struct harness *h, const char *id, int32_t n_prompt, enum llb_pooling_type type) {
  int32_t toks[256];
  for (int32_t i = 0; i < n_prompt; i++) toks[i] = 7 + i % 50;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n_prompt,
                                 .eos_token_id = -1, .pooling_params = {type, true, 0}};
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = type == LLB_POOLING_NONE ? 8 : 1;
  sp->ignore_eos = true;
  nr.sampling_params = sp;
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

/* The fake worker's vector for a request: a function of its id only. */
static float vec_value(const char *id, int k) { return (float)(strlen(id) * 10 + (size_t)k) + 0.5f; }

/* What the fake worker saw of each request. */
struct seen {
  int32_t chunks, sampled_steps, pooled_steps, computed_at_first;
};

/* The fake worker for one step: a generation request samples when its range reaches the end
 * of its tokens (as the harness' worker); a pooling request samples nothing and returns its
 * vector on the step that completes its prompt, unless `drop_vectors`. */
static llb_status execute(struct harness *h, struct seen *seen, const char *const *names, int num_names,
                          bool drop_vectors) {
  h_worker_apply(h);
  if (h->out.total_num_scheduled_tokens == 0) return LLB_STATUS_OK;
  const char *ids[64];
  int32_t num_sampled[64], flat[64], num_pooled[64], k = 0;
  float pooled[64 * DIMS];
  int32_t n = 0, np = 0;
  for (int pass = 0; pass < 2; pass++) {
    const int32_t cnt = pass ? h->out.num_cached_reqs : h->out.num_new_reqs;
    for (int32_t i = 0; i < cnt; i++) {
      const char *id = pass ? h->out.cached_reqs[i].req_id : h->out.new_reqs[i].req_id;
      const int32_t computed = pass ? h->out.cached_reqs[i].num_computed_tokens : h->out.new_reqs[i].num_computed_tokens;
      const int32_t done = computed + (pass ? h->out.cached_reqs[i].num_scheduled_tokens
                                            : h->out.new_reqs[i].num_scheduled_tokens);
      const struct sched_request *r = sched_find_request(h->s, id);
      assert_non_null(r);
      struct seen *sn = NULL;
      for (int j = 0; j < num_names; j++)
        if (!strcmp(names[j], id)) sn = &seen[j];
      assert_non_null(sn);
      if (sn->chunks++ == 0) sn->computed_at_first = computed;
      if (!pass) assert_int_equal(h->out.new_reqs[i].pooling_params.pooling_type, r->pooling_params.pooling_type);
      ids[n] = id;
      num_sampled[n] = num_pooled[n] = 0;
      if (!sched_request_is_pooling(r) && done >= r->num_tokens) {
        num_sampled[n] = 1;
        flat[k++] = h_token(h, id, sched_request_num_output_tokens(r));
        sn->sampled_steps++;
      } else if (sched_request_is_pooling(r) && done >= r->num_prompt_tokens && !drop_vectors) {
        for (int d = 0; d < DIMS; d++) pooled[np + d] = vec_value(id, d);
        num_pooled[n] = DIMS;
        np += DIMS;
        sn->pooled_steps++;
      }
      n++;
    }
  }
  struct sched_model_output mo = {.step = h->out.step, .num_reqs = n, .req_ids = ids, .num_sampled = num_sampled,
                                  .sampled_token_ids = flat, .num_pooled = num_pooled, .pooler_output = pooled};
  return sched_update_from_output(h->s, &mo, &h->eo);
}

/* The output of `id` in this step's EngineCoreOutputs, or -1. */
static int32_t output_of(const struct harness *h, const char *id) {
  for (int32_t i = 0; i < h->eo.num_outputs; i++)
    if (!strcmp(sched_engine_outputs_req_id(&h->eo, i), id)) return i;
  return -1;
}

static void assert_finished_with_vector(const struct harness *h, const char *id) {
  const int32_t o = output_of(h, id);
  assert_true(o >= 0);
  assert_int_equal(h->eo.outputs[o].finish_reason, SCHED_FINISH_REASON_STOP);
  assert_int_equal(h->eo.outputs[o].num_new_tokens, 0);
  assert_int_equal(h->eo.outputs[o].num_pooled, DIMS);
  const float *v = sched_engine_outputs_pooled(&h->eo, o);
  assert_non_null(v);
  for (int d = 0; d < DIMS; d++) assert_true(v[d] == vec_value(id, d));
  assert_null(sched_find_request(h->s, id));
}

static void assert_all_blocks_free(struct harness *h) {
  h_schedule(h); /* an idle step flushes the deferred frees */
  struct kv_manager_stats ks;
  kv_manager_get_stats(h->kv, &ks);
  assert_int_equal(ks.num_free_blocks, h->cfg.num_blocks);
  struct sched_stats ss;
  sched_get_stats(h->s, &ss);
  assert_int_equal(ss.num_free_blocks, h->cfg.num_blocks);
}

static void test_pooling_request_is_chunked_never_sampled_and_finishes_with_its_vector(void **state) {
  (void)state;
  struct sched_config c = pool_cfg(false);
  struct harness h;
  h_init(&h, &c);
  const char *names[] = {"emb"};
  struct seen seen[1] = {{0}};
  add_req(&h, "emb", 40, LLB_POOLING_MEAN);
  int steps = 0;
  while (sched_num_unfinished(h.s) > 0 && steps < 10) {
    h_schedule(&h);
    assert_int_equal(execute(&h, seen, names, 1, false), LLB_STATUS_OK);
    steps++;
    if (steps < 3) assert_int_equal(output_of(&h, "emb"), -1); /* nothing until the prompt is done */
  }
  assert_int_equal(steps, 3); /* 16 + 16 + 8 tokens */
  assert_int_equal(seen[0].chunks, 3);
  assert_int_equal(seen[0].sampled_steps, 0);
  assert_int_equal(seen[0].pooled_steps, 1);
  assert_finished_with_vector(&h, "emb");
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_pooling_request_never_takes_prefix_cache_hits(void **state) {
  (void)state;
  struct sched_config c = pool_cfg(false);
  c.max_num_batched_tokens = 64;
  struct harness h;
  h_init(&h, &c);
  const char *names[] = {"gen", "gen2", "emb"};
  struct seen seen[3] = {{0}};
  add_req(&h, "gen", 24, LLB_POOLING_NONE);
  while (sched_num_unfinished(h.s) > 0) {
    h_schedule(&h);
    assert_int_equal(execute(&h, seen, names, 3, false), LLB_STATUS_OK);
  }
  add_req(&h, "gen2", 24, LLB_POOLING_NONE); /* the same prompt hits the cache... */
  h_schedule(&h);
  assert_int_equal(execute(&h, seen, names, 3, false), LLB_STATUS_OK);
  assert_true(seen[1].computed_at_first > 0);
  add_req(&h, "emb", 24, LLB_POOLING_LAST); /* ...a pooling request computes every row */
  while (sched_num_unfinished(h.s) > 0) {
    h_schedule(&h);
    assert_int_equal(execute(&h, seen, names, 3, false), LLB_STATUS_OK);
    if (output_of(&h, "emb") >= 0) assert_finished_with_vector(&h, "emb");
  }
  assert_int_equal(seen[2].computed_at_first, 0);
  assert_int_equal(seen[2].pooled_steps, 1);
  h_fini(&h);
}

static void run_generation(bool with_pooling, bool async, int32_t out_tokens[8]) {
  struct sched_config c = pool_cfg(async);
  struct harness h;
  h_init(&h, &c);
  const char *names[] = {"gen", "e1", "e2"};
  struct seen seen[3] = {{0}};
  add_req(&h, "gen", 10, LLB_POOLING_NONE);
  if (with_pooling) {
    add_req(&h, "e1", 20, LLB_POOLING_LAST);
    add_req(&h, "e2", 7, LLB_POOLING_CLS);
  }
  int32_t got = 0;
  for (int steps = 0; sched_num_unfinished(h.s) > 0 && steps < 40; steps++) {
    h_schedule(&h);
    assert_int_equal(execute(&h, seen, names, 3, false), LLB_STATUS_OK);
    const int32_t o = output_of(&h, "gen");
    if (o >= 0)
      for (int32_t t = 0; t < h.eo.outputs[o].num_new_tokens; t++) out_tokens[got++] = sched_engine_outputs_tokens(&h.eo, o)[t];
    if (output_of(&h, "e1") >= 0) assert_finished_with_vector(&h, "e1");
    if (output_of(&h, "e2") >= 0) assert_finished_with_vector(&h, "e2");
  }
  assert_int_equal(sched_num_unfinished(h.s), 0);
  assert_int_equal(got, 8);
  if (with_pooling) {
    assert_int_equal(seen[1].pooled_steps, 1);
    assert_int_equal(seen[2].pooled_steps, 1);
    assert_int_equal(seen[1].sampled_steps + seen[2].sampled_steps, 0);
  }
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_generation_sharing_batches_with_pooling_is_unchanged(void **state) {
  (void)state;
  for (int async = 0; async < 2; async++) {
    int32_t alone[8], shared[8];
    run_generation(false, async, alone);
    run_generation(true, async, shared);
    assert_memory_equal(alone, shared, sizeof alone);
  }
}

static void test_async_pooling_request_gets_no_step_after_its_last_chunk(void **state) {
  (void)state;
  struct sched_config c = pool_cfg(true);
  struct harness h;
  h_init(&h, &c);
  add_req(&h, "emb", 12, LLB_POOLING_MEAN); /* one chunk */
  h_schedule(&h);
  assert_int_equal(h.out.total_num_scheduled_tokens, 12);
  h_schedule(&h); /* step 2 planned while step 1 is in flight: nothing to compute */
  assert_int_equal(h.out.total_num_scheduled_tokens, 0);
  h_fini(&h);
}

static void test_missing_vector_from_the_worker_is_an_error(void **state) {
  (void)state;
  struct sched_config c = pool_cfg(false);
  struct harness h;
  h_init(&h, &c);
  const char *names[] = {"emb"};
  struct seen seen[1] = {{0}};
  add_req(&h, "emb", 8, LLB_POOLING_LAST);
  h_schedule(&h);
  assert_int_not_equal(execute(&h, seen, names, 1, true), LLB_STATUS_OK);
  h_fini(&h);
}

static void test_bad_pooling_params_are_refused_at_admission(void **state) {
  (void)state;
  struct sched_config c = pool_cfg(false);
  struct harness h;
  h_init(&h, &c);
  int32_t toks[4] = {1, 2, 3, 4};
  struct sched_new_request nr = {.request_id = "bad", .prompt_token_ids = toks, .num_prompt_tokens = 4,
                                 .eos_token_id = -1, .pooling_params = {(enum llb_pooling_type)9, true, 0}};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_INVALID_ARGUMENT);
  nr.pooling_params = (struct llb_pooling_params){LLB_POOLING_LAST, true, -3};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_INVALID_ARGUMENT);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pooling_request_is_chunked_never_sampled_and_finishes_with_its_vector),
      cmocka_unit_test(test_pooling_request_never_takes_prefix_cache_hits),
      cmocka_unit_test(test_generation_sharing_batches_with_pooling_is_unchanged),
      cmocka_unit_test(test_async_pooling_request_gets_no_step_after_its_last_chunk),
      cmocka_unit_test(test_missing_vector_from_the_worker_is_an_error),
      cmocka_unit_test(test_bad_pooling_params_are_refused_at_admission),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

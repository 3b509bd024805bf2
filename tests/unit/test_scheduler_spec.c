/* Speculative decoding in the scheduler (actors/scheduler/sched_spec.c; vLLM v1
 * scheduler.py spec_token_ids / scheduled_spec_decode_tokens / num_rejected): a fake worker
 * verifies the scheduled drafts against the harness's deterministic "target" tokens (accepts
 * while equal, then returns its own token) and proposes drafts that are right for a while and
 * then wrong. The outputs must be the target's tokens exactly, as without drafts; the KV slots
 * must cover every draft; rejected drafts must be rolled back; blocks must all come back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_scheduler_harness.h"

#define K 4
#define MAX_OUT 128

struct spec_run {
  int32_t toks[8][MAX_OUT], ntoks[8];
  bool finished[8];
  enum sched_finish_reason reason[8];
  int32_t steps, max_drafts_seen;
  int32_t wrong_every; /* draft j of a proposal is wrong when (pos + j) % wrong_every == wrong_every - 1 */
};

static int idx(const char *id) { return atoi(id + 1); }

/* The worker's drafts for r's next step: the target's next tokens, some made wrong. */
static int32_t propose(const struct harness *h, const struct spec_run *sr, const char *id, int32_t next_pos,
                       int32_t *out) {
  for (int32_t j = 0; j < K; j++) {
    int32_t t = h_token(h, id, next_pos + j);
    out[j] = sr->wrong_every > 0 && (next_pos + j) % sr->wrong_every == sr->wrong_every - 1 ? t + 1 : t;
  }
  return K;
}

/* One step: schedule, check the drafts' slots, verify them like the worker, apply. */
static void spec_step(struct harness *h, struct spec_run *sr) {
  h_schedule(h);
  h_worker_apply(h); /* blocks cover computed + scheduled (drafts included), budget respected */
  if (h->out.total_num_scheduled_tokens == 0) return;
  const char *ids[16];
  int32_t num_sampled[16], flat[16 * (K + 1)], nspec[16], spec[16 * K];
  int32_t n = 0, f = 0, sf = 0;
  for (int pass = 0; pass < 2; pass++) {
    int32_t cnt = pass ? h->out.num_cached_reqs : h->out.num_new_reqs;
    for (int32_t i = 0; i < cnt; i++) {
      const char *id = pass ? h->out.cached_reqs[i].req_id : h->out.new_reqs[i].req_id;
      const int32_t computed = pass ? h->out.cached_reqs[i].num_computed_tokens : h->out.new_reqs[i].num_computed_tokens;
      const int32_t sched = pass ? h->out.cached_reqs[i].num_scheduled_tokens : h->out.new_reqs[i].num_scheduled_tokens;
      const int32_t d = pass ? h->out.cached_reqs[i].num_spec_tokens : 0;
      const int32_t *drafts = pass ? h->out.cached_reqs[i].spec_token_ids : NULL;
      const struct sched_request *r = sched_find_request(h->s, id);
      assert_non_null(r);
      if (d > 0) { /* drafts are the last scheduled tokens, right after the known ones */
        assert_int_equal(computed + sched, r->num_tokens + d);
        assert_true(d <= K);
        if (d > sr->max_drafts_seen) sr->max_drafts_seen = d;
      }
      ids[n] = id;
      num_sampled[n] = 0;
      nspec[n] = 0;
      if (computed + sched >= r->num_tokens) {
        int32_t pos = sched_request_num_output_tokens(r);
        for (int32_t j = 0; j <= d; j++) { /* accept while the draft is the target's token */
          int32_t t = h_token(h, id, pos + j);
          flat[f++] = t;
          num_sampled[n]++;
          if (j < d && drafts[j] != t) break;
        }
        nspec[n] = propose(h, sr, id, pos + num_sampled[n], spec + sf);
        sf += nspec[n];
      }
      n++;
    }
  }
  struct sched_model_output mo = {.step = h->out.step, .num_reqs = n, .req_ids = ids, .num_sampled = num_sampled,
                                  .sampled_token_ids = flat, .num_spec_tokens = nspec, .spec_token_ids = spec};
  assert_int_equal(sched_update_from_output(h->s, &mo, &h->eo), LLB_STATUS_OK);
  sr->steps++;
  for (int32_t i = 0; i < h->eo.num_outputs; i++) {
    int k = idx(sched_engine_outputs_req_id(&h->eo, i));
    const struct sched_engine_output *e = &h->eo.outputs[i];
    assert_false(sr->finished[k]);
    assert_int_equal(e->first_output_pos, sr->ntoks[k]);
    const int32_t *t = sched_engine_outputs_tokens(&h->eo, i);
    for (int32_t j = 0; j < e->num_new_tokens; j++) sr->toks[k][sr->ntoks[k]++] = t[j];
    if (e->finish_reason != SCHED_FINISH_REASON_NONE) sr->finished[k] = true, sr->reason[k] = e->finish_reason;
  }
  /* rolled back: a running request that sampled has every token but the last computed */
  for (int32_t i = 0; i < n; i++) {
    const struct sched_request *r = sched_find_request(h->s, ids[i]);
    if (r && num_sampled[i] > 0) assert_int_equal(r->num_computed_tokens, r->num_tokens - 1);
  }
}

static void assert_all_blocks_free(struct harness *h) {
  h_schedule(h);
  assert_int_equal(h->out.total_num_scheduled_tokens, 0);
  struct kv_manager_stats ks;
  kv_manager_get_stats(h->kv, &ks);
  assert_int_equal(ks.num_free_blocks, h->cfg.num_blocks);
  for (int32_t b = 0; b < h->cfg.num_blocks; b++) assert_int_equal(sched_block_ref_cnt(h->s, b), 0);
}

static void config(struct sched_config *c) {
  sched_config_init(c);
  c->num_blocks = 64;
  c->block_size = 4;
  c->num_lookahead_tokens = 0; /* drafts must get their slots without help */
  c->async_scheduling = false;
  c->num_speculative_tokens = K;
}

static void run(struct harness *h, struct spec_run *sr) {
  for (int s = 0; s < 400 && sched_num_unfinished(h->s) > 0; s++) spec_step(h, sr);
  assert_int_equal(sched_num_unfinished(h->s), 0);
}

static void test_outputs_equal_the_targets_tokens_with_partly_wrong_drafts(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  struct spec_run sr = {.wrong_every = 3};
  h_add(&h, "r0", 9, 40, 0, 1.0);
  h_add(&h, "r1", 5, 33, 0, 2.0);
  run(&h, &sr);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(sr.ntoks[k], k == 0 ? 40 : 33); /* max_tokens exact, never past it */
    assert_int_equal(sr.reason[k], SCHED_FINISH_REASON_LENGTH);
    char id[16];
    snprintf(id, sizeof id, "r%d", k);
    for (int32_t j = 0; j < sr.ntoks[k]; j++) assert_int_equal(sr.toks[k][j], h_token(&h, id, j));
  }
  assert_int_equal(sr.max_drafts_seen, K);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_true(st.spec_num_drafts > 0);
  assert_true(st.spec_num_accepted_tokens > 0);
  assert_true(st.spec_num_accepted_tokens < st.spec_num_draft_tokens); /* some were rejected */
  assert_int_equal(st.num_generation_tokens, 73);
  /* fewer steps than tokens: accepted drafts land several tokens per step */
  assert_true(sr.steps < 73 / 2 + 4);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_all_correct_drafts_give_k_plus_one_tokens_per_step(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  struct spec_run sr = {.wrong_every = 0};
  h_add(&h, "r0", 6, 51, 0, 1.0);
  run(&h, &sr);
  assert_int_equal(sr.ntoks[0], 51);
  for (int32_t j = 0; j < 51; j++) assert_int_equal(sr.toks[0][j], h_token(&h, "r0", j));
  /* 1 prefill step (1 token), then 5 tokens a step (the last step trimmed to max_tokens) */
  assert_int_equal(sr.steps, 1 + (50 + K) / (K + 1));
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_eos_inside_accepted_drafts_stops_there(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  h.eos = 2; /* the target emits EOS at output position 7, inside a run of accepted drafts */
  h.eos_at = 7;
  struct spec_run sr = {.wrong_every = 0};
  h_add(&h, "r0", 6, 60, 0, 1.0);
  run(&h, &sr);
  assert_int_equal(sr.ntoks[0], 8);
  assert_int_equal(sr.toks[0][7], 2);
  assert_int_equal(sr.reason[0], SCHED_FINISH_REASON_STOP);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_drafts_count_against_the_token_budget(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.max_num_batched_tokens = 6; /* 2 decodes + their drafts do not fit: drafts are trimmed */
  struct harness h;
  h_init(&h, &c);
  struct spec_run sr = {.wrong_every = 0};
  h_add(&h, "r0", 3, 30, 0, 1.0);
  h_add(&h, "r1", 3, 30, 0, 2.0);
  run(&h, &sr); /* h_worker_apply asserts total <= max_num_batched_tokens every step */
  for (int k = 0; k < 2; k++) {
    char id[16];
    snprintf(id, sizeof id, "r%d", k);
    assert_int_equal(sr.ntoks[k], 30);
    for (int32_t j = 0; j < 30; j++) assert_int_equal(sr.toks[k][j], h_token(&h, id, j));
  }
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_preemption_and_chunked_prefill_with_drafts_keep_the_tokens(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.num_blocks = 12;             /* two requests of 10 + 30 tokens need 20 blocks: preemption */
  c.max_num_batched_tokens = 7;  /* 10-token prompts are chunked */
  struct harness h;
  h_init(&h, &c);
  struct spec_run sr = {.wrong_every = 4};
  h_add(&h, "r0", 10, 30, 0, 1.0);
  h_add(&h, "r1", 10, 30, 0, 2.0);
  run(&h, &sr);
  for (int k = 0; k < 2; k++) {
    char id[16];
    snprintf(id, sizeof id, "r%d", k);
    assert_int_equal(sr.ntoks[k], 30);
    for (int32_t j = 0; j < 30; j++) assert_int_equal(sr.toks[k][j], h_token(&h, id, j));
  }
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_true(st.num_preemptions > 0);
  assert_true(st.spec_num_accepted_tokens > 0);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_forged_drafts_are_dropped_and_too_many_tokens_fail_the_step(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.vocab_size = 1000;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 3, 30, 0, 1.0);
  h_schedule(&h);
  const char *ids[1] = {"r0"};
  int32_t one = 1, tok = h_token(&h, "r0", 0), nspec = 2, forged[2] = {5, 1000}; /* 1000: outside the vocab */
  struct sched_model_output mo = {.step = h.out.step, .num_reqs = 1, .req_ids = ids, .num_sampled = &one,
                                  .sampled_token_ids = &tok, .num_spec_tokens = &nspec, .spec_token_ids = forged};
  assert_int_equal(sched_update_from_output(h.s, &mo, &h.eo), LLB_STATUS_OK);
  assert_int_equal(sched_find_request(h.s, "r0")->num_spec_tokens, 0);
  h_schedule(&h); /* a plain decode: no drafts */
  assert_int_equal(h.out.cached_reqs[0].num_spec_tokens, 0);
  assert_int_equal(h.out.cached_reqs[0].num_scheduled_tokens, 1);
  int32_t two = 2, toks[2] = {h_token(&h, "r0", 1), h_token(&h, "r0", 2)};
  mo = (struct sched_model_output){.step = h.out.step, .num_reqs = 1, .req_ids = ids, .num_sampled = &two,
                                   .sampled_token_ids = toks};
  assert_int_equal(sched_update_from_output(h.s, &mo, &h.eo), LLB_STATUS_INVALID_ARGUMENT);
  sched_preempt_all(h.s);
  h_fini(&h);
}

static void test_async_scheduling_with_drafts_is_refused(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.async_scheduling = true;
  struct scheduler *s = NULL;
  assert_int_equal(sched_create(&c, &s), LLB_STATUS_INVALID_ARGUMENT);
  c.async_scheduling = false;
  c.num_speculative_tokens = LLB_MAX_SPEC_TOKENS + 1;
  assert_int_equal(sched_create(&c, &s), LLB_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_outputs_equal_the_targets_tokens_with_partly_wrong_drafts),
      cmocka_unit_test(test_all_correct_drafts_give_k_plus_one_tokens_per_step),
      cmocka_unit_test(test_eos_inside_accepted_drafts_stops_there),
      cmocka_unit_test(test_drafts_count_against_the_token_budget),
      cmocka_unit_test(test_preemption_and_chunked_prefill_with_drafts_keep_the_tokens),
      cmocka_unit_test(test_forged_drafts_are_dropped_and_too_many_tokens_fail_the_step),
      cmocka_unit_test(test_async_scheduling_with_drafts_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

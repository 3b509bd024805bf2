/* The block state has one owner, the scheduler (docs/design.md §4): each request's block table
 * and each block's reference count live there, and the kv_manager is only the prefix index it
 * drives by block id. What a user depends on: a restarted kv_manager learns every held block
 * from the resync and never hands one to a second request; preemption releases exactly the
 * blocks no one else shares; a kv_manager answer that would give a held block is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/test_scheduler_harness.h"

static struct sched_config config(int32_t num_blocks) {
  struct sched_config c;
  sched_config_init(&c);
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.max_model_len = 128;
  c.num_lookahead_tokens = 0;
  c.async_scheduling = false;
  return c;
}

/* A request whose prompt is base, base+1, ... (distinct bases share no prefix). */
static void add_tokens(struct harness *h, const char *id, int32_t base, int32_t n, int32_t max_tokens) {
  int32_t toks[64];
  for (int32_t i = 0; i < n; i++) toks[i] = base + i;
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = max_tokens;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n,
                                 .eos_token_id = 2, .sampling_params = sp};
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

static void restart_kv_manager(struct harness *h) {
  kv_manager_destroy(h->kv);
  struct kv_manager_config kc = {.num_blocks = h->cfg.num_blocks, .block_size = h->cfg.block_size,
                                 .enable_prefix_caching = h->cfg.enable_prefix_caching};
  assert_int_equal(kv_manager_create(&kc, &h->kv), LLB_STATUS_OK);
}

static void run_to_end(struct harness *h) {
  for (int i = 0; i < 200 && sched_num_unfinished(h->s) > 0; i++) h_step(h);
  assert_int_equal(sched_num_unfinished(h->s), 0);
  h_schedule(h); /* the idle step sends the last RELEASE */
  struct sched_stats st;
  sched_get_stats(h->s, &st);
  assert_int_equal(st.num_free_blocks, h->cfg.num_blocks);
  assert_int_equal(kv_block_pool_num_free(kv_manager_pool(h->kv)), h->cfg.num_blocks);
}

/* a and b share their first two blocks (b's prefix hit); the kv_manager restarts empty while
 * both run. The scheduler's resync lists every block they hold (the shared ones once), the new
 * kv_manager takes them out of its free queue, and c, which needs most of the pool, gets only
 * the others; a and b decode on in the blocks they had, and everything is free at the end. */
static void a_restarted_kv_manager_gets_every_held_block_back_by_resync(void **state) {
  (void)state;
  struct sched_config c = config(12);
  struct harness h;
  h_init(&h, &c);
  add_tokens(&h, "a", 100, 12, 12);
  h_step(&h);
  add_tokens(&h, "b", 100, 12, 12);
  h_step(&h);
  const struct sched_request *a = sched_find_request(h.s, "a"), *b = sched_find_request(h.s, "b");
  assert_int_equal(b->num_cached_tokens, 8); /* two blocks of a's */
  assert_int_equal(b->block_ids[0], a->block_ids[0]);
  assert_int_equal(sched_block_ref_cnt(h.s, a->block_ids[0]), 2);
  bool held[12] = {false};
  int32_t num_held = 0;
  for (int32_t id = 0; id < c.num_blocks; id++)
    if ((held[id] = sched_block_ref_cnt(h.s, id) > 0)) num_held++;
  assert_int_equal(num_held, 5); /* a: 4, b: 2 shared + 1 of its own */

  restart_kv_manager(&h);
  sched_kv_resync(h.s); /* what the actor does when it sees the new kv_manager */
  add_tokens(&h, "c", 500, 20, 2); /* 5 of the 7 free blocks (b takes one more) */
  assert_true(h_schedule(&h));
  assert_true(h.step.resync);
  assert_int_equal(h.step.num_held_block_ids, num_held);
  for (int32_t k = 0; k < h.step.num_held_block_ids; k++) assert_true(held[h.step.held_block_ids[k]]);
  const struct sched_request *cr = sched_find_request(h.s, "c");
  assert_int_equal(cr->num_block_ids, 5);
  for (int32_t k = 0; k < cr->num_block_ids; k++) assert_false(held[cr->block_ids[k]]);
  h_execute(&h);
  run_to_end(&h);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_preemptions, 0);
  assert_int_equal(st.num_kv_protocol_faults, 0);
  h_fini(&h);
}

/* a and b share a's first two blocks; the pool runs out while both decode and b (the last
 * admitted) is preempted: the step's RELEASE names exactly b's own blocks, tail first, and
 * the shared ones stay held by a, in use in the kv_manager. */
static void preemption_with_shared_prefix_blocks_releases_exactly_the_unshared_ones(void **state) {
  (void)state;
  struct sched_config c = config(9);
  struct harness h;
  h_init(&h, &c);
  add_tokens(&h, "a", 100, 12, 20); /* 8 blocks at its end, b as many: they cannot both fit */
  h_step(&h);
  add_tokens(&h, "b", 100, 12, 20);
  h_step(&h);
  int32_t b_ids[32], b_refs[32], n_b = 0;
  for (int i = 0; i < 100; i++) {
    const struct sched_request *b = sched_find_request(h.s, "b");
    n_b = b->num_block_ids;
    for (int32_t k = 0; k < n_b; k++) {
      b_ids[k] = b->block_ids[k];
      b_refs[k] = sched_block_ref_cnt(h.s, b_ids[k]);
    }
    h_schedule(&h);
    if (b->status == SCHED_REQUEST_STATUS_PREEMPTED) break;
    h_execute(&h);
  }
  assert_int_equal(sched_find_request(h.s, "b")->status, SCHED_REQUEST_STATUS_PREEMPTED);
  int32_t want[32], n_want = 0, n_shared = 0;
  for (int32_t k = n_b - 1; k >= 0; k--) {
    if (b_refs[k] == 1) want[n_want++] = b_ids[k];
    else {
      n_shared++;
      assert_int_equal(sched_block_ref_cnt(h.s, b_ids[k]), 1); /* a's now */
    }
  }
  assert_int_equal(n_shared, 2);
  assert_true(n_want >= 1);
  /* the RELEASE goes with the next kv step (this one, or a later one if this step allocates nothing) */
  const struct kv_op *rel = NULL;
  for (int i = 0; i < 20 && !rel; i++) {
    for (int32_t k = 0; k < h.step.num_ops; k++)
      if (h.step.ops[k].kind == KV_OP_KIND_RELEASE) rel = &h.step.ops[k];
    if (rel) break;
    h_execute(&h);
    h_schedule(&h);
  }
  assert_non_null(rel);
  assert_int_equal(rel->num_block_ids, n_want);
  const int32_t *ids = kv_step_op_block_ids(&h.step, rel);
  for (int32_t k = 0; k < n_want; k++) assert_int_equal(ids[k], want[k]);
  for (int32_t k = 0; k < n_b; k++) /* after it: the shared ones still in use there (a's) */
    if (b_refs[k] > 1) assert_false(kv_block_pool_is_free(kv_manager_pool(h.kv), b_ids[k]));
  h_execute(&h);
  run_to_end(&h);
  h_fini(&h);
}

/* A kv_manager that lost track answers an ALLOCATE with a block a running request holds: the
 * scheduler takes none of the answer, keeps the request waiting, counts a protocol fault, and
 * the next kv step resyncs; nothing is shared by accident. */
static void an_allocation_giving_a_held_block_is_refused_and_resyncs(void **state) {
  (void)state;
  struct sched_config c = config(16);
  struct harness h;
  h_init(&h, &c);
  add_tokens(&h, "a", 100, 8, 8);
  h_step(&h);
  const int32_t a_block = sched_find_request(h.s, "a")->block_ids[0];
  add_tokens(&h, "b", 300, 8, 8);
  assert_int_equal(sched_schedule(h.s, &h.out, &h.step), LLB_STATUS_OK);
  assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_OK);
  for (int32_t i = 0; i < h.res.num_results; i++) { /* the forged answer: b's first block is a's */
    const struct kv_op_result *r = &h.res.results[i];
    if (h.step.ops[i].kind == KV_OP_KIND_ALLOCATE && strcmp(h.step.ops[i].req_id, "b") == 0)
      h.res.block_ids[r->block_offset] = a_block;
  }
  assert_int_equal(sched_apply_kv_result(h.s, &h.res, &h.out), LLB_STATUS_OK);
  assert_int_equal(sched_find_request(h.s, "b")->num_block_ids, 0);
  assert_int_equal(sched_find_request(h.s, "b")->status, SCHED_REQUEST_STATUS_WAITING);
  assert_int_equal(sched_block_ref_cnt(h.s, a_block), 1);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_kv_protocol_faults, 2); /* the forged id; the free count (b's real blocks) */
  h_execute(&h);
  assert_true(h_schedule_unchecked_mirror(&h));
  assert_true(h.step.resync);
  h_check_blocks(&h);
  h_execute(&h);
  run_to_end(&h);
  h_fini(&h);
}

/* A kv_manager that never had a resync (it started after the scheduler) refuses a step as
 * STATE_LOST and changes nothing; a step number that goes back is refused the same way. */
static void a_kv_manager_refuses_steps_until_it_is_told_the_held_blocks(void **state) {
  (void)state;
  struct sched_config c = config(8);
  struct harness h;
  h_init(&h, &c);
  add_tokens(&h, "a", 100, 8, 8);
  h_step(&h);
  restart_kv_manager(&h);
  add_tokens(&h, "b", 300, 8, 8);
  assert_int_equal(sched_schedule(h.s, &h.out, &h.step), LLB_STATUS_OK);
  assert_false(h.step.resync);
  assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_STATE_LOST);
  assert_int_equal(kv_block_pool_num_free(kv_manager_pool(h.kv)), c.num_blocks);
  /* the recovery of a failed KV round trip (sched_step_failed) asks for the resync by itself:
   * the step in flight may have changed anything there */
  assert_int_equal(sched_step_failed(h.s, "", false, &h.eo), LLB_STATUS_OK);
  assert_true(h_schedule(&h));
  assert_true(h.step.resync);
  h_execute(&h);
  struct kv_step stale;
  kv_step_init(&stale);
  kv_step_clear(&stale, 1); /* below the last step */
  assert_int_equal(kv_manager_apply_step(h.kv, &stale, &h.res), LLB_STATUS_STATE_LOST);
  kv_step_free(&stale);
  run_to_end(&h);
  h_fini(&h);
}

/* A resync lists every held block in one KVStep, which must fit the bus' max_payload (the
 * actor gives it 7/8: 229,376 block ids at NATS' default 1 MiB). Over max_resync_blocks held,
 * only as many running requests as needed are preempted, the latest first (c), so that the
 * resync fits; the others decode on in the blocks they hold, and c is recomputed after. Before,
 * the resync listed them all, its round trip failed (over max_payload) and every running
 * request was preempted. */
static void a_resync_over_its_limit_preempts_only_what_it_must(void **state) {
  (void)state;
  struct sched_config c = config(32);
  c.max_resync_blocks = 6;
  struct harness h;
  h_init(&h, &c);
  add_tokens(&h, "a", 100, 12, 6); /* 3 blocks each */
  add_tokens(&h, "b", 300, 12, 6);
  add_tokens(&h, "c", 500, 12, 6);
  h_step(&h);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(c.num_blocks - st.num_free_blocks, 9);
  restart_kv_manager(&h);
  sched_kv_resync(h.s);
  assert_true(h_schedule(&h));
  assert_true(h.step.resync);
  assert_int_equal(h.step.num_held_block_ids, 6); /* a's and b's */
  assert_int_equal(sched_find_request(h.s, "c")->status, SCHED_REQUEST_STATUS_PREEMPTED);
  assert_int_equal(sched_find_request(h.s, "a")->status, SCHED_REQUEST_STATUS_RUNNING);
  assert_int_equal(sched_find_request(h.s, "b")->status, SCHED_REQUEST_STATUS_RUNNING);
  h_execute(&h);
  run_to_end(&h);
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_preemptions, 1);
  assert_int_equal(st.num_kv_protocol_faults, 0);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_restarted_kv_manager_gets_every_held_block_back_by_resync),
      cmocka_unit_test(preemption_with_shared_prefix_blocks_releases_exactly_the_unshared_ones),
      cmocka_unit_test(an_allocation_giving_a_held_block_is_refused_and_resyncs),
      cmocka_unit_test(a_kv_manager_refuses_steps_until_it_is_told_the_held_blocks),
      cmocka_unit_test(a_resync_over_its_limit_preempts_only_what_it_must),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

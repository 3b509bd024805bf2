/* Encoder-cache accounting (schemas/encoder_ops.h, vLLM v1 EncoderCacheManager semantics)
 * and the encoder_cache actor's step application (actors/encoder_cache/encoder_cache.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/encoder_cache/encoder_cache.h"
#include "schemas/encoder_ops.h"

static struct encoder_cache *make(int32_t size) {
  struct encoder_cache *ec = NULL;
  assert_int_equal(encoder_cache_create(size, &ec), LLB_STATUS_OK);
  return ec;
}

static bool check(struct encoder_cache *ec, const char *req, const char *h) {
  bool hit = false;
  assert_int_equal(encoder_cache_check_and_update(ec, req, h, &hit), LLB_STATUS_OK);
  return hit;
}

static void test_miss_then_allocate_then_hit_takes_a_reference(void **state) {
  (void)state;
  struct encoder_cache *ec = make(100);
  assert_false(check(ec, "r1", "A"));
  assert_true(encoder_cache_can_allocate(ec, 40, 100, 0));
  assert_int_equal(encoder_cache_allocate(ec, "r1", "A", 40), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_num_free_slots(ec), 60);
  assert_int_equal(encoder_cache_num_freeable_slots(ec), 60);
  assert_true(check(ec, "r2", "A"));
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 2);
  assert_true(check(ec, "r2", "A")); /* a set: the same request counts once */
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 2);
  assert_int_equal(encoder_cache_num_free_slots(ec), 60); /* a hit costs no room */
  assert_int_not_equal(encoder_cache_allocate(ec, "r3", "A", 40), LLB_STATUS_OK); /* already cached */
  encoder_cache_destroy(ec);
}

static void test_free_makes_entries_freeable_not_freed(void **state) {
  (void)state;
  struct encoder_cache *ec = make(100);
  assert_int_equal(encoder_cache_allocate(ec, "r1", "A", 30), LLB_STATUS_OK);
  assert_true(check(ec, "r2", "A"));
  encoder_cache_free_request(ec, "r1");
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 1);
  assert_int_equal(encoder_cache_num_freeable_slots(ec), 70);
  encoder_cache_free_request(ec, "r2");
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 0);  /* freeable, still cached */
  assert_int_equal(encoder_cache_num_free_slots(ec), 70);
  assert_int_equal(encoder_cache_num_freeable_slots(ec), 100);
  assert_int_equal(encoder_cache_num_freed(ec), 0);
  /* a hit on a freeable entry references it again: no longer reclaimable */
  assert_true(check(ec, "r3", "A"));
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 1);
  assert_int_equal(encoder_cache_num_freeable_slots(ec), 70);
  encoder_cache_free_request(ec, "unknown"); /* ignored */
  encoder_cache_destroy(ec);
}

static void test_can_allocate_evicts_oldest_freeable_only_as_needed(void **state) {
  (void)state;
  struct encoder_cache *ec = make(100);
  assert_int_equal(encoder_cache_allocate(ec, "r1", "A", 30), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_allocate(ec, "r2", "B", 30), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_allocate(ec, "r3", "C", 30), LLB_STATUS_OK);
  encoder_cache_free_request(ec, "r2"); /* B freeable first */
  encoder_cache_free_request(ec, "r1"); /* then A */
  assert_int_equal(encoder_cache_num_free_slots(ec), 10);
  /* 35 rows: one eviction (B, the oldest freeable) is enough */
  assert_true(encoder_cache_can_allocate(ec, 35, 100, 0));
  assert_int_equal(encoder_cache_num_freed(ec), 1);
  assert_string_equal(encoder_cache_freed(ec, 0), "B");
  assert_int_equal(encoder_cache_num_refs(ec, "B"), -1);
  assert_int_equal(encoder_cache_num_refs(ec, "A"), 0);
  assert_int_equal(encoder_cache_num_free_slots(ec), 40);
  assert_int_equal(encoder_cache_allocate(ec, "r4", "D", 35), LLB_STATUS_OK);
  /* C is referenced: 70 rows cannot be reached (free 5 + freeable A 30) */
  assert_false(encoder_cache_can_allocate(ec, 70, 100, 0));
  assert_int_equal(encoder_cache_num_freed(ec), 1); /* nothing evicted by a refusal */
  encoder_cache_clear_freed(ec);
  assert_int_equal(encoder_cache_num_freed(ec), 0);
  encoder_cache_destroy(ec);
}

static void test_can_allocate_respects_the_compute_budget_and_scheduled_rows(void **state) {
  (void)state;
  struct encoder_cache *ec = make(100);
  assert_false(encoder_cache_can_allocate(ec, 50, 49, 0));  /* over the step's budget */
  assert_true(encoder_cache_can_allocate(ec, 50, 50, 0));
  assert_false(encoder_cache_can_allocate(ec, 50, 100, 60)); /* 60 rows already planned */
  assert_true(encoder_cache_can_allocate(ec, 40, 100, 60));
  encoder_cache_destroy(ec);
}

static void test_evict_all_lists_every_hash(void **state) {
  (void)state;
  struct encoder_cache *ec = make(100);
  assert_int_equal(encoder_cache_allocate(ec, "r1", "A", 10), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_allocate(ec, "r2", "B", 20), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_evict_all(ec), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_num_freed(ec), 2);
  assert_int_equal(encoder_cache_num_entries(ec), 0);
  assert_int_equal(encoder_cache_num_free_slots(ec), 100);
  encoder_cache_destroy(ec);
}

static void test_apply_step_answers_each_op_and_lists_evictions(void **state) {
  (void)state;
  struct encoder_cache *ec = make(50);
  struct ecache_result res = {0};
  struct ecache_stats stats = {0};
  struct llb_encoder_step_result w;
  struct llb_encoder_op ops1[] = {
      {LLB_ENCODER_OP_KIND_CHECK_AND_UPDATE, llb_str_c("r1"), llb_str_c("A"), 0, 40, 0, 0},
      {LLB_ENCODER_OP_KIND_CAN_ALLOCATE, llb_str_c("r1"), llb_str_c("A"), 0, 40, 64, 0},
      {LLB_ENCODER_OP_KIND_ALLOCATE, llb_str_c("r1"), llb_str_c("A"), 0, 40, 0, 0},
      {LLB_ENCODER_OP_KIND_CHECK_AND_UPDATE, llb_str_c("r2"), llb_str_c("A"), 0, 40, 0, 0},
      {LLB_ENCODER_OP_KIND_ALLOCATE, llb_str_c("r2"), llb_str_c("B"), 1, 40, 0, 0}, /* no room */
  };
  struct llb_encoder_step s1 = {.version = 1, .step = 1, .ops = ops1, .num_ops = 5};
  assert_int_equal(ecache_apply(ec, &s1, &res, &stats, &w), LLB_STATUS_OK);
  bool want1[] = {false, true, true, true, false};
  assert_int_equal(w.num_results, 5);
  assert_memory_equal(w.results, want1, sizeof want1);
  assert_int_equal(w.num_free_slots, 10);
  assert_int_equal(stats.num_queries, 2);
  assert_int_equal(stats.num_hits, 1);
  assert_int_equal(stats.num_allocated, 1);
  struct llb_encoder_op ops2[] = {
      {.kind = LLB_ENCODER_OP_KIND_FREE_REQUEST, .req_id = llb_str_c("r1")},
      {.kind = LLB_ENCODER_OP_KIND_FREE_REQUEST, .req_id = llb_str_c("r2")},
      {LLB_ENCODER_OP_KIND_CAN_ALLOCATE, llb_str_c("r3"), llb_str_c("C"), 0, 45, 64, 0},
      {LLB_ENCODER_OP_KIND_ALLOCATE, llb_str_c("r3"), llb_str_c("C"), 0, 45, 0, 0},
  };
  struct llb_encoder_step s2 = {.version = 1, .step = 2, .ops = ops2, .num_ops = 4};
  assert_int_equal(ecache_apply(ec, &s2, &res, &stats, &w), LLB_STATUS_OK);
  assert_true(w.results[2] && w.results[3]);
  assert_int_equal(w.num_freed_mm_hashes, 1);
  assert_string_equal(w.freed_mm_hashes[0].data, "A");
  assert_int_equal(w.num_free_slots, 5);
  struct llb_encoder_step s3 = {.version = 1, .step = 3, .reset = true};
  assert_int_equal(ecache_apply(ec, &s3, &res, &stats, &w), LLB_STATUS_OK);
  assert_int_equal(w.num_free_slots, 50);
  assert_int_equal(stats.num_resets, 1);
  ecache_result_free(&res);
  encoder_cache_destroy(ec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_miss_then_allocate_then_hit_takes_a_reference),
      cmocka_unit_test(test_free_makes_entries_freeable_not_freed),
      cmocka_unit_test(test_can_allocate_evicts_oldest_freeable_only_as_needed),
      cmocka_unit_test(test_can_allocate_respects_the_compute_budget_and_scheduled_rows),
      cmocka_unit_test(test_evict_all_lists_every_hash),
      cmocka_unit_test(test_apply_step_answers_each_op_and_lists_evictions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

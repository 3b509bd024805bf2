/* Block pool: FreeKVCacheBlockQueue order and O(1) operations, ref counts, lazy eviction
 * of cached blocks (actors/kv_manager/kv_block_pool.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <time.h>

#include "actors/kv_manager/kv_block_pool.h"

static void assert_queue(const struct kv_block_pool *p, const int32_t *want, int32_t n) {
  int32_t got[64];
  assert_int_equal(kv_block_pool_free_queue_ids(p, got, 64), n);
  for (int32_t i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
}

static void test_new_pool_queues_blocks_in_id_order(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(5, &p), LLB_STATUS_OK);
  assert_queue(p, (int32_t[]){0, 1, 2, 3, 4}, 5);
  assert_int_equal(kv_block_pool_num_free(p), 5);
  assert_true(kv_block_pool_usage(p) == 0.0);
  kv_block_pool_destroy(p);
  assert_int_equal(kv_block_pool_create(0, &p), LLB_STATUS_INVALID_ARGUMENT);
}

static void test_popleft_takes_head_and_free_appends_in_given_order(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(6, &p), LLB_STATUS_OK);
  int32_t ids[3];
  assert_int_equal(kv_block_pool_get_new_blocks(p, 3, ids), LLB_STATUS_OK);
  assert_int_equal(ids[0], 0);
  assert_int_equal(ids[2], 2);
  assert_queue(p, (int32_t[]){3, 4, 5}, 3);
  for (int i = 0; i < 3; i++) assert_false(kv_block_pool_is_free(p, ids[i]));
  /* reverse order, as KVCacheManager.free does: the tail block (2) is evicted first */
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){2, 1, 0}, 3), LLB_STATUS_OK);
  assert_queue(p, (int32_t[]){3, 4, 5, 2, 1, 0}, 6);
  assert_int_equal(kv_block_pool_get_new_blocks(p, 7, ids), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(kv_block_pool_num_free(p), 6);
  kv_block_pool_destroy(p);
}

/* touch takes a free block out of the middle of the queue and leaves one in use as it is (a
 * shared prefix hit); a release of a block that is free, out of range or listed twice
 * changes nothing. The pool keeps no counts: the scheduler releases a block once, when its
 * count reaches zero. */
static void test_touch_removes_from_the_middle_and_bad_releases_change_nothing(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(4, &p), LLB_STATUS_OK);
  assert_int_equal(kv_block_pool_touch(p, (int32_t[]){2}, 1), LLB_STATUS_OK);
  assert_queue(p, (int32_t[]){0, 1, 3}, 3);
  assert_int_equal(kv_block_pool_touch(p, (int32_t[]){2, 0}, 2), LLB_STATUS_OK); /* 2 in use already */
  assert_queue(p, (int32_t[]){1, 3}, 2);
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){2, 1}, 2), LLB_STATUS_INVALID_ARGUMENT); /* 1 is free */
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){2, 2}, 2), LLB_STATUS_INVALID_ARGUMENT); /* twice */
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){2, 4}, 2), LLB_STATUS_INVALID_ARGUMENT); /* range */
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){-1}, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_queue(p, (int32_t[]){1, 3}, 2);
  assert_int_equal(kv_block_pool_free_blocks(p, (int32_t[]){2, 0}, 2), LLB_STATUS_OK);
  assert_queue(p, (int32_t[]){1, 3, 2, 0}, 4);
  assert_int_equal(kv_block_pool_touch(p, (int32_t[]){9}, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
  kv_block_pool_destroy(p);
}

/* resync: the listed blocks leave the queue, every other one not in it is appended (id order),
 * the free ones keep their order and every hash stays; a bad list changes nothing. */
static void test_resync_rebuilds_the_free_queue_from_the_held_list(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(6, &p), LLB_STATUS_OK);
  int32_t ids[4];
  assert_int_equal(kv_block_pool_get_new_blocks(p, 4, ids), LLB_STATUS_OK); /* 0..3 in use */
  assert_true(kv_block_pool_cache_block(p, 1, 0xabc));
  assert_int_equal(kv_block_pool_resync(p, (int32_t[]){5, 0, 5}, 3), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(kv_block_pool_resync(p, (int32_t[]){6}, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_queue(p, (int32_t[]){4, 5}, 2);
  assert_int_equal(kv_block_pool_resync(p, (int32_t[]){5, 0}, 2), LLB_STATUS_OK);
  assert_queue(p, (int32_t[]){4, 1, 2, 3}, 4);
  assert_int_equal(kv_block_pool_get_cached_block(p, 0xabc), 1); /* still a hit, now free */
  assert_int_equal(kv_block_pool_resync(p, NULL, 0), LLB_STATUS_OK); /* nothing held */
  assert_queue(p, (int32_t[]){4, 1, 2, 3, 0, 5}, 6);
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
  kv_block_pool_destroy(p);
}

static void test_cached_block_stays_a_hit_while_free_and_is_evicted_when_reused(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(3, &p), LLB_STATUS_OK);
  int32_t ids[3];
  assert_int_equal(kv_block_pool_get_new_blocks(p, 1, ids), LLB_STATUS_OK);
  assert_true(kv_block_pool_cache_block(p, ids[0], 0xabc));
  assert_false(kv_block_pool_cache_block(p, ids[0], 0xdef)); /* already hashed */
  assert_int_equal(kv_block_pool_get_new_blocks(p, 1, ids + 1), LLB_STATUS_OK);
  assert_false(kv_block_pool_cache_block(p, ids[1], 0xabc)); /* hash owned by block 0 */
  assert_int_equal(kv_block_pool_free_blocks(p, ids, 2), LLB_STATUS_OK);
  assert_int_equal(kv_block_pool_get_cached_block(p, 0xabc), ids[0]);
  assert_int_equal(kv_block_pool_num_cached(p), 1);
  /* queue: 2, 0, 1. Two pops take 2 then 0: block 0 loses its hash */
  assert_int_equal(kv_block_pool_get_new_blocks(p, 1, ids), LLB_STATUS_OK);
  assert_int_equal(ids[0], 2);
  assert_int_equal(kv_block_pool_get_cached_block(p, 0xabc), 0);
  assert_int_equal(kv_block_pool_get_new_blocks(p, 1, ids), LLB_STATUS_OK);
  assert_int_equal(ids[0], 0);
  assert_int_equal(kv_block_pool_get_cached_block(p, 0xabc), -1);
  assert_false(kv_block_pool_block_hash(p, 0, NULL));
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
  kv_block_pool_destroy(p);
}

static void test_map_deletion_keeps_colliding_probe_chains(void **state) {
  (void)state;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(8, &p), LLB_STATUS_OK); /* map of 16 slots */
  int32_t ids[8];
  assert_int_equal(kv_block_pool_get_new_blocks(p, 8, ids), LLB_STATUS_OK);
  /* keys with equal low bits collide into one probe chain */
  for (int i = 0; i < 8; i++) assert_true(kv_block_pool_cache_block(p, ids[i], ((uint64_t)i << 32) | 5));
  assert_int_equal(kv_block_pool_free_blocks(p, ids, 8), LLB_STATUS_OK);
  assert_int_equal(kv_block_pool_get_new_blocks(p, 3, ids), LLB_STATUS_OK); /* evicts 0, 1, 2 */
  for (int i = 0; i < 8; i++)
    assert_int_equal(kv_block_pool_get_cached_block(p, ((uint64_t)i << 32) | 5), i < 3 ? -1 : i);
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
  kv_block_pool_destroy(p);
}

/* O(1): a million removes from the middle and appends take well under a second. */
static void test_queue_operations_are_constant_time(void **state) {
  (void)state;
  const int32_t n = 1 << 20;
  struct kv_block_pool *p;
  assert_int_equal(kv_block_pool_create(n, &p), LLB_STATUS_OK);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int32_t i = 0; i < n; i += 2) assert_int_equal(kv_block_pool_touch(p, &i, 1), LLB_STATUS_OK);
  for (int32_t i = n - 2; i >= 0; i -= 2) assert_int_equal(kv_block_pool_free_blocks(p, &i, 1), LLB_STATUS_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  assert_true(s < 2.0); /* O(n) would be ~10^11 steps */
  int32_t head[2];
  kv_block_pool_free_queue_ids(p, head, 2);
  assert_int_equal(head[0], 1); /* odd blocks kept their order at the head */
  assert_int_equal(head[1], 3);
  assert_int_equal(kv_block_pool_check(p), LLB_STATUS_OK);
  kv_block_pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_pool_queues_blocks_in_id_order),
      cmocka_unit_test(test_popleft_takes_head_and_free_appends_in_given_order),
      cmocka_unit_test(test_touch_removes_from_the_middle_and_bad_releases_change_nothing),
      cmocka_unit_test(test_resync_rebuilds_the_free_queue_from_the_held_list),
      cmocka_unit_test(test_cached_block_stays_a_hit_while_free_and_is_evicted_when_reused),
      cmocka_unit_test(test_map_deletion_keeps_colliding_probe_chains),
      cmocka_unit_test(test_queue_operations_are_constant_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

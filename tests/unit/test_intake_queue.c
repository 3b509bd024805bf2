/* actors/input_processor/intake_queue: per-tenant intake queues served in deficit round robin,
 * bounded per tenant, at most one tenant's share of the workers, drained on close. (The threads
 * that serve them: test_intake_workers.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "actors/input_processor/intake_queue.h"

static int items[64]; /* item i is &items[i]: pop order is read back from the pointer */

static struct intake_queue *make(int32_t max_items, int32_t cap, int64_t quantum) {
  struct intake_queue_config c;
  intake_queue_config_init(&c);
  c.max_items_per_tenant = max_items;
  c.quantum = quantum;
  c.max_in_service_per_tenant = cap;
  struct intake_queue *q = NULL;
  assert_int_equal(intake_queue_create(&c, &q), LLB_STATUS_OK);
  return q;
}

static int pop_done(struct intake_queue *q) {
  void *item;
  int slot;
  assert_true(intake_queue_pop(q, &item, &slot));
  intake_queue_done(q, slot);
  return (int)((int *)item - items);
}

/* A flood of one tenant queued first: the other tenant's requests are taken in turn with it,
 * not after it. */
static void test_tenants_are_served_in_turn_not_in_arrival_order(void **state) {
  (void)state;
  struct intake_queue *q = make(256, 1, 1000);
  for (int i = 0; i < 10; i++) assert_int_equal(intake_queue_push(q, "a", &items[i], 1000), LLB_STATUS_OK);
  for (int i = 10; i < 12; i++) assert_int_equal(intake_queue_push(q, "b", &items[i], 1000), LLB_STATUS_OK);
  int order[12];
  for (int i = 0; i < 12; i++) order[i] = pop_done(q);
  /* b's two are taken within the first four, each in its tenant's order */
  int b_seen = 0, last_a = -1;
  for (int i = 0; i < 12; i++) {
    if (order[i] >= 10) {
      assert_int_equal(order[i], 10 + b_seen);
      if (++b_seen == 2) assert_true(i <= 3);
    } else {
      assert_true(order[i] > last_a);
      last_a = order[i];
    }
  }
  assert_int_equal(b_seen, 2);
  intake_queue_destroy(q);
}

/* Deficit round robin by cost: with both tenants backlogged, a tenant of 64 KiB requests gets
 * one served per eight turns of 8 KiB, while a tenant of 1 KiB requests gets eight served each
 * turn: equal work, not equal counts (the big one's first waits 7 turns: 56 small ones). */
static void test_costly_requests_get_their_share_by_cost(void **state) {
  (void)state;
  struct intake_queue *q = make(256, 1, 8 * 1024);
  for (int i = 0; i < 4; i++) assert_int_equal(intake_queue_push(q, "big", &items[i], 64 * 1024), LLB_STATUS_OK);
  for (int i = 0; i < 60; i++) assert_int_equal(intake_queue_push(q, "small", &items[4], 1024), LLB_STATUS_OK);
  for (int i = 0; i < 56; i++) assert_int_equal(pop_done(q), 4);
  assert_int_equal(pop_done(q), 0);
  intake_queue_destroy(q);
}

static void test_a_full_tenant_queue_refuses_only_that_tenant(void **state) {
  (void)state;
  struct intake_queue *q = make(4, 1, 8192);
  for (int i = 0; i < 4; i++) assert_int_equal(intake_queue_push(q, "a", &items[i], 10), LLB_STATUS_OK);
  assert_int_equal(intake_queue_push(q, "a", &items[4], 10), LLB_STATUS_QUEUE_FULL);
  assert_non_null(strstr(llb_err_last(), "tenant a"));
  assert_int_equal(intake_queue_push(q, "b", &items[5], 10), LLB_STATUS_OK);
  int32_t total = 0;
  assert_int_equal(intake_queue_pending(q, "a", &total), 4);
  assert_int_equal(total, 5);
  assert_int_equal(intake_queue_push(q, "a", &items[6], 0), LLB_STATUS_INVALID_ARGUMENT);
  intake_queue_destroy(q);
}

/* While a tenant has its share of workers busy, the next worker serves another tenant. */
static void test_a_busy_tenant_waits_for_its_share_of_the_workers(void **state) {
  (void)state;
  struct intake_queue *q = make(256, 1, 8192);
  for (int i = 0; i < 3; i++) assert_int_equal(intake_queue_push(q, "a", &items[i], 10), LLB_STATUS_OK);
  assert_int_equal(intake_queue_push(q, "b", &items[10], 10), LLB_STATUS_OK);
  void *item;
  int slot_a, slot_b;
  assert_true(intake_queue_pop(q, &item, &slot_a));
  assert_ptr_equal(item, &items[0]);
  assert_true(intake_queue_pop(q, &item, &slot_b)); /* a is busy: b, though a has more queued */
  assert_ptr_equal(item, &items[10]);
  intake_queue_done(q, slot_b);
  intake_queue_done(q, slot_a);
  assert_true(intake_queue_pop(q, &item, &slot_a));
  assert_ptr_equal(item, &items[1]);
  intake_queue_done(q, slot_a);
  intake_queue_destroy(q);
}

static void test_close_drains_then_refuses(void **state) {
  (void)state;
  struct intake_queue *q = make(256, 1, 8192);
  assert_int_equal(intake_queue_push(q, "a", &items[0], 10), LLB_STATUS_OK);
  intake_queue_close(q);
  assert_int_equal(intake_queue_push(q, "a", &items[1], 10), LLB_STATUS_ABORTED);
  assert_int_equal(pop_done(q), 0);
  void *item;
  int slot;
  assert_false(intake_queue_pop(q, &item, &slot));
  intake_queue_destroy(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tenants_are_served_in_turn_not_in_arrival_order),
      cmocka_unit_test(test_costly_requests_get_their_share_by_cost),
      cmocka_unit_test(test_a_full_tenant_queue_refuses_only_that_tenant),
      cmocka_unit_test(test_a_busy_tenant_waits_for_its_share_of_the_workers),
      cmocka_unit_test(test_close_drains_then_refuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

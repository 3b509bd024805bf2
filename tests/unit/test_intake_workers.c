/* actors/input_processor/intake_workers: the threads that serve the intake queues finish every
 * queued item, and a thread whose item uses more than the CPU budget runs it at nice 19 while
 * the next item gets a thread at the pool's priority again (an unprivileged thread cannot lower
 * its nice value: the pool replaces it). No timing is asserted: a costly item spins until it sees
 * its own demotion (a guard of 60 s of wall time only keeps a failure from hanging). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "actors/input_processor/intake_queue.h"
#include "actors/input_processor/intake_workers.h"

static int items[64];

static struct intake_queue *make(void) {
  struct intake_queue_config c;
  intake_queue_config_init(&c);
  struct intake_queue *q = NULL;
  assert_int_equal(intake_queue_create(&c, &q), LLB_STATUS_OK);
  return q;
}

static int own_nice(void) {
  errno = 0;
  return getpriority(PRIO_PROCESS, (id_t)gettid());
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns CPU until this thread's nice value is `until` (or the guard passes); returns the nice seen. */
static int spin_until_nice(int until) {
  volatile uint64_t x = 0;
  const double give_up = wall_s() + 60;
  int nice = own_nice();
  while (nice != until && wall_s() < give_up) {
    for (int i = 0; i < 100000; i++) x += (uint64_t)i;
    nice = own_nice();
  }
  return nice;
}

static atomic_int worked;
static void count_work(void *user, void *item) {
  (void)user;
  (void)item;
  atomic_fetch_add(&worked, 1);
}

static void test_workers_finish_every_queued_item_on_stop(void **state) {
  (void)state;
  struct intake_queue *q = make();
  struct intake_workers *w = NULL;
  atomic_store(&worked, 0);
  assert_int_equal(intake_workers_start(q, 2, 0, count_work, NULL, &w), LLB_STATUS_OK);
  char tenant[16];
  for (int i = 0; i < 60; i++) {
    snprintf(tenant, sizeof tenant, "t%d", i % 7);
    assert_int_equal(intake_queue_push(q, tenant, &items[i], 100 + i), LLB_STATUS_OK);
  }
  intake_workers_stop(w);
  assert_int_equal(atomic_load(&worked), 60);
  intake_queue_destroy(q);
}

/* item 0: cheap; 1: costly (spins until demoted); 2: cheap again. Each records its thread's nice. */
static int nice_seen[3];
static void nice_work(void *user, void *item) {
  (void)user;
  const int i = (int)((int *)item - items);
  nice_seen[i] = i == 1 ? spin_until_nice(INTAKE_WORKERS_DEMOTED_NICE) : own_nice();
}

static void test_a_costly_item_runs_demoted_and_the_next_item_does_not(void **state) {
  (void)state;
  const int base = own_nice();
  if (base >= INTAKE_WORKERS_DEMOTED_NICE) skip(); /* already at the lowest priority: nothing to see */
  struct intake_queue *q = make();
  struct intake_workers *w = NULL;
  /* one worker: the three items run in order, each on whatever thread the pool has then */
  assert_int_equal(intake_workers_start(q, 1, 2 * 1000 * 1000, nice_work, NULL, &w), LLB_STATUS_OK);
  for (int i = 0; i < 3; i++) assert_int_equal(intake_queue_push(q, "a", &items[i], 10), LLB_STATUS_OK);
  intake_workers_stop(w); /* runs all three */
  assert_int_equal(nice_seen[0], base);
  assert_int_equal(nice_seen[1], INTAKE_WORKERS_DEMOTED_NICE);
  assert_int_equal(nice_seen[2], base); /* a new thread, at the pool's priority */
  intake_queue_destroy(q);
}

/* Every item over the budget: each thread is demoted and replaced, and stop still drains the
 * queue (replacements keep being started while it closes). */
static void costly_work(void *user, void *item) {
  (void)user;
  (void)item;
  if (own_nice() < INTAKE_WORKERS_DEMOTED_NICE) spin_until_nice(INTAKE_WORKERS_DEMOTED_NICE);
  atomic_fetch_add(&worked, 1);
}

static void test_demoted_threads_are_replaced_until_every_item_is_done(void **state) {
  (void)state;
  if (own_nice() >= INTAKE_WORKERS_DEMOTED_NICE) skip();
  struct intake_queue *q = make();
  struct intake_workers *w = NULL;
  atomic_store(&worked, 0);
  assert_int_equal(intake_workers_start(q, 2, 1000 * 1000, costly_work, NULL, &w), LLB_STATUS_OK);
  for (int i = 0; i < 12; i++) assert_int_equal(intake_queue_push(q, i % 2 ? "a" : "b", &items[i], 10), LLB_STATUS_OK);
  intake_workers_stop(w);
  assert_int_equal(atomic_load(&worked), 12);
  intake_queue_destroy(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_workers_finish_every_queued_item_on_stop),
      cmocka_unit_test(test_a_costly_item_runs_demoted_and_the_next_item_does_not),
      cmocka_unit_test(test_demoted_threads_are_replaced_until_every_item_is_done),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

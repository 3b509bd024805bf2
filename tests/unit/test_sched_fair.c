/* Tenant-fair admission (actors/scheduler/sched_fair.h) through the scheduler: with tenant a's
 * requests running, tenant b's new request is admitted before a's queued ones; with one tenant
 * the order stays FCFS; PRIORITY keeps its order; the tenant key comes from the cache salt's
 * "<len>:<tenant>" prefix only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "actors/scheduler/sched_fair.h"
#include "test_scheduler_harness.h"

static struct sched_config fair_cfg(enum sched_policy policy) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = 256;
  c.num_lookahead_tokens = 0;
  c.max_num_seqs = 2;
  c.policy = policy;
  return c;
}

/* A request of `salt` (as the input processor composes it: "<len>:<tenant>" + the client's). */
static void add_salted(struct harness *h, const char *id, const char *salt, double arrival) {
  int32_t toks[8];
  for (int32_t i = 0; i < 8; i++) toks[i] = 7 + i;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = 8,
                                 .eos_token_id = 2, .arrival_time = arrival, .cache_salt = salt};
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = 4;
  nr.sampling_params = sp;
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

/* The ids admitted by each step, in order, copied into got[] (a run to completion). */
static int admitted_order(struct harness *h, char (*got)[16], int cap) {
  int n = 0;
  for (int s = 0; s < 60 && sched_num_unfinished(h->s) > 0; s++) {
    h_step(h);
    for (int32_t i = 0; i < h->out.num_new_reqs && n < cap; i++)
      snprintf(got[n++], sizeof got[0], "%s", h->out.new_reqs[i].req_id);
  }
  assert_int_equal(sched_num_unfinished(h->s), 0);
  return n;
}

static void test_another_tenants_request_is_admitted_before_a_busy_tenants_queued_ones(void **state) {
  (void)state;
  struct sched_config c = fair_cfg(SCHED_POLICY_FCFS);
  struct harness h;
  h_init(&h, &c);
  add_salted(&h, "a1", "1:a", 0.0);
  add_salted(&h, "a2", "1:a", 1.0);
  add_salted(&h, "a3", "1:a", 2.0);
  add_salted(&h, "b1", "1:bclient-salt", 3.0); /* tenant b (its client's salt after the prefix) */
  char got[8][16];
  assert_int_equal(admitted_order(&h, got, 8), 4);
  /* FCFS would admit a1, a2 first and b1 last; a has a1 running when the second seat is given */
  const char *want[4] = {"a1", "b1", "a2", "a3"};
  for (int i = 0; i < 4; i++) assert_string_equal(got[i], want[i]);
  h_fini(&h);
}

static void test_one_tenant_keeps_fcfs_order(void **state) {
  (void)state;
  struct sched_config c = fair_cfg(SCHED_POLICY_FCFS);
  struct harness h;
  h_init(&h, &c);
  add_salted(&h, "r2", "1:a", 0.0);
  add_salted(&h, "r0", "1:ax", 1.0); /* the same tenant, another client salt */
  add_salted(&h, "r1", "1:a", 2.0);
  add_salted(&h, "r3", "1:ay", 3.0);
  char got[8][16];
  assert_int_equal(admitted_order(&h, got, 8), 4);
  const char *want[4] = {"r2", "r0", "r1", "r3"};
  for (int i = 0; i < 4; i++) assert_string_equal(got[i], want[i]);
  h_fini(&h);
}

static void test_priority_policy_is_left_as_it_is(void **state) {
  (void)state;
  struct sched_config c = fair_cfg(SCHED_POLICY_PRIORITY);
  struct harness h;
  h_init(&h, &c);
  add_salted(&h, "a1", "1:a", 0.0);
  add_salted(&h, "a2", "1:a", 1.0);
  add_salted(&h, "b1", "1:b", 2.0);
  char got[8][16];
  assert_int_equal(admitted_order(&h, got, 8), 3);
  const char *want[3] = {"a1", "a2", "b1"}; /* equal priorities: arrival order */
  for (int i = 0; i < 3; i++) assert_string_equal(got[i], want[i]);
  h_fini(&h);
}

static void test_the_tenant_key_is_the_salts_tenant_prefix(void **state) {
  (void)state;
  struct llb_hash_key key;
  memset(&key, 7, sizeof key);
  assert_true(sched_fair_tenant_key(&key, "1:a") != 0);
  assert_true(sched_fair_tenant_key(&key, "1:a") == sched_fair_tenant_key(&key, "1:aanything"));
  assert_true(sched_fair_tenant_key(&key, "1:a") != sched_fair_tenant_key(&key, "1:b"));
  assert_true(sched_fair_tenant_key(&key, "2:ab") != sched_fair_tenant_key(&key, "1:ab"));
  assert_true(sched_fair_tenant_key(&key, NULL) == 0);
  assert_true(sched_fair_tenant_key(&key, "") == 0);
  assert_true(sched_fair_tenant_key(&key, "client-salt") == 0);
  assert_true(sched_fair_tenant_key(&key, "9:short") == 0); /* shorter than it says */
  assert_true(sched_fair_tenant_key(&key, "0:") == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_another_tenants_request_is_admitted_before_a_busy_tenants_queued_ones),
      cmocka_unit_test(test_one_tenant_keeps_fcfs_order),
      cmocka_unit_test(test_priority_policy_is_left_as_it_is),
      cmocka_unit_test(test_the_tenant_key_is_the_salts_tenant_prefix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

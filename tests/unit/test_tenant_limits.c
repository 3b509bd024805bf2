/* actors/input_processor/tenant_limits: per-tenant in-flight, queued and token-rate limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/input_processor/tenant_limits.h"

static struct tenant_limits *make(const char *lines) {
  char path[] = "/tmp/llmbus-tenant-limits-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, lines, strlen(lines)), (ssize_t)strlen(lines));
  close(fd);
  struct tenant_limits_config cfg;
  llb_status st = tenant_limits_config_load(path, &cfg);
  unlink(path);
  assert_int_equal(st, LLB_STATUS_OK);
  struct tenant_limits *tl = NULL;
  assert_int_equal(tenant_limits_create(&cfg, 60000, &tl), LLB_STATUS_OK);
  return tl;
}

static llb_status admit1(struct tenant_limits *tl, const char *tenant, const char *id, double cost, int64_t now_ms,
                         int64_t *retry) {
  const char *ids[1] = {id};
  return tenant_limits_admit(tl, tenant, ids, 1, cost, 0, now_ms, retry);
}

static void test_concurrent_limit_refuses_then_frees_on_finish(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a max_concurrent=2\nb\n");
  int64_t retry = 0;
  assert_int_equal(admit1(tl, "a", "r1", 10, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r2", 10, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r3", 10, 0, &retry), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(retry, 1000);
  assert_non_null(strstr(llb_err_last(), "max_concurrent"));
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 0, 0, &retry), LLB_STATUS_QUEUE_FULL); /* before tokenizing */
  assert_int_equal(tenant_limits_precharge(tl, "b", 1, 0, 0, &retry), LLB_STATUS_OK);
  /* another tenant, and one without limits, are not affected */
  for (int i = 0; i < 10; i++) {
    char id[16];
    snprintf(id, sizeof id, "b%d", i);
    assert_int_equal(admit1(tl, "b", id, 10, 0, &retry), LLB_STATUS_OK);
    assert_int_equal(admit1(tl, "nobody", id, 10, 0, &retry), LLB_STATUS_OK);
  }
  tenant_limits_on_output(tl, "r1", true, false, 1);
  assert_int_equal(admit1(tl, "a", "r3", 10, 1, &retry), LLB_STATUS_QUEUE_FULL); /* running still counts */
  tenant_limits_on_output(tl, "r1", true, true, 2);
  assert_int_equal(admit1(tl, "a", "r3", 10, 2, &retry), LLB_STATUS_OK);
  int32_t in_flight, queued;
  tenant_limits_counts(tl, "a", &in_flight, &queued);
  assert_int_equal(in_flight, 2);
  assert_int_equal(queued, 2);
  tenant_limits_destroy(tl);
}

static void test_queued_limit_counts_requests_without_a_token(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a max_queued=1\n");
  int64_t retry = 0;
  assert_int_equal(admit1(tl, "a", "r1", 1, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r2", 1, 0, &retry), LLB_STATUS_QUEUE_FULL);
  assert_non_null(strstr(llb_err_last(), "max_queued"));
  tenant_limits_on_output(tl, "r1", false, false, 0); /* an output without tokens: still queued */
  assert_int_equal(admit1(tl, "a", "r2", 1, 0, &retry), LLB_STATUS_QUEUE_FULL);
  tenant_limits_on_output(tl, "r1", true, false, 0);
  assert_int_equal(admit1(tl, "a", "r2", 1, 0, &retry), LLB_STATUS_OK);
  tenant_limits_destroy(tl);
}

static void test_token_bucket_refills_at_its_rate_and_says_when(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a tokens_per_s=100 burst_tokens=300\n");
  int64_t retry = 0;
  assert_int_equal(admit1(tl, "a", "r1", 250, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r2", 100, 0, &retry), LLB_STATUS_QUEUE_FULL); /* 50 left */
  assert_int_equal(retry, 500);                                                   /* 50 more at 100/s */
  assert_non_null(strstr(llb_err_last(), "tokens_per_s"));
  assert_int_equal(admit1(tl, "a", "r2", 100, 499, &retry), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(admit1(tl, "a", "r2", 100, 500, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r3", 301, 100000, &retry), LLB_STATUS_TOO_LARGE); /* never fits */
  /* refilled no higher than the burst */
  assert_int_equal(admit1(tl, "a", "r4", 300, 100000, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "r5", 1, 100000, &retry), LLB_STATUS_QUEUE_FULL);
  tenant_limits_destroy(tl);
}

static void test_refused_request_of_n_children_is_refused_whole(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a max_concurrent=3\n");
  int64_t retry = 0;
  const char *ids[4] = {"0_x", "1_x", "2_x", "3_x"};
  assert_int_equal(tenant_limits_admit(tl, "a", ids, 4, 4, 0, 0, &retry), LLB_STATUS_QUEUE_FULL);
  int32_t in_flight, queued;
  tenant_limits_counts(tl, "a", &in_flight, &queued);
  assert_int_equal(in_flight, 0);
  assert_int_equal(tenant_limits_admit(tl, "a", ids, 3, 3, 0, 0, &retry), LLB_STATUS_OK);
  tenant_limits_release(tl, ids, 3); /* the publish failed */
  tenant_limits_counts(tl, "a", &in_flight, &queued);
  assert_int_equal(in_flight, 0);
  tenant_limits_destroy(tl);
}

static void test_lost_requests_expire_after_the_ttl(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a max_concurrent=1\n"); /* ttl 60 s */
  int64_t retry = 0;
  assert_int_equal(admit1(tl, "a", "lost", 1, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(admit1(tl, "a", "next", 1, 30000, &retry), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(admit1(tl, "a", "next", 1, 60001, &retry), LLB_STATUS_OK);
  tenant_limits_destroy(tl);
}

static void test_many_requests_keep_exact_counts(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a max_concurrent=100000\n");
  int64_t retry = 0;
  char id[32];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 5000; i++) {
      snprintf(id, sizeof id, "r%d-%d", round, i);
      assert_int_equal(admit1(tl, "a", id, 1, round, &retry), LLB_STATUS_OK);
    }
    for (int i = 0; i < 5000; i += 2) {
      snprintf(id, sizeof id, "r%d-%d", round, i);
      tenant_limits_on_output(tl, id, true, true, round);
    }
  }
  int32_t in_flight, queued;
  tenant_limits_counts(tl, "a", &in_flight, &queued);
  assert_int_equal(in_flight, 3 * 2500);
  assert_int_equal(queued, 3 * 2500);
  tenant_limits_destroy(tl);
}

static void test_limits_file_errors_name_the_line(void **state) {
  (void)state;
  struct tenant_limit t;
  char why[200];
  assert_int_equal(tenant_limits_parse_line("   ", &t, why, sizeof why), 0);
  assert_int_equal(tenant_limits_parse_line("acme max_concurrent=4 tokens_per_s=50", &t, why, sizeof why), 1);
  assert_int_equal(t.max_concurrent, 4);
  assert_true(t.burst_tokens == 500); /* 10 s of its rate */
  assert_int_equal(tenant_limits_parse_line("a.b", &t, why, sizeof why), -1);
  assert_int_equal(tenant_limits_parse_line("a max_concurrent=-1", &t, why, sizeof why), -1);
  assert_int_equal(tenant_limits_parse_line("a max_concurrent=1.5", &t, why, sizeof why), -1);
  assert_int_equal(tenant_limits_parse_line("a tokens_per_s=nan", &t, why, sizeof why), -1);
  assert_int_equal(tenant_limits_parse_line("a speed=3", &t, why, sizeof why), -1);
  assert_non_null(strstr(why, "unknown limit"));
  /* the api server's request rate: one second of it by default, at least one request */
  assert_int_equal(tenant_limits_parse_line("a requests_per_s=5", &t, why, sizeof why), 1);
  assert_true(t.requests_per_s == 5 && t.burst_requests == 5);
  assert_int_equal(tenant_limits_parse_line("a requests_per_s=0.5", &t, why, sizeof why), 1);
  assert_true(t.burst_requests == 1);
  assert_int_equal(tenant_limits_parse_line("a requests_per_s=2 burst_requests=8", &t, why, sizeof why), 1);
  assert_true(t.burst_requests == 8);
  assert_int_equal(tenant_limits_parse_line("a requests_per_s=2 burst_requests=0.5", &t, why, sizeof why), -1);
  assert_non_null(strstr(why, "burst_requests"));
  char path[] = "/tmp/llmbus-tenant-limits-XXXXXX";
  int fd = mkstemp(path);
  const char *text = "# ok\na\n\nb max_queued=x\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  struct tenant_limits_config cfg;
  assert_int_equal(tenant_limits_config_load(path, &cfg), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), ":4:"));
  unlink(path);
}

/* The bucket is charged before the costly work (an estimate from the request's sizes), then
 * settled to the real count: a tenant over its rate is refused before any template or tokenizer
 * work, an estimate that was too high goes back, and work done for a request that is then
 * refused (or a /tokenize call) still counts. */
static void test_precharge_refuses_before_work_and_settles_after(void **state) {
  (void)state;
  struct tenant_limits *tl = make("a tokens_per_s=10 burst_tokens=100\n");
  int64_t retry = 0;
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 60, 0, &retry), LLB_STATUS_OK); /* 40 left */
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 60, 0, &retry), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(retry, 2000); /* 20 missing at 10/s */
  assert_non_null(strstr(llb_err_last(), "tokens_per_s"));
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 101, 0, &retry), LLB_STATUS_TOO_LARGE);
  /* the first request really cost 30: 30 go back (70 left) */
  const char *ids[1] = {"r1"};
  assert_int_equal(tenant_limits_admit(tl, "a", ids, 1, 30, 60, 0, &retry), LLB_STATUS_OK);
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 70, 0, &retry), LLB_STATUS_OK); /* 0 left */
  /* that one was refused after its work: its precharge stays; a /tokenize of 50 more goes below 0 */
  tenant_limits_settle(tl, "a", 50, 0);
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 1, 0, &retry), LLB_STATUS_QUEUE_FULL);
  assert_int_equal(retry, 5100); /* 51 at 10/s */
  assert_int_equal(tenant_limits_precharge(tl, "a", 1, 1, 5100, &retry), LLB_STATUS_OK);
  /* a total over the burst is a 400 at admission even when each part fits */
  const char *ids2[1] = {"r2"};
  assert_int_equal(tenant_limits_admit(tl, "a", ids2, 1, 150, 1, 5100, &retry), LLB_STATUS_TOO_LARGE);
  tenant_limits_destroy(tl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_precharge_refuses_before_work_and_settles_after),
      cmocka_unit_test(test_concurrent_limit_refuses_then_frees_on_finish),
      cmocka_unit_test(test_queued_limit_counts_requests_without_a_token),
      cmocka_unit_test(test_token_bucket_refills_at_its_rate_and_says_when),
      cmocka_unit_test(test_refused_request_of_n_children_is_refused_whole),
      cmocka_unit_test(test_lost_requests_expire_after_the_ttl),
      cmocka_unit_test(test_many_requests_keep_exact_counts),
      cmocka_unit_test(test_limits_file_errors_name_the_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Speculative decoding (--speculative-config, n-gram proposer) through every actor with the
 * real model: greedy outputs are identical token for token with and without it, for several
 * prompts (a repetitive one among them, where drafts are accepted) alone and 8 at once; seeded
 * random sampling with it completes with valid outputs, the same ones when repeated; and the
 * scheduler's llmbus:spec_decode_* counters show drafts verified and accepted. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/e2e/stack.h"

#define NUM_PROMPTS 4
#define NUM_CONCURRENT 8
#define MAX_TOKENS 48
#define SPEC_CONFIG "{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4,\"prompt_lookup_min\":2}"

static const char *model;
static struct e2e_stack s;

static const char *const prompts[NUM_PROMPTS] = {
    "Repeat this list exactly: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry.",
    "Copy this code and rename x to y: def f(x): return x * x + x",
    "Name three primary colors.",
    "Write one sentence about the sea.",
};

static void make_request(int i, bool greedy, uint64_t seed, struct e2e_request *r, char *id, size_t cap) {
  memset(r, 0, sizeof *r);
  snprintf(id, cap, "spec-%d-%s-%llu", i, greedy ? "g" : "s", (unsigned long long)seed);
  r->request_id = id;
  r->prompt = prompts[i % NUM_PROMPTS];
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  if (greedy) {
    r->sp.temperature = 0.0f;
  } else {
    r->sp.temperature = 0.8f;
    r->sp.top_p = 0.95f;
    r->sp.has_seed = true;
    r->sp.seed = seed;
  }
}

/* A free TCP port on 127.0.0.1 (bound then released; the scheduler takes it right after). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* The value of counter `name` on the scheduler's /metrics, -1 when absent. */
static double scrape(int port, const char *name) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  assert_true(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
  static char buf[1 << 20];
  size_t n = 0;
  for (ssize_t k; n < sizeof buf - 1 && (k = read(fd, buf + n, sizeof buf - 1 - n)) > 0;) n += (size_t)k;
  buf[n] = '\0';
  close(fd);
  for (char *p = buf; (p = strstr(p, name)) != NULL; p++)
    if ((p == buf || p[-1] == '\n') && (p[strlen(name)] == ' ' || p[strlen(name)] == '{')) {
      char *v = strchr(p, ' ');
      return v ? strtod(v + 1, NULL) : -1;
    }
  return -1;
}

static void run_alone(bool greedy, uint64_t seed, struct e2e_result *out) {
  char id[64];
  for (int i = 0; i < NUM_PROMPTS; i++) {
    struct e2e_request r;
    make_request(i, greedy, seed, &r, id, sizeof id);
    assert_int_equal(e2e_generate(&s, &r, &out[i]), 0);
    if (out[i].error_code != 0 || !out[i].finished) e2e_print_result("alone", &out[i]);
    assert_int_equal(out[i].error_code, 0);
    assert_true(out[i].finished);
    assert_true(out[i].num_tokens >= 1 && out[i].num_tokens <= MAX_TOKENS);
  }
}

static void run_concurrent(struct e2e_result *out) {
  static struct e2e_pending pending[NUM_CONCURRENT];
  char ids[NUM_CONCURRENT][64];
  for (int i = 0; i < NUM_CONCURRENT; i++) {
    struct e2e_request r;
    make_request(i, true, 0, &r, ids[i], sizeof ids[i]);
    snprintf(ids[i], sizeof ids[i], "spec-concurrent-%d", i);
    r.request_id = ids[i];
    assert_int_equal(e2e_submit(&s, &r, &pending[i]), 0);
  }
  for (int i = 0; i < NUM_CONCURRENT; i++) {
    assert_int_equal(e2e_collect(&pending[i], E2E_WAIT_OUTPUT_MS), 0);
    out[i] = pending[i].result;
    assert_int_equal(out[i].error_code, 0);
  }
}

static void test_greedy_tokens_are_identical_with_speculative_decoding(void **state) {
  (void)state;
  static struct e2e_result base[NUM_PROMPTS], spec[NUM_PROMPTS], conc[NUM_CONCURRENT];
  static struct e2e_result seeded[2][NUM_PROMPTS];
  static const char *const sched_base[] = {E2E_SLOW_STEP_FLAGS, NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_base;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  run_alone(true, 0, base);
  assert_int_equal(e2e_stack_stop(&s), 0);

  char port[16];
  const int metrics_port = free_port();
  snprintf(port, sizeof port, "%d", metrics_port);
  const char *const sched_spec[] = {E2E_SLOW_STEP_FLAGS, "--speculative-config", SPEC_CONFIG, "--metrics-port", port,
                                    NULL};
  static const char *const worker_spec[] = {"--speculative-config", SPEC_CONFIG, NULL};
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_spec;
  o.actor_args[E2E_ACTOR_GPU_WORKER] = worker_spec;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  run_alone(true, 0, spec);
  int differ = 0;
  for (int i = 0; i < NUM_PROMPTS; i++) {
    char what[64];
    snprintf(what, sizeof what, "greedy prompt %d with drafts", i);
    differ += !e2e_same_tokens(what, &base[i], &spec[i]);
  }
  assert_int_equal(differ, 0);
  const double drafts = scrape(metrics_port, "llmbus:spec_decode_num_draft_tokens_total");
  const double accepted = scrape(metrics_port, "llmbus:spec_decode_num_accepted_tokens_total");
  fprintf(stderr, "e2e: drafts verified %.0f, accepted %.0f\n", drafts, accepted);
  assert_true(drafts > 0 && accepted > 0 && accepted <= drafts);

  run_concurrent(conc); /* 8 at once, repetitive prompts among them */
  for (int i = 0; i < NUM_CONCURRENT; i++) {
    char what[64];
    snprintf(what, sizeof what, "greedy concurrent %d with drafts", i);
    differ += !e2e_same_tokens(what, &base[i % NUM_PROMPTS], &conc[i]);
  }
  assert_int_equal(differ, 0);

  /* seeded random sampling: valid outputs, the same ones again */
  for (int k = 0; k < 2; k++) run_alone(false, 4242, seeded[k]);
  for (int i = 0; i < NUM_PROMPTS; i++) {
    char what[64];
    snprintf(what, sizeof what, "seeded prompt %d repeated", i);
    differ += !e2e_same_tokens(what, &seeded[0][i], &seeded[1][i]);
    for (int t = 0; t < seeded[0][i].num_tokens; t++) assert_true(seeded[0][i].token_ids[t] >= 0);
  }
  assert_int_equal(differ, 0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_greedy_tokens_are_identical_with_speculative_decoding, NULL,
                                               e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Pure-logic tests of bus/subject and bus/trace (no server needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "bus/subject.h"
#include "bus/trace.h"

static void test_subjects_follow_design_table(void **state) {
  (void)state;
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_generate(NULL, "default", buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, "llm.generate.default");
  assert_int_equal(bus_subject_abort("llm", "acme", buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, "llm.abort.acme");
  assert_int_equal(bus_subject_engine("x.llm", "e0", "execute", buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, "x.llm.engine.e0.execute");
  const char *kinds[] = {"requests", "abort", "kv", "encoder", "execute", "outputs", "stats"};
  for (int i = 0; i < 7; i++)
    assert_int_equal(bus_subject_engine("llm", "e1", kinds[i], buf, sizeof buf), LLB_STATUS_OK);
  assert_int_equal(bus_subject_health("llm", "scheduler", "0", buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, "llm.health.scheduler.0");
}

static void test_subject_tokens_reject_spaces_dots_wildcards(void **state) {
  (void)state;
  char buf[BUS_SUBJECT_MAX];
  const char *bad[] = {"", "a b", "a.b", "*", ">", "te\tnant", "x>", "a\"b", "a}b", "a/b", "a#b", "$x", "a@b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_false(bus_token_valid(bad[i]));
    assert_int_equal(bus_subject_generate("llm", bad[i], buf, sizeof buf),
                     LLB_STATUS_INVALID_ARGUMENT);
  }
  assert_int_equal(bus_subject_generate("llm", NULL, buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "tenant"));
  assert_int_equal(bus_subject_engine("llm", "e0", "bogus", buf, sizeof buf),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_health("llm", "a.b", "0", buf, sizeof buf),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_generate("llm..x", "t", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_generate("llm.*", "t", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  char small[8];
  assert_int_equal(bus_subject_generate("llm", "default", small, sizeof small), LLB_STATUS_TOO_LARGE);
}

/* One builder of bus/subject.h, called with the caller's buffer. */
typedef llb_status (*subject_fn)(char *buf, size_t cap);

/* build gives exactly `want` (the bytes the hand-written snprintf calls gave before the
 * builders), fits a buffer of strlen(want) + 1 bytes, and one byte less is TOO_LARGE with the
 * buffer emptied and the size needed named. */
static void expect_subject(subject_fn build, const char *want) {
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(build(buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, want);
  const size_t n = strlen(want);
  memset(buf, 'x', sizeof buf);
  assert_int_equal(build(buf, n + 1), LLB_STATUS_OK);
  assert_string_equal(buf, want);
  memset(buf, 'x', sizeof buf);
  assert_int_equal(build(buf, n), LLB_STATUS_TOO_LARGE);
  assert_int_equal(buf[0], '\0');
  char needs[96];
  snprintf(needs, sizeof needs, "subject needs %zu bytes, buffer holds %zu", n + 1, n);
  assert_non_null(strstr(llb_err_last(), needs));
  assert_int_equal(build(NULL, 0), LLB_STATUS_INVALID_ARGUMENT);
}

static llb_status tokenize_acme(char *b, size_t c) { return bus_subject_tokenize("x.llm", "acme", b, c); }
static llb_status tokenize_bad(char *b, size_t c) { return bus_subject_tokenize("llm", "*", b, c); }

static void test_subject_tokenize(void **state) {
  (void)state;
  expect_subject(tokenize_acme, "x.llm.tokenize.acme");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(tokenize_bad(buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_tokenize(NULL, "default", buf, sizeof buf), LLB_STATUS_OK);
  assert_string_equal(buf, "llm.tokenize.default");
}

static llb_status health_metrics(char *b, size_t c) {
  return bus_subject_health_metrics("llm", "kv_manager", "e0-1", b, c);
}

static void test_subject_health_metrics(void **state) {
  (void)state;
  expect_subject(health_metrics, "llm.health.kv_manager.e0-1.metrics");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_health_metrics("llm", "kv_manager", "*", buf, sizeof buf),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "instance"));
}

static llb_status trace_sched(char *b, size_t c) { return bus_subject_trace("llm", "scheduler", b, c); }

static void test_subject_trace(void **state) {
  (void)state;
  expect_subject(trace_sched, "llm.trace.scheduler");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_trace("llm", "a b", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
}

static llb_status kv_fetch_e0(char *b, size_t c) { return bus_subject_kv_fetch("llm", "prefill-0", b, c); }

/* Issue 36: one engine's worker serves the KV blocks it exports there; the engine id is checked. */
static void test_subject_kv_fetch(void **state) {
  (void)state;
  expect_subject(kv_fetch_e0, "llm.engine.prefill-0.kv_fetch");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_kv_fetch("llm", "e.*", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_engine("llm", "e1", "kv_fetch", buf, sizeof buf), LLB_STATUS_OK);
}

/* A step number at UINT64_MAX takes all 20 digits. */
static llb_status reply_step(char *b, size_t c) { return bus_subject_reply("_INBOX.abc123", 42, b, c); }
static llb_status reply_max(char *b, size_t c) { return bus_subject_reply("_INBOX.abc123", UINT64_MAX, b, c); }

static void test_subject_reply(void **state) {
  (void)state;
  expect_subject(reply_step, "_INBOX.abc123.42");
  expect_subject(reply_max, "_INBOX.abc123.18446744073709551615");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_reply(NULL, 1, buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_reply("_INBOX.*", 1, buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "inbox"));
}

static llb_status tenants_generate(char *b, size_t c) { return bus_pattern_tenants("llm", "generate", b, c); }
static llb_status tenants_abort(char *b, size_t c) { return bus_pattern_tenants("llm", "abort", b, c); }
static llb_status tenants_tokenize(char *b, size_t c) { return bus_pattern_tenants("a.b", "tokenize", b, c); }

static void test_pattern_tenants(void **state) {
  (void)state;
  expect_subject(tenants_generate, "llm.generate.*");
  expect_subject(tenants_abort, "llm.abort.*");
  expect_subject(tenants_tokenize, "a.b.tokenize.*");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_pattern_tenants("llm", "engine", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "generate, abort, tokenize"));
}

static llb_status engines_stats(char *b, size_t c) { return bus_pattern_engines("llm", "stats", b, c); }
static llb_status engines_outputs(char *b, size_t c) { return bus_pattern_engines("llm", "outputs", b, c); }
static llb_status engines_requests(char *b, size_t c) { return bus_pattern_engines(NULL, "requests", b, c); }

static void test_pattern_engines(void **state) {
  (void)state;
  expect_subject(engines_stats, "llm.engine.*.stats");
  expect_subject(engines_outputs, "llm.engine.*.outputs");
  expect_subject(engines_requests, "llm.engine.*.requests");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_pattern_engines("llm", "health", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_pattern_engines("llm..x", "stats", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
}

static llb_status health_all(char *b, size_t c) { return bus_pattern_health("llm", NULL, b, c); }
static llb_status health_peer(char *b, size_t c) { return bus_pattern_health("llm", "scheduler", b, c); }
static llb_status metrics_all(char *b, size_t c) { return bus_pattern_health_metrics("llm", b, c); }

static void test_pattern_health(void **state) {
  (void)state;
  expect_subject(health_all, "llm.health.*.*");
  expect_subject(health_peer, "llm.health.scheduler.*");
  expect_subject(metrics_all, "llm.health.*.*.metrics");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_pattern_health("llm", "*", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
}

static llb_status replies(char *b, size_t c) { return bus_pattern_replies("_INBOX.abc123", b, c); }

static void test_pattern_replies(void **state) {
  (void)state;
  expect_subject(replies, "_INBOX.abc123.*");
  char buf[BUS_SUBJECT_MAX];
  assert_int_equal(bus_pattern_replies("", buf, sizeof buf), LLB_STATUS_INVALID_ARGUMENT);
}

/* The builders that were there before: the same size rule. */
static llb_status generate_default(char *b, size_t c) { return bus_subject_generate(NULL, "default", b, c); }
static llb_status abort_acme(char *b, size_t c) { return bus_subject_abort("llm", "acme", b, c); }
static llb_status engine_kv(char *b, size_t c) { return bus_subject_engine("llm", "e0", "kv", b, c); }
static llb_status engine_health_all(char *b, size_t c) { return bus_subject_engine_health("llm", "e0", "*", b, c); }
static llb_status health_sched(char *b, size_t c) { return bus_subject_health("llm", "scheduler", "0", b, c); }

static void test_subject_builders_share_the_size_rule(void **state) {
  (void)state;
  expect_subject(generate_default, "llm.generate.default");
  expect_subject(abort_acme, "llm.abort.acme");
  expect_subject(engine_kv, "llm.engine.e0.kv");
  expect_subject(engine_health_all, "llm.engine.e0.health.*");
  expect_subject(health_sched, "llm.health.scheduler.0");
}

/* The one name rule for everything that reaches nats.conf, a subject, a file or a log line:
 * each kind refuses configuration syntax, paths and wildcards, naming the flag. */
static void test_one_name_validator_refuses_syntax_for_each_kind(void **state) {
  (void)state;
  assert_int_equal(bus_name_check(BUS_NAME_KIND_TOKEN, "--engine-id", "gpu_0-a"), LLB_STATUS_OK);
  assert_int_equal(bus_name_check(BUS_NAME_KIND_PREFIX, "--prefix", "acme.llm"), LLB_STATUS_OK);
  assert_int_equal(bus_name_check(BUS_NAME_KIND_MODEL, "--model-name", "org/SmolLM2-135M-Instruct.Q4_1"),
                   LLB_STATUS_OK);
  const char *bad_tokens[] = {"e\"0", "e 0", "e.0", "../e", "e}", "e\n", "", NULL};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(bus_name_check(BUS_NAME_KIND_TOKEN, "--engine-id", bad_tokens[i]), LLB_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(llb_err_last(), "--engine-id"));
  }
  const char *bad_prefixes[] = {"llm\"}", "llm..x", ".llm", "llm.", "llm.*", "a b", "x#y"};
  for (int i = 0; i < 7; i++)
    assert_int_equal(bus_name_check(BUS_NAME_KIND_PREFIX, "--prefix", bad_prefixes[i]), LLB_STATUS_INVALID_ARGUMENT);
  const char *bad_models[] = {"m\"x", "../m", "/m", ".m", "-m", "m\nx", "m x", "m{x}", "a..b"};
  for (int i = 0; i < 9; i++)
    assert_int_equal(bus_name_check(BUS_NAME_KIND_MODEL, "--model-name", bad_models[i]), LLB_STATUS_INVALID_ARGUMENT);
  char long_token[BUS_TOKEN_MAX + 2];
  memset(long_token, 'a', sizeof long_token - 1);
  long_token[sizeof long_token - 1] = '\0';
  assert_int_equal(bus_name_check(BUS_NAME_KIND_TOKEN, "--instance", long_token), LLB_STATUS_INVALID_ARGUMENT);
  long_token[BUS_TOKEN_MAX] = '\0';
  assert_int_equal(bus_name_check(BUS_NAME_KIND_TOKEN, "--instance", long_token), LLB_STATUS_OK);
}

static void test_traceparent_round_trip(void **state) {
  (void)state;
  struct bus_trace_ctx t, p;
  assert_int_equal(bus_traceparent_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &t),
                   LLB_STATUS_OK);
  assert_string_equal(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert_string_equal(t.span_id, "00f067aa0ba902b7");
  assert_int_equal(t.flags, 1);
  char buf[BUS_TRACEPARENT_LEN + 1];
  bus_traceparent_format(&t, buf, sizeof buf);
  assert_string_equal(buf, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  bus_trace_new(&t);
  bus_traceparent_format(&t, buf, sizeof buf);
  assert_int_equal(strlen(buf), BUS_TRACEPARENT_LEN);
  assert_int_equal(bus_traceparent_parse(buf, &p), LLB_STATUS_OK);
  assert_string_equal(p.trace_id, t.trace_id);
  assert_string_equal(p.span_id, t.span_id);
  assert_int_equal(p.flags, 1);
}

static void test_traceparent_invalid_forms_rejected(void **state) {
  (void)state;
  const char *bad[] = {
      "",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",         /* short */
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",      /* upper case */
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",      /* zero trace id */
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",      /* zero span id */
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",      /* version ff */
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",    /* v00 with extra */
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",      /* separator */
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",      /* non-hex */
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",      /* flags */
  };
  struct bus_trace_ctx t;
  memset(&t, 0x5a, sizeof t);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(bus_traceparent_parse(bad[i], &t), LLB_STATUS_MALFORMED);
  assert_int_equal(bus_traceparent_parse(NULL, &t), LLB_STATUS_MALFORMED);
  /* A future version with extra fields is accepted by its version-00 prefix. */
  assert_int_equal(
      bus_traceparent_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", &t),
      LLB_STATUS_OK);
}

static void test_child_span_keeps_trace_new_span(void **state) {
  (void)state;
  struct bus_trace_ctx parent, child, other;
  bus_trace_new(&parent);
  bus_trace_child(&parent, &child);
  assert_string_equal(child.trace_id, parent.trace_id);
  assert_string_not_equal(child.span_id, parent.span_id);
  assert_int_equal(child.flags, parent.flags);
  bus_trace_new(&other);
  assert_string_not_equal(other.trace_id, parent.trace_id);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_subjects_follow_design_table),
      cmocka_unit_test(test_subject_tokens_reject_spaces_dots_wildcards),
      cmocka_unit_test(test_subject_tokenize),
      cmocka_unit_test(test_subject_health_metrics),
      cmocka_unit_test(test_subject_trace),
      cmocka_unit_test(test_subject_kv_fetch),
      cmocka_unit_test(test_subject_reply),
      cmocka_unit_test(test_pattern_tenants),
      cmocka_unit_test(test_pattern_engines),
      cmocka_unit_test(test_pattern_health),
      cmocka_unit_test(test_pattern_replies),
      cmocka_unit_test(test_subject_builders_share_the_size_rule),
      cmocka_unit_test(test_one_name_validator_refuses_syntax_for_each_kind),
      cmocka_unit_test(test_traceparent_round_trip),
      cmocka_unit_test(test_traceparent_invalid_forms_rejected),
      cmocka_unit_test(test_child_span_keeps_trace_new_span),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

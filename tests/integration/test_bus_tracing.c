/* bus/span + bus/otlp_export: head sampling, the OTLP JSON a batch becomes, the exporter's
 * bounded queue that drops (and counts) instead of blocking when the collector does not
 * answer, and --trace-publish on a real nats-server. (The export to a real OTLP receiver,
 * validated against opentelemetry-proto, is tests/e2e/test_tracing.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/bus.h"
#include "bus/otlp_export.h"
#include "bus/span.h"
#include "tests/integration/nats_test_server.h"

static struct nats_test_server srv;
static bool have_server;

static void test_trace_id_ratio_rule_follows_the_low_eight_bytes(void **state) {
  (void)state;
  const char *low_zero = "ffffffffffffffff0000000000000001";
  const char *low_half = "00000000000000007fffffffffffffff";
  const char *low_above_half = "00000000000000008000000000000000";
  const char *low_max = "0000000000000000ffffffffffffffff";
  assert_true(bus_trace_id_sampled(low_zero, 1e-9));
  assert_false(bus_trace_id_sampled(low_zero, 0.0));
  assert_true(bus_trace_id_sampled(low_half, 0.5));
  assert_false(bus_trace_id_sampled(low_above_half, 0.5));
  assert_false(bus_trace_id_sampled(low_max, 0.999));
  assert_true(bus_trace_id_sampled(low_max, 1.0));
}

static void test_new_traces_are_sampled_at_the_ratio(void **state) {
  (void)state;
  struct bus_trace_ctx t;
  bus_trace_set_sample_ratio(0.0);
  for (int i = 0; i < 200; i++) {
    bus_trace_new(&t);
    assert_int_equal(t.flags, 0x00);
  }
  bus_trace_set_sample_ratio(0.25);
  int sampled = 0;
  for (int i = 0; i < 4000; i++) {
    bus_trace_new(&t);
    sampled += t.flags & 1;
    /* the flag is the rule applied to the id, so any process decides this trace alike */
    assert_int_equal(t.flags & 1, bus_trace_id_sampled(t.trace_id, 0.25));
  }
  assert_in_range(sampled, 800, 1200); /* 1000 expected; 5 standard deviations is 137 */
  bus_trace_set_sample_ratio(1.0);
  bus_trace_new(&t);
  assert_int_equal(t.flags, 0x01);
  /* a child keeps the parent's flag: later actors obey the head decision */
  struct bus_trace_ctx parent = t, child;
  parent.flags = 0x00;
  bus_trace_child(&parent, &child);
  assert_int_equal(child.flags, 0x00);
}

static struct otlp_exporter_config test_config(void) {
  return (struct otlp_exporter_config){.service_name = "unit\"svc", .instance = "i-1", .engine_id = "7",
                                       .queue_capacity = 16, .max_batch = 8, .flush_interval_ms = 100,
                                       .export_timeout_ms = 200};
}

static void test_batch_encodes_as_otlp_json(void **state) {
  (void)state;
  struct bus_span s[2];
  bus_span_begin(&s[0], NULL, "root", BUS_SPAN_KIND_SERVER);
  bus_span_begin(&s[1], &s[0].ctx, "child", BUS_SPAN_KIND_CLIENT);
  bus_span_attr_int(&s[1], "llmbus.step", 42);
  bus_span_attr_str(&s[1], "note", "quote\" and \x01 control");
  s[1].error = true;
  bus_span_end(NULL, &s[1]);
  bus_span_end(NULL, &s[0]);
  struct otlp_exporter_config cfg = test_config();
  char *json = NULL;
  size_t len = 0;
  assert_int_equal(otlp_encode_json(&cfg, s, 2, &json, &len), LLB_STATUS_OK);
  json_error_t err;
  json_t *doc = json_loadb(json, len, 0, &err);
  if (!doc) fail_msg("invalid JSON: %s: %s", err.text, json);
  json_t *rs = json_array_get(json_object_get(doc, "resourceSpans"), 0);
  json_t *attrs = json_object_get(json_object_get(rs, "resource"), "attributes");
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(attrs, 0), "value"),
                                                        "stringValue")),
                      "unit\"svc");
  json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
  assert_int_equal(json_array_size(spans), 2);
  json_t *root = json_array_get(spans, 0), *child = json_array_get(spans, 1);
  assert_string_equal(json_string_value(json_object_get(root, "traceId")), s[0].ctx.trace_id);
  assert_null(json_object_get(root, "parentSpanId")); /* a root has none */
  assert_string_equal(json_string_value(json_object_get(child, "parentSpanId")), s[0].ctx.span_id);
  assert_int_equal(json_integer_value(json_object_get(child, "kind")), BUS_SPAN_KIND_CLIENT);
  char ns[32];
  snprintf(ns, sizeof ns, "%lld", (long long)s[1].start_unix_ns); /* 64-bit ints are strings */
  assert_string_equal(json_string_value(json_object_get(child, "startTimeUnixNano")), ns);
  json_t *a0 = json_array_get(json_object_get(child, "attributes"), 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(a0, "value"), "intValue")), "42");
  json_t *a1 = json_array_get(json_object_get(child, "attributes"), 1);
  assert_string_equal(json_string_value(json_object_get(json_object_get(a1, "value"), "stringValue")),
                      "quote\" and \x01 control");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(child, "status"), "code")), 2);
  json_decref(doc);
  free(json);
}

/* A collector that accepts connections (the kernel's backlog) but never answers. */
static int silent_listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &n) != 0)
    fail_msg("listener");
  *port = ntohs(a.sin_port);
  return fd;
}

static void test_slow_collector_drops_and_counts_instead_of_blocking(void **state) {
  (void)state;
  int port;
  int fd = silent_listener(&port);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
  struct otlp_exporter_config cfg = test_config();
  cfg.endpoint = url;
  struct otlp_exporter *e = NULL;
  assert_int_equal(otlp_exporter_create(&cfg, &e), LLB_STATUS_OK);
  struct bus_span s;
  bus_span_begin(&s, NULL, "s", BUS_SPAN_KIND_INTERNAL);
  bus_span_end(NULL, &s);
  int accepted = 0;
  for (int i = 0; i < 100; i++) accepted += otlp_exporter_enqueue(e, &s);
  struct bus_tracing_stats st;
  otlp_exporter_get_stats(e, &st);
  /* the thread holds at most one batch in a POST that never ends; the queue holds 16 */
  assert_true(accepted <= cfg.queue_capacity + cfg.max_batch);
  assert_int_equal(st.recorded, (uint64_t)accepted);
  assert_int_equal(st.dropped, (uint64_t)(100 - accepted));
  otlp_exporter_destroy(e); /* one last try per batch, each bounded by export_timeout_ms */
  close(fd);
}

static void test_refused_collector_counts_failed_exports(void **state) {
  (void)state;
  int port;
  int fd = silent_listener(&port);
  close(fd); /* nothing listens there now: connections are refused */
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/base/", port);
  struct otlp_exporter_config cfg = test_config();
  cfg.endpoint = url;
  struct otlp_exporter *e = NULL;
  assert_int_equal(otlp_exporter_create(&cfg, &e), LLB_STATUS_OK);
  struct bus_span s;
  bus_span_begin(&s, NULL, "s", BUS_SPAN_KIND_INTERNAL);
  bus_span_end(NULL, &s);
  for (int i = 0; i < 5; i++) assert_true(otlp_exporter_enqueue(e, &s));
  struct bus_tracing_stats st = {0};
  for (int i = 0; i < 100 && st.export_failed < 5; i++) {
    usleep(50 * 1000);
    otlp_exporter_get_stats(e, &st);
  }
  assert_int_equal(st.export_failed, 5);
  assert_int_equal(st.exported, 0);
  otlp_exporter_destroy(e);
}

static void test_bad_endpoints_are_refused(void **state) {
  (void)state;
  const char *bad[] = {"https://127.0.0.1:4318", "127.0.0.1:4318", "http://", "ftp://x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct otlp_exporter_config cfg = test_config();
    cfg.endpoint = bad[i];
    struct otlp_exporter *e = NULL;
    assert_int_equal(otlp_exporter_create(&cfg, &e), LLB_STATUS_INVALID_ARGUMENT);
    assert_null(e);
  }
}

static void test_publish_puts_sampled_spans_on_the_trace_subject(void **state) {
  (void)state;
  if (!have_server) skip();
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe_sync(b, "llm.trace.unit_actor", &sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, 5000), LLB_STATUS_OK);
  assert_false(bus_tracing_enabled(b));
  struct bus_tracing_options to;
  bus_tracing_options_init(&to);
  to.publish = true;
  to.service_name = "unit_actor";
  to.flush_interval_ms = 50;
  assert_int_equal(bus_tracing_start(b, &to), LLB_STATUS_OK);
  assert_true(bus_tracing_enabled(b));
  struct bus_span unsampled, sampled;
  struct bus_trace_ctx off;
  bus_trace_new(&off);
  off.flags = 0;
  bus_span_begin(&unsampled, &off, "not_recorded", BUS_SPAN_KIND_INTERNAL);
  bus_span_end(b, &unsampled);
  bus_span_begin(&sampled, NULL, "recorded", BUS_SPAN_KIND_INTERNAL);
  bus_span_end(b, &sampled);
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(sub, 10000, &m), LLB_STATUS_OK);
  char *text = strndup((const char *)m->data, m->len);
  assert_non_null(strstr(text, sampled.ctx.span_id));
  assert_null(strstr(text, "not_recorded"));
  assert_non_null(strstr(text, "\"unit_actor\""));
  free(text);
  bus_msg_destroy(m);
  struct bus_tracing_stats st = {0};
  for (int i = 0; i < 200 && st.published < 1; i++) { /* counted once bus_publish returned */
    usleep(10 * 1000);
    bus_tracing_get_stats(b, &st);
  }
  assert_int_equal(st.recorded, 1);
  assert_int_equal(st.published, 1);
  bus_destroy(b);
}

static int setup(void **state) {
  (void)state;
  have_server = nats_test_server_bin() && nats_test_server_start(&srv, 0, false) == 0;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (have_server) nats_test_server_stop(&srv);
  return 0;
}

int main(void) {
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_id_ratio_rule_follows_the_low_eight_bytes),
      cmocka_unit_test(test_new_traces_are_sampled_at_the_ratio),
      cmocka_unit_test(test_batch_encodes_as_otlp_json),
      cmocka_unit_test(test_slow_collector_drops_and_counts_instead_of_blocking),
      cmocka_unit_test(test_refused_collector_counts_failed_exports),
      cmocka_unit_test(test_bad_endpoints_are_refused),
      cmocka_unit_test(test_publish_puts_sampled_spans_on_the_trace_subject),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

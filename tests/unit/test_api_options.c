/* actors/api_server/api_server_options: llmbus-api-server's flags → the actor's options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/api_server/api_server_keys.h"
#include "actors/api_server/api_server_options.h"
#include "actors/api_server/api_server_tools.h"

/* llmbus-api-server's defaults (cmd/api_server_main.c). */
static struct api_server_flags defaults(void) {
  return (struct api_server_flags){.http = "127.0.0.1:8000", .max_body_bytes = 1024 * 1024,
                                   .request_timeout_s = 10, .first_output_timeout_s = 60, .max_concurrent = 256,
                                   .max_connections = API_SERVER_DEFAULT_MAX_CONNECTIONS,
                                   .tenant = "default", .health_actors = API_SERVER_ACTOR_DEFAULT_HEALTH_ACTORS,
                                   .health_missed_beats = 3, .tool_call_parser = "hermes"};
}

static void test_served_model_name_is_the_gguf_basename_unless_given(void **state) {
  (void)state;
  struct api_server_flags f = defaults();
  struct api_server_config c;
  assert_int_equal(api_server_config_init(&c, &f, "/srv/models/SmolLM2-135M-Instruct.Q4_1.gguf", 2000), LLB_STATUS_OK);
  assert_string_equal(c.options.model_name, "SmolLM2-135M-Instruct.Q4_1");
  assert_null(c.options.api_keys);
  assert_int_equal(c.options.health_window_ms, 3 * 2000);
  assert_int_equal(c.options.max_body_bytes, 1024 * 1024);
  assert_string_equal(c.options.http_addr, "127.0.0.1:8000");
  api_server_config_free(&c);
  assert_int_equal(api_server_config_init(&c, &f, "plain-name", 2000), LLB_STATUS_OK);
  assert_string_equal(c.options.model_name, "plain-name");
  api_server_config_free(&c);
  const char *names[] = {"org/served", "alias-b"};
  f.served_model_names = names;
  f.num_served_model_names = 2;
  assert_int_equal(api_server_config_init(&c, &f, "/srv/models/x.gguf", 500), LLB_STATUS_OK);
  assert_string_equal(c.options.model_name, "org/served");
  assert_int_equal(c.options.num_model_aliases, 1);
  assert_string_equal(c.options.model_aliases[0], "alias-b");
  assert_int_equal(c.options.health_window_ms, 3 * 500);
  api_server_config_free(&c);
  f.num_served_model_names = 0; /* nothing to derive a name from */
  assert_int_equal(api_server_config_init(&c, &f, NULL, 2000), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_config_init(&c, &f, "/srv/models/", 2000), LLB_STATUS_INVALID_ARGUMENT);
}

static void test_out_of_range_flags_are_refused(void **state) {
  (void)state;
  struct api_server_config c;
  struct api_server_flags f = defaults();
  f.max_body_bytes = 1023;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f.max_body_bytes = ((int64_t)1 << 30) + 1;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  const struct api_server_flags ok = defaults();
  f = ok;
  f.request_timeout_s = 0;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f = ok;
  f.first_output_timeout_s = -1;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f = ok;
  f.max_concurrent = 0;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f = ok;
  f.health_missed_beats = 0;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f = ok;
  f.tool_call_parser = "pythonic";
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f.tool_call_parser = "mistral";
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_OK);
  assert_int_equal(c.options.tool_call_parser, TOOL_FORMAT_MISTRAL);
  api_server_config_free(&c);
}

static void test_api_key_serves_its_tenant_and_a_bad_one_stops_the_start(void **state) {
  (void)state;
  struct api_server_flags f = defaults();
  const char *keys[] = {"sk-aaaaaaaa", "sk-cccccccc"};
  f.api_keys = keys;
  f.num_api_keys = 2;
  f.tenant = "team-a";
  struct api_server_config c;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_OK);
  assert_non_null(c.options.api_keys);
  assert_string_equal(api_server_keys_tenant_of(c.options.api_keys, "Bearer sk-aaaaaaaa"), "team-a");
  assert_string_equal(api_server_keys_tenant_of(c.options.api_keys, "Bearer sk-cccccccc"), "team-a");
  assert_null(api_server_keys_tenant_of(c.options.api_keys, "Bearer sk-bbbbbbbb"));
  assert_string_equal(c.options.tenant, "team-a");
  api_server_config_free(&c);
  keys[1] = "short"; /* under API_SERVER_KEY_MIN_BYTES: refused, nothing left to free (ASan) */
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f.num_api_keys = 0;
  const char *files[] = {"/nonexistent/llmbus-keys"};
  f.api_keys_files = files;
  f.num_api_keys_files = 1;
  assert_int_not_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_OK);
}

static void test_seed_and_auto_tool_choice_reach_the_options(void **state) {
  (void)state;
  struct api_server_flags f = defaults();
  struct api_server_config c;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_OK);
  assert_false(c.options.has_seed);
  assert_false(c.options.enable_auto_tool_choice); /* vLLM's default: off */
  api_server_config_free(&c);
  f.seed = "42";
  f.enable_auto_tool_choice = true;
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_OK);
  assert_true(c.options.has_seed);
  assert_int_equal(c.options.seed, 42);
  assert_true(c.options.enable_auto_tool_choice);
  api_server_config_free(&c);
  f.seed = "-1";
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
  f.seed = "x";
  assert_int_equal(api_server_config_init(&c, &f, "m.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
}

/* Model names reach JSON answers, logs and metrics labels: the one name rule (bus/subject.h)
 * refuses what a configuration or a log could misread, before the server starts. */
static void test_model_names_with_syntax_are_refused(void **state) {
  (void)state;
  const char *bad[] = {"a\"b", "x\ny", "../etc", "/abs", "-flag", "sp ace", "a{b}", "a..b", "a#b", "a$b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct api_server_flags f = defaults();
    const char *names[] = {"good-alias", bad[i]}; /* an alias is held to the same rule */
    f.served_model_names = names + (i % 2 ? 0 : 1);
    f.num_served_model_names = i % 2 ? 2 : 1;
    struct api_server_config c;
    assert_int_equal(api_server_config_init(&c, &f, NULL, 2000), LLB_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(llb_err_last(), "--served-model-name"));
  }
  struct api_server_flags f = defaults();
  struct api_server_config c;
  assert_int_equal(api_server_config_init(&c, &f, "/m/My Model.gguf", 2000), LLB_STATUS_INVALID_ARGUMENT);
}

static void test_loopback_hosts_are_told_from_open_ones(void **state) {
  (void)state;
  assert_true(api_server_host_is_loopback("127.0.0.1"));
  assert_true(api_server_host_is_loopback("127.9.8.7"));
  assert_true(api_server_host_is_loopback("::1"));
  assert_true(api_server_host_is_loopback("localhost"));
  assert_false(api_server_host_is_loopback("0.0.0.0"));
  assert_false(api_server_host_is_loopback("::"));
  assert_false(api_server_host_is_loopback("10.1.2.3"));
  assert_false(api_server_host_is_loopback(""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_served_model_name_is_the_gguf_basename_unless_given),
      cmocka_unit_test(test_seed_and_auto_tool_choice_reach_the_options),
      cmocka_unit_test(test_model_names_with_syntax_are_refused),
      cmocka_unit_test(test_loopback_hosts_are_told_from_open_ones),
      cmocka_unit_test(test_out_of_range_flags_are_refused),
      cmocka_unit_test(test_api_key_serves_its_tenant_and_a_bad_one_stops_the_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

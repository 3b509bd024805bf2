/* base/status and base/log: every status has a distinct string, errors keep their context and
 * the frames they passed through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/log.h"
#include "base/status.h"

static void test_every_status_has_its_own_string(void **state) {
  (void)state;
  for (int i = 0; i < LLB_STATUS_COUNT; i++)
    for (int j = i + 1; j < LLB_STATUS_COUNT; j++)
      assert_string_not_equal(llb_strerror((llb_status)i), llb_strerror((llb_status)j));
  assert_string_equal(llb_strerror(LLB_STATUS_OK), "ok");
  assert_string_equal(llb_strerror((llb_status)9999), "unknown status");
}

static void test_error_context_names_where_and_why(void **state) {
  (void)state;
  llb_status st = LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s at offset %d", "blk.0", 42);
  assert_int_equal(st, LLB_STATUS_MALFORMED);
  assert_string_equal(llb_err_last(), "tensor blk.0 at offset 42");
  assert_non_null(strstr(llb_err_last_where(), "test_status.c:"));
  assert_non_null(strstr(llb_err_last_where(), "test_error_context_names_where_and_why"));
  llb_err_clear();
  assert_string_equal(llb_err_last(), "");
}

static llb_status fail_in_leaf(void) { return LLB_ERRF(LLB_STATUS_IO, "read %s", "x.gguf"); }

static llb_status pass_through_middle(void) {
  llb_status st = fail_in_leaf();
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  return LLB_STATUS_OK;
}

static llb_status pass_through_outer(void) { return LLB_UPDATE_ERR_STACK(pass_through_middle()); }

static llb_status succeed_outer(void) { return LLB_UPDATE_ERR_STACK(LLB_STATUS_OK); }

static void test_error_stack_names_each_frame_the_error_passed(void **state) {
  (void)state;
  llb_err_clear();
  assert_int_equal(pass_through_outer(), LLB_STATUS_IO);
  assert_string_equal(llb_err_last(), "read x.gguf");
  assert_string_equal(llb_err_last_stack(), "pass_through_middle <- pass_through_outer");
  const char *where = llb_err_last_where();
  assert_non_null(strstr(where, "fail_in_leaf(): read x.gguf [via pass_through_middle <- "
                                "pass_through_outer]"));
  assert_non_null(strstr(where, "test_status.c:"));
}

static void test_ok_status_adds_no_frame_and_new_error_starts_a_new_stack(void **state) {
  (void)state;
  llb_err_clear();
  assert_int_equal(succeed_outer(), LLB_STATUS_OK);
  assert_string_equal(llb_err_last_stack(), "");
  assert_int_equal(pass_through_outer(), LLB_STATUS_IO);
  assert_int_equal(LLB_ERRF(LLB_STATUS_MALFORMED, "second"), LLB_STATUS_MALFORMED);
  assert_string_equal(llb_err_last_stack(), "");
  assert_null(strstr(llb_err_last_where(), "[via"));
  assert_int_equal(pass_through_outer(), LLB_STATUS_IO);
  llb_err_clear();
  assert_string_equal(llb_err_last_stack(), "");
  assert_string_equal(llb_err_last_where(), "");
}

static void test_error_stack_is_bounded_and_says_frames_are_missing(void **state) {
  (void)state;
  (void)LLB_ERRF(LLB_STATUS_INTERNAL, "deep");
  for (int i = 0; i < 200; i++)
    assert_int_equal(llb_err_stack_push(LLB_STATUS_INTERNAL, "a_rather_long_function_name"),
                     LLB_STATUS_INTERNAL);
  const char *stack = llb_err_last_stack();
  assert_true(strlen(stack) < 256);
  assert_true(strlen(stack) > 200);
  assert_string_equal(stack + strlen(stack) - 7, " <- ...");
  char full[256];
  snprintf(full, sizeof full, "%s", stack);
  llb_err_stack_push(LLB_STATUS_INTERNAL, "f");
  assert_string_equal(llb_err_last_stack(), full); /* stays put once full */
  assert_non_null(strstr(llb_err_last_where(), "deep [via a_rather_long_function_name <- "));
  llb_err_clear();
}

static void test_log_quote_escapes_and_truncates(void **state) {
  (void)state;
  char buf[16];
  assert_string_equal(llb_log_quote(buf, sizeof buf, "a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
  llb_log_quote(buf, sizeof buf, "0123456789abcdefghij");
  assert_true(strlen(buf) < sizeof buf);
  assert_int_equal(buf[strlen(buf) - 1], '"');
}

static void test_log_redacts_credentials_in_nats_urls(void **state) {
  (void)state;
  char b[256];
  assert_string_equal(llb_log_redact_url(b, sizeof b, "nats://alice:s3cret@10.0.0.1:4222"), "nats://***@10.0.0.1:4222");
  assert_string_equal(llb_log_redact_url(b, sizeof b, "nats://tok@h:1,tls://u:p@h2:2,nats://h3:3"),
                      "nats://***@h:1,tls://***@h2:2,nats://h3:3");
  assert_string_equal(llb_log_redact_url(b, sizeof b, "u:p@host:4222"), "***@host:4222"); /* no scheme */
  assert_string_equal(llb_log_redact_url(b, sizeof b, "nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
  assert_string_equal(llb_log_redact_url(b, sizeof b, "nats://a:b@c@host:1"), "nats://***@host:1"); /* '@' in the password */
  assert_null(strstr(llb_log_redact_url(b, 12, "nats://alice:s3cret@h:1"), "s3cret")); /* truncated, still redacted */
}

/* Every line names the engine and the instance once actor_main set the context. */
static void test_log_lines_carry_the_process_context(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  int saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  llb_log_set_actor("scheduler");
  llb_log_set_context("engine=7 instance=host-42");
  llb_log(LLB_LOG_LEVEL_ERROR, "something", "k=%d", 1);
  llb_log_set_context(NULL);
  llb_log(LLB_LOG_LEVEL_ERROR, "plain", NULL);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fds[1]);
  char buf[1024] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  assert_true(n > 0);
  assert_non_null(strstr(buf, " actor=scheduler engine=7 instance=host-42 event=something k=1\n"));
  assert_non_null(strstr(buf, " actor=scheduler event=plain\n"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_status_has_its_own_string),
      cmocka_unit_test(test_error_context_names_where_and_why),
      cmocka_unit_test(test_error_stack_names_each_frame_the_error_passed),
      cmocka_unit_test(test_ok_status_adds_no_frame_and_new_error_starts_a_new_stack),
      cmocka_unit_test(test_error_stack_is_bounded_and_says_frames_are_missing),
      cmocka_unit_test(test_log_quote_escapes_and_truncates),
      cmocka_unit_test(test_log_redacts_credentials_in_nats_urls),
      cmocka_unit_test(test_log_lines_carry_the_process_context),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

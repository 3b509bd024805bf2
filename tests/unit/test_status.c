/* base/status and base/log: every status has a distinct string, errors keep their context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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

static void test_log_quote_escapes_and_truncates(void **state) {
  (void)state;
  char buf[16];
  assert_string_equal(llb_log_quote(buf, sizeof buf, "a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
  llb_log_quote(buf, sizeof buf, "0123456789abcdefghij");
  assert_true(strlen(buf) < sizeof buf);
  assert_int_equal(buf[strlen(buf) - 1], '"');
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_status_has_its_own_string),
      cmocka_unit_test(test_error_context_names_where_and_why),
      cmocka_unit_test(test_log_quote_escapes_and_truncates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

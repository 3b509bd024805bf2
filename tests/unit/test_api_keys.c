/* actors/api_server/api_server_keys: `Authorization: Bearer KEY` → tenant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/api_server/api_server_keys.h"

static void test_bearer_key_maps_to_its_tenant_and_nothing_else_does(void **state) {
  (void)state;
  struct api_server_keys *k;
  assert_int_equal(api_server_keys_create(&k), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_add(k, "sk-aaaaaaaa", "a"), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_add(k, "sk-bbbbbbbb", "b"), LLB_STATUS_OK);
  assert_string_equal(api_server_keys_tenant_of(k, "Bearer sk-aaaaaaaa"), "a");
  assert_string_equal(api_server_keys_tenant_of(k, "bearer sk-bbbbbbbb"), "b");
  assert_null(api_server_keys_tenant_of(k, NULL));
  assert_null(api_server_keys_tenant_of(k, ""));
  assert_null(api_server_keys_tenant_of(k, "sk-aaaaaaaa"));          /* no scheme */
  assert_null(api_server_keys_tenant_of(k, "Basic sk-aaaaaaaa"));    /* another scheme */
  assert_null(api_server_keys_tenant_of(k, "Bearer sk-aaaaaaa"));    /* a prefix */
  assert_null(api_server_keys_tenant_of(k, "Bearer sk-aaaaaaaaa"));  /* longer */
  assert_null(api_server_keys_tenant_of(k, "Bearer sk-aaaaaaab"));   /* last byte */
  assert_null(api_server_keys_tenant_of(k, "Bearer "));
  assert_int_equal(api_server_keys_count(k), 2);
  api_server_keys_destroy(k);
}

static void test_bad_keys_and_tenants_are_refused(void **state) {
  (void)state;
  struct api_server_keys *k;
  assert_int_equal(api_server_keys_create(&k), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_add(k, "short", "a"), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_keys_add(k, "has space in it", "a"), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_keys_add(k, "sk-cccccccc", "a.b"), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_keys_add(k, "sk-cccccccc", "a"), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_add(k, "sk-cccccccc", "b"), LLB_STATUS_INVALID_ARGUMENT); /* twice */
  assert_null(strstr(llb_err_last(), "sk-cccccccc")); /* never quotes a key */
  api_server_keys_destroy(k);
}

static void test_keys_file_must_be_private_and_well_formed(void **state) {
  (void)state;
  char path[] = "/tmp/llmbus-api-keys-XXXXXX";
  int fd = mkstemp(path);
  const char *text = "# keys\nsk-one-11111111 a\n\n\tsk-two-22222222\tb\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  struct api_server_keys *k;
  assert_int_equal(api_server_keys_create(&k), LLB_STATUS_OK);
  assert_int_equal(chmod(path, 0644), 0);
  assert_int_equal(api_server_keys_load_file(k, path), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(api_server_keys_load_file(k, path), LLB_STATUS_OK);
  assert_string_equal(api_server_keys_tenant_of(k, "Bearer sk-two-22222222"), "b");
  api_server_keys_destroy(k);
  fd = open(path, O_WRONLY | O_TRUNC);
  const char *bad = "sk-one-11111111 a extra\n";
  assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
  close(fd);
  assert_int_equal(api_server_keys_create(&k), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_load_file(k, path), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), ":1:"));
  assert_null(strstr(llb_err_last(), "sk-one"));
  api_server_keys_destroy(k);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bearer_key_maps_to_its_tenant_and_nothing_else_does),
      cmocka_unit_test(test_bad_keys_and_tenants_are_refused),
      cmocka_unit_test(test_keys_file_must_be_private_and_well_formed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

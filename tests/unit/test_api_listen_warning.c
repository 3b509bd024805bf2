/* The api server warns at start when it listens on an address other than loopback with no API
 * key at all (actors/api_server/actor.c, wherever the address came from: --http or serve's
 * flags): its log line `http_open_without_api_key`, captured from stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/api_server/actor.h"
#include "actors/api_server/api_server_keys.h"

/* Whether creating an api actor for `addr` (with keys or not) logs the warning. */
static bool warns(const char *addr, const struct api_server_keys *keys) {
  char path[] = "/tmp/llmbus-listen-warning-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  const struct api_server_actor_options o = {.http_addr = addr, .model_name = "smol", .api_keys = keys};
  struct api_server_actor *a = NULL;
  llb_status st = api_server_actor_create(&o, &a);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  assert_int_equal(st, LLB_STATUS_OK);
  api_server_actor_destroy(a);
  char buf[8192] = {0};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  unlink(path);
  return n > 0 && strstr(buf, "event=http_open_without_api_key") != NULL;
}

static void test_an_open_address_without_keys_is_logged(void **state) {
  (void)state;
  assert_true(warns("0.0.0.0:8000", NULL));
  assert_true(warns("[::]:8000", NULL));
  assert_false(warns("127.0.0.1:8000", NULL));
  assert_false(warns("[::1]:8000", NULL));
  struct api_server_keys *keys = NULL;
  assert_int_equal(api_server_keys_create(&keys), LLB_STATUS_OK);
  assert_int_equal(api_server_keys_add(keys, "sk-test-0123456789", "default"), LLB_STATUS_OK);
  assert_false(warns("0.0.0.0:8000", keys));
  api_server_keys_destroy(keys);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_an_open_address_without_keys_is_logged)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

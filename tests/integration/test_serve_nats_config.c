/* cmd/supervisor/serve_nats_config: the locked-down NATS set-up of `llmbus serve` on a real nats-server
 * (started by the supervisor with the generated nats.conf). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/bus.h"
#include "bus/credentials.h"
#include "cmd/supervisor/serve_nats_config.h"
#include "cmd/supervisor/supervisor.h"

static llb_status connect_as(const char *url, const char *user, const char *password, struct bus **out) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.user = user;
  o.password = password;
  o.install_signal_handlers = false;
  o.max_reconnect = 0;
  o.connect_timeout_ms = 2000;
  return bus_connect(&o, out);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

static void test_generated_config_admits_each_user_with_its_password_only(void **state) {
  (void)state;
  struct serve_tenants tn = {.num = 2};
  snprintf(tn.names[0], sizeof tn.names[0], "default");
  snprintf(tn.names[1], sizeof tn.names[1], "acme");
  struct serve_nats_auth *auth = NULL;
  assert_int_equal(serve_nats_auth_create(&tn, "llm", &auth), LLB_STATUS_OK);
  struct stat sb;
  assert_int_equal(stat(serve_nats_auth_dir(auth), &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  assert_int_equal(stat(serve_nats_auth_config_path(auth), &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", serve_nats_auth_dir(auth));
  /* nats.conf holds bcrypt hashes only, and the tenants' accounts their limits, without JetStream */
  char *conf = read_all(serve_nats_auth_config_path(auth));
  assert_non_null(conf);
  int hashes = 0;
  for (const char *p = conf; (p = strstr(p, "password: \"$2b$06$")); p++) hashes++;
  assert_int_equal(hashes, 10);
  int limited = 0;
  for (const char *p = conf; (p = strstr(p, "jetstream: disabled\n    limits: {max_connections: 64, "
                                             "max_subscriptions: 256, max_payload: 1048576}")); p++)
    limited++;
  assert_int_equal(limited, 2);

  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_config_file = serve_nats_auth_config_path(auth);
  struct supervisor *sup = NULL;
  assert_int_equal(supervisor_create(&cfg, &sup), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(sup), LLB_STATUS_OK);
  const char *url = supervisor_nats_url(sup);

  const char *users[] = {"kv-manager", "gpu-worker", "scheduler", "output-processor", "input-processor",
                         "encoder-cache", "api-server", "operator", "tenant-default", "tenant-acme"};
  char first_password[BUS_PASSWORD_MAX + 1] = "";
  for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
    char path[PATH_MAX + 80], password[BUS_PASSWORD_MAX + 1];
    assert_int_equal(serve_nats_auth_password_file(auth, users[i], path, sizeof path), LLB_STATUS_OK);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(bus_password_file_read(path, password, sizeof password), LLB_STATUS_OK);
    assert_int_equal(strlen(password), 64);
    if (strstr(conf, password)) fail_msg("%s's password is in nats.conf as it is", users[i]);
    assert_string_not_equal(password, first_password); /* one password per user */
    if (!first_password[0]) snprintf(first_password, sizeof first_password, "%s", password);
    struct bus *b = NULL;
    llb_status st = connect_as(url, users[i], password, &b);
    if (st != LLB_STATUS_OK) fail_msg("%s cannot connect: %s", users[i], llb_err_last());
    bus_destroy(b);
  }
  struct bus *b = NULL;
  assert_int_not_equal(connect_as(url, NULL, NULL, &b), LLB_STATUS_OK);
  assert_null(b);
  assert_int_not_equal(connect_as(url, "scheduler", first_password, &b), LLB_STATUS_OK); /* kv-manager's */
  assert_null(strstr(llb_err_last(), first_password)); /* never in an error */
  assert_int_not_equal(connect_as(url, "nobody", "x", &b), LLB_STATUS_OK);
  char path[PATH_MAX + 80];
  assert_int_equal(serve_nats_auth_password_file(auth, "tenant-other", path, sizeof path), LLB_STATUS_INVALID_ARGUMENT);
  free(conf);

  supervisor_destroy(sup);
  serve_nats_auth_destroy(auth);
  assert_int_not_equal(access(dir, F_OK), 0); /* removed with everything in it */
  bus_shutdown(5000);
}

static void test_permissions_follow_the_subject_table(void **state) {
  (void)state;
  char buf[2048];
  assert_true(serve_nats_user_permissions("gpu-worker", "llm", buf, sizeof buf) > 0);
  assert_non_null(strstr(buf, "subscribe: {allow: [\"llm.engine.*.execute\""));
  assert_non_null(strstr(buf, "allow_responses: true"));
  assert_null(strstr(buf, "\"llm.engine.*.kv\"")); /* the kv_manager's subject is not the worker's */
  assert_non_null(strstr(buf, "\"llm.engine.*.kv_fetch\"")); /* KV blocks between workers (P/D) */
  assert_true(serve_nats_user_permissions("scheduler", "x", buf, sizeof buf) > 0);
  assert_non_null(strstr(buf, "publish: {allow: [\"x.engine.*.kv\", \"x.engine.*.encoder\", \"x.engine.*.execute\""));
  assert_true(serve_nats_user_permissions("kv-manager", "llm", buf, sizeof buf) > 0);
  assert_null(strstr(buf, "execute"));
  assert_true(serve_nats_user_permissions("tenant-acme", "llm", buf, sizeof buf) > 0);
  assert_string_equal(buf, "{publish: {allow: [\"llm.generate.acme\", \"llm.abort.acme\", \"llm.tokenize.acme\"]}, "
                           "subscribe: {allow: [\"_INBOX.>\"]}}");
  assert_int_equal(serve_nats_user_permissions("tenant-a.b", "llm", buf, sizeof buf), -1);
  assert_int_equal(serve_nats_user_permissions("root", "llm", buf, sizeof buf), -1);
  assert_int_equal(serve_nats_user_permissions("scheduler", "llm", buf, 16), -1);
}

static void test_tenants_file_names_and_errors(void **state) {
  (void)state;
  char path[] = "/tmp/llmbus-tenants-XXXXXX";
  int fd = mkstemp(path);
  const char *text = "# ours\nacme max_concurrent=4\n\nbeta\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  struct serve_tenants tn;
  assert_int_equal(serve_tenants_read(path, &tn), LLB_STATUS_OK);
  assert_int_equal(tn.num, 2);
  assert_string_equal(tn.names[0], "acme");
  assert_string_equal(tn.names[1], "beta");
  FILE *f = fopen(path, "a");
  fputs("acme\n", f);
  fclose(f);
  assert_int_equal(serve_tenants_read(path, &tn), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "twice"));
  unlink(path);
}

/* nats.conf with each literal password replaced by $LLMBUS_PW_<USER> (upper case, '-' as '_'),
 * nats-server's reference to an environment variable: the shape of ops/nats/llmbus-accounts.conf. */
static char *example_of(const char *conf) {
  size_t cap = strlen(conf) * 2 + 4096, len = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  len += (size_t)snprintf(out, cap,
                          "# The accounts `llmbus serve --tenants` generates for the tenants default and acme\n"
                          "# (cmd/supervisor/serve_nats_config.h), passwords from the server's environment: export one\n"
                          "# LLMBUS_PW_<USER> per user before `nats-server -c`, best its bcrypt hash (serve writes\n"
                          "# \"$2b$06$...\" hashes; the clients keep the password). Checked against the generator by\n"
                          "# tests/integration/test_serve_nats_config.c (LLMBUS_WRITE_EXAMPLE=1 rewrites it).\n");
  const char *p = strchr(conf, '\n') + 1; /* the generated header line is replaced by the above */
  while (*p) {
    const char *user = strstr(p, "{user: \""), *eol = strchr(p, '\n');
    if (!eol) eol = p + strlen(p);
    if (user && user < eol) {
      const char *name = user + 8, *name_end = strchr(name, '"');
      const char *pw = strstr(name_end, "password: \""), *pw_end = strchr(pw + 11, '"');
      len += (size_t)snprintf(out + len, cap - len, "%.*spassword: $LLMBUS_PW_", (int)(pw - p), p);
      for (const char *c = name; c < name_end; c++) out[len++] = *c == '-' ? '_' : (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
      p = pw_end + 1;
      continue;
    }
    len += (size_t)snprintf(out + len, cap - len, "%.*s\n", (int)(eol - p), p);
    p = *eol ? eol + 1 : eol;
  }
  return out;
}

static void test_ops_example_is_what_serve_generates(void **state) {
  (void)state;
  struct serve_tenants tn = {.num = 2};
  snprintf(tn.names[0], sizeof tn.names[0], "default");
  snprintf(tn.names[1], sizeof tn.names[1], "acme");
  struct serve_nats_auth *auth = NULL;
  assert_int_equal(serve_nats_auth_create(&tn, "llm", &auth), LLB_STATUS_OK);
  char *conf = read_all(serve_nats_auth_config_path(auth));
  assert_non_null(conf);
  char *example = example_of(conf);
  const char *src = getenv("LLMBUS_SOURCE_DIR");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/ops/nats/llmbus-accounts.conf", src ? src : ".");
  if (getenv("LLMBUS_WRITE_EXAMPLE")) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(example, f);
    fclose(f);
  }
  char *committed = read_all(path);
  if (!committed || strcmp(committed, example) != 0)
    fail_msg("%s differs from what serve generates; regenerate it with LLMBUS_WRITE_EXAMPLE=1 "
             "LLMBUS_SOURCE_DIR=<checkout> test_serve_nats_config", path);
  free(committed);
  free(example);
  free(conf);
  serve_nats_auth_destroy(auth);
}

int main(void) {
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_permissions_follow_the_subject_table),
      cmocka_unit_test(test_tenants_file_names_and_errors),
      cmocka_unit_test(test_generated_config_admits_each_user_with_its_password_only),
      cmocka_unit_test(test_ops_example_is_what_serve_generates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

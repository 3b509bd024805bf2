/* The LoRA adapters the front doors resolve `model` against (schemas/lora_registry.h), with the
 * tenants file's `loras=` (actors/input_processor/tenant_limits.h): an adapter listed for some
 * tenants is theirs only, another tenant sees it as unknown; a worker's list replaces its last;
 * a silent worker's adapters go away. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "actors/input_processor/tenant_limits.h"
#include "schemas/lora_registry.h"

#define S(x) llb_str_c(x)
#define SEC (1000LL * 1000 * 1000)

static struct llb_heartbeat worker(const char *instance, const struct llb_lora_adapter *a, int32_t n) {
  return (struct llb_heartbeat){.actor = S("gpu_worker"), .instance = S(instance), .lora_adapters = a,
                                .num_lora_adapters = n};
}

static void test_adapters_resolve_for_their_tenants_only(void **state) {
  (void)state;
  struct tenant_limit t;
  char why[200];
  struct tenant_limits_config cfg = {0};
  assert_int_equal(tenant_limits_parse_line("acme loras=sql-lora,org/chat max_concurrent=2", &t, why, sizeof why), 1);
  assert_string_equal(t.loras, "sql-lora,org/chat");
  cfg.tenants[cfg.num++] = t;
  assert_int_equal(tenant_limits_parse_line("beta loras=org/chat", &t, why, sizeof why), 1);
  cfg.tenants[cfg.num++] = t;
  assert_int_equal(tenant_limits_parse_line("x loras=../etc", &t, why, sizeof why), -1);
  assert_non_null(strstr(why, "not a model name"));
  assert_int_equal(tenant_limits_parse_line("x loras=", &t, why, sizeof why), -1);
  struct lora_registry *r;
  assert_int_equal(lora_registry_create(10 * SEC, &r), LLB_STATUS_OK);
  assert_int_equal(tenant_limits_restrict_loras(&cfg, r), LLB_STATUS_OK);
  const struct llb_lora_adapter ads[3] = {{.lora_name = S("sql-lora"), .lora_int_id = 11, .rank = 8}, {.lora_name = S("org/chat"), .lora_int_id = 22, .rank = 4}, {.lora_name = S("open"), .lora_int_id = 33, .rank = 16}};
  const struct llb_heartbeat hb = worker("w1", ads, 3);
  lora_registry_on_heartbeat(r, &hb, 1 * SEC);
  assert_int_equal(lora_registry_lookup(r, "sql-lora", "acme", 2 * SEC), 11);
  assert_int_equal(lora_registry_lookup(r, "sql-lora", "beta", 2 * SEC), 0); /* acme's: unknown to beta */
  assert_int_equal(lora_registry_lookup(r, "org/chat", "beta", 2 * SEC), 22);
  assert_int_equal(lora_registry_lookup(r, "open", "default", 2 * SEC), 33); /* listed for none: everyone's */
  assert_int_equal(lora_registry_lookup(r, "missing", "acme", 2 * SEC), 0);
  char names[8][LLB_LORA_NAME_MAX + 1];
  assert_int_equal(lora_registry_list(r, "beta", 2 * SEC, names, 8), 2);
  assert_string_equal(names[0], "open");
  assert_string_equal(names[1], "org/chat");
  assert_int_equal(lora_registry_list(r, "acme", 2 * SEC, names, 8), 3);
  lora_registry_destroy(r);
}

static void test_worker_lists_replace_and_expire(void **state) {
  (void)state;
  struct lora_registry *r;
  assert_int_equal(lora_registry_create(10 * SEC, &r), LLB_STATUS_OK);
  const struct llb_lora_adapter a[1] = {{.lora_name = S("a"), .lora_int_id = 1, .rank = 8}}, b[1] = {{.lora_name = S("b"), .lora_int_id = 2, .rank = 8}};
  struct llb_heartbeat hb = worker("w1", a, 1);
  lora_registry_on_heartbeat(r, &hb, 1 * SEC);
  hb = worker("w2", a, 1); /* a second engine's worker serves it too: listed once */
  lora_registry_on_heartbeat(r, &hb, 1 * SEC);
  char names[4][LLB_LORA_NAME_MAX + 1];
  assert_int_equal(lora_registry_list(r, "t", 2 * SEC, names, 4), 1);
  hb = worker("w1", b, 1); /* w1 restarted with b only */
  lora_registry_on_heartbeat(r, &hb, 5 * SEC);
  assert_int_equal(lora_registry_lookup(r, "a", "t", 6 * SEC), 1); /* still w2's */
  assert_int_equal(lora_registry_lookup(r, "a", "t", 12 * SEC), 0); /* w2 silent for 11 s */
  assert_int_equal(lora_registry_lookup(r, "b", "t", 12 * SEC), 2);
  const struct llb_heartbeat other = {.actor = S("scheduler"), .instance = S("w1")};
  lora_registry_on_heartbeat(r, &other, 13 * SEC); /* not a worker: ignored */
  assert_int_equal(lora_registry_lookup(r, "b", "t", 13 * SEC), 2);
  assert_int_equal(lora_registry_restrict(r, "../x", "t"), LLB_STATUS_INVALID_ARGUMENT);
  lora_registry_destroy(r);
}

/* An adapter loaded at run time (/v1/load_lora_adapter: Heartbeat LoRAAdapter.dynamic) belongs to
 * the tenant that loaded it, another tenant sees it as unknown; loaded by the default tenant (no
 * tenants) it is everyone's. The api server learns back what the workers loaded (path, owner) and
 * how many workers serve it. */
static void test_run_time_adapters_belong_to_their_loader(void **state) {
  (void)state;
  struct lora_registry *r;
  assert_int_equal(lora_registry_create(10 * SEC, &r), LLB_STATUS_OK);
  const struct llb_lora_adapter a[3] = {
      {.lora_name = S("static"), .lora_int_id = 1, .rank = 8},
      {.lora_name = S("mine"), .lora_int_id = 2, .rank = 8, .dynamic = true, .lora_path = S("acme/m.gguf"),
       .tenant = S("acme")},
      {.lora_name = S("shared"), .lora_int_id = 3, .rank = 8, .dynamic = true, .lora_path = S("s.gguf"),
       .tenant = S(LORA_REGISTRY_OPEN_TENANT)}};
  struct llb_heartbeat hb = worker("w1", a, 3);
  lora_registry_on_heartbeat(r, &hb, 1 * SEC);
  hb = worker("w2", a, 1);
  lora_registry_on_heartbeat(r, &hb, 1 * SEC);
  assert_int_equal(lora_registry_lookup(r, "mine", "acme", 2 * SEC), 2);
  assert_int_equal(lora_registry_lookup(r, "mine", "beta", 2 * SEC), 0);
  assert_int_equal(lora_registry_lookup(r, "shared", "beta", 2 * SEC), 3);
  char names[4][LLB_LORA_NAME_MAX + 1];
  assert_int_equal(lora_registry_list(r, "beta", 2 * SEC, names, 4), 2); /* shared, static */
  assert_int_equal(lora_registry_num_workers(r, 2 * SEC, 0), 2);
  hb = worker("w1", a, 3);
  lora_registry_on_heartbeat(r, &hb, 5 * SEC);
  assert_int_equal(lora_registry_num_workers(r, 6 * SEC, 3 * SEC), 1); /* w2 silent for 5 s */
  char owner[LLB_LORA_TENANT_MAX + 1];
  assert_int_equal(lora_registry_served_by(r, "static", 2 * SEC, owner, sizeof owner), 2);
  assert_string_equal(owner, "");
  assert_int_equal(lora_registry_served_by(r, "mine", 2 * SEC, owner, sizeof owner), 1);
  assert_string_equal(owner, "acme");
  struct lora_registry_dynamic d[4];
  assert_int_equal(lora_registry_dynamic(r, 2 * SEC, d, 4), 2);
  assert_string_equal(d[0].name, "mine");
  assert_string_equal(d[0].path, "acme/m.gguf");
  assert_string_equal(d[0].tenant, "acme");
  lora_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_time_adapters_belong_to_their_loader),
      cmocka_unit_test(test_adapters_resolve_for_their_tenants_only),
      cmocka_unit_test(test_worker_lists_replace_and_expire),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

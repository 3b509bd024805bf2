/* --lora-modules values (actors/gpu_worker/lora_modules.c): vLLM's name=path and JSON forms,
 * names through bus_name_check, lora_int_id derived from the name (the same everywhere, in
 * [1, 2^31 - 1]), duplicates and id collisions refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gpu_worker/lora_modules.h"

static void test_both_forms_parse_and_ids_follow_the_name(void **state) {
  (void)state;
  const char *v[] = {"sql-lora=/models/sql.gguf",
                     "{\"name\": \"org/chat-lora\", \"path\": \"chat.gguf\", \"base_model_name\": \"SmolLM2\"}"};
  struct lora_modules m;
  assert_int_equal(lora_modules_parse(v, 2, &m), LLB_STATUS_OK);
  assert_int_equal(m.num, 2);
  assert_string_equal(m.items[0].name, "sql-lora");
  assert_string_equal(m.items[0].path, "/models/sql.gguf");
  assert_null(m.items[0].base_model_name);
  assert_string_equal(m.items[1].name, "org/chat-lora");
  assert_string_equal(m.items[1].path, "chat.gguf");
  assert_string_equal(m.items[1].base_model_name, "SmolLM2");
  assert_int_equal(m.items[0].lora_int_id, lora_module_int_id("sql-lora"));
  assert_true(m.items[0].lora_int_id >= 1 && m.items[1].lora_int_id >= 1);
  assert_ptr_equal(lora_modules_find(&m, "org/chat-lora"), &m.items[1]);
  assert_null(lora_modules_find(&m, "other"));
  lora_modules_free(&m);
  /* pinned: another engine or a restart computes the same id from the name alone */
  assert_int_equal(lora_module_int_id("sql-lora"), lora_module_int_id("sql-lora"));
  assert_true(lora_module_int_id("sql-lora") != lora_module_int_id("sql-lorb"));
}

static void test_bad_values_are_refused_naming_the_problem(void **state) {
  (void)state;
  const struct {
    const char *value, *why;
  } bad[] = {
      {"no-equals-sign", "name=path"},
      {"=x.gguf", "a model name"},
      {"../up=x.gguf", "a model name"},
      {"a b=x.gguf", "a model name"},
      {"ok=", "path is empty"},
      {"{\"name\": \"x\"}", "required"},
      {"{\"name\": \"x\", \"path\": \"p\", \"scale\": 2}", "not one of"},
      {"{\"name\": 3, \"path\": \"p\"}", "not a string"},
      {"{not json", "JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct lora_modules m;
    assert_int_equal(lora_modules_parse(&bad[i].value, 1, &m), LLB_STATUS_INVALID_ARGUMENT);
    if (!strstr(llb_err_last(), bad[i].why)) fail_msg("%s: %s", bad[i].value, llb_err_last());
    lora_modules_free(&m);
  }
  const char *twice[] = {"a=x.gguf", "a=y.gguf"};
  struct lora_modules m;
  assert_int_equal(lora_modules_parse(twice, 2, &m), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "given twice"));
  lora_modules_free(&m);
}

struct named_id {
  int32_t id;
  int32_t n;
};

static int by_id(const void *a, const void *b) {
  const struct named_id *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

/* Two names whose ids collide (found by the birthday bound among a few 10^5 names) are refused,
 * never renumbered: an id must stay the name's on every engine. */
static void test_two_names_with_one_id_are_refused(void **state) {
  (void)state;
  enum { N = 300000 };
  struct named_id *t = malloc(N * sizeof *t);
  assert_non_null(t);
  char name[32];
  for (int32_t i = 0; i < N; i++) {
    snprintf(name, sizeof name, "adapter-%d", i);
    t[i] = (struct named_id){lora_module_int_id(name), i};
  }
  qsort(t, N, sizeof *t, by_id);
  int32_t a = -1, b = -1;
  for (int32_t i = 1; i < N && a < 0; i++)
    if (t[i].id == t[i - 1].id) a = t[i - 1].n, b = t[i].n;
  free(t);
  assert_true(a >= 0);
  char va[48], vb[48];
  snprintf(va, sizeof va, "adapter-%d=a.gguf", a);
  snprintf(vb, sizeof vb, "adapter-%d=b.gguf", b);
  const char *v[] = {va, vb};
  struct lora_modules m;
  assert_int_equal(lora_modules_parse(v, 2, &m), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "same lora_int_id"));
  lora_modules_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_both_forms_parse_and_ids_follow_the_name),
      cmocka_unit_test(test_bad_values_are_refused_naming_the_problem),
      cmocka_unit_test(test_two_names_with_one_id_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Scheduler with LoRA adapters (vLLM v1 scheduler.py: max_loras, _gen_lora_extra_hash_keys):
 * a step never runs more distinct adapters than max_loras, a waiting request whose adapter
 * cannot be added waits while others are scheduled, and the prefix cache never hands one
 * adapter's (or the base model's) KV to another. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "test_scheduler_harness.h"

static struct sched_config lora_cfg(int32_t max_loras) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = 256;
  c.num_lookahead_tokens = 0;
  c.enable_lora = true;
  c.max_loras = max_loras;
  return c;
}

/* A request of n_prompt tokens (the same tokens for every id) running adapter `lora` (NULL = base). */
static llb_status add_lora(struct harness *h, const char *id, int32_t n_prompt, int32_t max_tokens,
                           const char *lora, double arrival) {
  int32_t toks[256];
  for (int32_t i = 0; i < n_prompt; i++) toks[i] = 7 + i % 50;
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = max_tokens;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n_prompt,
                                 .eos_token_id = 2, .arrival_time = arrival, .sampling_params = sp,
                                 .lora_name = lora, .lora_int_id = lora ? (int32_t)(llb_fnv1a64_str(lora) % 1000) + 1 : 0};
  return sched_add_request(h->s, &nr);
}

/* Distinct adapters among the running requests (every one of them is in the step's batch). */
static int distinct_running_loras(struct harness *h, const char *const *ids, int n) {
  int32_t seen[16];
  int num = 0;
  for (int i = 0; i < n; i++) {
    const struct sched_request *r = sched_find_request(h->s, ids[i]);
    if (!r || r->status != SCHED_REQUEST_STATUS_RUNNING || !r->lora_int_id) continue;
    bool dup = false;
    for (int k = 0; k < num; k++) dup |= seen[k] == r->lora_int_id;
    if (!dup) seen[num++] = r->lora_int_id;
  }
  return num;
}

static bool step_has_new(const struct harness *h, const char *id) {
  for (int32_t i = 0; i < h->out.num_new_reqs; i++)
    if (strcmp(h->out.new_reqs[i].req_id, id) == 0) return true;
  return false;
}

static void test_waiting_request_whose_adapter_exceeds_max_loras_waits_while_others_run(void **state) {
  (void)state;
  struct sched_config c = lora_cfg(1);
  struct harness h;
  h_init(&h, &c);
  const char *ids[] = {"a1", "b1", "base", "a2"};
  assert_int_equal(add_lora(&h, "a1", 8, 3, "sql-lora", 0), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "b1", 8, 3, "chat-lora", 1), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "base", 8, 3, NULL, 2), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "a2", 8, 3, "sql-lora", 3), LLB_STATUS_OK);
  h_schedule(&h);
  /* b1 arrived before base and a2 but its adapter would be a second one: passed over */
  assert_int_equal(h.out.num_new_reqs, 3);
  assert_true(step_has_new(&h, "a1") && step_has_new(&h, "base") && step_has_new(&h, "a2"));
  assert_false(step_has_new(&h, "b1"));
  assert_int_equal(h.out.new_reqs[0].lora_int_id, sched_find_request(h.s, "a1")->lora_int_id);
  assert_string_equal(h.out.new_reqs[0].lora_name, "sql-lora");
  assert_null(h.out.new_reqs[1].lora_name); /* base */
  h_execute(&h);
  bool b1_ran = false;
  for (int step = 0; step < 40 && sched_num_unfinished(h.s) > 0; step++) {
    h_schedule(&h);
    assert_true(distinct_running_loras(&h, ids, 4) <= 1);
    if (step_has_new(&h, "b1")) {
      b1_ran = true; /* only once sql-lora's requests have left */
      assert_null(sched_find_request(h.s, "a1"));
      assert_null(sched_find_request(h.s, "a2"));
    }
    h_execute(&h);
  }
  assert_true(b1_ran);
  assert_int_equal(sched_num_unfinished(h.s), 0);
  h_fini(&h);
}

static void test_max_loras_two_runs_two_adapters_and_the_base_together(void **state) {
  (void)state;
  struct sched_config c = lora_cfg(2);
  struct harness h;
  h_init(&h, &c);
  assert_int_equal(add_lora(&h, "a", 8, 2, "a", 0), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "b", 8, 2, "b", 1), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "c", 8, 2, "c", 2), LLB_STATUS_OK);
  assert_int_equal(add_lora(&h, "base", 8, 2, NULL, 3), LLB_STATUS_OK);
  h_schedule(&h);
  assert_int_equal(h.out.num_new_reqs, 3);
  assert_true(step_has_new(&h, "a") && step_has_new(&h, "b") && step_has_new(&h, "base"));
  h_execute(&h);
  for (int step = 0; step < 20 && sched_num_unfinished(h.s) > 0; step++) h_step(&h);
  assert_int_equal(sched_num_unfinished(h.s), 0);
  h_fini(&h);
}

/* Computed tokens of `id`'s first scheduling: its prefix-cache hit. */
static int32_t hit_of(struct harness *h, const char *id, const char *lora, double arrival) {
  assert_int_equal(add_lora(h, id, 41, 2, lora, arrival), LLB_STATUS_OK);
  h_schedule(h);
  assert_int_equal(h->out.num_new_reqs, 1);
  const int32_t hit = h->out.new_reqs[0].num_computed_tokens;
  h_execute(h);
  for (int step = 0; step < 10 && sched_num_unfinished(h->s) > 0; step++) h_step(h);
  return hit;
}

static void test_prefix_cache_is_never_shared_between_adapters_or_with_the_base(void **state) {
  (void)state;
  struct sched_config c = lora_cfg(4);
  struct harness h;
  h_init(&h, &c);
  assert_int_equal(hit_of(&h, "base0", NULL, 0), 0);
  assert_int_equal(hit_of(&h, "sql0", "sql-lora", 1), 0);   /* the base's blocks are not its */
  assert_int_equal(hit_of(&h, "sql1", "sql-lora", 2), 40);  /* its own are */
  assert_int_equal(hit_of(&h, "chat0", "chat-lora", 3), 0); /* another adapter's are not */
  assert_int_equal(hit_of(&h, "base1", NULL, 4), 40);       /* the base still finds its own */
  h_fini(&h);
}

static void test_adapter_request_is_refused_without_enable_lora_or_with_a_bad_id(void **state) {
  (void)state;
  struct sched_config c = lora_cfg(1);
  c.enable_lora = false;
  struct harness h;
  h_init(&h, &c);
  assert_int_equal(add_lora(&h, "a", 8, 2, "sql-lora", 0), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "LoRA is not enabled"));
  assert_int_equal(add_lora(&h, "base", 8, 2, NULL, 0), LLB_STATUS_OK);
  int32_t toks[2] = {7, 8};
  struct sched_new_request nr = {.request_id = "x", .prompt_token_ids = toks, .num_prompt_tokens = 2,
                                 .eos_token_id = 2, .sampling_params = h_new_params(&h), .lora_name = "a",
                                 .lora_int_id = 0};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_INVALID_ARGUMENT); /* a name without an id */
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_waiting_request_whose_adapter_exceeds_max_loras_waits_while_others_run),
      cmocka_unit_test(test_max_loras_two_runs_two_adapters_and_the_base_together),
      cmocka_unit_test(test_prefix_cache_is_never_shared_between_adapters_or_with_the_base),
      cmocka_unit_test(test_adapter_request_is_refused_without_enable_lora_or_with_a_bad_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

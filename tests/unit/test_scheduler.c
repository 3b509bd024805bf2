/* Scheduler: budgets, chunked prefill, preemption and resume, FCFS and priority order,
 * abort, KV round trips only when blocks are needed, prefix hits (actors/scheduler). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include <stdio.h>

#include "test_scheduler_harness.h"

static struct sched_config base_cfg(void) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = 256;
  c.num_lookahead_tokens = 0;
  return c;
}

/* Runs until nothing is left (bounded); returns the steps taken. */
static int run_all(struct harness *h, int max_steps) {
  int n = 0;
  while (sched_num_unfinished(h->s) > 0 && n < max_steps) {
    h_step(h);
    n++;
  }
  assert_int_equal(sched_num_unfinished(h->s), 0);
  return n;
}

static void assert_all_blocks_free(struct harness *h) {
  h_step(h); /* an idle step flushes the deferred frees */
  struct kv_manager_stats ks;
  kv_manager_get_stats(h->kv, &ks);
  assert_int_equal(ks.num_free_blocks, h->cfg.num_blocks);
  struct sched_stats ss;
  sched_get_stats(h->s, &ss);
  assert_int_equal(ss.num_free_blocks, h->cfg.num_blocks);
  for (int32_t b = 0; b < h->cfg.num_blocks; b++) assert_int_equal(sched_block_ref_cnt(h->s, b), 0);
}

static void test_token_budget_and_max_num_seqs_are_respected(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 3;
  struct harness h;
  h_init(&h, &c);
  for (int i = 0; i < 8; i++) {
    char id[16];
    snprintf(id, sizeof(id), "r%d", i);
    h_add(&h, id, 30, 5, 0, i);
  }
  h_step(&h);
  assert_int_equal(h.out.num_new_reqs, 3);              /* 30 + 30 + 4 (chunk) */
  assert_int_equal(h.out.total_num_scheduled_tokens, 64);
  assert_int_equal(h.out.new_reqs[2].num_scheduled_tokens, 4);
  h_step(&h);                                            /* r0, r1 decode; r2 continues */
  assert_int_equal(h.out.num_cached_reqs, 3);
  assert_int_equal(h.out.num_new_reqs, 0);               /* max_num_seqs */
  assert_int_equal(h.out.total_num_scheduled_tokens, 1 + 1 + 26);
  run_all(&h, 100);                                      /* harness checks every step */
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_chunked_prefill_splits_a_long_prompt_then_decodes(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_batched_tokens = 32;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "long", 100, 3, 0, 0);
  int32_t chunks[4] = {32, 32, 32, 4};
  for (int i = 0; i < 4; i++) {
    h_step(&h);
    assert_int_equal(h.out.total_num_scheduled_tokens, chunks[i]);
    assert_int_equal(h.eo.num_outputs, i == 3 ? 1 : 0);  /* a token only once caught up */
  }
  assert_int_equal(sched_find_request(h.s, "long")->num_computed_tokens, 100);
  h_step(&h);
  assert_int_equal(h.out.total_num_scheduled_tokens, 1);  /* decode */
  assert_int_equal(h.eo.outputs[0].first_output_pos, 1);
  /* disabled chunking: the prompt waits for a budget that holds it whole */
  struct sched_config c2 = c;
  c2.enable_chunked_prefill = false;
  struct harness h2;
  h_init(&h2, &c2);
  h_add(&h2, "big", 40, 2, 0, 0);
  h_add(&h2, "small", 8, 2, 0, 1);
  h_step(&h2);
  assert_int_equal(h2.out.total_num_scheduled_tokens, 0);
  h_fini(&h2);
  h_fini(&h);
}

/* Tokens of every output of a run, per request, checked for continuity. */
struct collected {
  char id[8][8];
  int32_t toks[8][64];
  int32_t n[8];
};

static void collect(struct collected *col, const struct harness *h) {
  for (int32_t i = 0; i < h->eo.num_outputs; i++) {
    const char *id = sched_engine_outputs_req_id(&h->eo, i);
    int k = id[1] - '0';
    snprintf(col->id[k], sizeof(col->id[k]), "%s", id);
    assert_int_equal(h->eo.outputs[i].first_output_pos, col->n[k]); /* no gap, no duplicate */
    const int32_t *t = sched_engine_outputs_tokens(&h->eo, i);
    for (int32_t j = 0; j < h->eo.outputs[i].num_new_tokens; j++) col->toks[k][col->n[k]++] = t[j];
  }
}

static void test_preemption_recomputes_and_resumes_with_identical_tokens(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.num_blocks = 10; /* 40 slots for two requests that need 2 x 28 */
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 8, 20, 0, 0);
  h_add(&h, "r1", 8, 20, 0, 1);
  struct collected col = {0};
  int steps = 0;
  bool saw_preempted = false;
  while (sched_num_unfinished(h.s) > 0 && steps < 200) {
    h_step(&h);
    collect(&col, &h);
    saw_preempted |= h.out.preempted_req_ids.num > 0;
    steps++;
  }
  assert_int_equal(sched_num_unfinished(h.s), 0);
  assert_true(saw_preempted);
  struct sched_stats ss;
  sched_get_stats(h.s, &ss);
  assert_true(ss.num_preemptions >= 1);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(col.n[k], 20);
    for (int32_t p = 0; p < 20; p++) assert_int_equal(col.toks[k][p], h_token(&h, col.id[k], p));
  }
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_resumed_request_is_sent_whole_with_its_outputs(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.num_blocks = 6;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 8, 12, 0, 0);
  h_add(&h, "r1", 8, 12, 0, 1);
  bool resumed = false;
  for (int s = 0; s < 100 && sched_num_unfinished(h.s) > 0; s++) {
    h_step(&h);
    for (int32_t i = 0; i < h.out.num_new_reqs; i++) {
      const struct sched_new_req_data *n = &h.out.new_reqs[i];
      if (!n->resumed_from_preemption) continue;
      resumed = true;
      assert_true(n->num_output_tokens > 0);          /* recomputed as context */
      assert_int_equal(n->num_prompt_tokens, 8);
    }
  }
  assert_true(resumed);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

/* A request replayed after a scheduler restart comes with the outputs it had (the output
 * processor's history): they are context in its first prefill (one NewRequestData with them,
 * prompt + outputs scheduled), the next token is sampled at the next position and the
 * sequence goes on as if nothing happened; at most max_tokens - 1 are kept; ids outside the
 * vocabulary are refused. */
static void test_replay_with_known_outputs_resumes_at_the_next_position(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.vocab_size = 1000;
  struct harness h;
  h_init(&h, &c);
  int32_t prompt[8], known[20];
  for (int32_t i = 0; i < 8; i++) prompt[i] = 7 + i;
  for (int32_t i = 0; i < 20; i++) known[i] = h_token(&h, "r0", i);
  struct sched_new_request nr = {.request_id = "r0", .prompt_token_ids = prompt, .num_prompt_tokens = 8,
                                 .eos_token_id = 2, .resume_output_ids = known, .num_resume_output_ids = 5};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  nr_sp.max_tokens = 12;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  struct collected col = {0};
  snprintf(col.id[0], sizeof col.id[0], "r0");
  for (int32_t p = 0; p < 5; p++) col.toks[0][col.n[0]++] = known[p];
  h_step(&h);
  assert_int_equal(h.out.num_new_reqs, 1);
  assert_int_equal(h.out.new_reqs[0].num_output_tokens, 5);
  assert_int_equal(h.out.new_reqs[0].num_scheduled_tokens, 13);
  collect(&col, &h);
  for (int s = 0; s < 50 && sched_num_unfinished(h.s) > 0; s++) {
    h_step(&h);
    collect(&col, &h);
  }
  assert_int_equal(sched_num_unfinished(h.s), 0);
  assert_int_equal(col.n[0], 12);
  for (int32_t p = 0; p < 12; p++) assert_int_equal(col.toks[0][p], h_token(&h, "r0", p));

  /* more known outputs than max_tokens allows: max_tokens - 1 kept, one sampled */
  nr.request_id = "r1";
  for (int32_t i = 0; i < 20; i++) known[i] = h_token(&h, "r1", i);
  nr.num_resume_output_ids = 20;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  h_step(&h);
  assert_int_equal(h.out.new_reqs[0].num_output_tokens, 11);
  run_all(&h, 50);
  /* a forged history */
  known[3] = 1000;
  nr.request_id = "r2";
  nr.num_resume_output_ids = 5;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "resumed output 3"));
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_fcfs_serves_in_arrival_order(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_seqs = 1;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r2", 4, 2, 0, 0.0);
  h_add(&h, "r0", 4, 2, -5, 1.0); /* priority ignored under FCFS */
  h_add(&h, "r1", 4, 2, 0, 2.0);
  const char *order[3] = {"r2", "r0", "r1"};
  int next = 0;
  for (int s = 0; s < 20 && sched_num_unfinished(h.s) > 0; s++) {
    h_step(&h);
    for (int32_t i = 0; i < h.out.num_new_reqs; i++) assert_string_equal(h.out.new_reqs[i].req_id, order[next++]);
  }
  assert_int_equal(next, 3);
  h_fini(&h);
}

static void test_priority_serves_lower_value_first_then_arrival(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_seqs = 1;
  c.policy = SCHED_POLICY_PRIORITY;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 4, 2, 5, 0.0);
  h_add(&h, "r1", 4, 2, 1, 3.0);
  h_add(&h, "r2", 4, 2, 1, 2.0);
  h_add(&h, "r3", 4, 2, 0, 9.0);
  const char *order[4] = {"r3", "r2", "r1", "r0"};
  int next = 0;
  for (int s = 0; s < 30 && sched_num_unfinished(h.s) > 0; s++) {
    h_step(&h);
    for (int32_t i = 0; i < h.out.num_new_reqs; i++) assert_string_equal(h.out.new_reqs[i].req_id, order[next++]);
  }
  assert_int_equal(next, 4);
  h_fini(&h);
}

static void test_priority_preempts_the_lowest_priority_running_request(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.policy = SCHED_POLICY_PRIORITY;
  c.num_blocks = 6;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 4, 16, 9, 0.0); /* admitted first, least important */
  h_add(&h, "r1", 4, 16, 0, 1.0);
  h_step(&h);
  assert_int_equal(h.out.num_new_reqs, 2);
  for (int s = 0; s < 40 && h.out.preempted_req_ids.num == 0; s++) h_step(&h);
  assert_int_equal(h.out.preempted_req_ids.num, 1);
  assert_string_equal(sched_str_list_get(&h.out.preempted_req_ids, 0), "r0");
  assert_int_equal(sched_find_request(h.s, "r0")->status, SCHED_REQUEST_STATUS_PREEMPTED);
  assert_int_equal(sched_find_request(h.s, "r0")->num_computed_tokens, 0);
  run_all(&h, 200);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

static void test_abort_frees_everything(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_seqs = 2;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 20, 50, 0, 0);
  h_add(&h, "r1", 20, 50, 0, 1);
  h_add(&h, "r2", 20, 50, 0, 2);
  h_step(&h);
  h_step(&h);
  struct sched_engine_outputs eo;
  sched_engine_outputs_init(&eo);
  const char *ids[4] = {"r0", "r2", "nope", "r1"};
  assert_int_equal(sched_abort_requests(h.s, ids, 4, SCHED_FINISH_REASON_ABORT, &eo), LLB_STATUS_OK);
  assert_int_equal(eo.num_outputs, 3);
  for (int32_t i = 0; i < 3; i++) assert_int_equal(eo.outputs[i].finish_reason, SCHED_FINISH_REASON_ABORT);
  assert_null(sched_find_request(h.s, "r1"));
  assert_int_equal(sched_num_unfinished(h.s), 0);
  h_step(&h);
  assert_int_equal(h.out.finished_req_ids.num, 2);        /* r0, r1 were on the worker */
  int32_t releases = 0;                                   /* one RELEASE of all their blocks */
  for (int32_t i = 0; i < h.step.num_ops; i++) releases += h.step.ops[i].kind == KV_OP_KIND_RELEASE;
  assert_int_equal(releases, 1);
  struct kv_manager_stats ks;
  kv_manager_get_stats(h.kv, &ks);
  assert_int_equal(ks.num_free_blocks, c.num_blocks);
  sched_engine_outputs_free(&eo);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

/* Stopping the engine with work in flight: a preempted request (its FREE still pending,
 * still in the request map) and an aborted one (pending, out of the map) are both released
 * exactly once; ASan fails this test on a use-after-free or a leak. */
static void test_destroy_with_pending_frees_releases_each_request_once(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 20, 50, 0, 0);
  h_add(&h, "r1", 20, 50, 0, 1);
  h_step(&h);
  h_step(&h);
  struct sched_engine_outputs eo;
  sched_engine_outputs_init(&eo);
  const char *ids[1] = {"r1"};
  assert_int_equal(sched_abort_requests(h.s, ids, 1, SCHED_FINISH_REASON_ABORT, &eo), LLB_STATUS_OK);
  assert_int_equal(eo.num_outputs, 1);
  sched_preempt_all(h.s);
  assert_non_null(sched_find_request(h.s, "r0"));
  /* the worker hears of the recovery's preemption with the next step (its row is dropped) */
  h_schedule(&h);
  bool told = false;
  for (int32_t i = 0; i < h.out.preempted_req_ids.num; i++)
    told |= strcmp(sched_str_list_get(&h.out.preempted_req_ids, i), "r0") == 0;
  assert_true(told);
  sched_engine_outputs_free(&eo);
  h_fini(&h);
}

/* docs/design.md §7: a full queue is a clear error for the new request and loses nothing already
 * accepted. */
static void test_full_waiting_queue_refuses_new_requests_and_keeps_accepted_ones(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.max_num_waiting = 2;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 8, 4, 0, 0);
  h_add(&h, "r1", 8, 4, 0, 1);
  int32_t toks[8] = {7, 8, 9, 10, 11, 12, 13, 14};
  struct sched_new_request nr = {.request_id = "r2", .prompt_token_ids = toks, .num_prompt_tokens = 8,
                                 .eos_token_id = 2};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_QUEUE_FULL);
  assert_non_null(strstr(llb_err_last(), "max_num_waiting"));
  assert_null(sched_find_request(h.s, "r2"));
  assert_int_equal(sched_num_unfinished(h.s), 2);
  h_step(&h); /* both start running: the queue has room again */
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  h_fini(&h);
}

/* An EngineCoreRequest can be forged by anyone who may publish on the engine's requests
 * subject: ids outside the vocabulary, non-finite sampling floats and NaN embeddings are
 * refused at admission with an error naming the field (they used to fail every worker step),
 * and an accepted request is not disturbed. */
static void test_forged_requests_are_refused_at_admission(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.vocab_size = 1000;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "ok", 8, 4, 0, 0);
  float nan_rows[2 * 4] = {1, 2, 3, 4, 5, NAN, 7, 8};
  float inf_rows[2 * 4] = {1, 2, 3, 4, 5, 6, 7, INFINITY};
  struct sched_mm_feature f = {.offset = 1, .length = 2, .mm_hash = 1, .hash = "h", .modality = "embeds",
                               .dtype = "f32", .num_cols = 4, .data = (const uint8_t *)nan_rows,
                               .data_bytes = sizeof nan_rows};
  static const char *const want[] = {"prompt_token_ids[3]", "prompt_token_ids[0]", "eos_token_id",
                                     "stop_token_ids[0]", "temperature", "top_p", "repetition_penalty",
                                     "presence/frequency", "non-finite", "non-finite", "max_tokens"};
  for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
    int32_t toks[8] = {7, 8, 9, 10, 11, 12, 13, 14};
    struct sched_new_request nr = {.request_id = "bad", .prompt_token_ids = toks, .num_prompt_tokens = 8,
                                   .eos_token_id = 2};
    struct llb_sampling_params nr_sp;    llb_sampling_params_init(&nr_sp);    nr.sampling_params = &nr_sp;
    struct llb_sampling_params *sp = &nr_sp;
    switch (i) {
    case 0: toks[3] = 1000; break; /* == vocab_size */
    case 1: toks[0] = -5; break;
    case 2: nr.eos_token_id = 5000; break;
    case 3: sp->num_stop_token_ids = 1; sp->stop_token_ids[0] = 1 << 30; break;
    case 4: sp->temperature = NAN; break;
    case 5: sp->top_p = INFINITY; break;
    case 6: sp->repetition_penalty = NAN; break;
    case 7: sp->frequency_penalty = -INFINITY; break;
    case 8: nr.mm_features = &f; nr.num_mm_features = 1; break;
    case 9: f.data = (const uint8_t *)inf_rows; nr.mm_features = &f; nr.num_mm_features = 1; break;
    case 10: sp->max_tokens = 0; break;
    }
    assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_INVALID_ARGUMENT);
    if (!strstr(llb_err_last(), want[i])) fail_msg("case %d: \"%s\" does not name %s", i, llb_err_last(), want[i]);
    assert_null(sched_find_request(h.s, "bad"));
  }
  assert_int_equal(sched_num_unfinished(h.s), 1);
  for (int i = 0; i < 20 && sched_num_unfinished(h.s) > 0; i++) h_step(&h);
  assert_int_equal(sched_num_unfinished(h.s), 0);
  h_fini(&h);
}

static void test_abort_during_a_kv_round_trip_finishes_after_it(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 10, 50, 0, 0);
  assert_int_equal(sched_schedule(h.s, &h.out, &h.step), LLB_STATUS_OK);
  assert_true(h.step.num_ops > 0);
  struct sched_engine_outputs eo;
  sched_engine_outputs_init(&eo);
  const char *id = "r0";
  assert_int_equal(sched_abort_requests(h.s, &id, 1, SCHED_FINISH_REASON_ABORT, &eo), LLB_STATUS_OK);
  assert_int_equal(eo.num_outputs, 1);
  assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_OK);
  assert_int_equal(sched_apply_kv_result(h.s, &h.res, &h.out), LLB_STATUS_OK);
  h_execute(&h);
  assert_int_equal(h.eo.num_outputs, 0);                  /* no second final output */
  assert_int_equal(sched_num_unfinished(h.s), 0);
  sched_engine_outputs_free(&eo);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

/* The caller's per-request data (the actor's meta) lives in the scheduler's registry: each
 * user is handed back exactly once, with the output that finishes its request, or freed by
 * free_user when no such output takes it (scheduler destroyed with the request live). */
static int users_freed;
static void count_free_user(void *user) {
  (void)user;
  users_freed++;
}

static void add_with_user(struct harness *h, const char *id, int32_t max_tokens, int *user) {
  int32_t toks[10];
  for (int32_t i = 0; i < 10; i++) toks[i] = 7 + i;
  struct llb_sampling_params *sp = h_new_params(h);
  sp->max_tokens = max_tokens;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = 10,
                                 .sampling_params = sp, .eos_token_id = -1, .user = user};
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

static void test_request_user_leaves_with_its_final_output_once(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.free_user = count_free_user;
  users_freed = 0;
  struct harness h;
  h_init(&h, &c);
  int u_done = 1, u_aborted = 2, u_live = 3;
  add_with_user(&h, "done", 2, &u_done);
  add_with_user(&h, "aborted", 50, &u_aborted);
  add_with_user(&h, "live", 50, &u_live);
  assert_ptr_equal(sched_find_request(h.s, "live")->user, &u_live);
  int final_done = 0;
  for (int step = 0; step < 4; step++) {
    h_step(&h);
    for (int32_t i = 0; i < h.eo.num_outputs; i++) {
      const struct sched_engine_output *o = &h.eo.outputs[i];
      const char *id = sched_engine_outputs_req_id(&h.eo, i);
      if (strcmp(id, "done") == 0 && o->finish_reason != SCHED_FINISH_REASON_NONE) {
        assert_ptr_equal(o->user, &u_done); /* the final output carries it */
        final_done++;
      } else {
        assert_ptr_equal(o->user, strcmp(id, "done") == 0 ? (void *)&u_done
                                  : strcmp(id, "aborted") == 0 ? (void *)&u_aborted : (void *)&u_live);
      }
    }
  }
  assert_int_equal(final_done, 1);
  assert_null(sched_find_request(h.s, "done"));
  /* aborted with its next step planned (in flight): the ABORT output takes the user at once */
  assert_int_equal(sched_schedule(h.s, &h.out, &h.step), LLB_STATUS_OK);
  struct sched_engine_outputs eo;
  sched_engine_outputs_init(&eo);
  const char *id = "aborted";
  assert_int_equal(sched_abort_requests(h.s, &id, 1, SCHED_FINISH_REASON_ABORT, &eo), LLB_STATUS_OK);
  assert_int_equal(eo.num_outputs, 1);
  assert_ptr_equal(eo.outputs[0].user, &u_aborted);
  assert_null(sched_find_request(h.s, "aborted")->user); /* still live, no longer holding it */
  if (!kv_step_empty(&h.step)) {
    assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_OK);
    assert_int_equal(sched_apply_kv_result(h.s, &h.res, &h.out), LLB_STATUS_OK);
  }
  h_execute(&h);
  for (int32_t i = 0; i < h.eo.num_outputs; i++) /* no output of it hands the user back again */
    assert_true(strcmp(sched_engine_outputs_req_id(&h.eo, i), "aborted") != 0 ||
                h.eo.outputs[i].user == NULL);
  assert_null(sched_find_request(h.s, "aborted"));
  assert_int_equal(users_freed, 0); /* every user so far went out with an output */
  sched_engine_outputs_free(&eo);
  h_fini(&h);                       /* "live" is still running */
  assert_int_equal(users_freed, 1);
}

static void test_decode_inside_allocated_blocks_makes_no_kv_round_trip(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.block_size = 16;
  c.num_lookahead_tokens = 16;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 5, 40, 0, 0);
  assert_true(h_schedule(&h));                            /* prefill: 5 + 16 slots = 2 blocks */
  assert_int_equal(h.out.new_reqs[0].num_block_ids, 2);
  h_execute(&h);
  int trips = 0;
  for (int s = 0; s < 27; s++) {                          /* decode while computed + 1 <= 32 */
    bool trip = h_schedule(&h);
    if (trip) trips++;
    assert_int_equal(h.step.num_ops, 0);
    h_execute(&h);
  }
  assert_int_equal(trips, 0);
  assert_true(h_schedule(&h));                            /* token 32 needs block 3 */
  assert_int_equal(h.out.cached_reqs[0].num_new_block_ids, 2); /* with lookahead */
  h_execute(&h);
  h_fini(&h);
}

static void test_prefix_hit_reduces_scheduled_tokens(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r0", 41, 2, 0, 0);
  run_all(&h, 10);
  h_add(&h, "r1", 41, 2, 0, 1);
  h_step(&h);
  assert_int_equal(h.out.num_new_reqs, 1);
  assert_int_equal(h.out.new_reqs[0].num_computed_tokens, 40);
  assert_int_equal(h.out.new_reqs[0].num_scheduled_tokens, 1);
  assert_int_equal(h.out.total_num_scheduled_tokens, 1);
  assert_int_equal(h.eo.outputs[0].num_cached_tokens, 40);
  struct sched_stats ss;
  sched_get_stats(h.s, &ss);
  assert_int_equal(ss.prefix_cache_hits, 40);
  assert_int_equal(ss.prefix_cache_queries, 82);
  /* the same prompt with a budget smaller than the cached prefix: hit capped below the chunk */
  run_all(&h, 10);
  h_fini(&h);
}

/* A kv_manager short of blocks (another resync told it 6 are in use) refuses an allocation
 * the scheduler planned: that request waits, the others go on; the free count in the reply
 * differs from the scheduler's, which counts a protocol fault and resyncs, and the next step
 * gets the refused request its blocks. */
static void test_refused_allocation_unschedules_the_request_and_the_resync_repairs(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.num_blocks = 8;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "r", 3, 1, 0, 0);
  run_all(&h, 10); /* the scheduler's first resync is done */
  h_step(&h);
  kv_step_clear(&h.step, 0);
  const int32_t intruder[6] = {0, 1, 2, 3, 4, 5};
  assert_int_equal(kv_step_set_held(&h.step, intruder, 6), LLB_STATUS_OK);
  assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_OK);
  h_add(&h, "r0", 16, 4, 0, 1);
  h_add(&h, "r1", 4, 4, 0, 2);
  assert_true(h_schedule_unchecked_mirror(&h));
  assert_int_equal(h.out.num_new_reqs, 1);               /* r0 (4 blocks) refused, r1 fits */
  assert_string_equal(h.out.new_reqs[0].req_id, "r1");
  assert_int_equal(sched_find_request(h.s, "r0")->status, SCHED_REQUEST_STATUS_WAITING);
  struct sched_stats ss;
  sched_get_stats(h.s, &ss);
  assert_int_equal(ss.num_kv_alloc_failures, 1);
  assert_int_equal(ss.num_kv_protocol_faults, 1);        /* 1 free there, 7 here */
  assert_int_equal(ss.num_free_blocks, 7);               /* never patched from the reply */
  h_execute(&h);
  assert_true(h_schedule_unchecked_mirror(&h));          /* the resync, then r0's ALLOCATE */
  assert_true(h.step.resync);
  assert_int_equal(h.step.num_held_block_ids, 1);        /* r1's block */
  assert_int_equal(h.out.num_new_reqs, 1);
  assert_string_equal(h.out.new_reqs[0].req_id, "r0");
  h_check_blocks(&h);
  h_execute(&h);
  run_all(&h, 20);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

/* Random arrivals (shared prompts, so prefix hits), aborts, tight blocks and preemption:
 * every step the harness checks that the kv_manager's free blocks are exactly those the
 * scheduler holds no reference to, and the worker's block tables. */
static void test_random_load_keeps_the_block_state_exact_and_leaks_nothing(void **state) {
  (void)state;
  struct sched_config c = base_cfg();
  c.num_blocks = 24;
  c.max_num_batched_tokens = 48;
  c.max_num_seqs = 6;
  c.num_lookahead_tokens = 4;
  c.policy = SCHED_POLICY_PRIORITY;
  struct harness h;
  h_init(&h, &c);
  uint64_t rng = 7;
  int added = 0;
  struct sched_engine_outputs eo;
  sched_engine_outputs_init(&eo);
  for (int step = 0; step < 3000; step++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t x = (uint32_t)(rng >> 33);
    if (x % 3 == 0 && added < 400) {
      char id[16];
      snprintf(id, sizeof(id), "q%d", added);
      h_add(&h, id, 4 + (int32_t)(x / 3 % 40), 1 + (int32_t)(x / 7 % 24), (int32_t)(x / 11 % 3), added);
      added++;
    }
    if (x % 17 == 0 && added > 0) {
      char id[16];
      snprintf(id, sizeof(id), "q%d", (int)(x / 17 % (uint32_t)added));
      const char *ids[1] = {id};
      assert_int_equal(sched_abort_requests(h.s, ids, 1, SCHED_FINISH_REASON_ABORT, &eo), LLB_STATUS_OK);
    }
    h_step(&h);
  }
  run_all(&h, 2000);
  struct sched_stats ss;
  sched_get_stats(h.s, &ss);
  assert_true(ss.num_preemptions > 0);
  assert_true(ss.prefix_cache_hits > 0);
  assert_int_equal(ss.num_kv_protocol_faults, 0);
  assert_int_equal(ss.num_kv_alloc_failures, 0);
  sched_engine_outputs_free(&eo);
  assert_all_blocks_free(&h);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_budget_and_max_num_seqs_are_respected),
      cmocka_unit_test(test_chunked_prefill_splits_a_long_prompt_then_decodes),
      cmocka_unit_test(test_preemption_recomputes_and_resumes_with_identical_tokens),
      cmocka_unit_test(test_resumed_request_is_sent_whole_with_its_outputs),
      cmocka_unit_test(test_replay_with_known_outputs_resumes_at_the_next_position),
      cmocka_unit_test(test_fcfs_serves_in_arrival_order),
      cmocka_unit_test(test_priority_serves_lower_value_first_then_arrival),
      cmocka_unit_test(test_priority_preempts_the_lowest_priority_running_request),
      cmocka_unit_test(test_abort_frees_everything),
      cmocka_unit_test(test_destroy_with_pending_frees_releases_each_request_once),
      cmocka_unit_test(test_full_waiting_queue_refuses_new_requests_and_keeps_accepted_ones),
      cmocka_unit_test(test_abort_during_a_kv_round_trip_finishes_after_it),
      cmocka_unit_test(test_request_user_leaves_with_its_final_output_once),
      cmocka_unit_test(test_decode_inside_allocated_blocks_makes_no_kv_round_trip),
      cmocka_unit_test(test_prefix_hit_reduces_scheduled_tokens),
      cmocka_unit_test(test_refused_allocation_unschedules_the_request_and_the_resync_repairs),
      cmocka_unit_test(test_random_load_keeps_the_block_state_exact_and_leaks_nothing),
      cmocka_unit_test(test_forged_requests_are_refused_at_admission),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

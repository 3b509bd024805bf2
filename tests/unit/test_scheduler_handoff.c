/* Disaggregated prefill/decode in the scheduler core (sched_hand_off; actors/scheduler/handoff.h
 * drives it): what the prefill engine relies on when a request leaves for a decode engine after
 * its first token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/test_scheduler_harness.h"

static void config(struct sched_config *c) {
  sched_config_init(c);
  c->num_blocks = 64;
  c->block_size = 4;
  c->max_num_batched_tokens = 64;
  c->num_lookahead_tokens = 0;
}

static int32_t find_output(const struct sched_engine_outputs *eo, const char *id) {
  for (int32_t i = 0; i < eo->num_outputs; i++)
    if (strcmp(sched_engine_outputs_req_id(eo, i), id) == 0) return i;
  return -1;
}

/* The first token's output becomes the request's last here: it carries the token, takes the
 * user over, and the request leaves (its id reaches the worker, its blocks go back, to the
 * prefix cache); the other request is untouched. */
static void a_request_handed_off_after_its_first_token_leaves_with_its_blocks_freed(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  static int user_p, user_q;
  int32_t toks[10];
  for (int32_t i = 0; i < 10; i++) toks[i] = 7 + i;
  struct llb_sampling_params *sp = h_new_params(&h);
  sp->max_tokens = 8;
  struct sched_new_request nr = {.request_id = "p", .prompt_token_ids = toks, .num_prompt_tokens = 10,
                                 .eos_token_id = 2, .sampling_params = sp, .user = &user_p};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  nr.request_id = "q";
  nr.user = &user_q;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  h_step(&h); /* prefill both: one token each */
  const int32_t i = find_output(&h.eo, "p");
  assert_true(i >= 0);
  assert_int_equal(h.eo.outputs[i].num_new_tokens, 1);
  assert_int_equal(h.eo.outputs[i].first_output_pos, 0);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_OK);
  assert_int_equal(side.num_outputs, 1);
  assert_string_equal(sched_engine_outputs_req_id(&side, 0), "p");
  assert_int_equal(side.outputs[0].finish_reason, SCHED_FINISH_REASON_HANDED_OFF);
  assert_int_equal(side.outputs[0].num_new_tokens, 0);
  assert_int_equal(side.outputs[0].first_output_pos, 1);
  assert_ptr_equal(side.outputs[0].user, &user_p); /* the final output owns it now */
  assert_null(sched_find_request(h.s, "p"));
  assert_non_null(sched_find_request(h.s, "q"));
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_INVALID_ARGUMENT); /* gone */
  sched_engine_outputs_free(&side);
  h_schedule(&h);
  bool told = false;
  for (int32_t k = 0; k < h.out.finished_req_ids.num; k++)
    told |= strcmp(sched_str_list_get(&h.out.finished_req_ids, k), "p") == 0;
  assert_true(told);
  h_execute(&h);
  while (sched_num_unfinished(h.s) > 0) h_step(&h);
  h_step(&h); /* an idle step flushes the deferred RELEASE */
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_free_blocks, c.num_blocks);
  h_fini(&h);
}

/* Only a running request with an output can be handed off: not before its first token, not
 * an aborted one, not an unknown id. */
static void only_a_running_request_with_an_output_is_handed_off(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "a", 6, 8, 0, 0);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "a", &side), LLB_STATUS_INVALID_ARGUMENT); /* no token yet */
  h_step(&h);
  assert_int_equal(sched_hand_off(h.s, "nobody", &side), LLB_STATUS_INVALID_ARGUMENT);
  const char *ids[1] = {"a"};
  assert_int_equal(sched_abort_requests(h.s, ids, 1, SCHED_FINISH_REASON_ABORT, &side), LLB_STATUS_OK);
  assert_int_equal(sched_hand_off(h.s, "a", &side), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(side.num_outputs, 1); /* only the abort's */
  sched_engine_outputs_free(&side);
  h_fini(&h);
}

/* Applies an output for the planned step (no tokens) that reports the transfers that ended. */
static void kv_report(struct harness *h, const char *const *sent, int32_t num_sent, const char *const *recvd,
                      int32_t num_recvd, const char *const *failed, int32_t num_failed) {
  h_worker_apply(h); /* the fake worker takes the step's finished / preempted ids */
  struct sched_model_output mo = {.step = h->out.step, .finished_sending = sent, .num_finished_sending = num_sent,
                                  .finished_recving = recvd, .num_finished_recving = num_recvd,
                                  .failed_recving = failed, .num_failed_recving = num_failed};
  assert_int_equal(sched_update_from_output(h->s, &mo, &h->eo), LLB_STATUS_OK);
}

/* KV transfer, prefill side (vLLM delay_free_blocks): a handed-off request's blocks stay
 * allocated and are exported with the next step (the blocks of its prompt), the engine polls
 * while the export is held, and finished_sending gives every block back. */
static void a_handed_off_requests_blocks_are_exported_until_finished_sending(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.kv_transfer = true;
  c.async_scheduling = false;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "p", 10, 8, 0, 0);
  h_step(&h);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_OK);
  sched_engine_outputs_free(&side);
  sched_kv_tick(h.s, true, 1.0);
  assert_true(sched_kv_pending(h.s));
  h_schedule(&h);
  assert_int_equal(h.out.total_num_scheduled_tokens, 0);
  assert_int_equal(h.out.num_kv_sends, 1);
  assert_string_equal(h.out.kv_sends[0].req_id, "p");
  assert_int_equal(h.out.kv_sends[0].num_tokens, 10);        /* the prompt: before the sampled token */
  assert_int_equal(h.out.kv_sends[0].num_block_ids, 3);      /* ceil(10 / 4) */
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_true(st.num_free_blocks < c.num_blocks);            /* still held */
  assert_int_equal(st.kv_sends, 1);
  kv_report(&h, NULL, 0, NULL, 0, NULL, 0);
  h_schedule(&h); /* a poll: nothing to run, the export still held */
  assert_true(h.out.kv_poll);
  assert_int_equal(h.out.num_kv_sends, 0);
  const char *sent[1] = {"p"};
  kv_report(&h, sent, 1, NULL, 0, NULL, 0);
  assert_false(sched_kv_pending(h.s));
  h_step(&h); /* an idle step flushes the RELEASE */
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_free_blocks, c.num_blocks);
  h_fini(&h);
}

/* Defect (review of the chaos_pd_short fix): a step whose KV round trip, encoder round trip or
 * send failed was dropped with the exports sched_schedule had moved into it, so the worker never
 * registered them while the decode engine, which has the hand-off, waited for them. Now
 * sched_kv_sends_unsent puts them back: the next step carries the export again; one ended
 * meanwhile (finished_sending) is not carried. */
static void an_export_of_a_step_never_sent_goes_with_the_next_step(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.kv_transfer = true;
  c.async_scheduling = false;
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "p", 10, 8, 0, 0);
  h_step(&h);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_OK);
  sched_kv_tick(h.s, true, 1.0);
  h_schedule(&h);
  assert_int_equal(h.out.num_kv_sends, 1);
  sched_kv_sends_unsent(h.s, &h.out); /* the step was not sent */
  assert_int_equal(sched_step_failed(h.s, "", false, &side), LLB_STATUS_OK);
  h_schedule(&h);
  assert_int_equal(h.out.num_kv_sends, 1);
  assert_string_equal(h.out.kv_sends[0].req_id, "p");
  assert_int_equal(h.out.kv_sends[0].num_tokens, 10);
  sched_kv_sends_unsent(h.s, &h.out); /* twice in a row: queued once */
  sched_kv_sends_unsent(h.s, &h.out);
  assert_int_equal(sched_step_failed(h.s, "", false, &side), LLB_STATUS_OK);
  h_schedule(&h);
  assert_int_equal(h.out.num_kv_sends, 1);
  kv_report(&h, NULL, 0, NULL, 0, NULL, 0); /* sent this time */
  h_schedule(&h);
  assert_int_equal(h.out.num_kv_sends, 0); /* registered: not again */
  const char *sent[1] = {"p"};
  kv_report(&h, sent, 1, NULL, 0, NULL, 0);
  assert_false(sched_kv_pending(h.s));
  sched_engine_outputs_free(&side);
  h_step(&h);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_free_blocks, c.num_blocks);
  h_fini(&h);
}

/* KV transfer, decode side (vLLM WAITING_FOR_REMOTE_KVS): a hand-off gets blocks for the remote
 * KV (with a prefix lookup), waits for it without compute, then computes only its last known
 * token; a failed receive computes everything from its prefix hit instead. */
static void a_hand_off_waits_for_its_kv_then_decodes_or_recomputes(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.kv_transfer = true;
  c.async_scheduling = false;
  struct harness h;
  h_init(&h, &c);
  for (int pass = 0; pass < 2; pass++) {
    const char *id = pass ? "fails" : "gets";
    int32_t toks[10];
    for (int32_t i = 0; i < 10; i++) toks[i] = 100 + 10 * pass + i;
    const int32_t first_output = 5;
    struct llb_sampling_params *sp = h_new_params(&h);
    sp->max_tokens = 4;
    struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = 10,
                                   .eos_token_id = 2, .sampling_params = sp, .resume_output_ids = &first_output,
                                   .num_resume_output_ids = 1, .kv_remote_engine_id = "P",
                                   .kv_remote_request_id = id, .kv_remote_num_tokens = 10};
    assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
    sched_kv_tick(h.s, true, 1.0);
    assert_true(h_schedule(&h));
    assert_int_equal(h.out.total_num_scheduled_tokens, 0); /* no compute while it waits */
    assert_int_equal(h.out.num_kv_recvs, 1);
    assert_string_equal(h.out.kv_recvs[0].remote_engine_id, "P");
    assert_int_equal(h.out.kv_recvs[0].remote_first_block, 0);
    assert_int_equal(h.out.kv_recvs[0].num_local_block_ids, 3);
    assert_int_equal(h.out.kv_recvs[0].num_tokens, 10);
    const struct sched_request *r = sched_find_request(h.s, id);
    assert_int_equal(r->status, SCHED_REQUEST_STATUS_WAITING_FOR_REMOTE_KVS);
    kv_report(&h, NULL, 0, pass ? NULL : &id, pass ? 0 : 1, pass ? &id : NULL, pass ? 1 : 0);
    assert_false(sched_kv_pending(h.s));
    h_schedule(&h);
    assert_int_equal(h.out.num_new_reqs, 1);
    assert_int_equal(h.out.new_reqs[0].num_computed_tokens, pass ? 0 : 10);
    assert_int_equal(h.out.new_reqs[0].num_scheduled_tokens, pass ? 11 : 1);
    h_execute(&h);
    const int32_t i = find_output(&h.eo, id);
    assert_true(i >= 0);
    assert_int_equal(h.eo.outputs[i].first_output_pos, 1);
    while (sched_num_unfinished(h.s) > 0) h_step(&h);
  }
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.kv_recv_tokens, 10);
  assert_int_equal(st.kv_recv_failures, 1);
  h_fini(&h);
}

/* Preempting a request that waits for its KV names it to the worker (which cancels the fetch
 * before its blocks go to anyone else) and recomputes it later. */
static void a_receiving_request_preempted_is_named_and_recomputed(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.kv_transfer = true;
  c.async_scheduling = false;
  struct harness h;
  h_init(&h, &c);
  int32_t toks[10];
  for (int32_t i = 0; i < 10; i++) toks[i] = 300 + i;
  const int32_t first_output = 5;
  struct llb_sampling_params *sp = h_new_params(&h);
  sp->max_tokens = 4;
  struct sched_new_request nr = {.request_id = "r", .prompt_token_ids = toks, .num_prompt_tokens = 10,
                                 .eos_token_id = 2, .sampling_params = sp, .resume_output_ids = &first_output,
                                 .num_resume_output_ids = 1, .kv_remote_engine_id = "P", .kv_remote_request_id = "r",
                                 .kv_remote_num_tokens = 10};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  h_schedule(&h);
  kv_report(&h, NULL, 0, NULL, 0, NULL, 0);
  sched_preempt_all(h.s);
  sched_kv_tick(h.s, true, 1.0);
  h_schedule(&h);
  bool named = false;
  for (int32_t k = 0; k < h.out.preempted_req_ids.num; k++)
    named |= strcmp(sched_str_list_get(&h.out.preempted_req_ids, k), "r") == 0;
  assert_true(named);
  assert_int_equal(h.out.num_new_reqs, 1); /* recomputed: prompt + its first output */
  assert_int_equal(h.out.new_reqs[0].num_scheduled_tokens, 11);
  h_fini(&h);
}

/* "p" (10 tokens, 3 blocks) computes its prompt, is handed off, and the next step exports its
 * blocks (the engine's first poll). */
static void export_p(struct harness *h) {
  h_add(h, "p", 10, 8, 0, 0);
  h_step(h);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h->s, "p", &side), LLB_STATUS_OK);
  sched_engine_outputs_free(&side);
  sched_kv_tick(h->s, true, 1.0);
  h_schedule(h);
}

/* The kv_manager restarted while an export was held (its new instance thinks every block
 * free, and refuses the first step as it knows nothing): the actor's recovery resyncs, the
 * export keeps its blocks (they are listed as held), the next request gets other blocks, the
 * epoch stays (no export was given up), and finished_sending releases them as usual. */
static void a_kv_manager_restart_keeps_held_exports_through_the_resync(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.num_blocks = 8;
  c.kv_transfer = true;
  c.async_scheduling = false;
  struct harness h;
  h_init(&h, &c);
  export_p(&h);
  assert_int_equal(h.out.num_kv_sends, 1);
  const uint64_t epoch = h.out.kv_epoch;
  assert_true(epoch != 0);
  int32_t exported[3];
  memcpy(exported, h.out.kv_sends[0].block_ids, sizeof exported);
  kv_report(&h, NULL, 0, NULL, 0, NULL, 0);
  /* the kv_manager dies: a new one, empty, refuses the next step; the actor resyncs and fails it */
  kv_manager_destroy(h.kv);
  struct kv_manager_config kc = {.num_blocks = c.num_blocks, .block_size = c.block_size,
                                 .enable_prefix_caching = c.enable_prefix_caching};
  assert_int_equal(kv_manager_create(&kc, &h.kv), LLB_STATUS_OK);
  h_add(&h, "q", 14, 4, 0, 0); /* 4 blocks, 5 at its end: every one not exported */
  assert_int_equal(sched_schedule(h.s, &h.out, &h.step), LLB_STATUS_OK);
  assert_int_equal(kv_manager_apply_step(h.kv, &h.step, &h.res), LLB_STATUS_STATE_LOST);
  sched_kv_resync(h.s);
  assert_int_equal(sched_step_failed(h.s, "", false, &h.eo), LLB_STATUS_OK);
  assert_true(sched_kv_pending(h.s)); /* the export is still held */
  assert_true(h_schedule(&h));
  assert_true(h.step.resync);
  assert_int_equal(h.step.num_held_block_ids, 3);
  assert_true(h.out.kv_epoch == epoch); /* nothing to drop on the worker */
  const struct sched_request *q = sched_find_request(h.s, "q");
  assert_int_equal(q->num_block_ids, 4);
  for (int32_t k = 0; k < q->num_block_ids; k++)
    for (int32_t e = 0; e < 3; e++) assert_int_not_equal(q->block_ids[k], exported[e]);
  for (int32_t e = 0; e < 3; e++) assert_int_equal(sched_block_ref_cnt(h.s, exported[e]), 1);
  h_execute(&h);
  while (sched_num_unfinished(h.s) > 0) h_step(&h);
  sched_kv_tick(h.s, true, 2.0);
  h_schedule(&h); /* a poll */
  assert_true(h.out.kv_poll);
  const char *sent[1] = {"p"};
  kv_report(&h, sent, 1, NULL, 0, NULL, 0); /* the decode engine fetched p's blocks */
  assert_false(sched_kv_pending(h.s));
  h_step(&h); /* an idle step sends the last RELEASE */
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_free_blocks, c.num_blocks);
  assert_int_equal(st.num_kv_protocol_faults, 0);
  h_fini(&h);
}

/* A resync over its limit (max_resync_blocks) whose held list the exports alone keep over it:
 * preempting running requests could not make it fit, so none is preempted (the round trip
 * fails as it would have; the running request keeps its progress). */
static void a_resync_that_exports_keep_over_its_limit_preempts_nothing(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  c.num_blocks = 16;
  c.kv_transfer = true;
  c.async_scheduling = false;
  c.max_resync_blocks = 2;
  struct harness h;
  h_init(&h, &c);
  export_p(&h);
  assert_int_equal(h.out.num_kv_sends, 1); /* p's 3 blocks held for the decode engine */
  kv_report(&h, NULL, 0, NULL, 0, NULL, 0);
  h_add(&h, "r", 6, 8, 0, 0);
  h_step(&h);
  assert_int_equal(sched_find_request(h.s, "r")->status, SCHED_REQUEST_STATUS_RUNNING);
  const int32_t r_blocks = sched_find_request(h.s, "r")->num_block_ids;
  assert_true(r_blocks > 0);
  sched_kv_resync(h.s);
  h_add(&h, "s", 6, 8, 0, 0); /* its allocation takes the resync to the kv_manager now */
  assert_true(h_schedule(&h));
  assert_true(h.step.resync);
  assert_int_equal(h.step.num_held_block_ids, 3 + r_blocks);
  assert_int_equal(sched_find_request(h.s, "r")->status, SCHED_REQUEST_STATUS_RUNNING);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_preemptions, 0);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_request_handed_off_after_its_first_token_leaves_with_its_blocks_freed),
      cmocka_unit_test(only_a_running_request_with_an_output_is_handed_off),
      cmocka_unit_test(a_handed_off_requests_blocks_are_exported_until_finished_sending),
      cmocka_unit_test(an_export_of_a_step_never_sent_goes_with_the_next_step),
      cmocka_unit_test(a_hand_off_waits_for_its_kv_then_decodes_or_recomputes),
      cmocka_unit_test(a_receiving_request_preempted_is_named_and_recomputed),
      cmocka_unit_test(a_kv_manager_restart_keeps_held_exports_through_the_resync),
      cmocka_unit_test(a_resync_that_exports_keep_over_its_limit_preempts_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Asynchronous scheduling (scheduler.h head comment; vLLM v1 async_scheduler.py): step N+1
 * is planned and "sent" before step N's output is applied. The fake worker here keeps its
 * own token counts, as the real one does, executes each step when it is sent (in order, as
 * the worker's subscription does), and checks what the scheduler asks of it: a decode's input
 * may be a token it sampled itself (CachedRequestData.num_output_tokens counts it), never one
 * it does not have. Outputs are compared with the synchronous loop token for token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_scheduler_harness.h"

#define AW_MAX 16
#define MAX_OUT 64

/* The fake worker's persistent batch. */
struct aw_req {
  char id[32];
  int32_t num_prompt, num_outputs; /* tokens it knows: prompt + its own samples */
  int32_t num_computed;
  bool live;
};

/* One step's model output, copied (the real one crosses the bus). */
struct aw_output {
  uint64_t step;
  bool failed; /* the step held the poison request: the worker answers with an error */
  int32_t n;
  char ids[AW_MAX][32];
  const char *id_ptrs[AW_MAX];
  int32_t num_sampled[AW_MAX], sampled[AW_MAX];
};

struct async_h {
  struct harness h;
  struct aw_req w[AW_MAX];
  struct aw_output q[2];
  int32_t q_head, q_num;
  int32_t toks[AW_MAX][MAX_OUT], ntoks[AW_MAX]; /* emitted per request (index from id) */
  bool finished[AW_MAX];
  enum sched_finish_reason reason[AW_MAX];
  int32_t worker_samples; /* tokens the worker sampled, kept or not */
  const char *poison;     /* a step that holds this request fails (NULL: none) */
  bool blame;             /* ... and the worker names it (ModelRunnerOutput.failed_req_id) */
  int32_t num_failures;   /* failed steps seen by the "actor" */
};

static int req_index(const char *id) { return atoi(id + 1); }

static struct aw_req *aw_find(struct async_h *a, const char *id) {
  for (int i = 0; i < AW_MAX; i++)
    if (a->w[i].live && strcmp(a->w[i].id, id) == 0) return &a->w[i];
  return NULL;
}

/* The worker executes h.out now (it is next in its queue) and queues its output. */
static void aw_execute(struct async_h *a) {
  const struct sched_output *o = &a->h.out;
  for (int32_t i = 0; i < o->finished_req_ids.num; i++) {
    struct aw_req *w = aw_find(a, sched_str_list_get(&o->finished_req_ids, i));
    if (w) w->live = false;
  }
  for (int32_t i = 0; i < o->preempted_req_ids.num; i++) {
    struct aw_req *w = aw_find(a, sched_str_list_get(&o->preempted_req_ids, i));
    assert_non_null(w);
    w->live = false;
  }
  struct aw_output *out = &a->q[(a->q_head + a->q_num) % 2];
  assert_true(a->q_num < 2); /* never more than one step ahead */
  memset(out, 0, sizeof(*out));
  out->step = o->step;
  for (int pass = 0; pass < 2; pass++) {
    int32_t cnt = pass ? o->num_cached_reqs : o->num_new_reqs;
    for (int32_t i = 0; i < cnt; i++) {
      struct aw_req *w;
      int32_t n;
      if (!pass) {
        const struct sched_new_req_data *nr = &o->new_reqs[i];
        assert_null(aw_find(a, nr->req_id));
        w = NULL;
        for (int k = 0; k < AW_MAX && !w; k++)
          if (!a->w[k].live) w = &a->w[k];
        assert_non_null(w);
        memset(w, 0, sizeof(*w));
        w->live = true;
        snprintf(w->id, sizeof(w->id), "%s", nr->req_id);
        w->num_prompt = nr->num_prompt_tokens;
        w->num_outputs = nr->num_output_tokens;
        w->num_computed = nr->num_computed_tokens;
        n = nr->num_scheduled_tokens;
      } else {
        const struct sched_cached_req_data *c = &o->cached_reqs[i];
        w = aw_find(a, c->req_id);
        assert_non_null(w);
        /* the scheduler may count tokens the worker sampled itself, never more */
        assert_true(c->num_output_tokens <= w->num_outputs);
        w->num_outputs = c->num_output_tokens;
        w->num_computed = c->num_computed_tokens;
        n = c->num_scheduled_tokens;
      }
      int32_t end = w->num_computed + n;
      assert_true(end <= w->num_prompt + w->num_outputs); /* only tokens it knows */
      if (a->poison && n > 0 && strcmp(w->id, a->poison) == 0) out->failed = true;
      w->num_computed = end;
      int32_t k = out->n++;
      snprintf(out->ids[k], sizeof(out->ids[k]), "%s", w->id);
      out->id_ptrs[k] = out->ids[k];
      out->num_sampled[k] = end == w->num_prompt + w->num_outputs ? 1 : 0;
      if (out->num_sampled[k]) {
        out->sampled[k] = h_token(&a->h, w->id, w->num_outputs);
        w->num_outputs++;
        a->worker_samples++;
      }
    }
  }
  /* flatten */
  int32_t m = 0;
  for (int32_t k = 0; k < out->n; k++)
    if (out->num_sampled[k]) out->sampled[m++] = out->sampled[k];
  a->q_num++;
}

static void collect(struct async_h *a) {
  const struct sched_engine_outputs *eo = &a->h.eo;
  for (int32_t i = 0; i < eo->num_outputs; i++) {
    int k = req_index(sched_engine_outputs_req_id(eo, i));
    const struct sched_engine_output *e = &eo->outputs[i];
    assert_false(a->finished[k]); /* nothing after a finish */
    assert_int_equal(e->first_output_pos, a->ntoks[k]);
    const int32_t *t = sched_engine_outputs_tokens(eo, i);
    for (int32_t j = 0; j < e->num_new_tokens; j++) a->toks[k][a->ntoks[k]++] = t[j];
    if (e->finish_reason != SCHED_FINISH_REASON_NONE) a->finished[k] = true;
    a->reason[k] = e->finish_reason;
  }
}

/* Applies the oldest output; a failed one is recovered from as the actor does (both steps
 * forgotten, sched_step_failed with the request the worker blamed, if it named one). */
static void aw_receive(struct async_h *a) {
  struct aw_output *out = &a->q[a->q_head];
  if (out->failed) {
    a->num_failures++;
    a->q_head = a->q_num = 0; /* a reply to the second step, should it come, is stale */
    sched_engine_outputs_clear(&a->h.eo, out->step);
    assert_int_equal(sched_step_failed(a->h.s, a->blame ? a->poison : NULL, true, &a->h.eo), LLB_STATUS_OK);
    collect(a);
    return;
  }
  struct sched_model_output mo = {.step = out->step, .num_reqs = out->n, .req_ids = out->id_ptrs,
                                  .num_sampled = out->num_sampled, .sampled_token_ids = out->sampled};
  assert_int_equal(sched_update_from_output(a->h.s, &mo, &a->h.eo), LLB_STATUS_OK);
  a->q_head = (a->q_head + 1) % 2;
  a->q_num--;
  collect(a);
}

/* One turn of the actor's async loop: plan and send a step if one is due, then apply the
 * oldest output when two are in flight or nothing was sent. Returns false when idle. */
static bool aw_turn(struct async_h *a) {
  bool sent = false;
  if (a->q_num < 2) {
    h_schedule(&a->h);
    if (a->h.out.total_num_scheduled_tokens > 0) {
      aw_execute(a);
      sent = true;
    }
  }
  if (a->q_num == 2 || (!sent && a->q_num > 0)) aw_receive(a);
  assert_int_equal(sched_num_steps_in_flight(a->h.s), a->q_num);
  return sent || a->q_num > 0;
}

static void run_async(struct async_h *a, int max_turns) {
  for (int t = 0; t < max_turns && (sched_num_unfinished(a->h.s) > 0 || a->q_num > 0); t++) aw_turn(a);
  assert_int_equal(sched_num_unfinished(a->h.s), 0);
  assert_int_equal(a->q_num, 0);
}

/* The same requests through the synchronous loop, for comparison. */
static void run_sync(struct harness *h, int32_t toks[AW_MAX][MAX_OUT], int32_t *ntoks) {
  for (int s = 0; s < 500 && sched_num_unfinished(h->s) > 0; s++) {
    h_step(h);
    for (int32_t i = 0; i < h->eo.num_outputs; i++) {
      int k = req_index(sched_engine_outputs_req_id(&h->eo, i));
      const int32_t *t = sched_engine_outputs_tokens(&h->eo, i);
      for (int32_t j = 0; j < h->eo.outputs[i].num_new_tokens; j++) toks[k][ntoks[k]++] = t[j];
    }
  }
  assert_int_equal(sched_num_unfinished(h->s), 0);
}

/* After the last step: an idle step flushes the deferred FREE ops; every block is free. */
static void assert_no_block_leaked(struct harness *h) {
  h_schedule(h);
  assert_int_equal(h->out.total_num_scheduled_tokens, 0);
  struct kv_manager_stats ks;
  kv_manager_get_stats(h->kv, &ks);
  assert_int_equal(ks.num_free_blocks, h->cfg.num_blocks);
  struct sched_stats st;
  sched_get_stats(h->s, &st);
  assert_int_equal(st.num_free_blocks, h->cfg.num_blocks);
  for (int32_t b = 0; b < h->cfg.num_blocks; b++) assert_int_equal(sched_block_ref_cnt(h->s, b), 0);
}

static struct sched_config cfg(int32_t num_blocks, int32_t budget) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = num_blocks;
  c.max_model_len = 256;
  c.num_lookahead_tokens = 0;
  c.max_num_batched_tokens = budget;
  return c;
}

/* A fresh fake-worker harness over cfg(num_blocks, budget), asynchronous scheduling on. */
static struct async_h *async_new(int32_t num_blocks, int32_t budget) {
  struct async_h *a = calloc(1, sizeof(*a));
  assert_non_null(a);
  struct sched_config c = cfg(num_blocks, budget);
  c.async_scheduling = true;
  h_init(&a->h, &c);
  return a;
}

/* Every block free again, then the harness freed (ASan: nothing leaked or freed twice). */
static void async_free_checked(struct async_h *a) {
  assert_no_block_leaked(&a->h);
  h_fini(&a->h);
  free(a);
}

static void add_mix(struct harness *h) {
  h_add(h, "r0", 5, 12, 0, 0);
  h_add(h, "r1", 23, 7, 0, 1);  /* chunked with a small budget */
  h_add(h, "r2", 9, 1, 0, 2);   /* one token: finishes at its first output */
  h_add(h, "r3", 14, 20, 0, 3);
  h_add(h, "r4", 3, 9, 0, 4);
}

static void compare_with_sync(struct sched_config c, int32_t eos, int32_t eos_at) {
  struct async_h *a = calloc(1, sizeof(*a));
  struct harness *sh = calloc(1, sizeof(*sh));
  int32_t(*stoks)[MAX_OUT] = calloc(AW_MAX, sizeof(*stoks));
  int32_t sn[AW_MAX] = {0};
  assert_non_null(a);
  assert_non_null(sh);
  assert_non_null(stoks);
  c.async_scheduling = false;
  h_init(sh, &c);
  sh->eos = eos;
  sh->eos_at = eos_at;
  add_mix(sh);
  run_sync(sh, stoks, sn);
  c.async_scheduling = true;
  h_init(&a->h, &c);
  a->h.eos = eos;
  a->h.eos_at = eos_at;
  add_mix(&a->h);
  run_async(a, 1000);
  for (int k = 0; k < 5; k++) {
    assert_true(a->finished[k]);
    assert_int_equal(a->ntoks[k], sn[k]);
    for (int32_t p = 0; p < sn[k]; p++) assert_int_equal(a->toks[k][p], stoks[k][p]);
  }
  assert_no_block_leaked(&a->h);
  assert_no_block_leaked(sh);
  h_fini(&a->h);
  h_fini(sh);
  free(stoks);
  free(sh);
  free(a);
}

static void test_async_outputs_equal_sync_with_chunked_prefill(void **state) {
  (void)state;
  compare_with_sync(cfg(64, 10), -1, 0);
}

static void test_async_outputs_equal_sync_with_eos(void **state) {
  (void)state;
  compare_with_sync(cfg(64, 16), 2, 3); /* every request samples EOS at output position 3 */
}

static void test_async_outputs_equal_sync_under_preemption(void **state) {
  (void)state;
  compare_with_sync(cfg(14, 32), -1, 0);
}

/* A request that stops at step N already has a decode in step N+1: that token is computed,
 * never emitted, and the blocks N+1 referenced are freed. */
static void test_finish_at_step_n_discards_step_n1_token_and_frees_blocks(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  a->h.eos = 2;
  a->h.eos_at = 4;
  h_add(&a->h, "r0", 6, 50, 0, 0);
  run_async(a, 100);
  assert_int_equal(a->ntoks[0], 5); /* 4 tokens then EOS */
  assert_int_equal(a->toks[0][4], 2);
  assert_true(a->worker_samples > 5); /* the worker sampled past the stop */
  async_free_checked(a);
}

/* max_tokens is exact and no step is scheduled past it: the worker never samples more. */
static void test_max_tokens_is_exact_and_not_overrun(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 7, 0, 0);
  run_async(a, 100);
  assert_int_equal(a->ntoks[0], 7);
  assert_int_equal(a->worker_samples, 7);
  async_free_checked(a);
}

/* While a request is mid-prefill, the step planned ahead gives it only prompt tokens; its
 * first decode comes only after the step holding its last chunk. */
static void test_prefill_chunk_never_gets_a_speculative_decode(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 8);
  h_add(&a->h, "r0", 30, 3, 0, 0);
  int32_t placeholders_max = 0;
  for (int t = 0; t < 100 && (sched_num_unfinished(a->h.s) > 0 || a->q_num > 0); t++) {
    aw_turn(a);
    const struct sched_request *r = sched_find_request(a->h.s, "r0");
    if (!r) continue;
    if (r->num_computed_tokens < r->num_prompt_tokens) assert_int_equal(r->num_output_placeholders, 0);
    if (r->num_output_placeholders > placeholders_max) placeholders_max = r->num_output_placeholders;
    assert_true(r->num_computed_tokens <= r->num_tokens + r->num_output_placeholders);
  }
  assert_int_equal(a->ntoks[0], 3);
  assert_true(placeholders_max >= 1);
  async_free_checked(a);
}

/* Abort with two steps in flight: one ABORT output, nothing after it, every block freed. */
static void test_abort_with_two_steps_in_flight_frees_every_block(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 40, 0, 0);
  h_add(&a->h, "r1", 6, 10, 0, 1);
  for (int t = 0; t < 6; t++) aw_turn(a);
  assert_int_equal(a->q_num, 1);
  h_schedule(&a->h); /* the step ahead */
  assert_true(a->h.out.total_num_scheduled_tokens > 0);
  aw_execute(a);
  assert_int_equal(a->q_num, 2);
  const char *id = "r0";
  sched_engine_outputs_clear(&a->h.eo, 0);
  assert_int_equal(sched_abort_requests(a->h.s, &id, 1, SCHED_FINISH_REASON_ABORT, &a->h.eo), LLB_STATUS_OK);
  assert_int_equal(a->h.eo.num_outputs, 1);
  assert_int_equal(a->h.eo.outputs[0].finish_reason, SCHED_FINISH_REASON_ABORT);
  collect(a);
  run_async(a, 100); /* r0 emits nothing more (collect asserts) */
  assert_int_equal(a->ntoks[1], 10);
  async_free_checked(a);
}

/* A third step is refused; recovery forgets both steps in flight and leaks nothing. */
static void test_depth_is_two_and_preempt_all_forgets_steps_in_flight(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 40, 0, 0);
  a->h.eos = 2;
  a->h.eos_at = 1; /* r0 finishes with the output of step 2 */
  h_schedule(&a->h);
  aw_execute(a);
  h_schedule(&a->h);
  aw_execute(a);
  assert_int_not_equal(sched_schedule(a->h.s, &a->h.out, &a->h.step), LLB_STATUS_OK);
  aw_receive(a);
  aw_receive(a);
  assert_true(a->finished[0]);
  h_add(&a->h, "r1", 6, 40, 0, 1);
  h_schedule(&a->h);
  aw_execute(a);
  h_schedule(&a->h);
  aw_execute(a);
  sched_preempt_all(a->h.s);
  assert_int_equal(sched_num_steps_in_flight(a->h.s), 0);
  const struct sched_request *r = sched_find_request(a->h.s, "r1");
  assert_non_null(r);
  assert_int_equal(r->num_output_placeholders, 0);
  assert_int_equal(r->num_computed_tokens, 0);
  struct sched_model_output stale = {.step = a->q[a->q_head].step};
  assert_int_not_equal(sched_update_from_output(a->h.s, &stale, &a->h.eo), LLB_STATUS_OK);
  h_fini(&a->h); /* ASan: nothing leaked, nothing freed twice */
  free(a);
}

/* A worker reply without the token it owed (a row missing, or num_sampled 0, for a request
 * that samples in that step) is an error, so the actor recovers with preempt_all; the
 * request is then recomputed and finishes normally instead of waiting forever. */
static void test_missing_sample_is_an_error_and_recovery_finishes_the_request(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 5, 0, 0);
  h_schedule(&a->h);
  aw_execute(a);
  struct aw_output *out = &a->q[a->q_head];
  assert_int_equal(out->num_sampled[0], 1);
  out->num_sampled[0] = 0; /* the worker "forgot" the token */
  struct sched_model_output mo = {.step = out->step, .num_reqs = out->n, .req_ids = out->id_ptrs,
                                  .num_sampled = out->num_sampled, .sampled_token_ids = out->sampled};
  assert_int_not_equal(sched_update_from_output(a->h.s, &mo, &a->h.eo), LLB_STATUS_OK);
  a->q_head = (a->q_head + 1) % 2;
  a->q_num--;
  sched_preempt_all(a->h.s); /* what the actor does on a failed step */
  run_async(a, 200);
  assert_true(a->finished[0]);
  assert_int_equal(a->ntoks[0], 5);
  async_free_checked(a);
}

/* r0 and r1 with the outputs they get alone: tokens h_token(id, 0..max_tokens). */
static void assert_innocents_complete(struct async_h *a) {
  static const int32_t max_tokens[2] = {9, 6};
  for (int k = 0; k < 2; k++) {
    const char *id = k == 0 ? "r0" : "r1";
    assert_true(a->finished[k]);
    assert_int_equal(a->reason[k], SCHED_FINISH_REASON_LENGTH);
    assert_int_equal(a->ntoks[k], max_tokens[k]);
    for (int32_t j = 0; j < max_tokens[k]; j++) assert_int_equal(a->toks[k][j], h_token(&a->h, id, j));
  }
  assert_true(a->finished[2]);
  assert_int_equal(a->reason[2], SCHED_FINISH_REASON_ERROR);
  assert_int_equal(a->ntoks[2], 0);
}

static void add_poison_mix(struct async_h *a) {
  h_add(&a->h, "r0", 6, 9, 0, 0);
  h_add(&a->h, "r2", 5, 8, 0, 1); /* the poison: every step that holds it fails */
  h_add(&a->h, "r1", 7, 6, 0, 2);
  a->poison = "r2";
}

/* The worker names the request that made its step fail: that request is finished with an
 * error at once and the others of the step are recomputed and complete with their normal
 * tokens; one failed step in all (before: preempt_all and the same step again, forever). */
static void test_request_blamed_by_the_worker_is_finished_with_an_error(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  add_poison_mix(a);
  a->blame = true;
  run_async(a, 300);
  assert_int_equal(a->num_failures, 1);
  assert_innocents_complete(a);
  async_free_checked(a);
}

/* The worker fails every step that holds the poison but names nobody: after the first
 * failure its requests are suspects and run one suspect at a time, so the second failure
 * names the poison, which is finished with an error; the others complete unchanged. */
static void test_request_failing_two_steps_in_a_row_is_isolated_and_finished(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  add_poison_mix(a);
  run_async(a, 300);
  assert_int_equal(a->num_failures, SCHED_MAX_FAILED_STEPS);
  assert_innocents_complete(a);
  async_free_checked(a);
}

/* A failure that is not the batch's fault (a timeout, a restarting worker: count = false)
 * never finishes anyone, however often it happens. */
static void test_uncounted_failures_never_finish_a_request(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 9, 0, 0);
  for (int i = 0; i < 5; i++) {
    h_schedule(&a->h);
    aw_execute(a);
    a->q_head = a->q_num = 0;
    sched_engine_outputs_clear(&a->h.eo, 0);
    assert_int_equal(sched_step_failed(a->h.s, NULL, false, &a->h.eo), LLB_STATUS_OK);
    assert_int_equal(a->h.eo.num_outputs, 0);
  }
  const struct sched_request *r = sched_find_request(a->h.s, "r0");
  assert_non_null(r);
  assert_int_equal(r->num_failed_steps, 0);
  run_async(a, 100);
  assert_int_equal(a->ntoks[0], 9);
  async_free_checked(a);
}

/* A request aborted while its step is in flight, then blamed by the worker for that step,
 * finishes once (its ABORT), never a second time with ERROR, and nothing is freed twice. */
static void test_aborted_request_blamed_for_its_step_finishes_once(void **state) {
  (void)state;
  struct async_h *a = async_new(32, 64);
  h_add(&a->h, "r0", 6, 9, 0, 0);
  h_add(&a->h, "r1", 7, 6, 0, 1);
  h_schedule(&a->h);
  aw_execute(a);
  sched_engine_outputs_clear(&a->h.eo, 0);
  const char *id = "r0";
  assert_int_equal(sched_abort_requests(a->h.s, &id, 1, SCHED_FINISH_REASON_ABORT, &a->h.eo), LLB_STATUS_OK);
  collect(a);
  assert_int_equal(a->reason[0], SCHED_FINISH_REASON_ABORT);
  a->q_head = a->q_num = 0; /* the worker failed that step, naming r0 */
  sched_engine_outputs_clear(&a->h.eo, 0);
  assert_int_equal(sched_step_failed(a->h.s, "r0", true, &a->h.eo), LLB_STATUS_OK);
  assert_int_equal(a->h.eo.num_outputs, 0);
  run_async(a, 200);
  assert_int_equal(a->reason[1], SCHED_FINISH_REASON_LENGTH);
  assert_int_equal(a->ntoks[1], 6);
  async_free_checked(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_async_outputs_equal_sync_with_chunked_prefill),
      cmocka_unit_test(test_async_outputs_equal_sync_with_eos),
      cmocka_unit_test(test_async_outputs_equal_sync_under_preemption),
      cmocka_unit_test(test_finish_at_step_n_discards_step_n1_token_and_frees_blocks),
      cmocka_unit_test(test_max_tokens_is_exact_and_not_overrun),
      cmocka_unit_test(test_prefill_chunk_never_gets_a_speculative_decode),
      cmocka_unit_test(test_abort_with_two_steps_in_flight_frees_every_block),
      cmocka_unit_test(test_depth_is_two_and_preempt_all_forgets_steps_in_flight),
      cmocka_unit_test(test_missing_sample_is_an_error_and_recovery_finishes_the_request),
      cmocka_unit_test(test_request_blamed_by_the_worker_is_finished_with_an_error),
      cmocka_unit_test(test_request_failing_two_steps_in_a_row_is_isolated_and_finished),
      cmocka_unit_test(test_uncounted_failures_never_finish_a_request),
      cmocka_unit_test(test_aborted_request_blamed_for_its_step_finishes_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

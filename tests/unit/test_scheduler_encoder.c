/* The scheduler's encoder-input scheduling (vLLM _try_schedule_encoder_inputs) against its
 * encoder-cache mirror: only items overlapping the step's tokens, cached ones skipped, the
 * step cut before an item that does not fit the budget, chunked prefill splitting an item,
 * the ops of the EncoderStep and the freed hashes. An in-process kv_manager answers kv steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/kv_manager/kv_manager.h"
#include "actors/scheduler/scheduler.h"

struct h {
  struct scheduler *s;
  struct kv_manager *kv;
  struct sched_output out;
  struct kv_step step;
  struct kv_step_result res;
  struct encoder_step enc;
  struct sched_engine_outputs eo;
  struct llb_sampling_params sp; /* every h_add request's (the scheduler borrows it) */
};

static int32_t h_lookahead = -1; /* >= 0: sched_config.num_lookahead_tokens of the next h_init */

static void h_init(struct h *h, int32_t budget, int32_t enc_budget, int32_t enc_cache) {
  memset(h, 0, sizeof(*h));
  struct sched_config c;
  sched_config_init(&c);
  if (h_lookahead >= 0) c.num_lookahead_tokens = h_lookahead;
  c.max_num_batched_tokens = budget;
  c.encoder_compute_budget = enc_budget;
  c.encoder_cache_size = enc_cache;
  c.num_blocks = 64;
  c.block_size = 4;
  assert_int_equal(sched_create(&c, &h->s), LLB_STATUS_OK);
  struct kv_manager_config kc = {.num_blocks = 64, .block_size = 4, .enable_prefix_caching = true};
  assert_int_equal(kv_manager_create(&kc, &h->kv), LLB_STATUS_OK);
  sched_output_init(&h->out);
  kv_step_init(&h->step);
  kv_step_result_init(&h->res);
  encoder_step_init(&h->enc);
  sched_engine_outputs_init(&h->eo);
  llb_sampling_params_init(&h->sp);
  h->sp.max_tokens = 2;
}

static void h_fini(struct h *h) {
  sched_destroy(h->s);
  kv_manager_destroy(h->kv);
  sched_output_free(&h->out);
  kv_step_free(&h->step);
  kv_step_result_free(&h->res);
  encoder_step_free(&h->enc);
  sched_engine_outputs_free(&h->eo);
}

/* A request of n prompt tokens with items (offset, length, hash). */
static void h_add(struct h *h, const char *id, int32_t n, const struct sched_mm_feature *mm, int32_t nmm) {
  int32_t toks[256];
  for (int32_t i = 0; i < n; i++) toks[i] = 10 + i;
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n,
                                 .eos_token_id = -1, .mm_features = mm, .num_mm_features = nmm};
  nr.sampling_params = &h->sp;
  assert_int_equal(sched_add_request(h->s, &nr), LLB_STATUS_OK);
}

/* Plans one step up to the encoder phase (kv answered in process). */
static void h_plan(struct h *h) {
  assert_int_equal(sched_schedule(h->s, &h->out, &h->step), LLB_STATUS_OK);
  if (!kv_step_empty(&h->step)) {
    assert_int_equal(kv_manager_apply_step(h->kv, &h->step, &h->res), LLB_STATUS_OK);
    assert_int_equal(sched_apply_kv_result(h->s, &h->res, &h->out), LLB_STATUS_OK);
  }
  assert_int_equal(sched_schedule_encoder(h->s, &h->out, &h->enc), LLB_STATUS_OK);
}

/* Finishes the planned step: every request that reached its end samples token 5. */
static void h_finish(struct h *h) {
  if (h->out.total_num_scheduled_tokens == 0) return;
  const char *ids[16];
  int32_t ns[16], toks[16], n = 0;
  for (int32_t i = 0; i < h->out.num_new_reqs; i++) ids[n++] = h->out.new_reqs[i].req_id;
  for (int32_t i = 0; i < h->out.num_cached_reqs; i++) ids[n++] = h->out.cached_reqs[i].req_id;
  for (int32_t i = 0; i < n; i++) {
    ns[i] = 1;
    toks[i] = 5;
  }
  struct sched_model_output mo = {.step = h->out.step, .num_reqs = n, .req_ids = ids, .num_sampled = ns,
                                  .sampled_token_ids = toks};
  /* partial prefills sample nothing: the scheduler ignores their tokens */
  assert_int_equal(sched_update_from_output(h->s, &mo, &h->eo), LLB_STATUS_OK);
}

static int32_t scheduled_of(const struct h *h, const char *id) {
  for (int32_t i = 0; i < h->out.num_new_reqs; i++)
    if (strcmp(h->out.new_reqs[i].req_id, id) == 0) return h->out.new_reqs[i].num_scheduled_tokens;
  for (int32_t i = 0; i < h->out.num_cached_reqs; i++)
    if (strcmp(h->out.cached_reqs[i].req_id, id) == 0) return h->out.cached_reqs[i].num_scheduled_tokens;
  return 0;
}

static int32_t count_ops(const struct h *h, enum encoder_op_kind k) {
  int32_t n = 0;
  for (int32_t i = 0; i < h->enc.num_ops; i++) n += h->enc.ops[i].kind == k;
  return n;
}

static void test_chunked_prefill_splits_an_item_encoded_once(void **state) {
  (void)state;
  struct h h;
  h_init(&h, 16, 0, 64);
  struct sched_mm_feature mm[] = {{.offset = 10, .length = 12, .hash = "A"}};
  h_add(&h, "r1", 40, mm, 1);
  h_plan(&h); /* tokens [0, 16) overlap the item [10, 22): encode it */
  assert_int_equal(scheduled_of(&h, "r1"), 16);
  assert_int_equal(h.out.num_encoder_inputs, 1);
  assert_int_equal(h.out.encoder_inputs[0].num_input_ids, 1);
  assert_int_equal(h.out.encoder_inputs[0].input_ids[0], 0);
  assert_int_equal(count_ops(&h, ENCODER_OP_KIND_ALLOCATE), 1);
  h_finish(&h);
  h_plan(&h); /* tokens [16, 32): the rest of the item comes from the cache */
  assert_int_equal(scheduled_of(&h, "r1"), 16);
  assert_int_equal(h.out.num_encoder_inputs, 0);
  assert_int_equal(count_ops(&h, ENCODER_OP_KIND_CHECK_AND_UPDATE), 1);
  assert_true(h.enc.ops[0].expected); /* a hit */
  h_finish(&h);
  h_plan(&h); /* tokens [32, 40): past the item, no encoder op at all */
  assert_int_equal(h.enc.num_ops, 0);
  assert_false(h.enc.reset);
  h_finish(&h);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.encoder_inputs_computed, 1);
  assert_int_equal(st.encoder_embeds_computed, 12);
  assert_int_equal(st.encoder_cache_queries, 2);
  assert_int_equal(st.encoder_cache_hits, 1);
  h_fini(&h);
}

static void test_step_is_cut_before_an_item_over_the_budget(void **state) {
  (void)state;
  struct h h;
  h_init(&h, 32, 12, 64);
  struct sched_mm_feature mm[] = {{.offset = 4, .length = 10, .hash = "A"},
                                  {.offset = 20, .length = 10, .hash = "B"}};
  h_add(&h, "r1", 40, mm, 2);
  h_plan(&h); /* A takes 10 of 12 rows; B (10) does not fit: stop at token 20 */
  assert_int_equal(scheduled_of(&h, "r1"), 20);
  assert_int_equal(h.out.total_num_scheduled_tokens, 20);
  assert_int_equal(h.out.num_encoder_inputs, 1);
  assert_int_equal(h.out.encoder_inputs[0].input_ids[0], 0);
  assert_int_equal(count_ops(&h, ENCODER_OP_KIND_CAN_ALLOCATE), 2);
  h_finish(&h);
  h_plan(&h); /* now B */
  assert_int_equal(scheduled_of(&h, "r1"), 20);
  assert_int_equal(h.out.num_encoder_inputs, 1);
  assert_int_equal(h.out.encoder_inputs[0].input_ids[0], 1);
  h_finish(&h);
  h_fini(&h);
}

/* An image's placeholder range holds tile markers that take no rows (is_embed 0): the budget
 * and the encoder cache count its rows (the 1s), not its length. 12 positions, 8 rows: it fits
 * a budget of 8 and a cache of 8, which its length would not. */
static void test_masked_image_counts_embedding_rows_not_positions(void **state) {
  (void)state;
  struct h h;
  h_init(&h, 32, 8, 8);
  static const uint8_t mask[12] = {0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1};
  struct sched_mm_feature mm[] = {{.offset = 4, .length = 12, .hash = "IMG", .is_embed = mask}};
  h_add(&h, "r1", 24, mm, 1);
  h_plan(&h);
  assert_int_equal(scheduled_of(&h, "r1"), 24);
  assert_int_equal(h.out.num_encoder_inputs, 1);
  assert_int_equal(count_ops(&h, ENCODER_OP_KIND_ALLOCATE), 1);
  for (int32_t i = 0; i < h.enc.num_ops; i++) assert_int_equal(h.enc.ops[i].num_embeds, 8);
  h_finish(&h);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.encoder_embeds_computed, 8);
  h_fini(&h);
  /* with one row more than the cache holds it is refused at admission, naming the rows */
  h_init(&h, 32, 8, 7);
  int32_t toks[24] = {0};
  struct sched_new_request nr = {.request_id = "r2", .prompt_token_ids = toks, .num_prompt_tokens = 24,
                                 .eos_token_id = -1, .mm_features = mm, .num_mm_features = 1};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_TOO_LARGE);
  assert_non_null(strstr(llb_err_last(), "8 embedding rows"));
  h_fini(&h);
}

static void test_two_requests_share_an_item_and_freed_hashes_reach_the_worker(void **state) {
  (void)state;
  struct h h;
  h_init(&h, 64, 0, 16);
  struct sched_mm_feature a[] = {{.offset = 2, .length = 8, .hash = "A"}};
  struct sched_mm_feature b[] = {{.offset = 2, .length = 12, .hash = "B"}};
  h_add(&h, "r1", 12, a, 1);
  h_add(&h, "r2", 14, a, 1);
  h_plan(&h); /* r1 encodes A, r2 hits it in the same step */
  assert_int_equal(h.out.num_encoder_inputs, 1);
  assert_string_equal(h.out.encoder_inputs[0].req_id, "r1");
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.encoder_inputs_computed, 1);
  assert_int_equal(st.encoder_cache_hits, 1);
  h_finish(&h);
  h_plan(&h); /* decode */
  h_finish(&h); /* max_tokens 2: both finish, A becomes freeable */
  h_add(&h, "r3", 16, b, 1);
  h_plan(&h); /* B needs 12 rows, 8 free: A (freeable) is evicted */
  assert_int_equal(count_ops(&h, ENCODER_OP_KIND_FREE_REQUEST), 2);
  assert_int_equal(h.out.free_encoder_mm_hashes.num, 1);
  assert_string_equal(sched_str_list_get(&h.out.free_encoder_mm_hashes, 0), "A");
  assert_int_equal(h.out.num_encoder_inputs, 1);
  h_finish(&h);
  h_fini(&h);
}

static void test_item_larger_than_the_cache_is_refused(void **state) {
  (void)state;
  struct h h;
  h_init(&h, 64, 0, 16);
  struct sched_mm_feature a[] = {{.offset = 0, .length = 20, .hash = "A"}};
  int32_t toks[24] = {0};
  struct sched_new_request nr = {.request_id = "big", .prompt_token_ids = toks, .num_prompt_tokens = 24,
                                 .eos_token_id = -1, .mm_features = a, .num_mm_features = 1};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_TOO_LARGE);
  h_fini(&h);
}

/* Plans one step whose ALLOCATE for `id` the kv_manager refuses for lack of room (QUEUE_FULL,
 * nothing changed: the op asks for more tokens than the pool holds). */
static void h_plan_refusing(struct h *h, const char *id) {
  assert_int_equal(sched_schedule(h->s, &h->out, &h->step), LLB_STATUS_OK);
  bool refused = false;
  for (int32_t i = 0; i < h->step.num_ops; i++) {
    struct kv_op *op = &h->step.ops[i];
    if (op->kind == KV_OP_KIND_ALLOCATE && op->req_id && strcmp(op->req_id, id) == 0) {
      op->num_tokens = 64 * 4 + 4;
      refused = true;
    }
  }
  assert_true(refused);
  assert_int_equal(kv_manager_apply_step(h->kv, &h->step, &h->res), LLB_STATUS_OK);
  assert_int_equal(sched_apply_kv_result(h->s, &h->res, &h->out), LLB_STATUS_OK);
  assert_int_equal(sched_schedule_encoder(h->s, &h->out, &h->enc), LLB_STATUS_OK);
}

/* A request whose image waits for encoder-cache room keeps its blocks; when its next allocation
 * is then refused it goes back to the queue still holding them, and when admitted again it
 * allocates the rest without a prefix lookup (the kv_manager refuses a lookup with held blocks:
 * before, that request was refused, resynced and requeued at every step, never running). */
static void test_requeued_request_holding_blocks_allocates_without_lookup(void **state) {
  (void)state;
  struct h h;
  h_lookahead = 0; /* blocks for the scheduled tokens only: r2 allocates again in step 3 */
  h_init(&h, 24, 0, 16);
  h_lookahead = -1;
  struct sched_mm_feature a[] = {{.offset = 0, .length = 12, .hash = "A"}};
  struct sched_mm_feature b[] = {{.offset = 0, .length = 12, .hash = "B"}};
  h_add(&h, "r1", 40, a, 1);
  h_plan(&h); /* r1: 24 of 40, A encoded (12 of the cache's 16 rows) */
  assert_int_equal(scheduled_of(&h, "r1"), 24);
  h_finish(&h);
  h_add(&h, "r2", 20, b, 1);
  h_plan(&h); /* r1 ends its prompt; r2 gets blocks, but B (12 rows) has no room while A is in use */
  assert_int_equal(scheduled_of(&h, "r2"), 0);
  h_finish(&h);
  h_plan_refusing(&h, "r2"); /* r2's next allocation refused: back to the queue, blocks held */
  assert_int_equal(scheduled_of(&h, "r2"), 0);
  h_finish(&h);
  bool ran = false;
  for (int i = 0; i < 8 && !ran; i++) { /* r1 finishes (max_tokens 2), A is freed, r2 runs */
    h_plan(&h);
    ran = scheduled_of(&h, "r2") > 0;
    h_finish(&h);
  }
  assert_true(ran);
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_kv_protocol_faults, 0);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunked_prefill_splits_an_item_encoded_once),
      cmocka_unit_test(test_step_is_cut_before_an_item_over_the_budget),
      cmocka_unit_test(test_requeued_request_holding_blocks_allocates_without_lookup),
      cmocka_unit_test(test_masked_image_counts_embedding_rows_not_positions),
      cmocka_unit_test(test_two_requests_share_an_item_and_freed_hashes_reach_the_worker),
      cmocka_unit_test(test_item_larger_than_the_cache_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Multimodal "embeds" items through the whole engine over a real nats-server (every actor a
 * process, llmbus-encoder-cache included, started by tests/e2e/stack.c) with the real model:
 * - an item holding exactly the token embeddings of a piece of text (token_embd.weight rows
 *   dequantized here) gives the same greedy tokens as the text inline, and the placeholders
 *   without the item give other tokens;
 * - the same with a 4-token step budget, so chunked prefill splits the item over steps;
 * - two requests sharing an item: SchedulerStats (llm.engine.0.stats) count it computed once
 *   and hit in the encoder cache.
 * argv[1]: the model (missing: skip 77 locally, fail under CI=true). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/e2e/stack.h"

#define GEN 8
#define MAX_IDS 128
#define STATS_WAIT_MS 30000

static const char *model;
static struct gguf_file *gf;
static struct tokenizer *tok;
static int32_t hidden;
static struct e2e_stack s;

/* "<a><b><c>" inline, and the same with <b> replaced by placeholders (token 0) whose
 * embeddings come from an item. */
struct prompts {
  int32_t inline_ids[MAX_IDS], mm_ids[MAX_IDS];
  int32_t n, off, len;
  float *rows;  /* [len, hidden] f32: token_embd.weight rows of <b> */
  float *other; /* [len, hidden] the same rows * 0.5: a different item */
};
static struct prompts P;

static int32_t tokenize(const char *text, int32_t *out, int32_t cap) {
  int32_t *ids = NULL;
  int64_t n = 0;
  assert_int_equal(tokenizer_encode(tok, text, strlen(text), false, false, &ids, &n), LLB_STATUS_OK);
  assert_true(n > 0 && n <= cap);
  memcpy(out, ids, (size_t)n * sizeof(int32_t));
  free(ids);
  return (int32_t)n;
}

/* Rows of token_embd.weight for ids[n], times scale, as f32 [n, hidden] (malloc'd). */
static float *embed_rows(const int32_t *ids, int32_t n, float scale) {
  const struct gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
  assert_non_null(t);
  size_t row_bytes = 0;
  assert_int_equal(ggml_row_bytes(t->type, t->ne[0], &row_bytes), LLB_STATUS_OK);
  float *rows = malloc((size_t)n * (size_t)hidden * sizeof(float));
  assert_non_null(rows);
  for (int32_t i = 0; i < n; i++) {
    assert_int_equal(ggml_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)ids[i] * row_bytes,
                                         rows + (size_t)i * hidden, hidden), LLB_STATUS_OK);
    for (int32_t c = 0; c < hidden; c++) rows[(size_t)i * hidden + c] *= scale;
  }
  return rows;
}

static void make_prompts(void) {
  int32_t a[64], b[64], c[64];
  int32_t na = tokenize("The city of light,", a, 64);
  int32_t nb = tokenize(" Paris, is the capital of a country called", b, 64);
  int32_t nc = tokenize(" France. Its most famous tower is the", c, 64);
  assert_true(na + nb + nc <= MAX_IDS);
  memcpy(P.inline_ids, a, (size_t)na * 4);
  memcpy(P.inline_ids + na, b, (size_t)nb * 4);
  memcpy(P.inline_ids + na + nb, c, (size_t)nc * 4);
  P.n = na + nb + nc;
  P.off = na;
  P.len = nb;
  memcpy(P.mm_ids, P.inline_ids, (size_t)P.n * 4);
  for (int32_t i = 0; i < nb; i++) P.mm_ids[na + i] = 0;
  P.rows = embed_rows(b, nb, 1.0f);
  P.other = embed_rows(b, nb, 0.5f);
}

static struct llb_mm_item item(const float *rows) {
  return (struct llb_mm_item){.modality = llb_str_c("embeds"), .data = (const uint8_t *)rows,
                              .data_bytes = (int64_t)P.len * hidden * 4, .dtype = llb_str_c("f32"),
                              .num_rows = P.len, .num_cols = hidden, .placeholder_offset = P.off};
}

static struct e2e_request request(const char *id, const int32_t *ids, int32_t n,
                                  const struct llb_mm_item *mm) {
  struct e2e_request r = {.request_id = id, .prompt_token_ids = ids, .num_prompt_token_ids = n,
                          .mm_items = mm, .num_mm_items = mm ? 1 : 0};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = GEN;
  r.sp.ignore_eos = true;
  return r;
}

static void generate(const char *id, const int32_t *ids, int32_t n, const struct llb_mm_item *mm,
                     struct e2e_result *out) {
  struct e2e_request r = request(id, ids, n, mm);
  assert_int_equal(e2e_generate(&s, &r, out), 0);
  e2e_print_result(id, out);
  if (out->error_code) fprintf(stderr, "%s: error %s (%s)\n", id, out->error_message, out->error_field);
  assert_int_equal(out->error_code, 0);
  assert_int_equal(out->num_tokens, GEN);
}

static struct llb_scheduler_stats stats_after_now(void) {
  struct llb_scheduler_stats st;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  return st;
}

static int teardown(void **state) {
  (void)state;
  e2e_stack_stop(&s);
  return 0;
}

static void start(const char *const *sched_args) {
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_args;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  assert_true(s.actors[E2E_ACTOR_ENCODER_CACHE].expected);
  assert_true(s.actors[E2E_ACTOR_ENCODER_CACHE].ready);
}

static void test_item_matches_inline_text_and_shared_item_is_computed_once(void **state) {
  (void)state;
  static const char *const args[] = {E2E_SLOW_STEP_FLAGS, NULL};
  start(args);
  double t0 = e2e_now_s();
  static struct e2e_result ref, mm, bare, r1, r2;
  struct llb_mm_item it = item(P.rows);
  generate("inline", P.inline_ids, P.n, NULL, &ref);
  generate("mm", P.mm_ids, P.n, &it, &mm);
  assert_true(e2e_same_tokens("item vs inline text", &ref, &mm));
  generate("placeholders-only", P.mm_ids, P.n, NULL, &bare);
  assert_memory_not_equal(bare.token_ids, ref.token_ids, GEN * sizeof(int32_t));

  /* Two requests sharing a new item that ends the prompt (the last prompt token is always
   * computed, so even a prefix-cache hit needs the item's output): computed once, then hit. */
  struct llb_scheduler_stats before = stats_after_now();
  struct llb_mm_item shared = item(P.other);
  int32_t n_end = P.off + P.len;
  struct e2e_request q1 = request("shared-1", P.mm_ids, n_end, &shared);
  struct e2e_request q2 = request("shared-2", P.mm_ids, n_end, &shared);
  struct e2e_pending p1, p2;
  assert_int_equal(e2e_submit(&s, &q1, &p1), 0);
  assert_int_equal(e2e_submit(&s, &q2, &p2), 0);
  assert_int_equal(e2e_collect(&p1, E2E_WAIT_OUTPUT_MS), 0);
  assert_int_equal(e2e_collect(&p2, E2E_WAIT_OUTPUT_MS), 0);
  r1 = p1.result;
  r2 = p2.result;
  e2e_pending_release(&p1);
  e2e_pending_release(&p2);
  assert_int_equal(r1.error_code, 0);
  assert_int_equal(r2.error_code, 0);
  assert_true(e2e_same_tokens("requests sharing an item", &r1, &r2));
  struct llb_scheduler_stats after = stats_after_now();
  fprintf(stderr, "e2e: encoder inputs computed %llu -> %llu, cache hits %llu -> %llu\n",
          (unsigned long long)before.encoder_inputs_computed, (unsigned long long)after.encoder_inputs_computed,
          (unsigned long long)before.encoder_cache_hits, (unsigned long long)after.encoder_cache_hits);
  assert_int_equal(after.encoder_inputs_computed - before.encoder_inputs_computed, 1);
  assert_true(after.encoder_cache_hits > before.encoder_cache_hits);
  fprintf(stderr, "e2e: item phase in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

static void test_chunked_prefill_splits_the_item_without_changing_tokens(void **state) {
  (void)state;
  static const char *const args[] = {E2E_SLOW_STEP_FLAGS, "--max-num-batched-tokens", "4",
                                     "--encoder-compute-budget", "256", NULL};
  start(args);
  double t0 = e2e_now_s();
  static struct e2e_result ref, mm;
  struct llb_mm_item it = item(P.rows);
  generate("inline-chunked", P.inline_ids, P.n, NULL, &ref);
  uint64_t computed = stats_after_now().encoder_inputs_computed;
  generate("mm-chunked", P.mm_ids, P.n, &it, &mm);
  assert_true(e2e_same_tokens("item vs inline text, budget 4", &ref, &mm));
  struct llb_scheduler_stats st = stats_after_now();
  assert_int_equal(st.encoder_inputs_computed - computed, 1);
  assert_true(st.encoder_cache_hits >= 2); /* later chunks of the item read its cached output */
  fprintf(stderr, "e2e: chunked phase in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  if (gguf_open(model, &gf) || tokenizer_load(gf, &tok)) {
    fprintf(stderr, "cannot load %s: %s\n", model, llb_err_last());
    return 1;
  }
  const struct gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
  if (!t) {
    fprintf(stderr, "%s has no token_embd.weight\n", model);
    return 1;
  }
  hidden = (int32_t)t->ne[0];
  make_prompts();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_item_matches_inline_text_and_shared_item_is_computed_once, teardown),
      cmocka_unit_test_teardown(test_chunked_prefill_splits_the_item_without_changing_tokens, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(P.rows);
  free(P.other);
  tokenizer_destroy(tok);
  gguf_close(gf);
  return rc;
}

/* End to end against llama.cpp: the default model's prompt tokens, first-step logits and
 * 64-token greedy continuations must match the golden file that tests/tools/make_golden.py
 * recorded with llama-cpp-python (see tests/tools/README.md).
 *
 * Usage: test_golden_llamacpp MODEL.gguf GOLDEN.json
 *
 * Our CPU kernels follow ggml's op-level arithmetic (Q8 activations, ggml's exp, fp16 q and
 * attention probabilities, RoPE as fused multiply-adds; kernels/cpu/README.md), so the
 * numbers are llama.cpp's bit for bit, not merely close. That is the bar, because this Q4_1
 * model is chaotic under Q8 activations: a 1e-6 relative perturbation of the embeddings moves
 * the first-step logits by ~1.2 (tests/tools/README.md), so "close" numerics diverge within
 * a few dozen greedy steps.
 *
 * llama.cpp sums attention in one order for multi-token ubatches and another for one-token
 * ones. The engine keeps one order for every row (LLAMA_ATTENTION_ORDER_BATCH_INVARIANT), so
 * that a decode step equals a recompute of the same token (docs/design.md §5); it is llama.cpp's
 * prefill order, so:
 * 1. In the engine's order, prompt ids are identical and the first step's logits equal
 *    llama.cpp's over its top-256 ids within FIRST_TOL (bit-exact on the machine that recorded
 *    them; the slack covers a libm differing in the last bit) with the same argmax.
 * 2. With LLAMA_ATTENTION_ORDER_LLAMACPP (llama.cpp's choice per step), free-running greedy
 *    continuations of 64 tokens equal llama.cpp's token for token. A case may diverge only at
 *    a near-tie: llama.cpp's top two logits within TIE_TOL and our token its runner-up; at
 *    most one of the cases may diverge.
 *
 * The model missing is a skip (77) locally and a failure under CI (env CI=true).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"
#include "model/template/chat_template.h"
#include "model/tokenizer/tokenizer.h"

#define FIRST_TOL 1e-3f
#define PACKED_TOL 1.5f /* measured 0.37-0.75 on the 8 cases; a 1e-6 input perturbation moves ~1.2 */
#define TIE_TOL 0.1f
#define MAX_DIVERGENT_CASES 1
#define BLOCK_SIZE 16

static const char *g_model_path;
static const char *g_golden_path;

struct golden_env {
  json_t *doc;
  struct gguf_file *gguf;
  struct tokenizer *tok;
  struct llama_model *model;
  struct llama_kv_cache *kv;
  struct llama_forward_ctx *fwd;
  struct sampler *sampler;
  enum chat_template_kind chat_kind;
  int32_t vocab;
  int32_t max_tokens;  /* longest prompt + greedy steps */
  int32_t num_blocks;
  float *logits;       /* [vocab] */
  int32_t *seq;        /* [max_tokens] prompt + generated ids */
  int32_t *positions;  /* [max_tokens] */
  int64_t *slots;      /* [max_tokens] */
  int32_t *block_table; /* [num_blocks]: the identity, one sequence at a time */
};

#define CHECK_OK(expr)                                                                   \
  do {                                                                                   \
    llb_status st_ = (expr);                                                             \
    if (st_ != LLB_STATUS_OK) fail_msg("%s: %s (%s)", #expr, llb_strerror(st_), llb_err_last()); \
  } while (0)

static json_t *jget(const json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  if (!v) fail_msg("golden file: key '%s' missing", key);
  return v;
}

static int setup_numerics(void **state, enum llama_attention_order order, enum llama_matmul_mode matmul) {
  struct golden_env *e = calloc(1, sizeof *e);
  assert_non_null(e);
  json_error_t jerr;
  e->doc = json_load_file(g_golden_path, 0, &jerr);
  if (!e->doc) fail_msg("%s:%d: %s", g_golden_path, jerr.line, jerr.text);
  CHECK_OK(gguf_open(g_model_path, &e->gguf));
  CHECK_OK(tokenizer_load(e->gguf, &e->tok));
  CHECK_OK(chat_template_from_gguf(e->gguf, &e->chat_kind));
  CHECK_OK(llama_model_load(e->gguf, &e->model));
  e->vocab = llama_model_config(e->model)->vocab_size;
  assert_int_equal(e->vocab, (int32_t)json_integer_value(jget(e->doc, "vocab_size")));
  int32_t n_greedy = (int32_t)json_integer_value(jget(e->doc, "n_greedy"));
  json_t *cases = jget(e->doc, "cases");
  int32_t longest = 1;
  for (size_t i = 0; i < json_array_size(cases); i++) {
    int32_t n = (int32_t)json_array_size(jget(json_array_get(cases, i), "prompt_ids"));
    if (n > longest) longest = n;
  }
  e->max_tokens = longest + n_greedy;
  e->num_blocks = (e->max_tokens + BLOCK_SIZE - 1) / BLOCK_SIZE;
  CHECK_OK(llama_kv_cache_create(e->model, e->num_blocks, BLOCK_SIZE, &e->kv));
  const struct llama_forward_options fo = {.max_num_tokens = longest, .n_threads = 2,
                                           .attention_order = order, .matmul = matmul};
  CHECK_OK(llama_forward_ctx_create_opts(e->model, &fo, &e->fwd));
  CHECK_OK(sampler_create(e->vocab, &e->sampler));
  e->logits = malloc((size_t)e->vocab * sizeof *e->logits);
  e->seq = malloc((size_t)e->max_tokens * sizeof *e->seq);
  e->positions = malloc((size_t)e->max_tokens * sizeof *e->positions);
  e->slots = malloc((size_t)e->max_tokens * sizeof *e->slots);
  e->block_table = malloc((size_t)e->num_blocks * sizeof *e->block_table);
  assert_true(e->logits && e->seq && e->positions && e->slots && e->block_table);
  for (int32_t i = 0; i < e->max_tokens; i++) {
    e->positions[i] = i;
    e->slots[i] = i; /* block i / BLOCK_SIZE through the identity table */
  }
  for (int32_t b = 0; b < e->num_blocks; b++) e->block_table[b] = b;
  *state = e;
  return 0;
}

static int setup_engine_order(void **state) {
  return setup_numerics(state, LLAMA_ATTENTION_ORDER_BATCH_INVARIANT, LLAMA_MATMUL_GGML);
}

static int setup_llamacpp_order(void **state) {
  return setup_numerics(state, LLAMA_ATTENTION_ORDER_LLAMACPP, LLAMA_MATMUL_GGML);
}

static int setup_engine_defaults(void **state) {
  return setup_numerics(state, LLAMA_ATTENTION_ORDER_BATCH_INVARIANT, LLAMA_MATMUL_PACKED);
}

static int teardown(void **state) {
  struct golden_env *e = *state;
  if (!e) return 0;
  free(e->logits);
  free(e->seq);
  free(e->positions);
  free(e->slots);
  free(e->block_table);
  sampler_destroy(e->sampler);
  llama_forward_ctx_destroy(e->fwd);
  llama_kv_cache_destroy(e->kv);
  llama_model_destroy(e->model);
  tokenizer_destroy(e->tok);
  gguf_close(e->gguf);
  json_decref(e->doc);
  free(e);
  return 0;
}

/* Runs seq[start, start + n) (context so far: start tokens) and leaves the last row's
 * logits in e->logits. */
static void forward_rows(struct golden_env *e, int32_t start, int32_t n) {
  const int32_t qsl[2] = {0, n};
  const int32_t seq_len = start + n;
  const int32_t last = n - 1;
  const struct llama_batch b = {
      .num_tokens = n, .token_ids = e->seq + start, .positions = e->positions + start,
      .slot_mapping = e->slots + start, .num_seqs = 1, .query_start_loc = qsl,
      .seq_lens = &seq_len, .block_tables = e->block_table, .max_blocks_per_seq = e->num_blocks,
      .num_logits = 1, .logits_indices = &last};
  CHECK_OK(llama_forward(e->fwd, e->kv, &b, e->logits));
}

/* Our prompt ids for a case: chat through our template + tokenizer, raw through the tokenizer.
 * Returns whether they equal the golden ids (printing the first difference if not). */
static bool prompt_ids_match(struct golden_env *e, const json_t *c, const char *name) {
  const char *kind = json_string_value(jget(c, "kind"));
  char *text = NULL;
  bool chat = strcmp(kind, "chat") == 0;
  if (chat) {
    json_t *msgs = jget(c, "messages");
    size_t n = json_array_size(msgs);
    struct chat_message m[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
      m[i].role = json_string_value(jget(json_array_get(msgs, i), "role"));
      m[i].content = json_string_value(jget(json_array_get(msgs, i), "content"));
    }
    CHECK_OK(chat_template_apply(e->chat_kind, m, n, true, &text));
    const char *want = json_string_value(jget(c, "prompt"));
    if (strcmp(text, want) != 0)
      printf("  %s: rendered chat text differs from the jinja2 rendering\n", name);
  } else {
    text = strdup(json_string_value(jget(c, "prompt")));
    assert_non_null(text);
  }
  int32_t *ids = NULL;
  int64_t n_ids = 0;
  CHECK_OK(tokenizer_encode(e->tok, text, strlen(text), true, chat, &ids, &n_ids));
  free(text);
  json_t *want = jget(c, "prompt_ids");
  bool same = (size_t)n_ids == json_array_size(want);
  int64_t first_diff = -1;
  for (int64_t i = 0; i < n_ids && i < (int64_t)json_array_size(want); i++)
    if (ids[i] != (int32_t)json_integer_value(json_array_get(want, (size_t)i))) {
      first_diff = i;
      same = false;
      break;
    }
  if (!same)
    printf("  %s: prompt ids differ: ours %lld, golden %zu, first difference at %lld\n", name,
           (long long)n_ids, json_array_size(want), (long long)first_diff);
  free(ids);
  return same;
}

/* First-step logits against the golden top-256; returns whether they are within FIRST_TOL
 * with llama.cpp's argmax. */
static bool first_logits_match(struct golden_env *e, const json_t *c, const char *name, float tol) {
  json_t *fl = jget(c, "first_logits");
  json_t *ids = jget(fl, "top_ids"), *vals = jget(fl, "top_values");
  float max_diff = 0.0f;
  for (size_t i = 0; i < json_array_size(ids); i++) {
    int32_t id = (int32_t)json_integer_value(json_array_get(ids, i));
    float d = (float)fabs(e->logits[id] - json_number_value(json_array_get(vals, i)));
    if (!(d <= max_diff)) max_diff = d; /* NaN propagates as a failure */
  }
  int32_t argmax = 0;
  for (int32_t i = 1; i < e->vocab; i++)
    if (e->logits[i] > e->logits[argmax]) argmax = i;
  int32_t g0 = (int32_t)json_integer_value(json_array_get(ids, 0));
  bool ok = max_diff <= tol && argmax == g0;
  printf("%-24s first logits: max|diff| %.6f over llama.cpp's top %zu, argmax %d vs %d%s\n", name,
         max_diff, json_array_size(ids), argmax, g0, ok ? "" : ": OFF");
  return ok;
}

/* Loads case c's golden prompt ids into e->seq; returns their count. */
static int32_t load_prompt(struct golden_env *e, const json_t *c) {
  json_t *pids = jget(c, "prompt_ids");
  int32_t n_prompt = (int32_t)json_array_size(pids);
  for (int32_t i = 0; i < n_prompt; i++)
    e->seq[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
  return n_prompt;
}

static void test_prompt_ids_and_first_logits_equal_llamacpp(void **state) {
  struct golden_env *e = *state;
  json_t *cases = jget(e->doc, "cases");
  int failures = 0;
  for (size_t ci = 0; ci < json_array_size(cases); ci++) {
    const json_t *c = json_array_get(cases, ci);
    const char *name = json_string_value(jget(c, "name"));
    if (!prompt_ids_match(e, c, name)) failures++;
    /* The forward pass is checked on the golden ids, whatever our tokenizer said. */
    forward_rows(e, 0, load_prompt(e, c));
    if (!first_logits_match(e, c, name, FIRST_TOL)) failures++;
  }
  assert_int_equal(failures, 0);
}

/* Free-running greedy in llama.cpp's attention order: the first step where our token differs
 * from llama.cpp's, or n_steps; at a divergence *near_tie says whether it is one. */
static int32_t greedy_divergence(struct golden_env *e, const json_t *c, bool *near_tie) {
  struct sampler_params greedy;
  sampler_params_init(&greedy);
  greedy.temperature = 0.0f;
  const int32_t n_prompt = load_prompt(e, c);
  json_t *steps = jget(c, "greedy");
  const int32_t n_steps = (int32_t)json_array_size(steps);
  forward_rows(e, 0, n_prompt);
  for (int32_t s = 0; s < n_steps; s++) {
    if (s > 0) forward_rows(e, n_prompt + s - 1, 1);
    json_t *st = json_array_get(steps, (size_t)s);
    struct sampler_result r;
    CHECK_OK(sampler_sample(e->sampler, &greedy, e->logits, e->seq, n_prompt + s, NULL, 0, 0, s, &r));
    if (r.token_id != (int32_t)json_integer_value(jget(st, "id"))) {
      json_t *ids = jget(st, "top2_ids"), *vals = jget(st, "top2_values");
      const double gap = json_number_value(json_array_get(vals, 0)) - json_number_value(json_array_get(vals, 1));
      *near_tie = gap <= TIE_TOL && r.token_id == (int32_t)json_integer_value(json_array_get(ids, 1));
      printf("  step %d: ours %d, llama.cpp %d; its top-2 gap %.4f%s\n", s, r.token_id,
             (int)json_integer_value(jget(st, "id")), gap, *near_tie ? " (near-tie)" : "");
      return s;
    }
    e->seq[n_prompt + s] = r.token_id;
  }
  return n_steps;
}

static void test_greedy_continuations_equal_llamacpp_token_for_token(void **state) {
  struct golden_env *e = *state;
  json_t *cases = jget(e->doc, "cases");
  int divergent = 0, failures = 0;
  for (size_t ci = 0; ci < json_array_size(cases); ci++) {
    const json_t *c = json_array_get(cases, ci);
    const char *name = json_string_value(jget(c, "name"));
    const int32_t n_steps = (int32_t)json_array_size(jget(c, "greedy"));
    bool near_tie = false;
    const int32_t at = greedy_divergence(e, c, &near_tie);
    printf("%-24s greedy: %d/%d tokens equal llama.cpp's\n", name, at, n_steps);
    if (at < n_steps) {
      divergent++;
      if (!near_tie) failures++;
    }
  }
  if (divergent > MAX_DIVERGENT_CASES) {
    printf("%d cases diverge; at most %d may\n", divergent, MAX_DIVERGENT_CASES);
    failures++;
  }
  assert_int_equal(failures, 0);
}

/* The engine's own matmuls (LLAMA_MATMUL_PACKED: another float order, the same integer
 * products): the first step stays within PACKED_TOL of llama.cpp with its argmax; greedy
 * continuations are printed for the record (they drift apart where this chaotic model meets a
 * near-tie, as two llama.cpp builds with different kernels do). */
static void test_engine_numerics_stay_close_to_llamacpp(void **state) {
  struct golden_env *e = *state;
  json_t *cases = jget(e->doc, "cases");
  int failures = 0;
  for (size_t ci = 0; ci < json_array_size(cases); ci++) {
    const json_t *c = json_array_get(cases, ci);
    const char *name = json_string_value(jget(c, "name"));
    forward_rows(e, 0, load_prompt(e, c));
    if (!first_logits_match(e, c, name, PACKED_TOL)) failures++;
    bool near_tie = false;
    const int32_t at = greedy_divergence(e, c, &near_tie);
    printf("%-24s greedy (packed matmuls): %d/%zu tokens equal llama.cpp's\n", name, at,
           json_array_size(jget(c, "greedy")));
  }
  assert_int_equal(failures, 0);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.gguf GOLDEN.json\n", argv[0]);
    return 2;
  }
  g_model_path = argv[1];
  g_golden_path = argv[2];
  if (access(g_model_path, R_OK) != 0) {
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
      fprintf(stderr, "FAIL: model %s missing under CI (run ops/fetch-model.sh)\n", g_model_path);
      return 1;
    }
    printf("SKIP: model %s missing (run ops/fetch-model.sh)\n", g_model_path);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_prompt_ids_and_first_logits_equal_llamacpp, setup_engine_order,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_greedy_continuations_equal_llamacpp_token_for_token,
                                      setup_llamacpp_order, teardown),
      cmocka_unit_test_setup_teardown(test_engine_numerics_stay_close_to_llamacpp, setup_engine_defaults,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* End to end against llama.cpp: the default model's prompt tokens, first-step logits and
 * 64-token greedy continuations must match the golden file that tests/tools/make_golden.py
 * recorded with llama-cpp-python (see tests/tools/README.md).
 *
 * Usage: test_golden_llamacpp MODEL.gguf GOLDEN.json
 *
 * Tolerances. Bit-for-bit agreement with llama.cpp is not the bar: this Q4_1 model under ggml's
 * numerics (activations re-quantized to Q8_1/Q8_0 before every matmul) is chaotic. A 1e-6
 * relative perturbation of the embeddings moves first-step logits by ~1.2 in a float64
 * reference with simulated Q8 activations (by 1e-4 without them): it flips a few Q8 roundings,
 * and each flip is a step of amax/127 next to the massive-activation channels. llama.cpp itself,
 * same build and machine, moves its logits by up to 0.86 (max |diff| over the top 256; rms 0.47,
 * mean shift 0.55) when the prompt is evaluated one token per ubatch instead of in one batch.
 * The bounds below are set from that self-variation (tests/tools/reference_forward.py and
 * tests/tools/README.md give the measurements); a real numerics bug is an order of magnitude
 * beyond them: NEOX rope instead of NORM gives max |diff| 5-12, rms 2-7, correlation 0.3-0.65.
 *
 * First step, per case, over llama.cpp's top-256 ids: max |diff| <= FIRST_MAX_TOL, rms diff <=
 * FIRST_RMS_TOL, Pearson correlation >= FIRST_CORR_MIN; mean and std of the full vector within
 * STAT_TOL; our argmax equal to llama.cpp's unless its top-2 gap is <= TIE_TOL.
 * Greedy, teacher-forced: every step feeds llama.cpp's token (so one near-tie does not end the
 * comparison), and at every step llama.cpp's token must be within STEP_TOL of our best logit;
 * at least MIN_EXACT_PERCENT of all steps must pick exactly llama.cpp's token.
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

#include "actors/gpu_worker/sampler.h"
#include "model/chat_template.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

#define FIRST_MAX_TOL 1.5f
#define FIRST_RMS_TOL 0.75
#define FIRST_CORR_MIN 0.98
#define STAT_TOL 1.0
#define TIE_TOL 0.5f
#define STEP_TOL 1.0f
#define MIN_EXACT_PERCENT 90
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

static int setup(void **state) {
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
  CHECK_OK(llama_forward_ctx_create(e->model, longest, 2, &e->fwd));
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

/* First-step logits against the golden top-256 and full-vector statistics. Returns the
 * max abs diff over the top-256 ids. */
static float compare_first_logits(struct golden_env *e, const json_t *c, const char *name,
                                  int *failures) {
  json_t *fl = jget(c, "first_logits");
  json_t *ids = jget(fl, "top_ids"), *vals = jget(fl, "top_values");
  const size_t n_top = json_array_size(ids);
  float max_diff = 0.0f;
  double sd2 = 0.0, so = 0.0, sg = 0.0, soo = 0.0, sgg = 0.0, sog = 0.0;
  for (size_t i = 0; i < n_top; i++) {
    int32_t id = (int32_t)json_integer_value(json_array_get(ids, i));
    const double ours = e->logits[id], gold = json_number_value(json_array_get(vals, i));
    float d = (float)fabs(ours - gold);
    if (!(d <= max_diff)) max_diff = d; /* NaN propagates as a failure */
    sd2 += (ours - gold) * (ours - gold);
    so += ours;
    sg += gold;
    soo += ours * ours;
    sgg += gold * gold;
    sog += ours * gold;
  }
  const double rms = sqrt(sd2 / (double)n_top);
  const double cov = sog - so * sg / (double)n_top;
  const double corr = cov / sqrt((soo - so * so / (double)n_top) * (sgg - sg * sg / (double)n_top));
  int32_t argmax = 0;
  double sum = 0.0, sum2 = 0.0;
  for (int32_t i = 0; i < e->vocab; i++) {
    if (e->logits[i] > e->logits[argmax]) argmax = i;
    sum += e->logits[i];
  }
  double mean = sum / e->vocab;
  for (int32_t i = 0; i < e->vocab; i++) sum2 += (e->logits[i] - mean) * (e->logits[i] - mean);
  double std = sqrt(sum2 / e->vocab);
  int32_t g0 = (int32_t)json_integer_value(json_array_get(ids, 0));
  float gap = (float)(json_number_value(json_array_get(vals, 0)) -
                      json_number_value(json_array_get(vals, 1)));
  bool ok = max_diff <= FIRST_MAX_TOL && rms <= FIRST_RMS_TOL && corr >= FIRST_CORR_MIN &&
            (argmax == g0 || gap <= TIE_TOL) &&
            fabs(mean - json_number_value(jget(fl, "mean"))) <= STAT_TOL &&
            fabs(std - json_number_value(jget(fl, "std"))) <= STAT_TOL;
  printf("  %s: first logits: max|diff| %.4f, rms %.4f, corr %.5f, argmax %d vs %d (gap %.4f), "
         "mean %.4f vs %.4f, std %.4f vs %.4f%s\n", name, max_diff, rms, corr, argmax, g0, gap, mean,
         json_number_value(jget(fl, "mean")), std, json_number_value(jget(fl, "std")),
         ok ? "" : ": OFF");
  if (!ok) (*failures)++;
  return max_diff;
}

static void test_matches_llamacpp_golden_outputs(void **state) {
  struct golden_env *e = *state;
  json_t *cases = jget(e->doc, "cases");
  int failures = 0, total_steps = 0, total_matched = 0;
  struct llb_sampling_params greedy;
  llb_sampling_params_init(&greedy);
  greedy.temperature = 0.0f;
  for (size_t ci = 0; ci < json_array_size(cases); ci++) {
    const json_t *c = json_array_get(cases, ci);
    const char *name = json_string_value(jget(c, "name"));
    if (!prompt_ids_match(e, c, name)) failures++;
    /* The forward pass is checked on the golden ids, whatever our tokenizer said. */
    json_t *pids = jget(c, "prompt_ids");
    int32_t n_prompt = (int32_t)json_array_size(pids);
    for (int32_t i = 0; i < n_prompt; i++)
      e->seq[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
    forward_rows(e, 0, n_prompt);
    float max_diff = compare_first_logits(e, c, name, &failures);

    json_t *steps = jget(c, "greedy");
    int32_t matched = 0, n_steps = (int32_t)json_array_size(steps);
    float worst = 0.0f;
    for (int32_t s = 0; s < n_steps; s++) {
      if (s > 0) forward_rows(e, n_prompt + s - 1, 1);
      json_t *st = json_array_get(steps, (size_t)s);
      int32_t want = (int32_t)json_integer_value(jget(st, "id"));
      float best = e->logits[0];
      for (int32_t i = 1; i < e->vocab; i++)
        if (e->logits[i] > best) best = e->logits[i];
      const float margin = best - e->logits[want]; /* 0 when we pick llama.cpp's token too */
      struct sampler_result r;
      CHECK_OK(sampler_sample(e->sampler, &greedy, e->logits, e->seq, n_prompt + s, NULL, 0, 0,
                              s, &r));
      if (r.token_id == want) matched++;
      if (!(margin <= worst)) worst = margin;
      if (!(margin <= STEP_TOL)) {
        printf("  %s: step %d: llama.cpp's token %d is %.4f below our best (%d)\n", name, s, want,
               margin, r.token_id);
        failures++;
      }
      e->seq[n_prompt + s] = want; /* teacher forcing: continue on llama.cpp's path */
    }
    total_steps += n_steps;
    total_matched += matched;
    printf("%-24s prompt %4d tokens, first logits max|diff| %.4f, greedy %d/%d exact, worst "
           "margin %.4f\n", name, n_prompt, max_diff, matched, n_steps, worst);
  }
  if (total_matched * 100 < total_steps * MIN_EXACT_PERCENT) {
    printf("greedy: %d of %d steps exact, fewer than %d%%\n", total_matched, total_steps,
           MIN_EXACT_PERCENT);
    failures++;
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
      cmocka_unit_test_setup_teardown(test_matches_llamacpp_golden_outputs, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

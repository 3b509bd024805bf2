/* LoRA adapters (model/forward/lora.h) in the CPU forward.
 * 1. Against llama.cpp: the tiny models of tests/unit/arch_models.h (llama, qwen2 with biases,
 *    gemma, phi3 with fused qkv and gate/up) with each random adapter of tests/unit/lora_models.h
 *    (rank 4 on all seven projections F32 alpha 8; rank 8 q, v F16 without alpha; rank 32 gate,
 *    up, down Q8_0 alpha 32), prompt logits and greedy steps within the architecture tests'
 *    tolerances of what llama.cpp computed with the same adapter (tests/unit/data/lora_golden.inc,
 *    tests/tools/gen_lora_golden.c), greedy ids equal; each adapter moves llama.cpp's logits far
 *    beyond the tolerance, so a forward that ignored it would fail.
 * 2. Every refusal of the loader, with its message.
 * 3. A batch mixing the base model and three adapters, prefill and decode rows at different
 *    positions, logits asked for some rows only: every row bit-identical to its sequence alone.
 * 4. A host backend without the lora op (backend_ops.lora NULL) runs the products through
 *    matmul: the same invariance, logits within 1e-5 of the op's.
 * 5. An adapter whose B is zero gives exactly the base logits; the forward's refusals (no
 *    scratch, rank over it, an adapter of another model). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/quant.h"
#include "model/forward/forward.h"
#include "model/forward/lora.h"
#include "model/gguf/gguf.h"
#include "tests/unit/arch_models.h"
#include "tests/unit/gguf_writer.h"
#include "tests/unit/lora_models.h"

#include "tests/unit/data/arch_golden.inc"
#include "tests/unit/data/lora_golden.inc"

enum { P = ARCH_MODEL_PROMPT, G = ARCH_MODEL_GREEDY, V = ARCH_MODEL_VOCAB, BS = 16, NB = 16, MAX_T = 48 };

/* A base model and its open file. */
struct base {
  void *buf;
  struct gguf_file *f;
  struct llama_model *m;
};

static void base_open(const char *name, struct base *b) {
  size_t size = 0;
  assert_int_equal(arch_model_write(name, &b->buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(b->buf, size, &b->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(b->f, &b->m), LLB_STATUS_OK);
}

static void base_close(struct base *b) {
  llama_model_destroy(b->m);
  gguf_close(b->f);
  free(b->buf);
}

/* An adapter and its open file. */
struct adapter {
  void *buf;
  struct gguf_file *f;
  struct llama_lora *a;
};

static void adapter_open(const char *base, const struct lora_model_spec *s, const struct llama_model *m,
                         struct adapter *ad) {
  size_t size = 0;
  assert_int_equal(lora_model_write(base, s, &ad->buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(ad->buf, size, &ad->f), LLB_STATUS_OK);
  assert_int_equal(llama_lora_load(ad->f, m, 0, &ad->a), LLB_STATUS_OK);
}

static void adapter_close(struct adapter *ad) {
  llama_lora_destroy(ad->a);
  gguf_close(ad->f);
  free(ad->buf);
}

static int argmax(const float *row) {
  int best = 0;
  for (int j = 1; j < V; j++)
    if (row[j] > row[best]) best = j;
  return best;
}

static double rel_err(const float *a, const float *b, int n) {
  double max_ref = 0, max_err = 0;
  for (int i = 0; i < n; i++) {
    max_ref = fmax(max_ref, fabs(b[i]));
    max_err = fmax(max_err, fabs((double)a[i] - b[i]));
  }
  return max_err / max_ref;
}

/* One step of one sequence: n tokens at pos0.., logits of every row into out; block table
 * 0..NB-1. */
static llb_status step_one(struct llama_forward_ctx *fc, struct llama_kv_cache *kv, const struct llama_lora *a,
                           const int32_t *ids, int32_t n, int32_t pos0, float *out) {
  int32_t pos[MAX_T], li[MAX_T], qsl[2] = {0, n}, lens[1] = {pos0 + n}, table[NB];
  int64_t slots[MAX_T];
  for (int32_t i = 0; i < NB; i++) table[i] = i;
  for (int32_t i = 0; i < n; i++) {
    pos[i] = pos0 + i;
    li[i] = i;
    slots[i] = (int64_t)(pos0 + i);
  }
  const struct llama_lora *loras[1] = {a};
  const struct llama_batch b = {.num_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                .max_blocks_per_seq = NB, .num_logits = n, .logits_indices = li,
                                .seq_loras = loras};
  return llama_forward(fc, kv, &b, out);
}

/* The prompt then G greedy steps with adapter a, into prompt [P * V], steps [G * V], ids [G]. */
static void run_greedy(const struct llama_model *m, const struct llama_lora *a, enum llama_matmul_mode mm,
                       enum llama_attention_order ao, float *prompt, float *steps, int *ids) {
  struct llama_kv_cache *kv = NULL;
  struct llama_forward_ctx *fc = NULL;
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  const struct llama_forward_options o = {.max_num_tokens = P, .n_threads = 1, .attention_order = ao, .matmul = mm,
                                          .max_lora_rank = 32};
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &fc), LLB_STATUS_OK);
  assert_int_equal(step_one(fc, kv, a, ARCH_MODEL_PROMPT_IDS, P, 0, prompt), LLB_STATUS_OK);
  const float *last = prompt + (P - 1) * V;
  for (int k = 0; k < G; k++) {
    ids[k] = argmax(last);
    assert_int_equal(step_one(fc, kv, a, &(int32_t){ids[k]}, 1, P + k, steps + k * V), LLB_STATUS_OK);
    last = steps + k * V;
  }
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
}

/* Every adapter of the golden on base `name` against llama.cpp, both numerics; base_golden is
 * llama.cpp's logits without adapter. */
static void check_base(const char *name, const float *base_golden) {
  struct base b;
  base_open(name, &b);
  static float prompt[P * V], steps[G * V];
  int ids[G];
  for (size_t gi = 0; gi < sizeof lora_goldens / sizeof lora_goldens[0]; gi++) {
    const struct lora_golden *g = &lora_goldens[gi];
    if (strcmp(g->base, name) != 0) continue;
    const struct lora_model_spec *s = &LORA_MODEL_SPECS[g->spec];
    const double moved = rel_err(g->prompt, base_golden, P * V);
    assert_true(moved > 1e-2);
    struct adapter ad;
    adapter_open(name, s, b.m, &ad);
    const enum llama_matmul_mode mm[2] = {LLAMA_MATMUL_GGML, LLAMA_MATMUL_PACKED};
    const enum llama_attention_order ao[2] = {LLAMA_ATTENTION_ORDER_LLAMACPP, LLAMA_ATTENTION_ORDER_BATCH_INVARIANT};
    const double tol[2] = {1e-4, 0.05};
    for (int mode = 0; mode < 2; mode++) {
      run_greedy(b.m, ad.a, mm[mode], ao[mode], prompt, steps, ids);
      const double ep = rel_err(prompt, g->prompt, P * V), es = rel_err(steps, g->decode, G * V);
      fprintf(stderr, "%s + %s vs llama.cpp (%s numerics): max error / max|logit| %.3g prompt, %.3g steps "
              "(the adapter moves llama.cpp's logits by %.3g)\n", name, s->name, mode ? "packed" : "llama.cpp", ep,
              es, moved);
      assert_true(ep < tol[mode]);
      assert_true(es < tol[mode]);
      for (int k = 0; k < G; k++) assert_int_equal(ids[k], g->greedy[k]);
    }
    adapter_close(&ad);
  }
  base_close(&b);
}

static void test_llama_adapters_match_llama_cpp(void **state) {
  (void)state;
  check_base("llama", golden_llama);
}

static void test_qwen2_adapters_with_biases_match_llama_cpp(void **state) {
  (void)state;
  check_base("qwen2", golden_qwen2);
}

static void test_gemma_adapters_match_llama_cpp(void **state) {
  (void)state;
  check_base("gemma", golden_gemma);
}

static void test_phi3_adapters_on_fused_projections_match_llama_cpp(void **state) {
  (void)state;
  check_base("phi3", golden_phi3);
}

/* ---------------------------------------------------------------- loader refusals */

/* What a refusal case writes: keys (arch NULL = none written) and up to 3 pairs / tensors. */
struct bad_tensor {
  const char *name;
  int64_t ne0, ne1;
  enum ggml_type type;
};

struct bad_case {
  const char *what;
  const char *general_type, *arch, *adapter_type;
  int alpha_as_string;
  float alpha;
  struct bad_tensor t[4];
  int32_t max_rank;
  llb_status want;
  const char *msg; /* a substring of llb_err_last() */
};

static llb_status load_case(const struct llama_model *m, const struct bad_case *c) {
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  if (c->general_type) assert_int_equal(gguf_writer_add_str(w, "general.type", c->general_type), LLB_STATUS_OK);
  if (c->arch) assert_int_equal(gguf_writer_add_str(w, "general.architecture", c->arch), LLB_STATUS_OK);
  if (c->adapter_type) assert_int_equal(gguf_writer_add_str(w, "adapter.type", c->adapter_type), LLB_STATUS_OK);
  if (c->alpha_as_string) assert_int_equal(gguf_writer_add_str(w, "adapter.lora.alpha", "8"), LLB_STATUS_OK);
  else if (c->alpha != 0.0f) assert_int_equal(gguf_writer_add_f32(w, "adapter.lora.alpha", c->alpha), LLB_STATUS_OK);
  static uint8_t zeros[64 * 128 * 4];
  for (int i = 0; i < 4 && c->t[i].name; i++) {
    size_t rb;
    assert_int_equal(ggml_row_bytes(c->t[i].type, c->t[i].ne0, &rb), LLB_STATUS_OK);
    assert_int_equal(gguf_writer_add_tensor(w, c->t[i].name, c->t[i].type, 2, (int64_t[]){c->t[i].ne0, c->t[i].ne1},
                                            zeros, rb * (size_t)c->t[i].ne1),
                     LLB_STATUS_OK);
  }
  void *buf;
  size_t size;
  assert_int_equal(gguf_writer_write_memory(w, &buf, &size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  struct gguf_file *f;
  assert_int_equal(gguf_open_memory(buf, size, &f), LLB_STATUS_OK);
  struct llama_lora *a = (struct llama_lora *)(uintptr_t)1;
  const llb_status st = llama_lora_load(f, m, c->max_rank, &a);
  if (st == LLB_STATUS_OK) llama_lora_destroy(a);
  else assert_null(a);
  gguf_close(f);
  free(buf);
  return st;
}

#define QA(n) "blk.0.attn_q.weight.lora_" n
static void test_loader_refuses_bad_adapters_naming_the_key_or_tensor(void **state) {
  (void)state;
  struct base b;
  base_open("llama", &b);
  const enum ggml_type F32 = GGML_TYPE_F32;
  const struct bad_tensor qa = {QA("a"), 64, 4, F32}, qb = {QA("b"), 4, 64, F32};
  const struct bad_case cases[] = {
      {"no general.type", NULL, "llama", "lora", 0, 0, {qa, qb}, 0, LLB_STATUS_MALFORMED, "general.type is ''"},
      {"a model, not an adapter", "model", "llama", "lora", 0, 0, {qa, qb}, 0, LLB_STATUS_MALFORMED,
       "general.type is 'model'"},
      {"another architecture", "adapter", "qwen2", "lora", 0, 0, {qa, qb}, 0, LLB_STATUS_UNSUPPORTED,
       "general.architecture 'qwen2' is not the base model's 'llama'"},
      {"a control vector", "adapter", "llama", "control_vector", 0, 0, {qa, qb}, 0, LLB_STATUS_MALFORMED,
       "adapter.type is 'control_vector'"},
      {"alpha a string", "adapter", "llama", "lora", 1, 0, {qa, qb}, 0, LLB_STATUS_MALFORMED, "adapter.lora.alpha"},
      {"negative alpha", "adapter", "llama", "lora", 0, -1.0f, {qa, qb}, 0, LLB_STATUS_MALFORMED,
       "adapter.lora.alpha = -1"},
      {"infinite alpha", "adapter", "llama", "lora", 0, INFINITY, {qa, qb}, 0, LLB_STATUS_MALFORMED,
       "adapter.lora.alpha = inf"},
      {"no pair", "adapter", "llama", "lora", 0, 0, {{0}}, 0, LLB_STATUS_MALFORMED, "without a lora_a / lora_b pair"},
      {"B missing", "adapter", "llama", "lora", 0, 0, {qa}, 0, LLB_STATUS_MALFORMED,
       "pair of " QA("a") " is missing its lora_b"},
      {"A missing", "adapter", "llama", "lora", 0, 0, {qb}, 0, LLB_STATUS_MALFORMED,
       "pair of " QA("b") " is missing its lora_a"},
      {"a third suffix", "adapter", "llama", "lora", 0, 0, {qa, qb, {"blk.0.attn_q.weight.lora_c", 4, 4, F32}}, 0,
       LLB_STATUS_MALFORMED, "blk.0.attn_q.weight.lora_c has an unexpected suffix"},
      {"a layer the model lacks", "adapter", "llama", "lora", 0, 0,
       {{"blk.2.attn_q.weight.lora_a", 64, 4, F32}, {"blk.2.attn_q.weight.lora_b", 4, 64, F32}}, 0,
       LLB_STATUS_MALFORMED, "blk.2.attn_q.weight does not exist in the base model"},
      {"the output projection", "adapter", "llama", "lora", 0, 0,
       {{"output.weight.lora_a", 64, 4, F32}, {"output.weight.lora_b", 4, 64, F32}}, 0, LLB_STATUS_UNSUPPORTED,
       "output.weight is not an adapted projection"},
      {"the embeddings", "adapter", "llama", "lora", 0, 0,
       {{"token_embd.weight.lora_a", 64, 4, F32}, {"token_embd.weight.lora_b", 4, 64, F32}}, 0,
       LLB_STATUS_UNSUPPORTED, "token_embd.weight is not an adapted projection"},
      {"A of the wrong width", "adapter", "llama", "lora", 0, 0, {{QA("a"), 32, 4, F32}, qb}, 0,
       LLB_STATUS_MALFORMED, "do not fit the base weight [64, 64]"},
      {"B of the wrong height", "adapter", "llama", "lora", 0, 0, {qa, {QA("b"), 4, 32, F32}}, 0,
       LLB_STATUS_MALFORMED, "do not fit the base weight"},
      {"ranks that differ", "adapter", "llama", "lora", 0, 0, {qa, {QA("b"), 8, 64, F32}}, 0, LLB_STATUS_MALFORMED,
       "has rank 4, " QA("b") " 8"},
      {"a type without a matmul", "adapter", "llama", "lora", 0, 0, {{QA("a"), 64, 4, GGML_TYPE_I8}, qb}, 0,
       LLB_STATUS_UNSUPPORTED, QA("a") " has type"},
      {"a rank over --max-lora-rank", "adapter", "llama", "lora", 0, 0, {qa, qb}, 2, LLB_STATUS_TOO_LARGE,
       "has rank 4, over the maximum 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const llb_status st = load_case(b.m, &cases[i]);
    fprintf(stderr, "%s: %s\n", cases[i].what, st ? llb_err_last() : "loaded");
    assert_int_equal(st, cases[i].want);
    assert_non_null(strstr(llb_err_last(), cases[i].msg));
  }
  /* the same keys and pair load; norm adapters are skipped as llama.cpp does */
  const struct bad_case good = {"good", "adapter", "llama", "lora", 0, 16.0f,
                                {qa, qb, {"blk.0.attn_norm.weight", 64, 1, F32}}, 4, LLB_STATUS_OK, ""};
  assert_int_equal(load_case(b.m, &good), LLB_STATUS_OK);
  base_close(&b);
}

static void test_adapter_reports_rank_alpha_and_targets(void **state) {
  (void)state;
  struct base b;
  base_open("phi3", &b);
  struct adapter ad;
  adapter_open("phi3", &LORA_MODEL_SPECS[0], b.m, &ad); /* all seven: attn_qkv, o, ffn_up, down per layer */
  assert_int_equal(llama_lora_rank(ad.a), 4);
  assert_true(llama_lora_alpha(ad.a) == 8.0f);
  assert_int_equal(llama_lora_num_targets(ad.a), 2 * 4);
  adapter_close(&ad);
  base_close(&b);
}

/* ---------------------------------------------------------------- batches */

enum { NSEQ = 4 };
static const int32_t SEQ_LEN[NSEQ] = {9, 14, 6, 11}; /* tokens each sequence runs */

static int32_t seq_token(int s, int i) { return (int32_t)(3 + (s * 17 + i * 7) % (V - 3)); }

/* Sequence s alone in its own cache, all its tokens in one step: logits of every row. */
static void run_alone(const struct llama_model *m, const struct llama_forward_options *o, const struct llama_lora *a,
                      int s, float *out) {
  struct llama_kv_cache *kv;
  struct llama_forward_ctx *fc;
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create_opts(m, o, &fc), LLB_STATUS_OK);
  int32_t ids[MAX_T];
  for (int i = 0; i < SEQ_LEN[s]; i++) ids[i] = seq_token(s, i);
  assert_int_equal(step_one(fc, kv, a, ids, SEQ_LEN[s], 0, out), LLB_STATUS_OK);
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
}

/* The NSEQ sequences together in steps: step k runs chunk[k][s] tokens of sequence s (0 = it
 * sits out), so that prefill and decode rows of different positions share steps; only the rows
 * where want_logits holds produce logits, compared bitwise with ref[s] (its rows alone). */
static void run_mixed(const struct llama_model *m, const struct llama_forward_options *o,
                      const struct llama_lora *const *loras, const int chunk[][NSEQ], int nsteps, float *const *ref) {
  struct llama_kv_cache *kv;
  struct llama_forward_ctx *fc;
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create_opts(m, o, &fc), LLB_STATUS_OK);
  int done[NSEQ] = {0};
  static float logits[MAX_T * V];
  for (int k = 0; k < nsteps; k++) {
    int32_t ids[MAX_T], pos[MAX_T], li[MAX_T], qsl[NSEQ + 1] = {0}, lens[NSEQ], tables[NSEQ * 4], who[MAX_T];
    int64_t slots[MAX_T];
    const struct llama_lora *step_loras[NSEQ];
    int32_t T = 0, ns = 0, nl = 0;
    for (int s = 0; s < NSEQ; s++) {
      if (chunk[k][s] == 0) continue;
      for (int i = 0; i < chunk[k][s]; i++, T++) {
        const int p = done[s] + i;
        ids[T] = seq_token(s, p);
        pos[T] = p;
        slots[T] = (int64_t)s * 4 * BS + p; /* sequence s owns blocks 4s..4s+3 */
        who[T] = s;
        if ((T + s) % 2 == 0 || i == chunk[k][s] - 1) li[nl++] = T; /* some rows, and each last one */
      }
      done[s] += chunk[k][s];
      for (int j = 0; j < 4; j++) tables[ns * 4 + j] = s * 4 + j;
      lens[ns] = done[s];
      step_loras[ns] = loras[s];
      qsl[++ns] = T;
    }
    const struct llama_batch b = {.num_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                  .num_seqs = ns, .query_start_loc = qsl, .seq_lens = lens, .block_tables = tables,
                                  .max_blocks_per_seq = 4, .num_logits = nl, .logits_indices = li,
                                  .seq_loras = step_loras};
    assert_int_equal(llama_forward(fc, kv, &b, logits), LLB_STATUS_OK);
    for (int32_t r = 0; r < nl; r++) {
      const int s = who[li[r]];
      assert_memory_equal(logits + (size_t)r * V, ref[s] + (size_t)pos[li[r]] * V, V * sizeof(float));
    }
  }
  for (int s = 0; s < NSEQ; s++) assert_int_equal(done[s], SEQ_LEN[s]);
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
}

static void check_mixed(const char *name, enum llama_matmul_mode mm, const struct backend_ops *ops) {
  struct base b;
  base_open(name, &b);
  struct adapter ad[3];
  for (int i = 0; i < 3; i++) adapter_open(name, &LORA_MODEL_SPECS[i], b.m, &ad[i]);
  const struct llama_lora *loras[NSEQ] = {NULL, ad[0].a, ad[1].a, ad[2].a};
  const struct llama_forward_options o = {.max_num_tokens = MAX_T, .n_threads = 2, .matmul = mm,
                                          .max_lora_rank = 32, .ops = ops};
  static float ref_rows[NSEQ][MAX_T * V];
  float *ref[NSEQ];
  for (int s = 0; s < NSEQ; s++) {
    ref[s] = ref_rows[s];
    run_alone(b.m, &o, loras[s], s, ref[s]);
  }
  /* tokens per sequence per step: prefill chunks of different lengths next to decode rows */
  static const int chunk[][NSEQ] = {{5, 3, 6, 1}, {1, 7, 0, 4}, {1, 1, 0, 1}, {2, 3, 0, 5}};
  run_mixed(b.m, &o, loras, chunk, 4, ref);
  /* the same sequences with their adapters swapped around: each still matches itself alone */
  const struct llama_lora *swapped[NSEQ] = {ad[2].a, NULL, ad[0].a, ad[0].a};
  for (int s = 0; s < NSEQ; s++) run_alone(b.m, &o, swapped[s], s, ref[s]);
  run_mixed(b.m, &o, swapped, chunk, 4, ref);
  for (int i = 0; i < 3; i++) adapter_close(&ad[i]);
  base_close(&b);
}

static void test_mixed_adapter_batch_rows_bit_identical_to_each_sequence_alone(void **state) {
  (void)state;
  check_mixed("qwen2", LLAMA_MATMUL_PACKED, NULL);
  check_mixed("llama", LLAMA_MATMUL_GGML, NULL);
  check_mixed("phi3", LLAMA_MATMUL_PACKED, NULL);
}

/* A host backend without the lora op (backend_ops.lora NULL): the forward runs each adapter's
 * two products through matmul; rows still bit-identical alone or mixed, and the logits close to
 * the op's (which sums B's short rows in its own order, kernels/cpu/lora.c). */
static void test_backend_without_lora_op_runs_adapters_through_matmul(void **state) {
  (void)state;
  static struct backend_ops no_op;
  no_op = *backend_cpu_ops();
  no_op.lora = NULL;
  check_mixed("qwen2", LLAMA_MATMUL_PACKED, &no_op);
  struct base b;
  base_open("llama", &b);
  static float with_op[P * V], by_matmul[P * V];
  for (int spec = 0; spec < LORA_MODEL_GOLDEN; spec++) {
    struct adapter ad;
    adapter_open("llama", &LORA_MODEL_SPECS[spec], b.m, &ad);
    const struct llama_forward_options o1 = {.max_num_tokens = MAX_T, .n_threads = 1, .max_lora_rank = 32};
    struct llama_forward_options o2 = o1;
    o2.ops = &no_op;
    run_alone(b.m, &o1, ad.a, 3, with_op);
    run_alone(b.m, &o2, ad.a, 3, by_matmul);
    const double e = rel_err(by_matmul, with_op, SEQ_LEN[3] * V);
    fprintf(stderr, "llama + %s: matmul path vs the lora op: %.3g of max|logit|\n", LORA_MODEL_SPECS[spec].name, e);
    assert_true(e < 1e-5);
    adapter_close(&ad);
  }
  base_close(&b);
}

/* ---------------------------------------------------------------- zero B, forward refusals */

static void test_adapter_with_zero_b_gives_exactly_the_base_logits(void **state) {
  (void)state;
  struct base b;
  base_open("qwen2", &b);
  struct lora_model_spec zero = LORA_MODEL_SPECS[0];
  zero.b_amp = 0.0f;
  struct adapter ad;
  adapter_open("qwen2", &zero, b.m, &ad);
  const struct llama_forward_options o = {.max_num_tokens = MAX_T, .n_threads = 1, .max_lora_rank = 8};
  static float base_logits[MAX_T * V], lora_logits[MAX_T * V];
  run_alone(b.m, &o, NULL, 1, base_logits);
  run_alone(b.m, &o, ad.a, 1, lora_logits);
  for (int i = 0; i < SEQ_LEN[1] * V; i++) assert_true(base_logits[i] == lora_logits[i]);
  adapter_close(&ad);
  base_close(&b);
}

static void test_forward_refuses_adapters_it_has_no_scratch_for(void **state) {
  (void)state;
  struct base b, other;
  base_open("llama", &b);
  base_open("llama3", &other);
  struct adapter small, big, foreign;
  adapter_open("llama", &LORA_MODEL_SPECS[1], b.m, &small);      /* rank 8 */
  adapter_open("llama", &LORA_MODEL_SPECS[2], b.m, &big);        /* rank 32 */
  adapter_open("llama3", &LORA_MODEL_SPECS[1], other.m, &foreign); /* same shapes, another model */
  struct llama_kv_cache *kv;
  assert_int_equal(llama_kv_cache_create(b.m, NB, BS, &kv), LLB_STATUS_OK);
  static float out[P * V];
  struct llama_forward_ctx *none, *r8;
  const struct llama_forward_options o0 = {.max_num_tokens = P, .n_threads = 1};
  const struct llama_forward_options o8 = {.max_num_tokens = P, .n_threads = 1, .max_lora_rank = 8};
  assert_int_equal(llama_forward_ctx_create_opts(b.m, &o0, &none), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create_opts(b.m, &o8, &r8), LLB_STATUS_OK);
  const int32_t *ids = ARCH_MODEL_PROMPT_IDS;
  assert_int_equal(step_one(none, kv, small.a, ids, P, 0, out), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "rank 8 over the context's max_lora_rank 0"));
  assert_int_equal(step_one(r8, kv, big.a, ids, P, 0, out), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "rank 32 over the context's max_lora_rank 8"));
  assert_int_equal(step_one(r8, kv, foreign.a, ids, P, 0, out), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "an adapter of another model"));
  assert_int_equal(step_one(r8, kv, small.a, ids, P, 0, out), LLB_STATUS_OK);
  assert_int_equal(step_one(none, kv, NULL, ids, P, 0, out), LLB_STATUS_OK);
  /* scratch wider than any row of the model is refused at creation */
  struct llama_forward_ctx *wide = NULL;
  const struct llama_forward_options ow = {.max_num_tokens = P, .n_threads = 1, .max_lora_rank = 129};
  assert_int_equal(llama_forward_ctx_create_opts(b.m, &ow, &wide), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(wide);
  llama_forward_ctx_destroy(none);
  llama_forward_ctx_destroy(r8);
  llama_kv_cache_destroy(kv);
  adapter_close(&small);
  adapter_close(&big);
  adapter_close(&foreign);
  base_close(&b);
  base_close(&other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_adapters_match_llama_cpp),
      cmocka_unit_test(test_qwen2_adapters_with_biases_match_llama_cpp),
      cmocka_unit_test(test_gemma_adapters_match_llama_cpp),
      cmocka_unit_test(test_phi3_adapters_on_fused_projections_match_llama_cpp),
      cmocka_unit_test(test_loader_refuses_bad_adapters_naming_the_key_or_tensor),
      cmocka_unit_test(test_adapter_reports_rank_alpha_and_targets),
      cmocka_unit_test(test_mixed_adapter_batch_rows_bit_identical_to_each_sequence_alone),
      cmocka_unit_test(test_backend_without_lora_op_runs_adapters_through_matmul),
      cmocka_unit_test(test_adapter_with_zero_b_gives_exactly_the_base_logits),
      cmocka_unit_test(test_forward_refuses_adapters_it_has_no_scratch_for),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

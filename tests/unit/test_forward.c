/* LLaMA forward (model/forward/forward.c) on a tiny random model built here with the GGUF writer:
 * 2 layers, E 64, 4 heads, 2 KV heads, head_dim 16, FFN 128, vocab 97, Q4_1/Q8_0/F32 weights.
 *
 * Against a dense float reference written here (dequantized weights, double sums, K/V
 * rounded to fp16 as the cache stores them): prefill logits within 0.08 * max|logit| + 0.03
 * (8-bit activation quantization per 32-block through 2 random layers: typical rows are off
 * by ~1% of max|logit|, the worst of the 12 rows by ~6%). Everything
 * else is bit-identical: decode through the paged cache vs a full recompute, chunked vs
 * one-shot prefill, a mixed batch vs each sequence alone, 1 vs 2 threads. */
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
#include "model/gguf/gguf.h"
#include "model/forward/packed_cache.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 64, H = 4, HKV = 2, D = 16, F = 128, V = 97, CTX = 128, BS = 4, NB = 32, MB = 16 };

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; }

struct fixture {
  void *buf;
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_forward_ctx *fc, *fc1;
  size_t size;
  /* dense copies for the reference */
  float *tok, *out_w, *out_norm;
  float *wq[L], *wk[L], *wv[L], *wo[L], *wg[L], *wu[L], *wd[L], *an[L], *fn[L];
};

static float *add_weight(struct gguf_writer *w, const char *name, enum ggml_type t, int64_t cols, int64_t rows) {
  size_t rb;
  assert_int_equal(ggml_row_bytes(t, cols, &rb), LLB_STATUS_OK);
  const size_t bb = ggml_type_block_bytes(t), n = rb * (size_t)rows;
  uint8_t *p = malloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
  const float scale = 1.0f / sqrtf((float)cols);
  for (size_t b = 0; b < n / bb; b++) {
    uint16_t d = llb_fp32_to_fp16(scale * (0.1f + 0.1f * fabsf(rndf()))), m = llb_fp32_to_fp16(-0.8f * scale);
    memcpy(p + b * bb, &d, 2);
    if (t == GGML_TYPE_Q4_1) memcpy(p + b * bb + 2, &m, 2);
  }
  assert_int_equal(gguf_writer_add_tensor(w, name, t, 2, (int64_t[]){cols, rows}, p, n), LLB_STATUS_OK);
  float *dense = malloc(sizeof(float) * (size_t)(cols * rows));
  for (int64_t r = 0; r < rows; r++)
    assert_int_equal(ggml_dequantize_row(t, p + (size_t)r * rb, dense + r * cols, cols), LLB_STATUS_OK);
  free(p);
  return dense;
}

static float *add_norm(struct gguf_writer *w, const char *name) {
  float *v = malloc(sizeof(float) * E);
  for (int i = 0; i < E; i++) v[i] = 1.0f + 0.3f * rndf();
  assert_int_equal(gguf_writer_add_tensor_f32(w, name, 1, (int64_t[]){E}, v), LLB_STATUS_OK);
  return v;
}

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof(*fx));
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_llama_hparams(w, &hp), LLB_STATUS_OK);
  fx->tok = add_weight(w, "token_embd.weight", GGML_TYPE_Q8_0, E, V);
  for (int l = 0; l < L; l++) {
    char n[64];
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, l), n)
    fx->an[l] = add_norm(w, NAME("attn_norm.weight"));
    fx->fn[l] = add_norm(w, NAME("ffn_norm.weight"));
    fx->wq[l] = add_weight(w, NAME("attn_q.weight"), GGML_TYPE_Q4_1, E, H * D);
    fx->wk[l] = add_weight(w, NAME("attn_k.weight"), GGML_TYPE_Q8_0, E, HKV * D);
    fx->wv[l] = add_weight(w, NAME("attn_v.weight"), GGML_TYPE_Q4_1, E, HKV * D);
    fx->wo[l] = add_weight(w, NAME("attn_output.weight"), GGML_TYPE_Q4_1, H * D, E);
    fx->wg[l] = add_weight(w, NAME("ffn_gate.weight"), GGML_TYPE_Q4_1, E, F);
    fx->wu[l] = add_weight(w, NAME("ffn_up.weight"), GGML_TYPE_Q8_0, E, F);
    fx->wd[l] = add_weight(w, NAME("ffn_down.weight"), GGML_TYPE_Q4_1, F, E);
#undef NAME
  }
  fx->out_norm = add_norm(w, "output_norm.weight");
  fx->out_w = add_weight(w, "output.weight", GGML_TYPE_Q4_1, E, V);
  assert_int_equal(gguf_writer_write_memory(w, &fx->buf, &fx->size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  assert_int_equal(gguf_open_memory(fx->buf, fx->size, &fx->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f, &fx->m), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create(fx->m, 32, 2, &fx->fc), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create(fx->m, 32, 1, &fx->fc1), LLB_STATUS_OK);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  llama_forward_ctx_destroy(fx->fc);
  llama_forward_ctx_destroy(fx->fc1);
  llama_model_destroy(fx->m);
  gguf_close(fx->f);
  free(fx->buf);
  free(fx->tok);
  free(fx->out_w);
  free(fx->out_norm);
  for (int l = 0; l < L; l++) {
    free(fx->wq[l]); free(fx->wk[l]); free(fx->wv[l]); free(fx->wo[l]);
    free(fx->wg[l]); free(fx->wu[l]); free(fx->wd[l]); free(fx->an[l]); free(fx->fn[l]);
  }
  free(fx);
  return 0;
}

/* ---------------------------------------------------------------- dense reference */

static void ref_norm(const float *x, const float *w, float *y) {
  double ss = 0;
  for (int i = 0; i < E; i++) ss += (double)x[i] * x[i];
  for (int i = 0; i < E; i++) y[i] = (float)(x[i] / sqrt(ss / E + 1e-5) * w[i]);
}

static void ref_mv(const float *w, const float *x, int rows, int cols, float *y) {
  for (int r = 0; r < rows; r++) {
    double s = 0;
    for (int i = 0; i < cols; i++) s += (double)w[r * cols + i] * x[i];
    y[r] = (float)s;
  }
}

static void ref_rope(float *v, int n_heads, int pos) {
  for (int h = 0; h < n_heads; h++)
    for (int i = 0; i < D / 2; i++) {
      const double th = pos * pow(10000.0, -2.0 * i / D);
      float *p = v + h * D + 2 * i;
      const double a = p[0], b = p[1];
      p[0] = (float)(a * cos(th) - b * sin(th));
      p[1] = (float)(a * sin(th) + b * cos(th));
    }
}

/* Logits [n, V] of the sequence ids[0..n-1] at positions 0..n-1, all rows. */
static void ref_forward(const struct fixture *fx, const int32_t *ids, int n, float *logits) {
  float (*x)[E] = malloc(sizeof(float) * E * (size_t)n);
  float (*k)[HKV * D] = malloc(sizeof(float) * HKV * D * (size_t)n), (*v)[HKV * D] = malloc(sizeof(float) * HKV * D * (size_t)n);
  float (*q)[H * D] = malloc(sizeof(float) * H * D * (size_t)n);
  for (int t = 0; t < n; t++) memcpy(x[t], fx->tok + ids[t] * E, sizeof(float) * E);
  for (int l = 0; l < L; l++) {
    float xn[E], att[H * D], o[E], g[F], u[F];
    for (int t = 0; t < n; t++) {
      ref_norm(x[t], fx->an[l], xn);
      ref_mv(fx->wq[l], xn, H * D, E, q[t]);
      ref_mv(fx->wk[l], xn, HKV * D, E, k[t]);
      ref_mv(fx->wv[l], xn, HKV * D, E, v[t]);
      ref_rope(q[t], H, t);
      ref_rope(k[t], HKV, t);
      for (int i = 0; i < HKV * D; i++) {
        k[t][i] = llb_fp16_to_fp32(llb_fp32_to_fp16(k[t][i]));
        v[t][i] = llb_fp16_to_fp32(llb_fp32_to_fp16(v[t][i]));
      }
    }
    for (int t = 0; t < n; t++) {
      for (int h = 0; h < H; h++) {
        const int kh = h / (H / HKV);
        double sc[CTX], mx = -1e30, sum = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < D; i++) s += (double)q[t][h * D + i] * k[j][kh * D + i];
          sc[j] = s / sqrt((double)D);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
        for (int i = 0; i < D; i++) {
          double acc = 0;
          for (int j = 0; j <= t; j++) acc += sc[j] / sum * v[j][kh * D + i];
          att[h * D + i] = (float)acc;
        }
      }
      ref_mv(fx->wo[l], att, E, H * D, o);
      for (int i = 0; i < E; i++) x[t][i] += o[i];
      ref_norm(x[t], fx->fn[l], xn);
      ref_mv(fx->wg[l], xn, F, E, g);
      ref_mv(fx->wu[l], xn, F, E, u);
      for (int i = 0; i < F; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
      ref_mv(fx->wd[l], g, E, F, o);
      for (int i = 0; i < E; i++) x[t][i] += o[i];
    }
  }
  for (int t = 0; t < n; t++) {
    float xn[E];
    ref_norm(x[t], fx->out_norm, xn);
    ref_mv(fx->out_w, xn, V, E, logits + t * V);
  }
  free(x); free(k); free(v); free(q);
}

/* ---------------------------------------------------------------- batch helpers */

struct seq {
  const int32_t *ids;
  int start, len;        /* rows ids[start .. start+len-1] are computed this step */
  const int32_t *table;  /* [MB] */
};

/* Runs one step over seqs; logits for every computed row, in order. */
static llb_status run_step(struct llama_forward_ctx *fc, struct llama_kv_cache *kv, const struct seq *s, int n_seqs,
                           float *logits, const float *embeds, const uint8_t *mask) {
  int32_t ids[32], pos[32], qsl[9] = {0}, lens[8], tables[8 * MB], li[32];
  int64_t slots[32];
  int n = 0;
  for (int i = 0; i < n_seqs; i++) {
    for (int r = 0; r < s[i].len; r++, n++) {
      const int p = s[i].start + r;
      ids[n] = s[i].ids[p];
      pos[n] = p;
      slots[n] = (int64_t)s[i].table[p / BS] * BS + p % BS;
      li[n] = n;
    }
    qsl[i + 1] = n;
    lens[i] = s[i].start + s[i].len;
    memcpy(tables + i * MB, s[i].table, sizeof(int32_t) * MB);
  }
  const struct llama_batch b = {.num_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = n_seqs, .query_start_loc = qsl, .seq_lens = lens,
                                .block_tables = tables, .max_blocks_per_seq = MB, .input_embeds = embeds,
                                .embeds_mask = mask, .num_logits = n, .logits_indices = li};
  return llama_forward(fc, kv, &b, logits);
}

static const int32_t k_prompt[12] = {5, 96, 17, 0, 42, 42, 63, 8, 77, 31, 2, 50};
static const int32_t k_table_a[MB] = {7, 3, 12, 0, 9, 30, 21, 5, 1, 2, 4, 6, 8, 10, 11, 13};
static const int32_t k_table_b[MB] = {14, 31, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28, 29};

static struct llama_kv_cache *new_cache(const struct fixture *fx) {
  struct llama_kv_cache *kv = NULL;
  assert_int_equal(llama_kv_cache_create(fx->m, NB, BS, &kv), LLB_STATUS_OK);
  return kv;
}

static void test_prefill_logits_match_dense_float_reference(void **state) {
  struct fixture *fx = *state;
  struct llama_kv_cache *kv = new_cache(fx);
  float got[12 * V], ref[12 * V];
  const struct seq s = {k_prompt, 0, 12, k_table_a};
  assert_int_equal(run_step(fx->fc, kv, &s, 1, got, NULL, NULL), LLB_STATUS_OK);
  ref_forward(fx, k_prompt, 12, ref);
  double max_ref = 0, max_err = 0;
  for (int i = 0; i < 12 * V; i++) {
    max_ref = fmax(max_ref, fabs(ref[i]));
    max_err = fmax(max_err, fabs(ref[i] - got[i]));
  }
  print_message("prefill: max |logit| %.4f, max error %.5f\n", max_ref, max_err);
  assert_true(max_ref > 0.1); /* not a degenerate all-zero model */
  assert_true(max_err <= 0.08 * max_ref + 0.03);
  llama_kv_cache_destroy(kv);
}

static void test_decode_steps_match_full_recompute_bitwise(void **state) {
  struct fixture *fx = *state;
  struct llama_kv_cache *kv = new_cache(fx);
  float step[12 * V], full[12 * V];
  const struct seq pre = {k_prompt, 0, 8, k_table_a};
  assert_int_equal(run_step(fx->fc, kv, &pre, 1, step, NULL, NULL), LLB_STATUS_OK);
  for (int p = 8; p < 12; p++) {
    const struct seq dec = {k_prompt, p, 1, k_table_a};
    assert_int_equal(run_step(fx->fc, kv, &dec, 1, step, NULL, NULL), LLB_STATUS_OK);
    struct llama_kv_cache *kv2 = new_cache(fx);
    const struct seq all = {k_prompt, 0, p + 1, k_table_b};
    assert_int_equal(run_step(fx->fc1, kv2, &all, 1, full, NULL, NULL), LLB_STATUS_OK);
    assert_memory_equal(step, full + p * V, sizeof(float) * V);
    llama_kv_cache_destroy(kv2);
  }
  llama_kv_cache_destroy(kv);
}

/* A worker's forward with fewer threads for decode steps (n_threads_decode): prefills of more
 * rows than decode_max_tokens on 3 threads, decode steps on 1, alternating; every row's
 * logits bit-identical to one thread throughout. Bad counts are refused. */
static void test_decode_threads_change_nothing_but_the_threads(void **state) {
  struct fixture *fx = *state;
  const struct llama_forward_options o = {.max_num_tokens = 32, .n_threads = 3, .n_threads_decode = 1,
                                          .decode_max_tokens = 4};
  struct llama_forward_ctx *fc = NULL;
  assert_int_equal(llama_forward_ctx_create_opts(fx->m, &o, &fc), LLB_STATUS_OK);
  struct llama_kv_cache *kv = new_cache(fx), *kv1 = new_cache(fx);
  float got[12 * V], want[12 * V];
  const struct seq pre = {k_prompt, 0, 6, k_table_a}, pre1 = {k_prompt, 0, 6, k_table_b};
  assert_int_equal(run_step(fc, kv, &pre, 1, got, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc1, kv1, &pre1, 1, want, NULL, NULL), LLB_STATUS_OK);
  assert_memory_equal(got, want, sizeof(float) * 6 * V);
  for (int p = 6; p < 12;) {
    const int n = p == 8 ? 4 : p == 6 ? 2 : 1; /* 2 and 4 rows: decode-sized; then single rows */
    const struct seq s = {k_prompt, p, n, k_table_a}, s1 = {k_prompt, p, n, k_table_b};
    assert_int_equal(run_step(fc, kv, &s, 1, got, NULL, NULL), LLB_STATUS_OK);
    assert_int_equal(run_step(fx->fc1, kv1, &s1, 1, want, NULL, NULL), LLB_STATUS_OK);
    assert_memory_equal(got, want, sizeof(float) * (size_t)n * V);
    p += n;
  }
  llama_kv_cache_destroy(kv);
  llama_kv_cache_destroy(kv1);
  llama_forward_ctx_destroy(fc);
  const struct llama_forward_options bad = {.max_num_tokens = 32, .n_threads = 2, .n_threads_decode = -1};
  assert_int_equal(llama_forward_ctx_create_opts(fx->m, &bad, &fc), LLB_STATUS_INVALID_ARGUMENT);
}

static void test_chunked_prefill_equals_one_shot_bitwise(void **state) {
  struct fixture *fx = *state;
  struct llama_kv_cache *kv = new_cache(fx), *kv2 = new_cache(fx);
  float one[12 * V], chunks[12 * V];
  const struct seq s = {k_prompt, 0, 12, k_table_a};
  assert_int_equal(run_step(fx->fc, kv, &s, 1, one, NULL, NULL), LLB_STATUS_OK);
  const struct seq c1 = {k_prompt, 0, 7, k_table_b}, c2 = {k_prompt, 7, 5, k_table_b};
  assert_int_equal(run_step(fx->fc, kv2, &c1, 1, chunks, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc, kv2, &c2, 1, chunks + 7 * V, NULL, NULL), LLB_STATUS_OK);
  assert_memory_equal(one, chunks, sizeof(one));
  llama_kv_cache_destroy(kv);
  llama_kv_cache_destroy(kv2);
}

static void test_mixed_batch_equals_each_sequence_alone_bitwise(void **state) {
  struct fixture *fx = *state;
  static const int32_t other[6] = {1, 2, 3, 90, 91, 92};
  struct llama_kv_cache *kv = new_cache(fx), *kv2 = new_cache(fx);
  float mixed[12 * V], alone[12 * V], tmp[12 * V];
  /* history: A has 4 tokens, B has 5 */
  const struct seq a0 = {k_prompt, 0, 4, k_table_a}, b0 = {other, 0, 5, k_table_b};
  const struct seq both0[2] = {a0, b0};
  assert_int_equal(run_step(fx->fc, kv, both0, 2, tmp, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc1, kv2, &a0, 1, tmp, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc1, kv2, &b0, 1, tmp, NULL, NULL), LLB_STATUS_OK);
  /* step: A prefill chunk of 5 + B decode of 1, together vs alone */
  const struct seq a1 = {k_prompt, 4, 5, k_table_a}, b1 = {other, 5, 1, k_table_b};
  const struct seq both1[2] = {a1, b1};
  assert_int_equal(run_step(fx->fc, kv, both1, 2, mixed, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc1, kv2, &a1, 1, alone, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(run_step(fx->fc1, kv2, &b1, 1, alone + 5 * V, NULL, NULL), LLB_STATUS_OK);
  assert_memory_equal(mixed, alone, sizeof(float) * 6 * V);
  llama_kv_cache_destroy(kv);
  llama_kv_cache_destroy(kv2);
}

static void test_input_embeds_override_and_bad_batches(void **state) {
  struct fixture *fx = *state;
  struct llama_kv_cache *kv = new_cache(fx), *kv2 = new_cache(fx);
  float plain[4 * V], over[4 * V], embeds[4 * E];
  const struct seq s = {k_prompt, 0, 4, k_table_a};
  assert_int_equal(run_step(fx->fc, kv, &s, 1, plain, NULL, NULL), LLB_STATUS_OK);
  /* rows 1 and 3 from input_embeds holding exactly their token embeddings: same logits */
  const uint8_t mask[4] = {0, 1, 0, 1};
  for (int t = 0; t < 4; t++) memcpy(embeds + t * E, fx->tok + k_prompt[t] * E, sizeof(float) * E);
  assert_int_equal(run_step(fx->fc, kv2, &s, 1, over, embeds, mask), LLB_STATUS_OK);
  assert_memory_equal(plain, over, sizeof(plain));
  /* a different embedding changes the logits of that row */
  embeds[1 * E] += 1.0f;
  assert_int_equal(run_step(fx->fc, kv2, &s, 1, over, embeds, mask), LLB_STATUS_OK);
  assert_memory_not_equal(plain + V, over + V, sizeof(float) * V);
  /* token id out of vocabulary */
  static const int32_t bad_ids[2] = {3, V};
  const struct seq bad = {bad_ids, 0, 2, k_table_a};
  assert_int_equal(run_step(fx->fc, kv, &bad, 1, over, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  /* a block id beyond the cache */
  int32_t table[MB];
  memcpy(table, k_table_a, sizeof(table));
  table[0] = NB;
  const struct seq bad_block = {k_prompt, 0, 2, table};
  assert_int_equal(run_step(fx->fc, kv, &bad_block, 1, over, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  llama_kv_cache_destroy(kv);
  llama_kv_cache_destroy(kv2);
}

/* The host's shared packed-weight cache (model/forward/packed_cache.h): the first context packs and
 * writes it, the next maps it instead of packing; both give the private copy's logits bit for
 * bit; a cache file whose bytes were not made by this build's packing is detected, repacked
 * and replaced. */
static void prefill_logits(const struct llama_model *m, struct llama_forward_ctx *fc, float *out) {
  struct llama_kv_cache *kv = NULL;
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  const struct seq s = {k_prompt, 0, 12, k_table_a};
  assert_int_equal(run_step(fc, kv, &s, 1, out, NULL, NULL), LLB_STATUS_OK);
  llama_kv_cache_destroy(kv);
}

/* XORs the byte at offset of the one cache file under cache_path (dir: scratch for its listing). */
static void flip_cache_byte(const char *dir, const char *cache_path, long offset) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -f %s/*.tmp.*; ls %s/*.llbpack > %s/list", cache_path, cache_path, dir);
  assert_int_equal(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/list", dir);
  FILE *lf = fopen(cmd, "r");
  assert_non_null(lf);
  char packed_file[200] = "";
  assert_non_null(fgets(packed_file, sizeof packed_file, lf));
  fclose(lf);
  packed_file[strcspn(packed_file, "\n")] = '\0';
  FILE *pf = fopen(packed_file, "r+b");
  assert_non_null(pf);
  assert_int_equal(fseek(pf, offset, SEEK_SET), 0);
  int byte = fgetc(pf);
  assert_int_equal(fseek(pf, offset, SEEK_SET), 0);
  fputc(byte ^ 0x5a, pf);
  fclose(pf);
}

static void test_shared_packed_cache_maps_and_matches_private(void **state) {
  struct fixture *fx = *state;
  char dir[] = "/tmp/llb-packed-XXXXXX", model_path[64], cache_path[128];
  assert_non_null(mkdtemp(dir));
  snprintf(model_path, sizeof model_path, "%s/m.gguf", dir);
  FILE *f = fopen(model_path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(fx->buf, 1, fx->size, f), fx->size);
  fclose(f);
  struct gguf_file *gf;
  struct llama_model *m;
  assert_int_equal(gguf_open(model_path, &gf), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(gf, &m), LLB_STATUS_OK);
  snprintf(cache_path, sizeof cache_path, "%s/cache", dir);
  const struct llama_forward_options o = {.max_num_tokens = 32, .n_threads = 1, .packed_cache_dir = cache_path};
  float priv[12 * V], first[12 * V], second[12 * V], third[12 * V];
  prefill_logits(fx->m, fx->fc1, priv);
  struct llama_forward_ctx *a, *b, *c;
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &a), LLB_STATUS_OK); /* packs, writes, maps */
  assert_true(llama_forward_ctx_packed_shared(a));
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &b), LLB_STATUS_OK); /* maps */
  assert_true(llama_forward_ctx_packed_shared(b));
  prefill_logits(m, a, first);
  prefill_logits(m, b, second);
  assert_memory_equal(first, priv, sizeof priv);
  assert_memory_equal(second, priv, sizeof priv);
  /* a cache written by other packing code: flip a byte of the weight the check repacks for each
   * type, the smallest (blk.0.attn_v for Q4_1, after blk.0.attn_q, Q4_1, and blk.0.attn_k, Q8_0) */
  const struct backend_weight wq0 = {.type = GGML_TYPE_Q4_1, .rows = H * D, .cols = E,
                                     .row_bytes = (size_t)E / QK4_1 * ggml_type_block_bytes(GGML_TYPE_Q4_1)};
  const struct backend_weight wk0 = {.type = GGML_TYPE_Q8_0, .rows = HKV * D, .cols = E,
                                     .row_bytes = (size_t)E / QK8_0 * ggml_type_block_bytes(GGML_TYPE_Q8_0)};
  const long wq0_at = (long)((backend_cpu_ops()->pack_bytes(&wq0) + 63) / 64 * 64);
  const long wk0_at = (long)((backend_cpu_ops()->pack_bytes(&wk0) + 63) / 64 * 64);
  assert_true(wq0_at > 0 && wk0_at > 0);
  flip_cache_byte(dir, cache_path, PACKED_CACHE_DATA_OFFSET + wq0_at + wk0_at + 5);
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &c), LLB_STATUS_OK); /* detects, repacks, rewrites */
  prefill_logits(m, c, third);
  assert_memory_equal(third, priv, sizeof priv);
  assert_true(llama_forward_ctx_packed_shared(c));
  /* ... and for the other type (blk.0.attn_k, Q8_0, the second weight): a layout change of one
   * type's panels is caught whichever type the file starts with */
  flip_cache_byte(dir, cache_path, PACKED_CACHE_DATA_OFFSET + wq0_at + 5);
  struct llama_forward_ctx *d;
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &d), LLB_STATUS_OK); /* detects, repacks, rewrites */
  float fourth[12 * V];
  prefill_logits(m, d, fourth);
  assert_memory_equal(fourth, priv, sizeof priv);
  llama_forward_ctx_destroy(d);
  llama_forward_ctx_destroy(a);
  llama_forward_ctx_destroy(b);
  llama_forward_ctx_destroy(c);
  llama_model_destroy(m);
  gguf_close(gf);
  char file[512];
  snprintf(file, sizeof file, "rm -rf %s", dir);
  assert_int_equal(system(file), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prefill_logits_match_dense_float_reference),
      cmocka_unit_test(test_decode_steps_match_full_recompute_bitwise),
      cmocka_unit_test(test_chunked_prefill_equals_one_shot_bitwise),
      cmocka_unit_test(test_decode_threads_change_nothing_but_the_threads),
      cmocka_unit_test(test_mixed_batch_equals_each_sequence_alone_bitwise),
      cmocka_unit_test(test_input_embeds_override_and_bad_batches),
      cmocka_unit_test(test_shared_packed_cache_maps_and_matches_private),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

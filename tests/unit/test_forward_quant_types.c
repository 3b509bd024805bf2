/* The LLaMA forward pass on weights of the types GGUF files mix in (Q4_0, Q5_0, Q5_1, Q2_K, Q3_K,
 * IQ4_NL, IQ4_XS, and Q4_K/Q5_K, which now have packed panels): a tiny random model (2 layers, E 256, 4 heads, 2 KV heads, head_dim 64,
 * FFN 512, vocab 61) written with the GGUF writer, every matmul weight and the embedding in
 * one of those types, against the SAME model written in F32 (each tensor the exact
 * ggml_dequantize_row of the quantized one). The F32 model's matmuls take float activations,
 * the quantized model's take Q8_0/Q8_1/Q8_K activations (ggml's vec_dot types), so the logits
 * differ only by activation rounding: stated tolerance 0.05 * max|logit| + 0.02 (measured
 * 1.5-3% of max|logit|), with both matmul numerics: PACKED (Q4_0 and Q5_0 in their zero-point
 * form, Q5_1, IQ4_NL, Q4_K, Q5_K,
 * IQ4_XS repacked into int8 panels, Q2_K/Q3_K on their dots) and GGML (every type on its dot). Also: a
 * decode step equals the recompute bit for bit, and a type with no matmul (iq2_xxs) is
 * refused naming the tensor and the type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 256, H = 4, HKV = 2, D = 64, F = 512, V = 61, CTX = 64, BS = 4, NB = 16, MB = 8, NP = 10 };

static uint64_t rng_state = 99;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; }

/* Byte offsets of d and dmin (-1: none) in a block, and the largest |scale * quant| of the
 * type before d, so that random blocks get weights of about 1/sqrt(cols). */
static void type_scales(enum ggml_type t, int *d_off, int *m_off, float *qmax) {
  *m_off = -1;
  *d_off = 0;
  *qmax = 1;
  switch (t) {
  case GGML_TYPE_Q4_0: *qmax = 8; break;
  case GGML_TYPE_Q5_0: *qmax = 16; break;
  case GGML_TYPE_Q5_1: *m_off = 2; *qmax = 31; break;
  case GGML_TYPE_Q2_K: *d_off = 80; *m_off = 82; *qmax = 45; break;
  case GGML_TYPE_Q3_K: *d_off = 108; *qmax = 128; break;
  case GGML_TYPE_IQ4_NL: *qmax = 127; break;
  case GGML_TYPE_IQ4_XS: *qmax = 32 * 127; break;
  case GGML_TYPE_Q4_K: *m_off = 2; *qmax = 63 * 15; break;
  case GGML_TYPE_Q5_K: *m_off = 2; *qmax = 63 * 31; break;
  default: fail();
  }
}

/* Adds tensor `name` [rows, cols] of type t with random blocks to q, and its dequantized
 * values as F32 to f. */
static void add_weight(struct gguf_writer *q, struct gguf_writer *f, const char *name, enum ggml_type t,
                       int64_t cols, int64_t rows) {
  size_t rb;
  assert_int_equal(ggml_row_bytes(t, cols, &rb), LLB_STATUS_OK);
  const size_t bb = ggml_type_block_bytes(t), n = rb * (size_t)rows;
  uint8_t *p = malloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
  int d_off, m_off;
  float qmax;
  type_scales(t, &d_off, &m_off, &qmax);
  const float scale = 2.0f / sqrtf((float)cols) / qmax;
  for (size_t b = 0; b < n / bb; b++) {
    const uint16_t d = llb_fp32_to_fp16(scale * (0.5f + 0.5f * fabsf(rndf())));
    memcpy(p + b * bb + d_off, &d, 2);
    if (m_off >= 0) {
      const uint16_t m = llb_fp32_to_fp16(t == GGML_TYPE_Q5_1 ? -15.0f * scale : 1.5f * scale);
      memcpy(p + b * bb + m_off, &m, 2);
    }
  }
  const int64_t ne[2] = {cols, rows};
  assert_int_equal(gguf_writer_add_tensor(q, name, t, 2, ne, p, n), LLB_STATUS_OK);
  float *dense = malloc(sizeof(float) * (size_t)(cols * rows));
  for (int64_t r = 0; r < rows; r++)
    assert_int_equal(ggml_dequantize_row(t, p + (size_t)r * rb, dense + r * cols, cols), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_add_tensor_f32(f, name, 2, ne, dense), LLB_STATUS_OK);
  free(dense);
  free(p);
}

static void add_meta(struct gguf_writer *w) {
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_llama_hparams(w, &hp), LLB_STATUS_OK);
}

static void add_norm(struct gguf_writer *q, struct gguf_writer *f, const char *name) {
  float v[E];
  for (int i = 0; i < E; i++) v[i] = 1.0f + 0.3f * rndf();
  assert_int_equal(gguf_writer_add_tensor_f32(q, name, 1, (int64_t[]){E}, v), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_add_tensor_f32(f, name, 1, (int64_t[]){E}, v), LLB_STATUS_OK);
}

struct model {
  void *buf;
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_forward_ctx *fc;      /* LLAMA_MATMUL_PACKED, the default */
  struct llama_forward_ctx *fc_ggml; /* LLAMA_MATMUL_GGML */
};

struct fixture {
  struct model quant, dense;
};

static void open_model(struct gguf_writer *w, struct model *out) {
  size_t size;
  assert_int_equal(gguf_writer_write_memory(w, &out->buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(out->buf, size, &out->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(out->f, &out->m), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create(out->m, 16, 2, &out->fc), LLB_STATUS_OK);
  const struct llama_forward_options o = {.max_num_tokens = 16, .n_threads = 2, .matmul = LLAMA_MATMUL_GGML};
  assert_int_equal(llama_forward_ctx_create_opts(out->m, &o, &out->fc_ggml), LLB_STATUS_OK);
}

static void close_model(struct model *m) {
  llama_forward_ctx_destroy(m->fc);
  llama_forward_ctx_destroy(m->fc_ggml);
  llama_model_destroy(m->m);
  gguf_close(m->f);
  free(m->buf);
}

/* Between them the two layers use every type above; the two layers swap roles. */
static const enum ggml_type k_layer_types[L][7] = {
    {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL,
     GGML_TYPE_Q4_0},
    {GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_IQ4_XS, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
     GGML_TYPE_Q2_K},
};

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof(*fx));
  struct gguf_writer *q, *f;
  assert_int_equal(gguf_writer_create(3, &q), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_create(3, &f), LLB_STATUS_OK);
  add_meta(q);
  add_meta(f);
  add_weight(q, f, "token_embd.weight", GGML_TYPE_Q5_0, E, V);
  for (int l = 0; l < L; l++) {
    char n[64];
    const enum ggml_type *ty = k_layer_types[l];
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, l), n)
    add_norm(q, f, NAME("attn_norm.weight"));
    add_norm(q, f, NAME("ffn_norm.weight"));
    add_weight(q, f, NAME("attn_q.weight"), ty[0], E, H * D);
    add_weight(q, f, NAME("attn_k.weight"), ty[1], E, HKV * D);
    add_weight(q, f, NAME("attn_v.weight"), ty[2], E, HKV * D);
    add_weight(q, f, NAME("attn_output.weight"), ty[3], H * D, E);
    add_weight(q, f, NAME("ffn_gate.weight"), ty[4], E, F);
    add_weight(q, f, NAME("ffn_up.weight"), ty[5], E, F);
    add_weight(q, f, NAME("ffn_down.weight"), ty[6], F, E);
#undef NAME
  }
  add_norm(q, f, "output_norm.weight");
  add_weight(q, f, "output.weight", GGML_TYPE_IQ4_XS, E, V);
  open_model(q, &fx->quant);
  open_model(f, &fx->dense);
  gguf_writer_destroy(q);
  gguf_writer_destroy(f);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  close_model(&fx->quant);
  close_model(&fx->dense);
  free(fx);
  return 0;
}

static const int32_t k_prompt[NP] = {3, 60, 17, 0, 42, 42, 33, 8, 57, 31};
static const int32_t k_table[MB] = {5, 2, 9, 0, 11, 7, 1, 3};

/* Rows [start, start + len) of k_prompt in one step of one sequence; logits of every row. */
static void run_ctx(struct llama_forward_ctx *fc, struct llama_kv_cache *kv, int start, int len, float *logits) {
  int32_t ids[NP], pos[NP], li[NP], qsl[2] = {0, len}, lens[1] = {start + len};
  int64_t slots[NP];
  for (int r = 0; r < len; r++) {
    const int p = start + r;
    ids[r] = k_prompt[p];
    pos[r] = p;
    slots[r] = (int64_t)k_table[p / BS] * BS + p % BS;
    li[r] = r;
  }
  const struct llama_batch b = {.num_tokens = len, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = k_table,
                                .max_blocks_per_seq = MB, .num_logits = len, .logits_indices = li};
  assert_int_equal(llama_forward(fc, kv, &b, logits), LLB_STATUS_OK);
}

static void run(struct model *m, struct llama_kv_cache *kv, int start, int len, float *logits) {
  run_ctx(m->fc, kv, start, len, logits);
}

static struct llama_kv_cache *new_cache(const struct model *m) {
  struct llama_kv_cache *kv = NULL;
  assert_int_equal(llama_kv_cache_create(m->m, NB, BS, &kv), LLB_STATUS_OK);
  return kv;
}

static void test_new_quant_types_logits_match_dequantized_f32_model(void **state) {
  struct fixture *fx = *state;
  float got[NP * V], want[NP * V];
  struct llama_kv_cache *kf = new_cache(&fx->dense);
  run(&fx->dense, kf, 0, NP, want);
  llama_kv_cache_destroy(kf);
  for (int mode = 0; mode < 2; mode++) {
    struct llama_kv_cache *kq = new_cache(&fx->quant);
    run_ctx(mode == 0 ? fx->quant.fc : fx->quant.fc_ggml, kq, 0, NP, got);
    llama_kv_cache_destroy(kq);
    double max_ref = 0, max_err = 0;
    int argmax_same = 0;
    for (int r = 0; r < NP; r++) {
      int ag = 0, aw = 0;
      for (int i = 0; i < V; i++) {
        max_ref = fmax(max_ref, fabs(want[r * V + i]));
        max_err = fmax(max_err, fabs(want[r * V + i] - got[r * V + i]));
        if (got[r * V + i] > got[r * V + ag]) ag = i;
        if (want[r * V + i] > want[r * V + aw]) aw = i;
      }
      argmax_same += ag == aw;
    }
    print_message("%s: new types vs f32: max |logit| %.4f, max error %.5f, argmax equal on %d/%d rows\n",
                  mode == 0 ? "packed" : "ggml", max_ref, max_err, argmax_same, NP);
    assert_true(max_ref > 0.1);
    assert_true(max_err > 0.0); /* the quantized model really ran on Q8 activations */
    assert_true(max_err <= 0.05 * max_ref + 0.02);
  }
}

static void test_new_quant_types_decode_step_equals_recompute_bitwise(void **state) {
  struct fixture *fx = *state;
  struct llama_kv_cache *kv = new_cache(&fx->quant), *kv2 = new_cache(&fx->quant);
  float step[NP * V], full[NP * V];
  run(&fx->quant, kv, 0, NP - 1, step);
  run(&fx->quant, kv, NP - 1, 1, step);
  run(&fx->quant, kv2, 0, NP, full);
  assert_memory_equal(step, full + (NP - 1) * V, sizeof(float) * V);
  llama_kv_cache_destroy(kv);
  llama_kv_cache_destroy(kv2);
}

static void test_type_without_matmul_is_refused_naming_tensor_and_type(void **state) {
  (void)state;
  struct gguf_writer *q;
  assert_int_equal(gguf_writer_create(3, &q), LLB_STATUS_OK);
  add_meta(q);
  const int64_t ne[2] = {E, V};
  uint8_t blocks[66 * (E / 256) * V];
  memset(blocks, 0, sizeof blocks);
  assert_int_equal(gguf_writer_add_tensor(q, "token_embd.weight", GGML_TYPE_IQ2_XXS, 2, ne, blocks, sizeof blocks),
                   LLB_STATUS_OK);
  void *buf;
  size_t size;
  assert_int_equal(gguf_writer_write_memory(q, &buf, &size), LLB_STATUS_OK);
  struct gguf_file *gf = NULL;
  assert_int_equal(gguf_open_memory(buf, size, &gf), LLB_STATUS_OK);
  struct llama_model *m = NULL;
  assert_int_equal(llama_model_load(gf, &m), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "token_embd.weight"));
  assert_non_null(strstr(llb_err_last(), "iq2_xxs"));
  gguf_close(gf);
  free(buf);
  gguf_writer_destroy(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_quant_types_logits_match_dequantized_f32_model),
      cmocka_unit_test(test_new_quant_types_decode_step_equals_recompute_bitwise),
  };
  const struct CMUnitTest alone[] = {
      cmocka_unit_test(test_type_without_matmul_is_refused_naming_tensor_and_type),
  };
  return cmocka_run_group_tests(tests, setup, teardown) | cmocka_run_group_tests(alone, NULL, NULL);
}

/* model/gguf/config: LLaMA hyperparameters and tensor-shape checks on tiny files made with the
 * test GGUF writer; with `--model PATH`, the default model's config (exit 77 if absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf/config.h"
#include "tests/unit/gguf_writer.h"

/* Tiny model: E 64, H 4, Hkv 2, D 16, F 96, V 40, 2 blocks. */
enum { E = 64, H = 4, HKV = 2, D = 16, FF = 96, V = 40, NBLK = 2 };

struct tiny_opts {
  const char *skip_key;      /* metadata key left out */
  const char *arch;          /* default "llama" */
  const char *rope_scaling;  /* rope.scaling.type, NULL = absent */
  float rope_factor;
  bool with_output;          /* output.weight present (untied) */
  const char *bad_tensor;    /* this tensor gets shape [E + 1] x ... */
  bool no_head_count_kv;
  uint32_t sliding_window;   /* attention.sliding_window, 0 = absent */
  int32_t swa_period;        /* attention.sliding_window_pattern as a period, 0 = absent */
  const bool *swa_layers;    /* ... or as NBLK booleans */
  const char *extra_tensor;  /* an [8] f32 tensor of this name */
  uint32_t block_count_key;  /* block_count key value instead of NBLK (tensors stay NBLK) */
  uint32_t key_length;       /* attention.key_length, 0 = absent */
  float final_softcap;       /* final_logit_softcapping, 0 = absent */
};

struct tiny {
  void *buf;
  size_t size;
  struct gguf_file *f;
};

static float weights[(E + 1) * (FF + 1)];

static void add_key_u32(struct gguf_writer *w, const struct tiny_opts *o, const char *suffix,
                        uint32_t v) {
  char key[96];
  snprintf(key, sizeof key, "%s.%s", o->arch ? o->arch : "llama", suffix);
  if (o->skip_key == NULL || strcmp(o->skip_key, key) != 0) {
    gguf_writer_add_u32(w, key, v);
  }
}

static void add_w(struct gguf_writer *w, const struct tiny_opts *o, const char *name, int64_t ne0,
                  int64_t ne1) {
  if (o->bad_tensor && strcmp(o->bad_tensor, name) == 0) {
    ne0 += 1;
  }
  if (ne1 > 0) {
    gguf_writer_add_tensor_f32(w, name, 2, (int64_t[]){ne0, ne1}, weights);
  } else {
    gguf_writer_add_tensor_f32(w, name, 1, (int64_t[]){ne0}, weights);
  }
}

static llb_status make_tiny(const struct tiny_opts *o, struct tiny *t) {
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const char *arch = o->arch ? o->arch : "llama";
  gguf_writer_add_str(w, "general.architecture", arch);
  add_key_u32(w, o, "block_count", o->block_count_key ? o->block_count_key : NBLK);
  if (o->key_length) add_key_u32(w, o, "attention.key_length", o->key_length);
  if (o->final_softcap != 0.0f) {
    char sk[96];
    snprintf(sk, sizeof sk, "%s.final_logit_softcapping", arch);
    gguf_writer_add_f32(w, sk, o->final_softcap);
  }
  add_key_u32(w, o, "embedding_length", E);
  add_key_u32(w, o, "feed_forward_length", FF);
  add_key_u32(w, o, "attention.head_count", H);
  if (!o->no_head_count_kv) {
    add_key_u32(w, o, "attention.head_count_kv", HKV);
  }
  add_key_u32(w, o, "context_length", 256);
  char key[96];
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  gguf_writer_add_f32(w, key, 500000.0f);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  if (o->skip_key == NULL || strcmp(o->skip_key, key) != 0) {
    gguf_writer_add_f32(w, key, 1e-5f);
  }
  if (o->sliding_window) add_key_u32(w, o, "attention.sliding_window", o->sliding_window);
  if (o->swa_period) add_key_u32(w, o, "attention.sliding_window_pattern", (uint32_t)o->swa_period);
  if (o->swa_layers) {
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gguf_writer_add_array(w, key, GGUF_VALUE_TYPE_BOOL, o->swa_layers, NBLK);
  }
  if (o->extra_tensor) add_w(w, o, o->extra_tensor, 8, 0);
  if (o->rope_scaling) {
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gguf_writer_add_str(w, key, o->rope_scaling);
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    gguf_writer_add_f32(w, key, o->rope_factor);
  }
  const char *toks[V];
  char tokbuf[V][16];
  for (int i = 0; i < V; i++) {
    snprintf(tokbuf[i], sizeof tokbuf[i], "t%d", i);
    toks[i] = tokbuf[i];
  }
  if (o->skip_key == NULL || strcmp(o->skip_key, "tokenizer.ggml.tokens") != 0) {
    gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, V);
  }
  add_w(w, o, "token_embd.weight", E, V);
  add_w(w, o, "output_norm.weight", E, 0);
  if (o->with_output) {
    add_w(w, o, "output.weight", E, V);
  }
  for (int l = 0; l < NBLK; l++) {
    char n[64];
#define LAYER(suffix, a, b)                           \
  snprintf(n, sizeof n, "blk.%d." suffix, l);         \
  add_w(w, o, n, a, b)
    LAYER("attn_norm.weight", E, 0);
    LAYER("attn_q.weight", E, H * D);
    LAYER("attn_k.weight", E, HKV * D);
    LAYER("attn_v.weight", E, HKV * D);
    LAYER("attn_output.weight", H * D, E);
    LAYER("ffn_norm.weight", E, 0);
    LAYER("ffn_gate.weight", E, FF);
    LAYER("ffn_up.weight", E, FF);
    LAYER("ffn_down.weight", FF, E);
#undef LAYER
  }
  assert_int_equal(gguf_writer_write_memory(w, &t->buf, &t->size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  return gguf_open_memory(t->buf, t->size, &t->f);
}

static void free_tiny(struct tiny *t) {
  gguf_close(t->f);
  free(t->buf);
}

static void expect_msg(const char *needle) {
  if (strstr(llb_err_last(), needle) == NULL) {
    fail_msg("message '%s' does not mention '%s'", llb_err_last(), needle);
  }
}

static void test_good_config_reads_every_field(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){.with_output = true}, &t), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_string_equal(c.architecture, "llama");
  assert_int_equal(c.block_count, NBLK);
  assert_int_equal(c.embedding_length, E);
  assert_int_equal(c.feed_forward_length, FF);
  assert_int_equal(c.head_count, H);
  assert_int_equal(c.head_count_kv, HKV);
  assert_int_equal(c.head_dim, D);
  assert_int_equal(c.context_length, 256);
  assert_int_equal(c.vocab_size, V);
  assert_int_equal(c.rope_dimension_count, D);
  assert_true(c.rope_freq_base == 500000.0f);
  assert_true(c.rope_freq_scale == 1.0f);
  assert_true(c.layer_norm_rms_epsilon == 1e-5f);
  assert_int_equal(c.rope_type, LLAMA_ROPE_TYPE_NORM);
  assert_false(c.tied_embeddings);
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_OK);
  free_tiny(&t);
}

static void test_head_count_kv_defaults_to_head_count(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){.no_head_count_kv = true}, &t), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(c.head_count_kv, H);
  /* the file's k/v tensors are [E, Hkv*D] with Hkv = 2, so the shape check names attn_k */
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_MALFORMED);
  expect_msg("blk.0.attn_k.weight");
  free_tiny(&t);
}

static void test_missing_output_weight_means_tied_embeddings(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){0}, &t), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_true(c.tied_embeddings);
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_OK);
  free_tiny(&t);
}

static void test_missing_key_is_named(void **state) {
  (void)state;
  const char *keys[] = {"llama.embedding_length", "llama.block_count", "llama.context_length",
                        "llama.attention.layer_norm_rms_epsilon"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    struct tiny t;
    assert_int_equal(make_tiny(&(struct tiny_opts){.skip_key = keys[i]}, &t), LLB_STATUS_OK);
    struct llama_config c;
    assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_NOT_FOUND);
    expect_msg(keys[i]);
    free_tiny(&t);
  }
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){.skip_key = "tokenizer.ggml.tokens"}, &t),
                   LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_NOT_FOUND);
  expect_msg("llama.vocab_size");
  free_tiny(&t);
}

static void test_rope_scaling_linear_and_unsupported_type_named(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){.rope_scaling = "linear", .rope_factor = 4.0f},
                             &t), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_true(c.rope_freq_scale == 0.25f);
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.rope_scaling = "none", .rope_factor = 4.0f},
                             &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_true(c.rope_freq_scale == 1.0f);
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.rope_scaling = "yarn", .rope_factor = 4.0f},
                             &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_UNSUPPORTED);
  expect_msg("llama.rope.scaling.type");
  expect_msg("yarn");
  free_tiny(&t);
}

static void test_unsupported_architecture_is_named(void **state) {
  (void)state;
  const char *archs[] = {"stablelm", "falcon"};
  for (size_t i = 0; i < 2; i++) {
    struct tiny t;
    assert_int_equal(make_tiny(&(struct tiny_opts){.arch = archs[i]}, &t), LLB_STATUS_OK);
    struct llama_config c;
    assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_UNSUPPORTED);
    expect_msg(archs[i]);
    free_tiny(&t);
  }
}

/* qwen2 / qwen3 / phi3: LLaMA's tensors plus their own (q/k/v biases; per-head q/k norms; fused
 * qkv and gate/up), NEOX RoPE;
 * a file without those tensors is refused naming the first one missing. */
static void test_qwen_architectures_need_their_extra_tensors(void **state) {
  (void)state;
  const struct { const char *arch, *missing; bool bias, norm; } cases[] = {
      {"qwen2", "blk.0.attn_q.bias", true, false}, {"qwen3", "blk.0.attn_q_norm.weight", false, true},
      {"phi3", "blk.0.attn_qkv.weight", false, false}};
  for (size_t i = 0; i < 3; i++) {
    struct tiny t;
    assert_int_equal(make_tiny(&(struct tiny_opts){.arch = cases[i].arch}, &t), LLB_STATUS_OK);
    struct llama_config c;
    assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
    assert_int_equal(c.rope_type, LLAMA_ROPE_TYPE_NEOX);
    assert_int_equal(c.attn_qkv_bias, cases[i].bias);
    assert_int_equal(c.attn_qk_norm, cases[i].norm);
    assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_NOT_FOUND);
    expect_msg(cases[i].missing);
    free_tiny(&t);
  }
}

static void test_wrong_tensor_shape_is_named_with_both_shapes(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){.bad_tensor = "blk.1.ffn_down.weight"}, &t),
                   LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_MALFORMED);
  expect_msg("blk.1.ffn_down.weight");
  expect_msg("[97, 64]");
  expect_msg("expected [96, 64]");
  free_tiny(&t);

  assert_int_equal(make_tiny(&(struct tiny_opts){.bad_tensor = "output_norm.weight"}, &t),
                   LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_MALFORMED);
  expect_msg("output_norm.weight");
  free_tiny(&t);
}

static void test_missing_tensor_is_named(void **state) {
  (void)state;
  struct tiny t;
  assert_int_equal(make_tiny(&(struct tiny_opts){0}, &t), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  c.block_count = NBLK + 1; /* the file has two blocks */
  assert_int_equal(llama_config_check_tensors(t.f, &c), LLB_STATUS_NOT_FOUND);
  expect_msg("blk.2.attn_norm.weight");
  free_tiny(&t);
}

/* Which layers attend a sliding window: every layer of a llama (Mistral) file that sets one,
 * with no context cap; gemma2's default period 2 (layer 0 slides); a pattern key as a period or
 * one bool per layer; qwen2 and phi3 ignore the key as llama.cpp does. */
static void test_sliding_window_layers_follow_the_file(void **state) {
  (void)state;
  struct tiny t;
  struct llama_config c;
  assert_int_equal(make_tiny(&(struct tiny_opts){.sliding_window = 8}, &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(c.sliding_window, 8);
  assert_int_equal(c.context_length, 256);
  assert_true(c.layer_sliding[0] && c.layer_sliding[1]);
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "gemma2"}, &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(c.sliding_window, 4096);
  assert_true(c.layer_sliding[0] && !c.layer_sliding[1]);
  assert_true(c.attn_logit_softcapping == 50.0f && c.final_logit_softcapping == 30.0f);
  assert_true(c.rope_freq_base_swa == 500000.0f);
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "gemma2", .swa_period = 1}, &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_true(!c.layer_sliding[0] && !c.layer_sliding[1]); /* period 1: il % 1 < 0 never */
  free_tiny(&t);
  const bool second[NBLK] = {false, true};
  assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "gemma3", .sliding_window = 16, .swa_layers = second}, &t),
                   LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_true(!c.layer_sliding[0] && c.layer_sliding[1]);
  assert_true(c.rope_freq_base_swa == 10000.0f && c.rope_freq_base == 500000.0f);
  assert_true(c.attn_logit_softcapping == 0.0f && c.final_logit_softcapping == 0.0f);
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "gemma3"}, &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
  assert_int_equal(c.sliding_window, 0);
  free_tiny(&t);
  const char *ignoring[] = {"qwen2", "phi3"};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(make_tiny(&(struct tiny_opts){.arch = ignoring[i], .sliding_window = 8}, &t), LLB_STATUS_OK);
    assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.context_length, 256);
    free_tiny(&t);
  }
}

/* gemma2/3 scale q by 1/sqrt(head_dim), or by 1/sqrt(E / H) for the 27B models (46 / 62
 * layers, their query_pre_attn_scalar), as llama.cpp decides it; here head_dim 32, E / H 16. */
static void test_gemma_query_scale_follows_llama_cpp(void **state) {
  (void)state;
  const struct { const char *arch; uint32_t layers; float scale; } cases[] = {
      {"gemma2", 26, 0.17677669f}, {"gemma2", 46, 0.25f}, {"gemma3", 34, 0.17677669f}, {"gemma3", 62, 0.25f}};
  for (size_t i = 0; i < 4; i++) {
    struct tiny t;
    struct llama_config c;
    assert_int_equal(make_tiny(&(struct tiny_opts){.arch = cases[i].arch, .block_count_key = cases[i].layers,
                                                   .key_length = 32},
                               &t),
                     LLB_STATUS_OK);
    assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_OK);
    if (fabsf(c.attention_scale - cases[i].scale) > 1e-7f)
      fail_msg("%s %u layers: scale %g, expected %g", cases[i].arch, cases[i].layers, c.attention_scale,
               cases[i].scale);
    free_tiny(&t);
  }
}

/* A soft-cap from the file is used as it says, and refused when 1/cap would not be finite
 * (a subnormal) or it is negative. */
static void test_softcap_keys_are_bounded(void **state) {
  (void)state;
  const struct { float v; llb_status want; } cases[] = {
      {12.5f, LLB_STATUS_OK}, {1e-40f, LLB_STATUS_MALFORMED}, {-3.0f, LLB_STATUS_MALFORMED}};
  for (size_t i = 0; i < 3; i++) {
    struct tiny t;
    struct llama_config c;
    assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "gemma2", .final_softcap = cases[i].v}, &t), LLB_STATUS_OK);
    assert_int_equal(llama_config_from_gguf(t.f, &c), cases[i].want);
    if (cases[i].want == LLB_STATUS_OK) assert_true(c.final_logit_softcapping == 12.5f);
    else expect_msg("gemma2.final_logit_softcapping");
    free_tiny(&t);
  }
}

/* LongRoPE factor tensors: phi3 needs both sets; another architecture's are refused. */
static void test_longrope_factors_need_phi3_and_both_sets(void **state) {
  (void)state;
  struct tiny t;
  struct llama_config c;
  assert_int_equal(make_tiny(&(struct tiny_opts){.arch = "phi3", .extra_tensor = "rope_factors_long.weight"}, &t),
                   LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_NOT_FOUND);
  expect_msg("rope_factors_short.weight");
  free_tiny(&t);
  assert_int_equal(make_tiny(&(struct tiny_opts){.extra_tensor = "rope_factors_short.weight"}, &t), LLB_STATUS_OK);
  assert_int_equal(llama_config_from_gguf(t.f, &c), LLB_STATUS_UNSUPPORTED);
  expect_msg("LongRoPE");
  free_tiny(&t);
}

static const char *model_path;

static void test_default_model_config(void **state) {
  (void)state;
  struct gguf_file *f;
  assert_int_equal(gguf_open(model_path, &f), LLB_STATUS_OK);
  struct llama_config c;
  assert_int_equal(llama_config_from_gguf(f, &c), LLB_STATUS_OK);
  assert_string_equal(c.architecture, "llama");
  assert_int_equal(c.block_count, 30);
  assert_int_equal(c.embedding_length, 576);
  assert_int_equal(c.feed_forward_length, 1536);
  assert_int_equal(c.head_count, 9);
  assert_int_equal(c.head_count_kv, 3);
  assert_int_equal(c.head_dim, 64);
  assert_int_equal(c.context_length, 8192);
  assert_int_equal(c.vocab_size, 49152);
  assert_int_equal(c.rope_dimension_count, 64);
  assert_true(c.rope_freq_base == 100000.0f);
  assert_true(c.rope_freq_scale == 1.0f);
  assert_true(c.layer_norm_rms_epsilon == 1e-5f);
  assert_int_equal(c.rope_type, LLAMA_ROPE_TYPE_NORM);
  assert_true(c.tied_embeddings);
  assert_int_equal(llama_config_check_tensors(f, &c), LLB_STATUS_OK);
  gguf_close(f);
}

int main(int argc, char **argv) {
  for (int i = 0; i < (E + 1) * (FF + 1); i++) {
    weights[i] = (float)((i * 7) % 13) * 0.01f - 0.05f;
  }
  if (argc > 2 && strcmp(argv[1], "--model") == 0) {
    model_path = argv[2];
    if (access(model_path, R_OK) != 0) {
      printf("SKIP: default model %s is absent (run ops/fetch-model.sh)\n", model_path);
      return 77;
    }
    const struct CMUnitTest model_tests[] = {cmocka_unit_test(test_default_model_config)};
    return cmocka_run_group_tests(model_tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_config_reads_every_field),
      cmocka_unit_test(test_head_count_kv_defaults_to_head_count),
      cmocka_unit_test(test_missing_output_weight_means_tied_embeddings),
      cmocka_unit_test(test_missing_key_is_named),
      cmocka_unit_test(test_rope_scaling_linear_and_unsupported_type_named),
      cmocka_unit_test(test_qwen_architectures_need_their_extra_tensors),
      cmocka_unit_test(test_unsupported_architecture_is_named),
      cmocka_unit_test(test_sliding_window_layers_follow_the_file),
      cmocka_unit_test(test_longrope_factors_need_phi3_and_both_sets),
      cmocka_unit_test(test_gemma_query_scale_follows_llama_cpp),
      cmocka_unit_test(test_softcap_keys_are_bounded),
      cmocka_unit_test(test_wrong_tensor_shape_is_named_with_both_shapes),
      cmocka_unit_test(test_missing_tensor_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

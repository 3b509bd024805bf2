/* LLaMA hyperparameters from GGUF metadata. Key names and defaults follow llama.cpp
 * (llama-arch.cpp LLM_KV_*, llama-model.cpp load_hparams); RoPE types follow its
 * llama_model_rope_type(). */
#include "model/gguf/config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define KEY_MAX 128

/* Which layers slide (attention.sliding_window), per llama.cpp's load_arch_hparams. */
enum swa_rule {
  SWA_IGNORED = 0, /* the key is ignored, as llama.cpp does for these archs: full attention */
  SWA_EVERY_LAYER, /* llama (Mistral): every layer when the key is > 0 (HF MistralConfig) */
  SWA_GEMMA2,      /* window default 4096, period 2 */
  SWA_GEMMA3,      /* only when the key is > 0, period 6 */
};

struct arch_info {
  const char *name;
  bool supported;
  enum llama_rope_type rope_type;
  const char *why_not; /* for unsupported ones */
  bool qkv_bias, qk_norm, fused, gemma, post_norms;
  enum swa_rule swa;
};

static const struct arch_info arch_table[] = {
    {"llama", true, LLAMA_ROPE_TYPE_NORM, NULL, false, false, false, false, false, SWA_EVERY_LAYER},
    {"qwen2", true, LLAMA_ROPE_TYPE_NEOX, NULL, true, false, false, false, false, SWA_IGNORED},
    {"qwen3", true, LLAMA_ROPE_TYPE_NEOX, NULL, false, true, false, false, false, SWA_IGNORED},
    {"phi3", true, LLAMA_ROPE_TYPE_NEOX, NULL, false, false, true, false, false, SWA_IGNORED},
    {"gemma", true, LLAMA_ROPE_TYPE_NEOX, NULL, false, false, false, true, false, SWA_IGNORED},
    {"gemma2", true, LLAMA_ROPE_TYPE_NEOX, NULL, false, false, false, true, true, SWA_GEMMA2},
    {"gemma3", true, LLAMA_ROPE_TYPE_NEOX, NULL, false, true, false, true, true, SWA_GEMMA3},
    {"stablelm", false, LLAMA_ROPE_TYPE_NEOX, "LayerNorm and partial rotary", false, false, false, false, false, SWA_IGNORED},
    {"mistral3", false, LLAMA_ROPE_TYPE_NORM, "a vision tower and YaRN-scaled attention", false, false, false, false, false, SWA_IGNORED},
    {"granite", false, LLAMA_ROPE_TYPE_NORM, "embedding, residual and logit multipliers", false, false, false, false, false, SWA_IGNORED},
};

static void arch_key(char *buf, const char *arch, const char *suffix) {
  snprintf(buf, KEY_MAX, "%s.%s", arch, suffix);
}

/* Reads integer key `key` into *out, requiring lo <= value <= hi. */
static llb_status get_i32(const struct gguf_file *f, const char *key, int64_t lo, int64_t hi,
                          int32_t *out) {
  int64_t v;
  llb_status st = gguf_get_int(f, key, &v);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (v < lo || v > hi) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %lld, outside [%lld, %lld]", key,
                    (long long)v, (long long)lo, (long long)hi);
  }
  *out = (int32_t)v;
  return LLB_STATUS_OK;
}

/* As get_i32 but `def` when absent. */
static llb_status get_i32_opt(const struct gguf_file *f, const char *key, int64_t lo, int64_t hi,
                              int32_t def, int32_t *out) {
  if (gguf_find_key(f, key) < 0) {
    *out = def;
    return LLB_STATUS_OK;
  }
  return get_i32(f, key, lo, hi, out);
}

/* Reads a finite float key; `def` when absent and has_def. */
static llb_status get_f32(const struct gguf_file *f, const char *key, bool has_def, float def,
                          float *out) {
  if (has_def && gguf_find_key(f, key) < 0) {
    *out = def;
    return LLB_STATUS_OK;
  }
  double v;
  llb_status st = gguf_get_float(f, key, &v);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (!isfinite(v) || fabs(v) > 3.0e38) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is not a finite float32 (%g)", key, v);
  }
  *out = (float)v;
  return LLB_STATUS_OK;
}

static llb_status read_arch(const struct gguf_file *f, struct llama_config *c, const struct arch_info **info) {
  struct gguf_str arch;
  llb_status st = gguf_get_str(f, "general.architecture", &arch);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
    const struct arch_info *a = &arch_table[i];
    if (!gguf_str_eq(arch, a->name)) {
      continue;
    }
    if (!a->supported) {
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: general.architecture '%s' is not "
                      "supported: its forward pass differs from LLaMA's (%s)", a->name,
                      a->why_not);
    }
    snprintf(c->architecture, sizeof c->architecture, "%s", a->name);
    c->rope_type = a->rope_type;
    c->attn_qkv_bias = a->qkv_bias;
    c->attn_qk_norm = a->qk_norm;
    c->fused_qkv = c->fused_gate_up = a->fused;
    c->gemma = a->gemma;
    c->post_norms = a->post_norms;
    *info = a;
    return LLB_STATUS_OK;
  }
  return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: general.architecture '%.*s' is not supported "
                  "(supported: llama)", arch.len > 64 ? 64 : (int)arch.len, arch.data);
}

static llb_status read_rope_scaling(const struct gguf_file *f, const char *arch,
                                    struct llama_config *c) {
  char key[KEY_MAX];
  float factor = 1.0f;
  llb_status st;
  c->rope_freq_scale = 1.0f;
  arch_key(key, arch, "rope.scaling.type");
  if (gguf_find_key(f, key) >= 0) {
    struct gguf_str type;
    if ((st = gguf_get_str(f, key, &type)) != LLB_STATUS_OK) {
      return st;
    }
    if (gguf_str_eq(type, "none")) {
      return LLB_STATUS_OK;
    }
    /* "longrope" (phi3): llama.cpp scales frequencies as "linear" does, the factors apart */
    if (!gguf_str_eq(type, "linear") && !gguf_str_eq(type, "longrope")) {
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: key '%s' is '%.*s'; only 'none', "
                      "'linear' and 'longrope' are supported", key, type.len > 32 ? 32 : (int)type.len,
                      type.data);
    }
    arch_key(key, arch, "rope.scaling.factor");
    if ((st = get_f32(f, key, true, 1.0f, &factor)) != LLB_STATUS_OK) {
      return st;
    }
  } else {
    /* older files: <arch>.rope.scale_linear is the linear factor */
    arch_key(key, arch, "rope.scale_linear");
    if ((st = get_f32(f, key, true, 1.0f, &factor)) != LLB_STATUS_OK) {
      return st;
    }
  }
  if (!(factor > 0.0f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be > 0", key, factor);
  }
  c->rope_freq_scale = 1.0f / factor;
  return LLB_STATUS_OK;
}

static llb_status read_vocab(const struct gguf_file *f, const char *arch, struct llama_config *c) {
  char key[KEY_MAX];
  if (gguf_find_key(f, "tokenizer.ggml.tokens") >= 0) {
    struct gguf_array tokens;
    llb_status st = gguf_get_array(f, "tokenizer.ggml.tokens", &tokens);
    if (st != LLB_STATUS_OK) {
      return st;
    }
    if (tokens.type != GGUF_VALUE_TYPE_STRING || tokens.len == 0 || tokens.len > INT32_MAX) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key 'tokenizer.ggml.tokens' must be a "
                      "non-empty string array of at most INT32_MAX entries");
    }
    c->vocab_size = (int32_t)tokens.len;
    return LLB_STATUS_OK;
  }
  arch_key(key, arch, "vocab_size");
  if (gguf_find_key(f, key) < 0) {
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "config: vocabulary size unknown: neither "
                    "'tokenizer.ggml.tokens' nor '%s' is present", key);
  }
  return get_i32(f, key, 1, INT32_MAX, &c->vocab_size);
}

/* Which layers slide and their RoPE (llama.cpp load_arch_hparams, load_swa_pattern,
 * llama_hparams::set_swa_pattern with dense_first false). */
static llb_status read_sliding(const struct gguf_file *f, enum swa_rule rule, struct llama_config *c) {
  char key[KEY_MAX];
  const char *arch = c->architecture;
  llb_status st;
  c->rope_freq_base_swa = c->rope_freq_base;
  c->rope_freq_scale_swa = c->rope_freq_scale;
  arch_key(key, arch, "attention.sliding_window");
  const int32_t def = rule == SWA_GEMMA2 ? 4096 : 0;
  if ((st = get_i32_opt(f, key, rule == SWA_GEMMA2 ? 1 : 0, INT32_MAX, def, &c->sliding_window)) != LLB_STATUS_OK) {
    return st;
  }
  if (rule == SWA_IGNORED || c->sliding_window == 0) {
    c->sliding_window = 0;
    return LLB_STATUS_OK;
  }
  if (c->block_count > LLAMA_CONFIG_MAX_LAYERS) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: %d layers with sliding-window attention (at most %d)",
                    c->block_count, LLAMA_CONFIG_MAX_LAYERS);
  }
  int64_t period = rule == SWA_GEMMA2 ? 2 : rule == SWA_GEMMA3 ? 6 : 0; /* 0: every layer */
  arch_key(key, arch, "attention.sliding_window_pattern");
  const int64_t at = gguf_find_key(f, key);
  if (at >= 0 && gguf_kv_type(f, at) == GGUF_VALUE_TYPE_ARRAY) { /* a bool per layer */
    struct gguf_array a;
    if ((st = gguf_get_array(f, key, &a)) != LLB_STATUS_OK) {
      return st;
    }
    if ((a.type != GGUF_VALUE_TYPE_BOOL && a.type != GGUF_VALUE_TYPE_INT32 && a.type != GGUF_VALUE_TYPE_UINT32 &&
         a.type != GGUF_VALUE_TYPE_INT8 && a.type != GGUF_VALUE_TYPE_UINT8) || a.len != (uint64_t)c->block_count) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' must be %d booleans, one per layer", key,
                      c->block_count);
    }
    for (int32_t il = 0; il < c->block_count; il++) c->layer_sliding[il] = gguf_array_int(&a, (uint64_t)il) != 0;
  } else {
    if (at >= 0) {
      int64_t v;
      if ((st = gguf_get_int(f, key, &v)) != LLB_STATUS_OK) {
        return st;
      }
      if (v < 0 || v > INT32_MAX) {
        return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %lld", key, (long long)v);
      }
      period = v;
    }
    /* llama.cpp: period 0 slides every layer; else layer il slides when il % period < period - 1 */
    for (int32_t il = 0; il < c->block_count; il++)
      c->layer_sliding[il] = period == 0 || il % period < period - 1;
  }
  if (rule == SWA_GEMMA3) { /* gemma3's local layers: their own base (llama.cpp's default 10000), no scaling */
    c->rope_freq_base_swa = 10000.0f;
    c->rope_freq_scale_swa = 1.0f;
  }
  arch_key(key, arch, "rope.freq_base_swa");
  if ((st = get_f32(f, key, true, c->rope_freq_base_swa, &c->rope_freq_base_swa)) != LLB_STATUS_OK) {
    return st;
  }
  if (!(c->rope_freq_base_swa > 0.0f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be > 0", key, c->rope_freq_base_swa);
  }
  return LLB_STATUS_OK;
}

/* A soft-capping key: `def` when absent, 0 (none) or >= 1e-6. */
static llb_status get_softcap(const struct gguf_file *f, const char *arch, const char *suffix, float def,
                              float *out) {
  char key[KEY_MAX];
  arch_key(key, arch, suffix);
  llb_status st = get_f32(f, key, true, def, out);
  /* 1/c must stay finite (a subnormal cap would make it inf and the logits NaN) */
  if (st == LLB_STATUS_OK && !(*out == 0.0f || *out >= 1e-6f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be 0 or >= 1e-6", key, *out);
  }
  return st;
}

/* The q scaling of gemma* and phi3, and gemma2/3's soft-capping (llama.cpp build_gemma*,
 * build_phi3; the 27B test on the layer count is llama.cpp's, for query_pre_attn_scalar). */
static llb_status read_gemma(const struct gguf_file *f, struct llama_config *c) {
  const char *arch = c->architecture;
  if (c->gemma || c->fused_qkv) c->attention_scale = 1.0f / sqrtf((float)c->head_dim);
  const bool gemma2 = strcmp(arch, "gemma2") == 0, gemma3 = strcmp(arch, "gemma3") == 0;
  if (!gemma2 && !gemma3) return LLB_STATUS_OK;
  if (c->block_count == (gemma2 ? 46 : 62)) {
    if (c->embedding_length < c->head_count) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "config: %s embedding_length %d below head_count %d", arch,
                      c->embedding_length, c->head_count);
    }
    c->attention_scale = 1.0f / sqrtf((float)(c->embedding_length / c->head_count));
  }
  llb_status st = get_softcap(f, arch, "final_logit_softcapping", gemma2 ? 30.0f : 0.0f, &c->final_logit_softcapping);
  if (st == LLB_STATUS_OK && gemma2) st = get_softcap(f, arch, "attn_logit_softcapping", 50.0f, &c->attn_logit_softcapping);
  c->scale_token_embeds_only = gemma3;
  return st;
}

/* phi3's LongRoPE (llama.cpp llama_model::get_rope_factors) and the RoPE attention factor every
 * architecture reads (llama_context: yarn_attn_factor *= rope_attn_factor). */
static llb_status read_longrope(const struct gguf_file *f, struct llama_config *c) {
  char key[KEY_MAX];
  const char *arch = c->architecture;
  arch_key(key, arch, "rope.scaling.attn_factor");
  llb_status st = get_f32(f, key, true, 1.0f, &c->rope_attn_factor);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (!(c->rope_attn_factor > 0.0f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be > 0", key, c->rope_attn_factor);
  }
  arch_key(key, arch, "rope.scaling.original_context_length");
  if ((st = get_i32_opt(f, key, 1, INT32_MAX, c->context_length, &c->rope_original_context_length)) != LLB_STATUS_OK) {
    return st;
  }
  const bool has_long = gguf_find_tensor(f, "rope_factors_long.weight") != NULL;
  const bool has_short = gguf_find_tensor(f, "rope_factors_short.weight") != NULL;
  if (!has_long && !has_short) return LLB_STATUS_OK;
  if (!c->fused_qkv) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: '%s' file with LongRoPE factors "
                    "(rope_factors_long/short.weight): only phi3's are supported", arch);
  }
  if (!has_long || !has_short) {
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "config: tensor '%s' is missing (LongRoPE needs both factor sets)",
                    has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
  }
  c->rope_longrope = true;
  return LLB_STATUS_OK;
}

llb_status llama_config_from_gguf(const struct gguf_file *f, struct llama_config *out) {
  if (f == NULL || out == NULL) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "llama_config_from_gguf: NULL argument");
  }
  struct llama_config c;
  memset(&c, 0, sizeof c);
  char key[KEY_MAX];
  const struct arch_info *info = NULL;
  llb_status st = read_arch(f, &c, &info);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  const char *arch = c.architecture;
  int32_t experts = 0;
  arch_key(key, arch, "expert_count");
  if ((st = get_i32_opt(f, key, 0, INT32_MAX, 0, &experts)) != LLB_STATUS_OK) {
    return st;
  }
  if (experts > 0) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: key '%s' is %d: mixture-of-experts models "
                    "are not supported", key, experts);
  }
  static const struct { const char *suffix; size_t off; } required[] = {
      {"block_count", offsetof(struct llama_config, block_count)},
      {"embedding_length", offsetof(struct llama_config, embedding_length)},
      {"feed_forward_length", offsetof(struct llama_config, feed_forward_length)},
      {"attention.head_count", offsetof(struct llama_config, head_count)},
      {"context_length", offsetof(struct llama_config, context_length)},
  };
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    arch_key(key, arch, required[i].suffix);
    st = get_i32(f, key, 1, INT32_MAX, (int32_t *)((char *)&c + required[i].off));
    if (st != LLB_STATUS_OK) {
      return st;
    }
  }
  arch_key(key, arch, "attention.head_count_kv");
  if ((st = get_i32_opt(f, key, 1, c.head_count, c.head_count, &c.head_count_kv)) !=
      LLB_STATUS_OK) {
    return st;
  }
  if (c.head_count % c.head_count_kv != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' (%d) does not divide head_count (%d)",
                    key, c.head_count_kv, c.head_count);
  }
  arch_key(key, arch, "attention.key_length");
  if (gguf_find_key(f, key) >= 0) {
    if ((st = get_i32(f, key, 1, INT32_MAX, &c.head_dim)) != LLB_STATUS_OK) {
      return st;
    }
  } else if (c.embedding_length % c.head_count != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: embedding_length %d is not a multiple of "
                    "head_count %d and '%s' is absent", c.embedding_length, c.head_count, key);
  } else {
    c.head_dim = c.embedding_length / c.head_count;
  }
  int32_t value_length = 0;
  arch_key(key, arch, "attention.value_length");
  if ((st = get_i32_opt(f, key, 1, INT32_MAX, c.head_dim, &value_length)) != LLB_STATUS_OK) {
    return st;
  }
  if (value_length != c.head_dim) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: key '%s' (%d) differs from the key length "
                    "(%d)", key, value_length, c.head_dim);
  }
  arch_key(key, arch, "rope.dimension_count");
  if ((st = get_i32_opt(f, key, 2, c.head_dim, c.head_dim, &c.rope_dimension_count)) !=
      LLB_STATUS_OK) {
    return st;
  }
  if (c.rope_dimension_count % 2 != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' (%d) is odd", key,
                    c.rope_dimension_count);
  }
  arch_key(key, arch, "rope.freq_base");
  if ((st = get_f32(f, key, true, 10000.0f, &c.rope_freq_base)) != LLB_STATUS_OK) {
    return st;
  }
  if (!(c.rope_freq_base > 0.0f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be > 0", key,
                    c.rope_freq_base);
  }
  if ((st = read_rope_scaling(f, arch, &c)) != LLB_STATUS_OK) {
    return st;
  }
  arch_key(key, arch, "attention.layer_norm_rms_epsilon");
  if ((st = get_f32(f, key, false, 0.0f, &c.layer_norm_rms_epsilon)) != LLB_STATUS_OK) {
    return st;
  }
  if (!(c.layer_norm_rms_epsilon > 0.0f)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: key '%s' is %g, must be > 0", key,
                    c.layer_norm_rms_epsilon);
  }
  if ((st = read_vocab(f, arch, &c)) != LLB_STATUS_OK) {
    return st;
  }
  c.tied_embeddings = gguf_find_tensor(f, "output.weight") == NULL;
  if ((st = read_sliding(f, info->swa, &c)) != LLB_STATUS_OK || (st = read_gemma(f, &c)) != LLB_STATUS_OK ||
      (st = read_longrope(f, &c)) != LLB_STATUS_OK) {
    return st;
  }
  *out = c;
  return LLB_STATUS_OK;
}

static void shape_str(char *buf, size_t cap, const int64_t *ne, int n) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && used < cap; i++) {
    used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)ne[i]);
  }
  if (used < cap) {
    snprintf(buf + used, cap - used, "]");
  }
}

/* Checks one tensor: present, shape ne[0..n) (higher dims 1), a dequantizable type. */
static llb_status check_one(const struct gguf_file *f, const char *name, int64_t ne0, int64_t ne1) {
  const struct gguf_tensor *t = gguf_find_tensor(f, name);
  if (t == NULL) {
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "config: tensor '%s' is missing", name);
  }
  int64_t want[4] = {ne0, ne1 > 0 ? ne1 : 1, 1, 1};
  int n = ne1 > 0 ? 2 : 1;
  if (memcmp(t->ne, want, sizeof want) != 0) {
    char w[64], g[96];
    shape_str(w, sizeof w, want, n);
    shape_str(g, sizeof g, t->ne, t->n_dims > 0 ? (int)t->n_dims : 1);
    return LLB_ERRF(LLB_STATUS_MALFORMED, "config: tensor '%s' has shape %s, expected %s", name,
                    g, w);
  }
  if (!ggml_type_is_supported(t->type)) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "config: tensor '%s' has type %s, which is not "
                    "supported", name, ggml_type_name(t->type));
  }
  return LLB_STATUS_OK;
}

llb_status llama_config_check_tensors(const struct gguf_file *f, const struct llama_config *cfg) {
  if (f == NULL || cfg == NULL) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "llama_config_check_tensors: NULL argument");
  }
  const int64_t e = cfg->embedding_length, v = cfg->vocab_size, ff = cfg->feed_forward_length;
  const int64_t q_dim = (int64_t)cfg->head_count * cfg->head_dim;
  const int64_t kv_dim = (int64_t)cfg->head_count_kv * cfg->head_dim;
  llb_status st;
  if ((st = check_one(f, "token_embd.weight", e, v)) != LLB_STATUS_OK ||
      (st = check_one(f, "output_norm.weight", e, 0)) != LLB_STATUS_OK) {
    return st;
  }
  if (!cfg->tied_embeddings && (st = check_one(f, "output.weight", e, v)) != LLB_STATUS_OK) {
    return st;
  }
  static const struct { const char *suffix; int in, out; } layer[] = {
      /* in/out: 0 = none, 1 = E, 2 = H*D, 3 = Hkv*D, 4 = F */
      {"attn_norm.weight", 1, 0}, {"attn_q.weight", 1, 2},   {"attn_k.weight", 1, 3},
      {"attn_v.weight", 1, 3},    {"attn_output.weight", 2, 1}, {"ffn_norm.weight", 1, 0},
      {"ffn_gate.weight", 1, 4},  {"ffn_up.weight", 1, 4},   {"ffn_down.weight", 4, 1},
  };
  const int64_t dim_of[5] = {0, e, q_dim, kv_dim, ff};
  for (int32_t l = 0; l < cfg->block_count; l++) {
    for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
      const char *sfx = layer[i].suffix;
      int64_t out_dim = dim_of[layer[i].out];
      if (cfg->fused_qkv && (!strcmp(sfx, "attn_k.weight") || !strcmp(sfx, "attn_v.weight"))) continue;
      if (cfg->fused_gate_up && !strcmp(sfx, "ffn_gate.weight")) continue;
      if (cfg->fused_qkv && !strcmp(sfx, "attn_q.weight")) { /* phi3: q, k, v rows in one */
        sfx = "attn_qkv.weight";
        out_dim = q_dim + 2 * kv_dim;
      }
      if (cfg->fused_gate_up && !strcmp(sfx, "ffn_up.weight")) out_dim = 2 * ff; /* gate then up rows */
      char name[96];
      snprintf(name, sizeof name, "blk.%d.%s", l, sfx);
      if ((st = check_one(f, name, dim_of[layer[i].in], out_dim)) != LLB_STATUS_OK) {
        return st;
      }
    }
    enum { BIAS, QK_NORM, POST_NORM };
    static const struct { const char *suffix; int dim, kind; } extra[] = {
        /* dim as above; 5 = head_dim */
        {"attn_q.bias", 2, BIAS}, {"attn_k.bias", 3, BIAS}, {"attn_v.bias", 3, BIAS},
        {"attn_q_norm.weight", 5, QK_NORM}, {"attn_k_norm.weight", 5, QK_NORM},
        {"post_attention_norm.weight", 1, POST_NORM}, {"post_ffw_norm.weight", 1, POST_NORM},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
      const bool has = extra[i].kind == BIAS ? cfg->attn_qkv_bias : extra[i].kind == QK_NORM ? cfg->attn_qk_norm
                                                                                                : cfg->post_norms;
      if (!has) continue;
      char name[96];
      snprintf(name, sizeof name, "blk.%d.%s", l, extra[i].suffix);
      const int64_t n = extra[i].dim == 5 ? cfg->head_dim : dim_of[extra[i].dim];
      if ((st = check_one(f, name, n, 0)) != LLB_STATUS_OK) {
        return st;
      }
    }
  }
  if (cfg->rope_longrope && ((st = check_one(f, "rope_factors_long.weight", cfg->rope_dimension_count / 2, 0)) !=
                                 LLB_STATUS_OK ||
                             (st = check_one(f, "rope_factors_short.weight", cfg->rope_dimension_count / 2, 0)) !=
                                 LLB_STATUS_OK)) {
    return st;
  }
  return LLB_STATUS_OK;
}

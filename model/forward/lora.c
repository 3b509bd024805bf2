/* LoRA adapters (model/forward/lora.h): llama.cpp's GGUF LoRA loader (src/llama-adapter.cpp,
 * llama_adapter_lora_init_impl) and the per-sequence product of the forward (llm_build_lora_mm:
 * y = W x + scale * B (A x), before any bias), batched per adapter over its rows (Punica's SGMV
 * shape): each step's rows grouped by adapter once, then every adapter's products of a projection
 * group in one call of the backend's lora op (kernels/backend.h), or, on a backend without it,
 * two matmul calls per adapter over its gathered rows. */
#include "model/forward/lora.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/quant.h"
#include "model/forward/forward_internal.h"

/* ---------------------------------------------------------------- loader */

/* A base tensor name's layer and target: "blk.<il>.<proj>.weight". fused = phi3's attn_qkv or
 * fused ffn_up (several targets of one pair). Returns false for any other name. */
struct lora_site {
  int32_t il;
  enum llama_lora_target t; /* the first target the pair covers */
  int32_t n_targets;        /* 3 for attn_qkv, 2 for a fused ffn_up, else 1 */
};

static bool parse_site(const struct llama_config *cfg, const char *name, struct lora_site *s) {
  int il = -1, used = 0;
  char canon[24];
  if (strncmp(name, "blk.", 4) != 0 || !isdigit((unsigned char)name[4]) ||
      sscanf(name, "blk.%d.%n", &il, &used) != 1 || used == 0 || il < 0 ||
      snprintf(canon, sizeof(canon), "blk.%d.", il) != used || strncmp(canon, name, (size_t)used) != 0)
    return false;
  static const struct {
    const char *proj;
    enum llama_lora_target t;
  } projs[] = {{"attn_q.weight", LLAMA_LORA_Q},        {"attn_k.weight", LLAMA_LORA_K},
               {"attn_v.weight", LLAMA_LORA_V},        {"attn_output.weight", LLAMA_LORA_O},
               {"ffn_gate.weight", LLAMA_LORA_GATE},   {"ffn_up.weight", LLAMA_LORA_UP},
               {"ffn_down.weight", LLAMA_LORA_DOWN},   {"attn_qkv.weight", LLAMA_LORA_Q}};
  for (size_t i = 0; i < sizeof(projs) / sizeof(projs[0]); i++) {
    if (strcmp(name + used, projs[i].proj) != 0) continue;
    const bool qkv = i == 7;
    if (qkv != cfg->fused_qkv && (qkv || i <= 2)) return false; /* attn_q on phi3, attn_qkv elsewhere */
    if (cfg->fused_gate_up && i == 4) return false;
    *s = (struct lora_site){.il = il, .t = projs[i].t, .n_targets = qkv ? 3 : 1};
    if (cfg->fused_gate_up && projs[i].t == LLAMA_LORA_UP) *s = (struct lora_site){il, LLAMA_LORA_GATE, 2};
    return il < cfg->block_count;
  }
  return false;
}

/* The base weight a pair at s adapts (the fused tensor's rows in full). */
static struct backend_weight site_weight(const struct llama_model *m, const struct lora_site *s) {
  const struct llama_layer *l = &m->layers[s->il];
  const struct backend_weight *ws[LLAMA_LORA_NUM_TARGETS] = {&l->wq, &l->wk, &l->wv, &l->wo,
                                                             &l->w_gate, &l->w_up, &l->w_down};
  struct backend_weight w = *ws[s->t];
  for (int32_t j = 1; j < s->n_targets; j++) w.rows += ws[s->t + j]->rows;
  return w;
}

/* The view of an adapter tensor as a matmul weight; the types llama_model_load reads. */
static llb_status lora_view(const struct gguf_tensor *t, struct backend_weight *out) {
  switch (t->type) {
  case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0:
  case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
  case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
  case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS: break;
  default:
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "LoRA tensor %s has type %s, no matmul for it", t->name,
                    ggml_type_name(t->type));
  }
  size_t row_bytes;
  if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < 1 || t->ne[1] < 1 ||
      ggml_row_bytes(t->type, t->ne[0], &row_bytes) != LLB_STATUS_OK ||
      t->size_bytes < row_bytes * (size_t)t->ne[1])
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s: [%lld, %lld, %lld, %lld] of %s is no matrix of whole blocks",
                    t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                    ggml_type_name(t->type));
  *out = (struct backend_weight){.type = t->type, .rows = t->ne[1], .cols = t->ne[0], .row_bytes = row_bytes,
                                 .data = t->data};
  return LLB_STATUS_OK;
}

/* The string key, "" when absent (llama.cpp's get_kv_str); MALFORMED if not a string. */
static llb_status key_str(const struct gguf_file *f, const char *key, char *out, size_t cap) {
  out[0] = '\0';
  if (gguf_find_key(f, key) < 0) return LLB_STATUS_OK;
  struct gguf_str s;
  if (gguf_get_str(f, key, &s) != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA key %s: not a string", key);
  const size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
  memcpy(out, s.data, n);
  out[n] = '\0';
  return LLB_STATUS_OK;
}

static llb_status check_keys(const struct gguf_file *f, const struct llama_model *base, float *alpha) {
  char v[64];
  llb_status st = key_str(f, "general.type", v, sizeof(v));
  if (st != LLB_STATUS_OK) return st;
  if (strcmp(v, "adapter") != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA: general.type is '%s', expected 'adapter'", v);
  if ((st = key_str(f, "general.architecture", v, sizeof(v))) != LLB_STATUS_OK) return st;
  if (strcmp(v, base->cfg.architecture) != 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "LoRA: general.architecture '%s' is not the base model's '%s'", v,
                    base->cfg.architecture);
  if ((st = key_str(f, "adapter.type", v, sizeof(v))) != LLB_STATUS_OK) return st;
  if (strcmp(v, "lora") != 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA: adapter.type is '%s', expected 'lora'", v);
  double a = 0.0;
  if (gguf_find_key(f, "adapter.lora.alpha") >= 0 && gguf_get_float(f, "adapter.lora.alpha", &a) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA key adapter.lora.alpha: not a float");
  if (!isfinite(a) || a < 0.0 || a > 1e30)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA key adapter.lora.alpha = %g: not finite and >= 0", a);
  *alpha = (float)a;
  return LLB_STATUS_OK;
}

/* Tensors found for one site: A and B. */
struct lora_found {
  const struct gguf_tensor *a, *b;
  struct lora_site site;
};

/* Pairs f's tensors by site into found [block_count * targets] (indexed by the site's first
 * target). llama.cpp skips "*_norm.weight" tensors (norm adapters are not applied). */
static llb_status pair_tensors(const struct gguf_file *f, const struct llama_model *base, struct lora_found *found) {
  const int64_t n = gguf_tensor_count(f);
  for (int64_t i = 0; i < n; i++) {
    const struct gguf_tensor *t = gguf_tensor_at(f, i);
    const size_t len = strlen(t->name);
    const bool is_a = len > 7 && strcmp(t->name + len - 7, ".lora_a") == 0;
    const bool is_b = len > 7 && strcmp(t->name + len - 7, ".lora_b") == 0;
    if (!is_a && !is_b) {
      if (len >= 12 && strcmp(t->name + len - 12, "_norm.weight") == 0) continue;
      return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s has an unexpected suffix (not .lora_a / .lora_b)", t->name);
    }
    char name[128];
    if (len - 7 >= sizeof(name)) return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s: name too long", t->name);
    memcpy(name, t->name, len - 7);
    name[len - 7] = '\0';
    struct lora_site s;
    if (!parse_site(&base->cfg, name, &s)) {
      if (!gguf_find_tensor(base->gguf, name))
        return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s: %s does not exist in the base model", t->name, name);
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "LoRA tensor %s: %s is not an adapted projection (q, k, v, o, gate, "
                      "up, down)", t->name, name);
    }
    struct lora_found *fd = &found[(size_t)s.il * LLAMA_LORA_NUM_TARGETS + s.t];
    const struct gguf_tensor **slot = is_a ? &fd->a : &fd->b;
    if (*slot) return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s appears twice", t->name);
    *slot = t;
    fd->site = s;
  }
  return LLB_STATUS_OK;
}

/* Checks one pair against its base weight and writes its targets' views into a->pairs. */
static llb_status add_pair(struct llama_lora *a, const struct lora_found *fd, int32_t max_rank) {
  const struct gguf_tensor *ta = fd->a, *tb = fd->b;
  if (!ta || !tb)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor pair of %s is missing its %s", (ta ? ta : tb)->name,
                    ta ? "lora_b" : "lora_a");
  struct backend_weight va, vb;
  llb_status st = lora_view(ta, &va);
  if (st == LLB_STATUS_OK) st = lora_view(tb, &vb);
  if (st != LLB_STATUS_OK) return st;
  const struct backend_weight w = site_weight(a->base, &fd->site);
  if (va.cols != w.cols || vb.rows != w.rows)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensors %s [%lld, %lld] and %s [%lld, %lld] do not fit the base "
                    "weight [%lld, %lld]", ta->name, (long long)va.cols, (long long)va.rows, tb->name,
                    (long long)vb.cols, (long long)vb.rows, (long long)w.cols, (long long)w.rows);
  if (va.rows != vb.cols)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA tensor %s has rank %lld, %s %lld (lora_a not transposed?)", ta->name,
                    (long long)va.rows, tb->name, (long long)vb.cols);
  if (max_rank > 0 && va.rows > max_rank)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "LoRA tensor %s has rank %lld, over the maximum %d", ta->name,
                    (long long)va.rows, max_rank);
  const float scale = a->alpha != 0.0f ? a->alpha / (float)va.rows : 1.0f;
  const struct llama_layer *l = &a->base->layers[fd->site.il];
  const struct backend_weight *ws[LLAMA_LORA_NUM_TARGETS] = {&l->wq, &l->wk, &l->wv, &l->wo,
                                                             &l->w_gate, &l->w_up, &l->w_down};
  int64_t first = 0;
  for (int32_t j = 0; j < fd->site.n_targets; j++) {
    const enum llama_lora_target t = (enum llama_lora_target)(fd->site.t + j);
    struct backend_weight b = vb;
    b.data = (const uint8_t *)vb.data + (size_t)first * vb.row_bytes;
    b.rows = ws[t]->rows;
    first += b.rows;
    a->pairs[(size_t)fd->site.il * LLAMA_LORA_NUM_TARGETS + t] = (struct llama_lora_pair){va, b, scale};
  }
  if (va.rows > a->max_rank) a->max_rank = (int32_t)va.rows;
  a->num_pairs++;
  return LLB_STATUS_OK;
}

#define LORA_HUGE_PAGE ((size_t)2 << 20)
#define LORA_ALIGN ((size_t)64)

/* Bytes of w's data rounded up to LORA_ALIGN. */
static size_t aligned_bytes(const struct backend_weight *w) {
  return ((size_t)w->rows * w->row_bytes + LORA_ALIGN - 1) / LORA_ALIGN * LORA_ALIGN;
}

/* Every pair's A and B copied into one 2 MiB-aligned allocation with huge pages where the
 * kernel gives them (as the base's packed weights: forward_pack.c), the file's pages released.
 * A step reads each adapter's bytes once from DRAM in runs of a few dozen KiB, and 4 KiB pages
 * stop the hardware prefetchers and cost a TLB walk each: -8% of the LoRA products' time on a
 * batch-16 decode step with 4 adapters (4 KiB-page heap against this, one thread, cold). */
static llb_status copy_to_huge_pages(struct llama_lora *a, const struct gguf_file *f, size_t slots) {
  size_t total = 0;
  for (size_t i = 0; i < slots; i++)
    if (a->pairs[i].a.data) total += aligned_bytes(&a->pairs[i].a) + aligned_bytes(&a->pairs[i].b);
  const size_t alloc = (total + LORA_HUGE_PAGE - 1) / LORA_HUGE_PAGE * LORA_HUGE_PAGE;
  a->store = aligned_alloc(LORA_HUGE_PAGE, alloc);
  if (!a->store) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapter weights (%zu bytes)", total);
#ifdef MADV_HUGEPAGE
  (void)madvise(a->store, alloc, MADV_HUGEPAGE);
#endif
  uint8_t *p = a->store;
  for (size_t i = 0; i < slots; i++) {
    struct backend_weight *ws[2] = {&a->pairs[i].a, &a->pairs[i].b};
    if (!ws[0]->data) continue;
    for (int k = 0; k < 2; k++) {
      const size_t n = (size_t)ws[k]->rows * ws[k]->row_bytes;
      memcpy(p, ws[k]->data, n);
      gguf_release_pages(f, ws[k]->data, n);
      ws[k]->data = p;
      p += aligned_bytes(ws[k]);
    }
  }
  return LLB_STATUS_OK;
}

llb_status llama_lora_load(const struct gguf_file *f, const struct llama_model *base, int32_t max_rank,
                           struct llama_lora **out) {
  if (!f || !base || !out || max_rank < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "llama_lora_load arguments");
  *out = NULL;
  const size_t slots = (size_t)base->cfg.block_count * LLAMA_LORA_NUM_TARGETS;
  struct llama_lora *a = calloc(1, sizeof(*a));
  struct lora_found *found = calloc(slots, sizeof(*found));
  llb_status st = LLB_STATUS_OK;
  if (!a || !found || !(a->pairs = calloc(slots, sizeof(*a->pairs)))) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapter of %zu projections", slots);
    goto done;
  }
  a->base = base;
  if ((st = check_keys(f, base, &a->alpha)) != LLB_STATUS_OK) goto done;
  if ((st = pair_tensors(f, base, found)) != LLB_STATUS_OK) goto done;
  for (size_t i = 0; i < slots; i++)
    if ((found[i].a || found[i].b) && (st = add_pair(a, &found[i], max_rank)) != LLB_STATUS_OK) goto done;
  if (a->num_pairs == 0) st = LLB_ERRF(LLB_STATUS_MALFORMED, "LoRA adapter without a lora_a / lora_b pair");
  else st = copy_to_huge_pages(a, f, slots);
done:
  free(found);
  if (st != LLB_STATUS_OK) {
    llama_lora_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

void llama_lora_destroy(struct llama_lora *a) {
  if (!a) return;
  free(a->store);
  free(a->pairs);
  free(a);
}

int32_t llama_lora_rank(const struct llama_lora *a) { return a->max_rank; }

float llama_lora_alpha(const struct llama_lora *a) { return a->alpha; }

int32_t llama_lora_num_targets(const struct llama_lora *a) { return a->num_pairs; }

/* ---------------------------------------------------------------- forward */

/* The widest input or output row of a projection of c's model. */
static int64_t lora_widest(const struct llama_config *cfg) {
  const int64_t E = cfg->embedding_length, F = cfg->feed_forward_length;
  const int64_t HD = (int64_t)cfg->head_count * cfg->head_dim;
  const int64_t w = E > HD ? E : HD;
  return w > F ? w : F;
}

llb_status llama_forward_lora_alloc(struct llama_forward_ctx *c, const struct llama_forward_options *o) {
  if (o->max_lora_rank < 0 || o->max_lora_rank > lora_widest(&c->m->cfg))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_lora_rank %d not in [0, %lld]", o->max_lora_rank,
                    (long long)lora_widest(&c->m->cfg));
  if (o->max_lora_rank == 0 || !c->ops->host_memory) return LLB_STATUS_OK;
  const size_t T = (size_t)c->max_num_tokens, W = (size_t)lora_widest(&c->m->cfg);
  c->lora_list = malloc(T * sizeof(*c->lora_list));
  c->lora_row = malloc(T * sizeof(int32_t));
  c->lora_rows = malloc(T * sizeof(int32_t));
  c->lora_first = malloc(T * sizeof(int32_t));
  c->lora_count = malloc(T * sizeof(int32_t));
  c->lora_segs = malloc(T * sizeof(*c->lora_segs));
  if (!c->ops->lora) { /* the matmul path's gathered rows and products */
    c->lora_x = malloc(T * W * sizeof(float));
    c->lora_t = malloc(3 * T * (size_t)o->max_lora_rank * sizeof(float));
    c->lora_u = malloc(T * W * sizeof(float));
  }
  if (!c->lora_list || !c->lora_row || !c->lora_rows || !c->lora_first || !c->lora_count || !c->lora_segs ||
      (!c->ops->lora && (!c->lora_x || !c->lora_t || !c->lora_u)))
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA scratch for %zu rows of rank %d", T, o->max_lora_rank);
  c->lora_max_rank = o->max_lora_rank;
  return LLB_STATUS_OK;
}

void llama_forward_lora_free(struct llama_forward_ctx *c) {
  free(c->lora_list);
  free(c->lora_row);
  free(c->lora_rows);
  free(c->lora_first);
  free(c->lora_count);
  free(c->lora_segs);
  free(c->lora_x);
  free(c->lora_t);
  free(c->lora_u);
}

/* The index of a in the step's list, appended when new. */
static int32_t lora_index(struct llama_forward_ctx *c, const struct llama_lora *a) {
  for (int32_t i = 0; i < c->lora_n; i++)
    if (c->lora_list[i] == a) return i;
  c->lora_list[c->lora_n] = a;
  return c->lora_n++;
}

/* lora_rows: the first T rows' adapted rows grouped by adapter, ascending within each. */
static void lora_group(struct llama_forward_ctx *c, int32_t T) {
  for (int32_t i = 0; i < c->lora_n; i++) c->lora_count[i] = 0;
  for (int32_t r = 0; r < T; r++)
    if (c->lora_row[r] >= 0) c->lora_count[c->lora_row[r]]++;
  for (int32_t i = 0, first = 0; i < c->lora_n; i++) {
    c->lora_first[i] = first;
    first += c->lora_count[i];
    c->lora_count[i] = 0;
  }
  for (int32_t r = 0; r < T; r++) {
    const int32_t i = c->lora_row[r];
    if (i >= 0) c->lora_rows[c->lora_first[i] + c->lora_count[i]++] = r;
  }
}

llb_status llama_forward_lora_begin(struct llama_forward_ctx *c, const struct llama_batch *b) {
  c->lora_n = 0;
  if (!b->seq_loras) return LLB_STATUS_OK;
  bool any = false;
  for (int32_t s = 0; s < b->num_seqs; s++) any = any || b->seq_loras[s];
  if (!any) return LLB_STATUS_OK;
  if (!c->ops->host_memory) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "LoRA adapters on backend %s", c->ops->name);
  for (int32_t s = 0; s < b->num_seqs; s++) {
    const struct llama_lora *a = b->seq_loras[s];
    if (!a) continue;
    if (a->base != c->m) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq_loras[%d]: an adapter of another model", s);
    if (a->max_rank > c->lora_max_rank)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq_loras[%d]: rank %d over the context's max_lora_rank %d", s,
                      a->max_rank, c->lora_max_rank);
  }
  const int32_t T = b->num_tokens;
  for (int32_t r = 0; r < T; r++) c->lora_row[r] = -1;
  for (int32_t s = 0; s < b->num_seqs; s++) {
    const int32_t from = b->query_start_loc[s], to = b->query_start_loc[s + 1];
    if (from < 0 || from > to || to > T) {
      c->lora_n = 0;
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc[%d..%d] = %d..%d not in [0, %d]", s, s + 1, from,
                      to, T);
    }
    if (!b->seq_loras[s]) continue;
    const int32_t idx = lora_index(c, b->seq_loras[s]);
    for (int32_t r = from; r < to; r++) c->lora_row[r] = idx;
  }
  lora_group(c, T);
  return LLB_STATUS_OK;
}

void llama_forward_lora_select(struct llama_forward_ctx *c, const struct llama_batch *b) {
  if (c->lora_n == 0) return;
  for (int32_t i = 0; i < b->num_logits; i++) c->lora_row[i] = c->lora_row[b->logits_indices[i]];
  lora_group(c, b->num_logits);
}

/* y rows rows[i] += scale * u row i (ggml_scale then ggml_add). */
static void lora_accumulate(float *y, int64_t out, const float *u, const int32_t *rows, int32_t n, float scale) {
  for (int32_t i = 0; i < n; i++) {
    float *yr = y + (size_t)rows[i] * (size_t)out;
    const float *ur = u + (size_t)i * (size_t)out;
    for (int64_t k = 0; k < out; k++) {
      const float s = scale * ur[k];
      yr[k] = yr[k] + s;
    }
  }
}

/* One segment's products through matmul (a backend without the lora op): its rows of x
 * gathered (all T rows: x itself), t = A x for the targets in one call, u = B t per target. */
static llb_status lora_by_matmul(struct llama_forward_ctx *c, const struct backend_lora_seg *g, const float *x,
                                 int64_t cols, int32_t T, float *const *y, int32_t n) {
  const struct backend_weight *wa[BACKEND_LORA_MAX_TARGETS];
  float *t_out[BACKEND_LORA_MAX_TARGETS];
  int32_t which[BACKEND_LORA_MAX_TARGETS], m = 0;
  for (int32_t j = 0; j < n; j++) {
    if (!g->a[j]) continue;
    wa[m] = g->a[j];
    t_out[m] = c->lora_t + (size_t)m * (size_t)c->max_num_tokens * (size_t)c->lora_max_rank;
    which[m++] = j;
  }
  const float *xg = x;
  if (g->n_rows < T) {
    for (int32_t i = 0; i < g->n_rows; i++)
      memcpy(c->lora_x + (size_t)i * (size_t)cols, x + (size_t)g->rows[i] * (size_t)cols, (size_t)cols * sizeof(float));
    xg = c->lora_x;
  }
  llb_status st = c->ops->matmul(c->bc, xg, g->n_rows, wa, t_out, m);
  for (int32_t k = 0; k < m && st == LLB_STATUS_OK; k++) {
    const int32_t j = which[k];
    const struct backend_weight *wb[1] = {g->b[j]};
    float *u_out[1] = {c->lora_u};
    st = c->ops->matmul(c->bc, t_out[k], g->n_rows, wb, u_out, 1);
    if (st == LLB_STATUS_OK) lora_accumulate(y[j], g->b[j]->rows, c->lora_u, g->rows, g->n_rows, g->scale[j]);
  }
  return st;
}

llb_status llama_forward_lora(struct llama_forward_ctx *c, int32_t il, const float *x, int32_t T,
                              const enum llama_lora_target *ids, float *const *y, int32_t n) {
  int32_t n_segs = 0;
  int64_t cols = 0;
  for (int32_t ai = 0; ai < c->lora_n; ai++) {
    struct backend_lora_seg *g = &c->lora_segs[n_segs];
    *g = (struct backend_lora_seg){.rows = c->lora_rows + c->lora_first[ai], .n_rows = c->lora_count[ai]};
    bool any = false;
    for (int32_t j = 0; j < n; j++) {
      const struct llama_lora_pair *p = &c->lora_list[ai]->pairs[(size_t)il * LLAMA_LORA_NUM_TARGETS + ids[j]];
      if (!p->a.data) continue;
      g->a[j] = &p->a, g->b[j] = &p->b, g->scale[j] = p->scale;
      cols = p->a.cols;
      any = true;
    }
    if (any && g->n_rows > 0) n_segs++;
  }
  if (n_segs == 0) return LLB_STATUS_OK;
  if (c->ops->lora) return c->ops->lora(c->bc, x, cols, y, n, c->lora_segs, n_segs);
  for (int32_t s = 0; s < n_segs; s++) {
    llb_status st = lora_by_matmul(c, &c->lora_segs[s], x, cols, T, y, n);
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

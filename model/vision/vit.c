/* One tile through the ViT and the projector, on the backend op table, as llama.cpp's mtmd
 * graphs compute it (tools/mtmd/clip.cpp build_inp / build_vit / build_attn /
 * build_patch_merge_permute, models/siglip.cpp, models/llava.cpp):
 *   patches (conv2d as a matmul over unfolded patches) + bias [+ class embedding, appended
 *   last as ggml_concat does] + position embeddings, [pre-LayerNorm], per block:
 *   x += attn_out(attention(LN1(x))); x += down(gelu(up(LN2(x)))), [post-LayerNorm], then
 *   idefics3: pixel shuffle by scale_factor, one linear map;
 *   mlp: rows 1..n_patches (llama.cpp's "patches" rows), mm.0, GELU (tanh), mm.2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/vision/clip_internal.h"

#define VIT_TRY(expr)                                 \
  do {                                                \
    llb_status vit_st_ = (expr);                      \
    if (vit_st_ != LLB_STATUS_OK) return vit_st_;     \
  } while (0)

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Projector input width and hidden width (0 for idefics3). */
static int64_t proj_in(const struct clip_model *m) {
  return m->type == CLIP_PROJECTOR_TYPE_IDEFICS3 ? (int64_t)m->hp.n_embd * m->hp.scale_factor * m->hp.scale_factor
                                                 : m->hp.n_embd;
}

llb_status clip_run_init(struct clip_model *m, int32_t n_threads) {
  struct clip_run *r = &m->run;
  r->ops = backend_cpu_ops();
  if (!r->ops->layer_norm || !r->ops->gelu || !r->ops->add_bias || !r->ops->attention_full)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "backend %s has no vision encoder ops", r->ops->name);
  const int64_t d = m->hp.n_embd, n = m->n_pos, ps = m->hp.patch_size, side = m->hp.image_size;
  const int64_t hidden = m->type == CLIP_PROJECTOR_TYPE_MLP ? m->mm0.rows : 0;
  const int64_t ff_w = max64(max64(m->hp.n_ff, hidden), m->n_embd_out);
  const int64_t max_row = max64(max64(3 * ps * ps, max64(d, m->hp.n_ff)), max64(proj_in(m), hidden));
  struct backend_ctx_params p = {.n_threads = n_threads, .max_num_tokens = (int32_t)n, .max_row_elems = max_row,
                                 .max_context_len = (int32_t)n};
  VIT_TRY(r->ops->ctx_create(&p, &r->ctx));
  r->pos_ids = malloc((size_t)n * sizeof *r->pos_ids);
  r->patches = malloc((size_t)(m->n_patches * 3 * ps * ps) * sizeof(float));
  r->x = malloc((size_t)(n * d) * sizeof(float));
  r->h = malloc((size_t)(n * d) * sizeof(float));
  r->q = malloc((size_t)(n * d) * sizeof(float));
  r->k = malloc((size_t)(n * d) * sizeof(float));
  r->v = malloc((size_t)(n * d) * sizeof(float));
  r->att = malloc((size_t)(n * d) * sizeof(float));
  r->ff = malloc((size_t)(n * ff_w) * sizeof(float));
  r->merged = malloc((size_t)(m->rows_per_tile * proj_in(m)) * sizeof(float));
  r->pixels = malloc((size_t)(3 * side * side) * sizeof(float));
  if (!r->pos_ids || !r->patches || !r->x || !r->h || !r->q || !r->k || !r->v || !r->att || !r->ff || !r->merged ||
      !r->pixels)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "clip run state (%lld positions of %lld)", (long long)n, (long long)d);
  for (int32_t i = 0; i < n; i++) r->pos_ids[i] = i;
  return LLB_STATUS_OK;
}

void clip_run_free(struct clip_run *r) {
  if (r->ops && r->ctx) r->ops->ctx_destroy(r->ctx);
  free(r->pos_ids);
  free(r->patches);
  free(r->x);
  free(r->h);
  free(r->q);
  free(r->k);
  free(r->v);
  free(r->att);
  free(r->ff);
  free(r->merged);
  free(r->pixels);
  memset(r, 0, sizeof *r);
}

/* patches [n_patches, 3 * ps * ps] from planar pixels [3][side][side]: patch (py, px) in
 * row-major order, each row (c, ky, kx) with kx fastest (ggml_im2col's order, which is the
 * GGUF layout [ps, ps, 3, n_embd] of v.patch_embd.weight). */
static void unfold(const struct clip_model *m) {
  const int32_t ps = m->hp.patch_size, side = m->hp.image_size, np = side / ps;
  const float *px = m->run.pixels;
  for (int32_t py = 0; py < np; py++)
    for (int32_t pxi = 0; pxi < np; pxi++) {
      float *row = m->run.patches + ((int64_t)py * np + pxi) * 3 * ps * ps;
      for (int32_t c = 0; c < 3; c++)
        for (int32_t ky = 0; ky < ps; ky++)
          memcpy(row + ((int64_t)c * ps + ky) * ps,
                 px + ((int64_t)c * side + (int64_t)py * ps + ky) * side + (int64_t)pxi * ps, (size_t)ps * sizeof(float));
    }
}

/* x [n_pos, n_embd] = patch embeddings [+ class] + position embeddings. */
static llb_status embed_patches(struct clip_model *m) {
  struct clip_run *r = &m->run;
  const struct backend_ops *ops = r->ops;
  const int32_t d = m->hp.n_embd;
  const struct backend_weight *w[1] = {&m->patch_embd};
  float *o[1] = {r->x};
  unfold(m);
  VIT_TRY(ops->matmul(r->ctx, r->patches, m->n_patches, w, o, 1));
  if (m->patch_b) VIT_TRY(ops->add_bias(r->ctx, r->x, m->patch_b, m->n_patches, d));
  if (m->class_embd) memcpy(r->x + (int64_t)m->n_patches * d, m->class_embd, (size_t)d * sizeof(float));
  /* position embeddings, dequantized row by row into h (the table may be f16) */
  VIT_TRY(ops->embed(r->ctx, &m->pos_embd, r->pos_ids, m->n_pos, r->h));
  VIT_TRY(ops->add(r->ctx, r->x, r->h, (int64_t)m->n_pos * d));
  if (m->pre_ln_w) VIT_TRY(ops->layer_norm(r->ctx, r->x, m->pre_ln_w, m->pre_ln_b, m->n_pos, d, m->hp.eps, r->x));
  return LLB_STATUS_OK;
}

static llb_status block(struct clip_model *m, const struct clip_layer *l) {
  struct clip_run *r = &m->run;
  const struct backend_ops *ops = r->ops;
  const int32_t n = m->n_pos, d = m->hp.n_embd, ff = m->hp.n_ff, hd = d / m->hp.n_head;
  VIT_TRY(ops->layer_norm(r->ctx, r->x, l->ln1_w, l->ln1_b, n, d, m->hp.eps, r->h));
  const struct backend_weight *qkv[3] = {&l->q, &l->k, &l->v};
  float *qkv_out[3] = {r->q, r->k, r->v};
  VIT_TRY(ops->matmul(r->ctx, r->h, n, qkv, qkv_out, 3));
  if (l->q_b) VIT_TRY(ops->add_bias(r->ctx, r->q, l->q_b, n, d));
  if (l->k_b) VIT_TRY(ops->add_bias(r->ctx, r->k, l->k_b, n, d));
  if (l->v_b) VIT_TRY(ops->add_bias(r->ctx, r->v, l->v_b, n, d));
  struct backend_full_attn_params ap = {.q = r->q, .k = r->k, .v = r->v, .out = r->att, .n_tokens = n,
                                        .n_heads = m->hp.n_head, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd)};
  VIT_TRY(ops->attention_full(r->ctx, &ap));
  const struct backend_weight *wo[1] = {&l->o};
  float *o[1] = {r->h};
  VIT_TRY(ops->matmul(r->ctx, r->att, n, wo, o, 1));
  if (l->o_b) VIT_TRY(ops->add_bias(r->ctx, r->h, l->o_b, n, d));
  VIT_TRY(ops->add(r->ctx, r->x, r->h, (int64_t)n * d));
  VIT_TRY(ops->layer_norm(r->ctx, r->x, l->ln2_w, l->ln2_b, n, d, m->hp.eps, r->h));
  const struct backend_weight *wu[1] = {&l->up}, *wd[1] = {&l->down};
  float *ou[1] = {r->ff}, *od[1] = {r->att};
  VIT_TRY(ops->matmul(r->ctx, r->h, n, wu, ou, 1));
  if (l->up_b) VIT_TRY(ops->add_bias(r->ctx, r->ff, l->up_b, n, ff));
  VIT_TRY(ops->gelu(r->ctx, r->ff, (int64_t)n * ff, m->hp.gelu));
  VIT_TRY(ops->matmul(r->ctx, r->ff, n, wd, od, 1));
  if (l->down_b) VIT_TRY(ops->add_bias(r->ctx, r->att, l->down_b, n, d));
  return ops->add(r->ctx, r->x, r->att, (int64_t)n * d);
}

/* merged [(side/s)^2, d * s^2]: row (yg, xg) holds patches (yg*s + j, xg*s + i) for j, i < s,
 * feature (j * s + i) * d + e (transformers' Idefics3 pixel_shuffle; llama.cpp's
 * build_patch_merge_permute). */
static void pixel_shuffle(struct clip_model *m) {
  const int32_t d = m->hp.n_embd, s = m->hp.scale_factor, side = m->hp.image_size / m->hp.patch_size, g = side / s;
  for (int32_t yg = 0; yg < g; yg++)
    for (int32_t xg = 0; xg < g; xg++) {
      float *row = m->run.merged + ((int64_t)yg * g + xg) * d * s * s;
      for (int32_t j = 0; j < s; j++)
        for (int32_t i = 0; i < s; i++)
          memcpy(row + ((int64_t)j * s + i) * d, m->run.x + ((int64_t)(yg * s + j) * side + xg * s + i) * d,
                 (size_t)d * sizeof(float));
    }
}

static llb_status project(struct clip_model *m, float *out) {
  struct clip_run *r = &m->run;
  const struct backend_ops *ops = r->ops;
  float *o[1] = {out};
  if (m->type == CLIP_PROJECTOR_TYPE_IDEFICS3) {
    const struct backend_weight *w[1] = {&m->mm0};
    pixel_shuffle(m);
    return ops->matmul(r->ctx, r->merged, m->rows_per_tile, w, o, 1);
  }
  /* llama.cpp takes rows 1..n_patches of [patches, class] (clip.cpp "patches" input) */
  const float *feat = m->run.x + (m->class_embd ? m->hp.n_embd : 0);
  const struct backend_weight *w0[1] = {&m->mm0}, *w2[1] = {&m->mm2};
  float *hid[1] = {r->ff};
  VIT_TRY(ops->matmul(r->ctx, feat, m->n_patches, w0, hid, 1));
  VIT_TRY(ops->add_bias(r->ctx, r->ff, m->mm0_b, m->n_patches, (int32_t)m->mm0.rows));
  VIT_TRY(ops->gelu(r->ctx, r->ff, (int64_t)m->n_patches * m->mm0.rows, BACKEND_GELU_TANH));
  VIT_TRY(ops->matmul(r->ctx, r->ff, m->n_patches, w2, o, 1));
  return ops->add_bias(r->ctx, out, m->mm2_b, m->n_patches, m->n_embd_out);
}

llb_status clip_vit_encode_tile(struct clip_model *m, float *out) {
  VIT_TRY(embed_patches(m));
  for (int32_t il = 0; il < m->hp.n_layer_run; il++) VIT_TRY(block(m, &m->layers[il]));
  if (m->post_ln_w)
    VIT_TRY(m->run.ops->layer_norm(m->run.ctx, m->run.x, m->post_ln_w, m->post_ln_b, m->n_pos, m->hp.n_embd, m->hp.eps,
                                   m->run.x));
  return project(m, out);
}

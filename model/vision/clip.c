/* The image encoder: mmproj loading (llama.cpp tools/mtmd/clip.cpp clip_model_loader: keys
 * KEY_*, tensors TN_* of clip-impl.h) and the plan of an image (mtmd.cpp's slice templates).
 * The forward is vit.c, the preprocessing clip_preproc.c. */
#include "model/vision/clip.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/vision/clip_internal.h"
#include "model/vision/image.h"

/* Bounds on what an mmproj may declare: far above real encoders (SigLIP-so400m: 1152 wide,
 * 27 layers, 4304 MLP; 896-pixel tiles), low enough that sizes computed from them fit int32. */
#define CLIP_MAX_IMAGE_SIZE 2048
#define CLIP_MAX_WIDTH 16384
#define CLIP_MAX_LAYERS 256
#define CLIP_MAX_LONGEST_EDGE 8192
/* patches a tile side (SigLIP-so400m at 896/14: 64) and idefics3 tiles an image side
 * (SmolVLM: 2048/512 = 4), bounding a plan's rows far below int32 */
#define CLIP_MAX_PATCHES_SIDE 256
#define CLIP_MAX_GRID_SIDE 32

const char *clip_projector_type_name(enum clip_projector_type t) {
  switch (t) {
  case CLIP_PROJECTOR_TYPE_MLP: return "mlp";
  case CLIP_PROJECTOR_TYPE_IDEFICS3: return "idefics3";
  }
  return "unknown";
}

int32_t clip_model_n_embd_out(const struct clip_model *m) { return m->n_embd_out; }

enum clip_projector_type clip_model_projector_type(const struct clip_model *m) { return m->type; }

/* ---------------------------------------------------------------- metadata */

/* *out = the integer at key, or `def` when absent and not required. */
static llb_status get_i32(const struct gguf_file *f, const char *key, bool required, int32_t def, int32_t lo,
                          int32_t hi, int32_t *out) {
  int64_t v;
  llb_status st = gguf_get_int(f, key, &v);
  if (st == LLB_STATUS_NOT_FOUND && !required) {
    *out = def;
    return LLB_STATUS_OK;
  }
  if (st != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %s", llb_err_last());
  if (v < lo || v > hi) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %s = %lld not in [%d, %d]", key, (long long)v, lo, hi);
  *out = (int32_t)v;
  return LLB_STATUS_OK;
}

static llb_status get_f32_array3(const struct gguf_file *f, const char *key, float out[3]) {
  struct gguf_array a;
  llb_status st = gguf_get_array(f, key, &a);
  if (st != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %s", llb_err_last());
  if (a.type != GGUF_VALUE_TYPE_FLOAT32 || a.len < 3)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %s must be 3 float32 values", key);
  for (int i = 0; i < 3; i++) {
    out[i] = gguf_array_f32(&a, (uint64_t)i);
    if (!isfinite(out[i])) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %s[%d] not finite", key, i);
  }
  return LLB_STATUS_OK;
}

static bool get_bool_or(const struct gguf_file *f, const char *key, bool def) {
  bool v;
  return gguf_get_bool(f, key, &v) == LLB_STATUS_OK ? v : def;
}

static llb_status read_projector_type(const struct gguf_file *f, enum clip_projector_type *out) {
  struct gguf_str s;
  llb_status st = gguf_get_str(f, "clip.vision.projector_type", &s);
  if (st == LLB_STATUS_NOT_FOUND) st = gguf_get_str(f, "clip.projector_type", &s);
  if (st != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: no clip.projector_type (%s)", llb_err_last());
  if (gguf_str_eq(s, "mlp")) *out = CLIP_PROJECTOR_TYPE_MLP;
  else if (gguf_str_eq(s, "idefics3")) *out = CLIP_PROJECTOR_TYPE_IDEFICS3;
  else
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: projector type '%.*s' is not supported (supported: mlp, idefics3)",
                    (int)(s.len > 64 ? 64 : s.len), s.data);
  return LLB_STATUS_OK;
}

/* The llava feature layer: blocks to run before taking the features (llama.cpp clip_graph_llava:
 * the deepest of clip.vision.feature_layer, default the one before last). */
static llb_status read_feature_layer(const struct gguf_file *f, int32_t n_layer, int32_t *n_run) {
  struct gguf_array a;
  *n_run = n_layer - 1;
  if (gguf_get_array(f, "clip.vision.feature_layer", &a) != LLB_STATUS_OK) return LLB_STATUS_OK;
  if (a.len == 0) return LLB_STATUS_OK;
  if (a.len > 1)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: %llu feature layers (stacked features are not supported)",
                    (unsigned long long)a.len);
  const int64_t v = gguf_array_int(&a, 0);
  if (v < 1 || v > n_layer) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: feature layer %lld of %d", (long long)v, n_layer);
  *n_run = (int32_t)v;
  return LLB_STATUS_OK;
}

static llb_status read_hparams(struct clip_model *m) {
  const struct gguf_file *f = m->gguf;
  struct clip_hparams *hp = &m->hp;
  bool has_vision = get_bool_or(f, "clip.has_vision_encoder", true);
  if (!has_vision) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: no vision encoder (clip.has_vision_encoder false)");
  llb_status st = read_projector_type(f, &m->type);
  if (st != LLB_STATUS_OK) return st;
  if ((st = get_i32(f, "clip.vision.image_size", true, 0, 1, CLIP_MAX_IMAGE_SIZE, &hp->image_size)) ||
      (st = get_i32(f, "clip.vision.patch_size", true, 0, 1, CLIP_MAX_IMAGE_SIZE, &hp->patch_size)) ||
      (st = get_i32(f, "clip.vision.embedding_length", true, 0, 1, CLIP_MAX_WIDTH, &hp->n_embd)) ||
      (st = get_i32(f, "clip.vision.feed_forward_length", true, 0, 1, 4 * CLIP_MAX_WIDTH, &hp->n_ff)) ||
      (st = get_i32(f, "clip.vision.block_count", true, 0, 1, CLIP_MAX_LAYERS, &hp->n_layer)) ||
      (st = get_i32(f, "clip.vision.attention.head_count", true, 0, 1, CLIP_MAX_WIDTH, &hp->n_head)))
    return st;
  double eps;
  if (gguf_get_float(f, "clip.vision.attention.layer_norm_epsilon", &eps) != LLB_STATUS_OK || !(eps > 0.0) || eps > 1.0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: clip.vision.attention.layer_norm_epsilon missing or not in (0, 1]");
  hp->eps = (float)eps;
  if ((st = get_f32_array3(f, "clip.vision.image_mean", hp->image_mean)) ||
      (st = get_f32_array3(f, "clip.vision.image_std", hp->image_std)))
    return st;
  for (int i = 0; i < 3; i++)
    if (!(hp->image_std[i] > 0.0f)) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: image_std[%d] not positive", i);
  if (hp->image_size % hp->patch_size != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: image_size %d not a multiple of patch_size %d", hp->image_size,
                    hp->patch_size);
  if (hp->n_embd % hp->n_head != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: %d heads do not divide width %d", hp->n_head, hp->n_embd);
  if (get_bool_or(f, "clip.use_silu", false)) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: clip.use_silu encoders");
  hp->gelu = get_bool_or(f, "clip.use_gelu", false) ? BACKEND_GELU_TANH : BACKEND_GELU_QUICK;
  hp->n_layer_run = hp->n_layer;
  const int32_t side = hp->image_size / hp->patch_size;
  if (side > CLIP_MAX_PATCHES_SIDE)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: %d x %d patches a tile (at most %d a side)", side, side,
                    CLIP_MAX_PATCHES_SIDE);
  m->n_patches = side * side;
  if (m->type == CLIP_PROJECTOR_TYPE_IDEFICS3) {
    if ((st = get_i32(f, "clip.vision.projector.scale_factor", false, 1, 1, 64, &hp->scale_factor))) return st;
    if (hp->scale_factor < 2 || side % hp->scale_factor != 0)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: idefics3 scale factor %d with %d patches a side", hp->scale_factor,
                      side);
    if ((st = get_i32(f, "clip.vision.preproc_image_size", false, 0, 0, CLIP_MAX_LONGEST_EDGE, &hp->longest_edge)))
      return st;
    if (hp->longest_edge < hp->image_size)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED,
                      "mmproj: idefics3 without clip.vision.preproc_image_size >= image_size (got %d; llama.cpp's "
                      "min/max-pixels slicing is not supported)",
                      hp->longest_edge);
    m->rows_per_tile = m->n_patches / (hp->scale_factor * hp->scale_factor);
    if (hp->longest_edge / hp->image_size >= CLIP_MAX_GRID_SIDE)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: longest edge %d is %d tiles of %d (at most %d a side)",
                      hp->longest_edge, hp->longest_edge / hp->image_size, hp->image_size, CLIP_MAX_GRID_SIDE - 1);
  } else {
    if (gguf_find_key(f, "clip.vision.image_grid_pinpoints") >= 0)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: llava image_grid_pinpoints (LLaVA-1.6 anyres) are not supported");
    if ((st = read_feature_layer(f, hp->n_layer, &hp->n_layer_run))) return st;
    if (hp->n_layer_run < 1) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: llava encoder of %d layer(s)", hp->n_layer);
    m->rows_per_tile = m->n_patches;
  }
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- tensors */

/* *out = the f32 vector `name` of n elements; NULL when absent and not required. */
static llb_status vec_f32(const struct clip_model *m, const char *name, int64_t n, bool required, const float **out) {
  const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
  *out = NULL;
  if (!t) return required ? LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: missing tensor %s", name) : LLB_STATUS_OK;
  if (t->type != GGML_TYPE_F32)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: tensor %s is %s (vectors must be f32)", name, ggml_type_name(t->type));
  if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: tensor %s has %lld elements, expected %lld", name,
                    (long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), (long long)n);
  *out = t->data;
  return LLB_STATUS_OK;
}

/* *w = the weight `name` viewed as [rows, cols] (ne[0] * ... up to the last dim = cols). */
static llb_status weight(const struct gguf_tensor *t, const char *name, int64_t rows, int64_t cols,
                         struct backend_weight *w) {
  const int64_t last = t->ne[3] > 1 ? t->ne[3] : t->ne[2] > 1 ? t->ne[2] : t->ne[1];
  const int64_t total = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
  if (last != rows || total != rows * cols)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: tensor %s is [%lld %lld %lld %lld], expected %lld rows of %lld", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)rows,
                    (long long)cols);
  if (!ggml_type_is_supported(t->type) || cols % ggml_type_block_elems(t->type) != 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: tensor %s of type %s (rows of %lld)", name, ggml_type_name(t->type),
                    (long long)cols);
  *w = (struct backend_weight){.type = t->type, .rows = rows, .cols = cols, .row_bytes = t->size_bytes / (size_t)rows,
                               .data = t->data};
  return LLB_STATUS_OK;
}

static llb_status mat(const struct clip_model *m, const char *name, int64_t rows, int64_t cols, struct backend_weight *w) {
  const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
  if (!t) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: missing tensor %s", name);
  if (t->ne[0] != cols)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: tensor %s has rows of %lld, expected %lld", name, (long long)t->ne[0],
                    (long long)cols);
  return weight(t, name, rows, cols, w);
}

/* Output rows of a 2-D tensor (ne[1]), 0 when absent or not 2-D. */
static int64_t rows_of(const struct clip_model *m, const char *name) {
  const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
  return t && t->n_dims == 2 ? t->ne[1] : 0;
}

#define NAME(buf, ...) (snprintf((buf), sizeof(buf), __VA_ARGS__), (buf))

static llb_status load_layer(struct clip_model *m, int il, struct clip_layer *l) {
  const int64_t d = m->hp.n_embd, ff = m->hp.n_ff;
  char nm[96];
  llb_status st;
  if ((st = vec_f32(m, NAME(nm, "v.blk.%d.ln1.weight", il), d, true, &l->ln1_w)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.ln1.bias", il), d, false, &l->ln1_b)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.ln2.weight", il), d, true, &l->ln2_w)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.ln2.bias", il), d, false, &l->ln2_b)) ||
      (st = mat(m, NAME(nm, "v.blk.%d.attn_q.weight", il), d, d, &l->q)) ||
      (st = mat(m, NAME(nm, "v.blk.%d.attn_k.weight", il), d, d, &l->k)) ||
      (st = mat(m, NAME(nm, "v.blk.%d.attn_v.weight", il), d, d, &l->v)) ||
      (st = mat(m, NAME(nm, "v.blk.%d.attn_out.weight", il), d, d, &l->o)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.attn_q.bias", il), d, false, &l->q_b)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.attn_k.bias", il), d, false, &l->k_b)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.attn_v.bias", il), d, false, &l->v_b)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.attn_out.bias", il), d, false, &l->o_b)))
    return st;
  /* older conversions name fc1 "ffn_down" and fc2 "ffn_up": llama.cpp swaps them back when
   * "ffn_down" takes n_embd inputs (clip.cpp is_ffn_swapped) */
  const struct gguf_tensor *down = gguf_find_tensor(m->gguf, NAME(nm, "v.blk.%d.ffn_down.weight", il));
  const bool swapped = down && down->ne[0] == d && ff != d;
  const char *up_name = swapped ? "ffn_down" : "ffn_up", *down_name = swapped ? "ffn_up" : "ffn_down";
  if ((st = mat(m, NAME(nm, "v.blk.%d.%s.weight", il, up_name), ff, d, &l->up)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.%s.bias", il, up_name), ff, false, &l->up_b)) ||
      (st = mat(m, NAME(nm, "v.blk.%d.%s.weight", il, down_name), d, ff, &l->down)) ||
      (st = vec_f32(m, NAME(nm, "v.blk.%d.%s.bias", il, down_name), d, false, &l->down_b)))
    return st;
  return LLB_STATUS_OK;
}

static llb_status load_projector(struct clip_model *m) {
  const int64_t d = m->hp.n_embd;
  llb_status st;
  if (m->type == CLIP_PROJECTOR_TYPE_IDEFICS3) {
    const int64_t in = d * m->hp.scale_factor * m->hp.scale_factor, out = rows_of(m, "mm.model.fc.weight");
    if (out < 1 || out > CLIP_MAX_WIDTH) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: mm.model.fc.weight missing or not 2-D");
    m->n_embd_out = (int32_t)out;
    return mat(m, "mm.model.fc.weight", out, in, &m->mm0);
  }
  const int64_t hidden = rows_of(m, "mm.0.weight"), out = rows_of(m, "mm.2.weight");
  if (hidden < 1 || hidden > 4 * CLIP_MAX_WIDTH || out < 1 || out > CLIP_MAX_WIDTH)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: llava projector needs 2-D mm.0.weight and mm.2.weight");
  m->n_embd_out = (int32_t)out;
  if ((st = mat(m, "mm.0.weight", hidden, d, &m->mm0)) || (st = vec_f32(m, "mm.0.bias", hidden, true, &m->mm0_b)) ||
      (st = mat(m, "mm.2.weight", out, hidden, &m->mm2)) || (st = vec_f32(m, "mm.2.bias", out, true, &m->mm2_b)))
    return st;
  return LLB_STATUS_OK;
}

static llb_status load_tensors(struct clip_model *m) {
  const int64_t d = m->hp.n_embd, ps = m->hp.patch_size;
  llb_status st;
  const struct gguf_tensor *pe = gguf_find_tensor(m->gguf, "v.patch_embd.weight");
  if (!pe) return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: missing tensor v.patch_embd.weight");
  if (pe->ne[0] != ps || pe->ne[1] != ps || pe->ne[2] != 3 || pe->ne[3] != d)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "mmproj: v.patch_embd.weight is [%lld %lld %lld %lld], expected [%lld %lld 3 %lld]",
                    (long long)pe->ne[0], (long long)pe->ne[1], (long long)pe->ne[2], (long long)pe->ne[3],
                    (long long)ps, (long long)ps, (long long)d);
  if ((st = weight(pe, "v.patch_embd.weight", d, 3 * ps * ps, &m->patch_embd)) ||
      (st = vec_f32(m, "v.patch_embd.bias", d, false, &m->patch_b)) ||
      (st = vec_f32(m, "v.class_embd", d, false, &m->class_embd)) ||
      (st = vec_f32(m, "v.pre_ln.weight", d, false, &m->pre_ln_w)) ||
      (st = vec_f32(m, "v.pre_ln.bias", d, false, &m->pre_ln_b)) ||
      (st = vec_f32(m, "v.post_ln.weight", d, false, &m->post_ln_w)) ||
      (st = vec_f32(m, "v.post_ln.bias", d, false, &m->post_ln_b)))
    return st;
  if (m->class_embd && m->type != CLIP_PROJECTOR_TYPE_MLP)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "mmproj: a class embedding with projector %s", clip_projector_type_name(m->type));
  m->n_pos = m->n_patches + (m->class_embd ? 1 : 0);
  if ((st = mat(m, "v.position_embd.weight", m->n_pos, d, &m->pos_embd))) return st;
  m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
  if (!m->layers) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "mmproj: %d layers", m->hp.n_layer);
  for (int il = 0; il < m->hp.n_layer_run; il++)
    if ((st = load_layer(m, il, &m->layers[il]))) return st;
  return load_projector(m);
}

llb_status clip_model_load(const char *mmproj_path, int32_t n_threads, struct clip_model **out) {
  if (!out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_model_load: out is NULL");
  *out = NULL;
  if (!mmproj_path || n_threads < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_model_load: path %s, %d threads", mmproj_path ? "set" : "NULL",
                    n_threads);
  struct clip_model *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "clip model");
  llb_status st = gguf_open(mmproj_path, &m->gguf);
  if (st == LLB_STATUS_OK) st = read_hparams(m);
  if (st == LLB_STATUS_OK) st = load_tensors(m);
  if (st == LLB_STATUS_OK) st = clip_run_init(m, n_threads);
  if (st != LLB_STATUS_OK) {
    clip_model_destroy(m);
    return LLB_UPDATE_ERR_STACK(st);
  }
  LLB_LOG_INFO("clip_model_loaded", "path=%s projector=%s image_size=%d patch_size=%d n_embd=%d n_layer=%d "
               "rows_per_tile=%d n_embd_out=%d", mmproj_path, clip_projector_type_name(m->type), m->hp.image_size,
               m->hp.patch_size, m->hp.n_embd, m->hp.n_layer_run, m->rows_per_tile, m->n_embd_out);
  *out = m;
  return LLB_STATUS_OK;
}

void clip_model_destroy(struct clip_model *m) {
  if (!m) return;
  clip_run_free(&m->run);
  free(m->layers);
  gguf_close(m->gguf);
  free(m);
}

/* ---------------------------------------------------------------- plan */

void clip_idefics3_sizes(const struct clip_model *m, int32_t width, int32_t height, int32_t *resized_w,
                         int32_t *resized_h, int32_t *grid_cols, int32_t *grid_rows) {
  /* mtmd_image_preprocessor_idefics3 (transformers' Idefics3ImageProcessor): the longer side to
   * longest_edge keeping the aspect ratio (the other side truncated, then made even), then both
   * sides up to multiples of image_size. A side that would vanish is kept at 2 pixels. */
  const int32_t edge = m->hp.longest_edge, tile = m->hp.image_size;
  const double aspect = (double)width / height;
  int32_t w, h;
  if (width >= height) {
    w = edge;
    h = (int32_t)(edge / aspect);
    h += h % 2;
  } else {
    h = edge;
    w = (int32_t)(edge * aspect);
    w += w % 2;
  }
  w = w < 2 ? 2 : w;
  h = h < 2 ? 2 : h;
  *resized_w = w;
  *resized_h = h;
  *grid_cols = (w + tile - 1) / tile;
  *grid_rows = (h + tile - 1) / tile;
}

/* Appends printf output to the plan's prompt; false when it does not fit (cannot happen with
 * the capacity computed below). */
static bool append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - *len) return false;
  *len += (size_t)n;
  return true;
}

static bool append_images(char *buf, size_t cap, size_t *len, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (!append(buf, cap, len, "<image>")) return false;
  return true;
}

static bool idefics3_prompt(const struct clip_plan *p, char *buf, size_t cap, size_t *len) {
  /* mtmd.cpp MTMD_SLICE_TMPL_IDEFICS3: slices row-major, "\n" between rows, then the overview */
  for (int32_t r = 0; r < p->grid_rows; r++) {
    for (int32_t c = 0; c < p->grid_cols; c++)
      if (!append(buf, cap, len, "<fake_token_around_image><row_%d_col_%d>", r + 1, c + 1) ||
          !append_images(buf, cap, len, p->rows_per_tile))
        return false;
    if (r != p->grid_rows - 1 && !append(buf, cap, len, "\n")) return false;
  }
  return append(buf, cap, len, "\n\n<fake_token_around_image><global-img>") &&
         append_images(buf, cap, len, p->rows_per_tile) && append(buf, cap, len, "<fake_token_around_image>");
}

llb_status clip_image_plan(const struct clip_model *m, int32_t width, int32_t height, struct clip_plan *out) {
  if (!out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_image_plan: out is NULL");
  memset(out, 0, sizeof *out);
  if (!m || width < 1 || height < 1 || width > LLB_IMAGE_DEFAULT_MAX_SIDE || height > LLB_IMAGE_DEFAULT_MAX_SIDE)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_image_plan: image of %d x %d (sides 1..%d)", width, height,
                    LLB_IMAGE_DEFAULT_MAX_SIDE);
  struct clip_plan p = {.projector_type = m->type, .rows_per_tile = m->rows_per_tile, .image_token = "<image>"};
  if (m->type == CLIP_PROJECTOR_TYPE_IDEFICS3) {
    int32_t rw, rh;
    clip_idefics3_sizes(m, width, height, &rw, &rh, &p.grid_cols, &p.grid_rows);
    p.num_tiles = p.grid_rows * p.grid_cols + 1;
  } else {
    p.num_tiles = 1;
  }
  p.num_rows = p.num_tiles * p.rows_per_tile;
  /* 7 bytes per "<image>", 64 per tile of markers, 96 for the overview's */
  const size_t cap = (size_t)p.num_rows * 7 + (size_t)p.num_tiles * 64 + 96;
  p.prompt = malloc(cap);
  if (!p.prompt) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "clip_image_plan: prompt of %zu bytes", cap);
  p.prompt[0] = '\0';
  bool ok = m->type == CLIP_PROJECTOR_TYPE_IDEFICS3 ? idefics3_prompt(&p, p.prompt, cap, &p.prompt_len)
                                                    : append_images(p.prompt, cap, &p.prompt_len, p.rows_per_tile);
  if (!ok) {
    free(p.prompt);
    return LLB_ERRF(LLB_STATUS_INTERNAL, "clip_image_plan: prompt over %zu bytes", cap);
  }
  *out = p;
  return LLB_STATUS_OK;
}

void clip_plan_free(struct clip_plan *p) {
  if (!p) return;
  free(p->prompt);
  memset(p, 0, sizeof *p);
}

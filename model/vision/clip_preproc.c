/* Image -> tiles of normalized pixels -> clip_vit_encode_tile, as llama.cpp's mtmd preprocesses
 * (tools/mtmd/mtmd-image.cpp):
 *  - idefics3 (mtmd_image_preprocessor_idefics3, transformers' Idefics3ImageProcessor): Lanczos
 *    resize to the longest edge, Lanczos resize to multiples of image_size, tiles cropped
 *    row-major, and an overview (the refined image resized to one tile), encoded last;
 *  - mlp (mtmd_image_preprocessor_fixed_size with clip.cpp's llava defaults): bicubic resize
 *    keeping the aspect ratio into image_size x image_size (sides rounded up), centred on a
 *    (122, 116, 104) background.
 * Every resize is Pillow's (model/vision/image.c), skipped when the size does not change. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/vision/clip_internal.h"
#include "model/vision/image.h"

/* *dst = src resized to w x h with f, or a copy when the size is already w x h. */
static llb_status resize_or_copy(const struct llb_image *src, int32_t w, int32_t h, enum llb_image_filter f,
                                 struct llb_image *dst) {
  if (src->width != w || src->height != h) return llb_image_resize(src, w, h, f, dst);
  const size_t bytes = (size_t)w * (size_t)h * 3;
  dst->rgb = malloc(bytes);
  if (!dst->rgb) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "image copy of %dx%d", w, h);
  memcpy(dst->rgb, src->rgb, bytes);
  dst->width = w;
  dst->height = h;
  return LLB_STATUS_OK;
}

/* tile (side x side) = src's pixels from (x0, y0). */
static void crop(const struct llb_image *src, int32_t x0, int32_t y0, int32_t side, struct llb_image *tile) {
  for (int32_t y = 0; y < side; y++)
    memcpy(tile->rgb + (size_t)y * (size_t)side * 3, src->rgb + ((size_t)(y0 + y) * (size_t)src->width + (size_t)x0) * 3,
           (size_t)side * 3);
}

/* Normalizes one tile into run.pixels and encodes it into out. */
static llb_status encode(struct clip_model *m, const struct llb_image *tile, float *out) {
  llb_status st = llb_image_to_tensor(tile, m->hp.image_mean, m->hp.image_std, m->run.pixels);
  return st != LLB_STATUS_OK ? st : clip_vit_encode_tile(m, out);
}

static llb_status encode_idefics3(struct clip_model *m, const struct llb_image *img, float *out) {
  const int32_t side = m->hp.image_size;
  const size_t tile_floats = (size_t)m->rows_per_tile * (size_t)m->n_embd_out;
  int32_t rw, rh, gc, gr;
  clip_idefics3_sizes(m, img->width, img->height, &rw, &rh, &gc, &gr);
  struct llb_image resized = {0}, refined = {0}, overview = {0}, tile = {0};
  llb_status st = resize_or_copy(img, rw, rh, LLB_IMAGE_FILTER_LANCZOS, &resized);
  if (st == LLB_STATUS_OK) st = resize_or_copy(&resized, gc * side, gr * side, LLB_IMAGE_FILTER_LANCZOS, &refined);
  llb_image_free(&resized);
  if (st == LLB_STATUS_OK) st = resize_or_copy(&refined, side, side, LLB_IMAGE_FILTER_LANCZOS, &overview);
  tile.width = tile.height = side;
  tile.rgb = st == LLB_STATUS_OK ? malloc((size_t)side * (size_t)side * 3) : NULL;
  if (st == LLB_STATUS_OK && !tile.rgb) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tile of %d", side);
  for (int32_t y = 0; st == LLB_STATUS_OK && y < gr; y++)
    for (int32_t x = 0; st == LLB_STATUS_OK && x < gc; x++) {
      crop(&refined, x * side, y * side, side, &tile);
      st = encode(m, &tile, out + (size_t)(y * gc + x) * tile_floats);
    }
  if (st == LLB_STATUS_OK) st = encode(m, &overview, out + (size_t)(gr * gc) * tile_floats);
  llb_image_free(&refined);
  llb_image_free(&overview);
  llb_image_free(&tile);
  return st;
}

static llb_status encode_mlp(struct clip_model *m, const struct llb_image *img, float *out) {
  const int32_t side = m->hp.image_size;
  static const uint8_t pad[3] = {122, 116, 104}; /* clip.cpp image_pad_color of llava */
  if (img->width == side && img->height == side) return encode(m, img, out);
  const float sw = (float)side / (float)img->width, sh = (float)side / (float)img->height, s = sw < sh ? sw : sh;
  int32_t nw = (int32_t)ceilf((float)img->width * s), nh = (int32_t)ceilf((float)img->height * s);
  nw = nw > side ? side : nw < 1 ? 1 : nw;
  nh = nh > side ? side : nh < 1 ? 1 : nh;
  struct llb_image resized = {0}, canvas = {0};
  llb_status st = llb_image_resize(img, nw, nh, LLB_IMAGE_FILTER_BICUBIC, &resized);
  if (st != LLB_STATUS_OK) return st;
  canvas.width = canvas.height = side;
  canvas.rgb = malloc((size_t)side * (size_t)side * 3);
  if (!canvas.rgb) {
    llb_image_free(&resized);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "canvas of %d", side);
  }
  for (size_t i = 0; i < (size_t)side * (size_t)side; i++) memcpy(canvas.rgb + i * 3, pad, 3);
  const int32_t ox = (side - nw) / 2, oy = (side - nh) / 2;
  for (int32_t y = 0; y < nh; y++)
    memcpy(canvas.rgb + ((size_t)(oy + y) * (size_t)side + (size_t)ox) * 3, resized.rgb + (size_t)y * (size_t)nw * 3,
           (size_t)nw * 3);
  st = encode(m, &canvas, out);
  llb_image_free(&resized);
  llb_image_free(&canvas);
  return st;
}

llb_status clip_encode_rgb(struct clip_model *m, const struct llb_image *img, float *out, int32_t max_rows,
                           int32_t *rows) {
  if (!m || !img || !img->rgb || !out || !rows || max_rows < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_encode_rgb: NULL argument or empty image");
  *rows = 0;
  struct clip_plan plan;
  llb_status st = clip_image_plan(m, img->width, img->height, &plan);
  if (st == LLB_STATUS_OK && plan.num_rows > max_rows)
    st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "image of %dx%d needs %d embedding rows, room for %d", img->width, img->height,
                  plan.num_rows, max_rows);
  if (st == LLB_STATUS_OK)
    st = m->type == CLIP_PROJECTOR_TYPE_IDEFICS3 ? encode_idefics3(m, img, out) : encode_mlp(m, img, out);
  if (st == LLB_STATUS_OK) *rows = plan.num_rows;
  clip_plan_free(&plan);
  return st;
}

llb_status clip_encode_image(struct clip_model *m, const uint8_t *bytes, size_t n, float *out, int32_t max_rows,
                             int32_t *rows) {
  if (!m || !bytes || !out || !rows || max_rows < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "clip_encode_image: NULL argument or negative max_rows");
  *rows = 0;
  struct llb_image img;
  llb_status st = llb_image_decode(bytes, n, NULL, &img);
  if (st == LLB_STATUS_OK) {
    st = clip_encode_rgb(m, &img, out, max_rows, rows);
    llb_image_free(&img);
  }
  return st == LLB_STATUS_OK ? st : LLB_UPDATE_ERR_STACK(st);
}

/* Images in chat messages → prompt tokens + placeholder ranges. See mm_images.h. */
#include "actors/input_processor/mm_images.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/tokenizer.h"

llb_status input_processor_image_check(const struct input_processor_image_config *cfg, const struct input_processor_image *img,
                              int32_t *width, int32_t *height, char *msg, size_t cap) {
  *width = *height = 0;
  int64_t max_bytes = cfg->max_image_bytes > 0 ? cfg->max_image_bytes : INPUT_PROCESSOR_DEFAULT_MAX_IMAGE_BYTES;
  if (img->data_bytes > max_bytes) {
    snprintf(msg, cap, "the image file has %lld bytes, over the limit of %lld bytes", (long long)img->data_bytes,
             (long long)max_bytes);
    return LLB_STATUS_TOO_LARGE;
  }
  enum llb_image_format fmt = llb_image_sniff(img->data, img->data_bytes > 0 ? (size_t)img->data_bytes : 0);
  const char *want = fmt == LLB_IMAGE_JPEG ? "jpeg" : fmt == LLB_IMAGE_PNG ? "png" : NULL;
  if (!want) {
    snprintf(msg, cap, "is neither a JPEG nor a PNG file (supported image types: image/jpeg, image/png)");
    return LLB_STATUS_UNSUPPORTED;
  }
  if (!img->dtype || strcmp(img->dtype, want) != 0) {
    snprintf(msg, cap, "is a %s file but was declared '%s'", want, img->dtype ? img->dtype : "");
    return LLB_STATUS_UNSUPPORTED;
  }
  struct llb_image_limits lim = cfg->limits;
  if (lim.max_side <= 0) lim.max_side = LLB_IMAGE_DEFAULT_MAX_SIDE;
  if (lim.max_pixels <= 0) lim.max_pixels = LLB_IMAGE_DEFAULT_MAX_PIXELS;
  struct llb_image im;
  llb_status st = llb_image_decode(img->data, (size_t)img->data_bytes, &lim, &im);
  if (st != LLB_STATUS_OK) {
    const char *why = llb_err_last();
    snprintf(msg, cap, "cannot be decoded: %s", why && why[0] ? why : llb_strerror(st));
    llb_err_clear();
    return st;
  }
  *width = im.width;
  *height = im.height;
  llb_image_free(&im);
  return LLB_STATUS_OK;
}

int32_t input_processor_image_count_markers(const char *text, const char *marker) {
  size_t m = strlen(marker);
  int32_t n = 0;
  if (m == 0) return 0;
  for (const char *p = strstr(text, marker); p; p = strstr(p + m, marker)) n++;
  return n;
}

void input_processor_image_ranges_free(struct input_processor_image_range *ranges, int32_t n) {
  for (int32_t i = 0; ranges && i < n; i++) {
    free(ranges[i].is_embed);
    ranges[i].is_embed = NULL;
  }
}

/* Growable token array. */
struct ids {
  int32_t *v;
  int64_t n, cap;
};

static llb_status ids_append_text(struct ids *a, const struct tokenizer *tok, const char *s, size_t len) {
  if (len == 0) return LLB_STATUS_OK;
  int32_t *t = NULL;
  int64_t n = 0;
  llb_status st = tokenizer_encode(tok, s, len, false, true, &t, &n);
  if (st != LLB_STATUS_OK) return st;
  if (a->n + n > a->cap) {
    int64_t cap = a->cap ? a->cap : 256;
    while (cap < a->n + n) cap *= 2;
    int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) {
      free(t);
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt of %lld tokens", (long long)(a->n + n));
    }
    a->v = v;
    a->cap = cap;
  }
  if (n > 0) memcpy(a->v + a->n, t, (size_t)n * sizeof *t);
  a->n += n;
  free(t);
  return LLB_STATUS_OK;
}

/* Marks image k's range: its tokens from `start` on; the embed tokens take rows. */
static llb_status mark_range(const struct ids *a, int64_t start, int32_t embed_id, int32_t rows,
                             struct input_processor_image_range *r, char *msg, size_t cap) {
  int64_t len = a->n - start;
  if (len < 1 || len > INT32_MAX || start > INT32_MAX) {
    snprintf(msg, cap, "an image expands to %lld tokens", (long long)len);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  r->offset = (int32_t)start;
  r->length = (int32_t)len;
  r->is_embed = malloc((size_t)len);
  if (!r->is_embed) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "is_embed of %lld", (long long)len);
  r->num_embeds = 0;
  for (int64_t i = 0; i < len; i++) {
    r->is_embed[i] = a->v[start + i] == embed_id;
    r->num_embeds += r->is_embed[i];
  }
  if (r->num_embeds != rows) {
    snprintf(msg, cap, "the image's prompt text holds %d embed tokens but the encoder gives %d rows",
             r->num_embeds, rows);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  return LLB_STATUS_OK;
}

llb_status input_processor_image_expand(const struct tokenizer *tok, const char *embed_token, const char *text,
                               const char *marker, const struct input_processor_image_plan *plans,
                               int32_t num_images, int32_t **ids_out, int64_t *n_out,
                               struct input_processor_image_range *ranges, char *msg, size_t cap) {
  *ids_out = NULL;
  *n_out = 0;
  memset(ranges, 0, (size_t)num_images * sizeof *ranges);
  const char *et = embed_token ? embed_token : INPUT_PROCESSOR_IMAGE_MARKER;
  int32_t embed_id = tokenizer_find_token(tok, et, strlen(et));
  if (embed_id < 0) {
    snprintf(msg, cap, "the model's vocabulary has no image token '%s'", et);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  int32_t found = input_processor_image_count_markers(text, marker);
  if (found != num_images) {
    snprintf(msg, cap, "the rendered chat holds %d image markers '%s' but the request has %d images (is '%s' "
             "written in the text?)", found, marker, num_images, marker);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  struct ids a = {0};
  llb_status st = LLB_STATUS_OK;
  const char *at = text;
  size_t m = strlen(marker);
  for (int32_t k = 0; k < num_images && st == LLB_STATUS_OK; k++) {
    const char *hit = strstr(at, marker);
    st = ids_append_text(&a, tok, at, (size_t)(hit - at));
    int64_t start = a.n;
    if (st == LLB_STATUS_OK) st = ids_append_text(&a, tok, plans[k].text, strlen(plans[k].text));
    if (st == LLB_STATUS_OK) st = mark_range(&a, start, embed_id, plans[k].rows, &ranges[k], msg, cap);
    at = hit + m;
  }
  if (st == LLB_STATUS_OK) st = ids_append_text(&a, tok, at, strlen(at));
  if (st == LLB_STATUS_OK) { /* the text around the images must not hold the embed token */
    int64_t outside = 0;
    for (int64_t i = 0; i < a.n; i++) outside += a.v[i] == embed_id;
    for (int32_t k = 0; k < num_images; k++) outside -= ranges[k].num_embeds;
    if (outside != 0) {
      snprintf(msg, cap, "the text holds the image token '%s' %lld times outside the images' places; remove it",
               et, (long long)outside);
      st = LLB_STATUS_INVALID_ARGUMENT;
    }
  }
  if (st != LLB_STATUS_OK) {
    free(a.v);
    input_processor_image_ranges_free(ranges, num_images);
    return st;
  }
  *ids_out = a.v;
  *n_out = a.n;
  return LLB_STATUS_OK;
}

/* Every message's offsets are non-decreasing and inside its content; they number the images. */
static llb_status check_offsets(const struct input_processor_image_request *req, char *field, size_t fcap, char *msg,
                                size_t cap) {
  int32_t total = 0;
  for (size_t i = 0; i < req->render.num_messages; i++) {
    const struct chat_message_extra *x = req->render.extras ? &req->render.extras[i] : NULL;
    if (!x || x->num_image_offsets == 0) continue;
    size_t len = req->render.messages[i].content ? strlen(req->render.messages[i].content) : 0;
    for (int32_t k = 0; k < x->num_image_offsets; k++) {
      if (x->image_offsets[k] > len || (k > 0 && x->image_offsets[k] < x->image_offsets[k - 1])) {
        snprintf(field, fcap, "messages[%zu].image_offsets", i);
        snprintf(msg, cap, "offset %u of image part %d is not inside the %zu-byte content in order",
                 x->image_offsets[k], k, len);
        return LLB_STATUS_INVALID_ARGUMENT;
      }
    }
    total += x->num_image_offsets;
  }
  if (total != req->num_images) {
    snprintf(field, fcap, "mm_items");
    snprintf(msg, cap, "%d image parts in the messages but %d image items", total, req->num_images);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  return LLB_STATUS_OK;
}

/* Renders as OpenAI content lists; falls back to string content with mtmd's marker when the
 * template fails on lists or does not write one INPUT_PROCESSOR_IMAGE_MARKER per image. */
static llb_status render(struct input_processor_image_request *req, char **text, const char **marker) {
  req->render.image_format = CHAT_IMAGE_FORMAT_OPENAI;
  req->render.image_marker = NULL;
  llb_status st = chat_render_jinja(req->tmpl, &req->render, text);
  if (st == LLB_STATUS_OK && input_processor_image_count_markers(*text, INPUT_PROCESSOR_IMAGE_MARKER) == req->num_images) {
    *marker = INPUT_PROCESSOR_IMAGE_MARKER;
    return LLB_STATUS_OK;
  }
  if (st == LLB_STATUS_OUT_OF_MEMORY) return st;
  free(*text);
  *text = NULL;
  llb_err_clear();
  req->render.image_format = CHAT_IMAGE_FORMAT_STRING;
  req->render.image_marker = INPUT_PROCESSOR_IMAGE_DEFAULT_MARKER;
  *marker = INPUT_PROCESSOR_IMAGE_DEFAULT_MARKER;
  return chat_render_jinja(req->tmpl, &req->render, text);
}

llb_status input_processor_images_tokenize(const struct tokenizer *tok, const struct input_processor_image_config *cfg,
                                  struct input_processor_image_request *req, int32_t **ids_out, int64_t *n_out,
                                  struct input_processor_image_range *ranges, char *field, size_t fcap, char *msg,
                                  size_t cap) {
  *ids_out = NULL;
  *n_out = 0;
  field[0] = msg[0] = '\0';
  int32_t max_images = cfg->max_images > 0 ? cfg->max_images : INPUT_PROCESSOR_DEFAULT_MAX_IMAGES;
  if (max_images > INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST) max_images = INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST;
  if (!cfg->plan || !req->tmpl) {
    snprintf(field, fcap, "mm_items");
    snprintf(msg, cap, !cfg->plan ? "this model server takes no images (start the worker with --mmproj FILE)"
                                  : "images need the model's Jinja chat template (not a named chat_template)");
    return LLB_STATUS_UNSUPPORTED;
  }
  if (req->num_images > max_images) {
    snprintf(field, fcap, "mm_items");
    snprintf(msg, cap, "at most %d images per request, got %d", max_images, req->num_images);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  llb_status st = check_offsets(req, field, fcap, msg, cap);
  if (st != LLB_STATUS_OK) return st;
  /* what needs no pixel first: a vocabulary without the image token refuses every image, so
   * say so before decoding any (8 images of 16 M pixels took 5 s to learn it) */
  const char *et = cfg->embed_token ? cfg->embed_token : INPUT_PROCESSOR_IMAGE_MARKER;
  if (tokenizer_find_token(tok, et, strlen(et)) < 0) {
    snprintf(field, fcap, "messages");
    snprintf(msg, cap, "the model's vocabulary has no image token '%s'", et);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  struct input_processor_image_plan plans[INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST] = {{0}};
  for (int32_t k = 0; k < req->num_images && st == LLB_STATUS_OK; k++) {
    int32_t w, h;
    snprintf(field, fcap, "mm_items[%d].data", req->item_index[k]);
    st = input_processor_image_check(cfg, &req->images[k], &w, &h, msg, cap);
    if (st == LLB_STATUS_OK && (st = cfg->plan(cfg->plan_ctx, w, h, &plans[k])) != LLB_STATUS_OK) {
      const char *why = llb_err_last();
      snprintf(msg, cap, "a %dx%d image: %s", w, h, why && why[0] ? why : llb_strerror(st));
    }
  }
  char *text = NULL;
  const char *marker = NULL;
  if (st == LLB_STATUS_OK) {
    field[0] = msg[0] = '\0';
    st = render(req, &text, &marker);
  }
  if (st == LLB_STATUS_OK) {
    snprintf(field, fcap, "messages");
    st = input_processor_image_expand(tok, cfg->embed_token, text, marker, plans, req->num_images, ids_out, n_out, ranges,
                             msg, cap);
  }
  free(text);
  for (int32_t k = 0; k < req->num_images; k++) free(plans[k].text);
  if (st == LLB_STATUS_OK) field[0] = '\0';
  return st;
}

/* Encoder table by modality + encoder-output cache. See mm_encoder.h. */
#include "actors/gpu_worker/mm_encoder.h"

#include "schemas/embeds.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/vision/clip.h"

struct mm_entry {
  char *mm_hash;
  int32_t rows;
  float *out; /* [rows, hidden_size] */
};

struct mm_encoder_cache {
  int32_t hidden_size;
  struct clip_model *clip; /* the "image" encoder (--mmproj), borrowed; NULL = images refused */
  struct mm_entry *entries; /* [num_entries]; few (bounded by the scheduler's cache size) */
  int32_t num_entries, cap_entries;
  int64_t num_rows;
  uint64_t num_encoded;
};

/* "embeds": precomputed embeddings are their own encoder output (f16 widened). */
static llb_status encode_embeds(struct mm_encoder_cache *c, const struct llb_mm_feature *item, float *out) {
  const int64_t n = (int64_t)llb_mm_feature_num_embeds(item) * c->hidden_size;
  if (item->dtype.len == 3 && memcmp(item->dtype.data, "f32", 3) == 0) {
    memcpy(out, item->data, (size_t)n * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, item->data + 2 * i, 2);
      out[i] = llb_fp16_to_fp32(h);
    }
  }
  return LLB_STATUS_OK;
}

/* "image": the mmproj's ViT + projector on the file (model/vision/clip.h); rows in the plan's order,
 * which the input processor's is_embed mask follows. */
static llb_status encode_image(struct mm_encoder_cache *c, const struct llb_mm_feature *item, float *out) {
  if (!c->clip)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "this worker has no image encoder (start it with --mmproj FILE)");
  const int32_t want = llb_mm_feature_num_embeds(item);
  int32_t rows = 0;
  llb_status st = clip_encode_image(c->clip, item->data, (size_t)item->data_bytes, out, want, &rows);
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  if (rows != want)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "image %s gives %d rows, its placeholders take %d (another mmproj "
                    "planned it?)", item->mm_hash.data, rows, want);
  return LLB_STATUS_OK;
}

static const struct {
  const char *modality;
  mm_encode_fn encode;
} encoders[] = {
    {"embeds", encode_embeds},
    {"image", encode_image},
};

static mm_encode_fn find_encoder(struct llb_str modality) {
  for (size_t i = 0; i < sizeof encoders / sizeof encoders[0]; i++)
    if (modality.len == strlen(encoders[i].modality) &&
        memcmp(modality.data, encoders[i].modality, modality.len) == 0)
      return encoders[i].encode;
  return NULL;
}

bool mm_encoder_supports(struct llb_str modality) { return find_encoder(modality) != NULL; }

void mm_encoder_cache_set_image_encoder(struct mm_encoder_cache *c, struct clip_model *clip) { c->clip = clip; }

llb_status mm_encoder_cache_create(int32_t hidden_size, struct mm_encoder_cache **out) {
  *out = NULL;
  if (hidden_size < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "mm encoder: hidden size %d", hidden_size);
  struct mm_encoder_cache *c = calloc(1, sizeof(*c));
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "mm encoder cache");
  c->hidden_size = hidden_size;
  *out = c;
  return LLB_STATUS_OK;
}

void mm_encoder_cache_destroy(struct mm_encoder_cache *c) {
  if (!c) return;
  for (int32_t i = 0; i < c->num_entries; i++) {
    free(c->entries[i].mm_hash);
    free(c->entries[i].out);
  }
  free(c->entries);
  free(c);
}

static int32_t find(const struct mm_encoder_cache *c, struct llb_str h) {
  for (int32_t i = 0; i < c->num_entries; i++)
    if (strlen(c->entries[i].mm_hash) == h.len && memcmp(c->entries[i].mm_hash, h.data, h.len) == 0) return i;
  return -1;
}

llb_status mm_encoder_check_item(const struct mm_encoder_cache *c, const struct llb_mm_feature *item) {
  if (!find_encoder(item->modality))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "modality '%s' has no encoder on this worker (known: embeds, image)",
                    item->modality.data ? item->modality.data : "");
  if (item->mm_hash.len == 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item without mm_hash");
  if (llb_mm_feature_num_embeds(item) < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item %s takes no embedding rows", item->mm_hash.data);
  if (llb_mm_dtype_is_encoded(item->dtype)) {
    if (!item->data || item->data_bytes < 1 || item->num_cols != c->hidden_size)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item %s: an empty file, or %d columns for hidden size %d",
                      item->mm_hash.data, item->num_cols, c->hidden_size);
    return LLB_STATUS_OK; /* the encoder decodes (and checks) the file */
  }
  if (item->num_cols != c->hidden_size)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item %s has %d columns, the model's hidden size is %d",
                    item->mm_hash.data, item->num_cols, c->hidden_size);
  int64_t esize = item->dtype.len == 3 && memcmp(item->dtype.data, "f32", 3) == 0   ? 4
                  : item->dtype.len == 3 && memcmp(item->dtype.data, "f16", 3) == 0 ? 2
                                                                                    : 0;
  const int32_t rows = llb_mm_feature_num_embeds(item);
  if (esize == 0 || item->length < 1 || !item->data ||
      item->data_bytes != (int64_t)rows * item->num_cols * esize)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item %s: data of %lld bytes (%s) does not hold [%d, %d]",
                    item->mm_hash.data, (long long)item->data_bytes, item->dtype.data ? item->dtype.data : "",
                    rows, item->num_cols);
  const int64_t bad = llb_embeds_first_nonfinite(item->data, item->data_bytes, item->dtype.data);
  if (bad >= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "item %s holds a non-finite value (NaN or Inf) at row %lld",
                    item->mm_hash.data, (long long)(bad / item->num_cols));
  return LLB_STATUS_OK;
}

llb_status mm_encoder_cache_encode(struct mm_encoder_cache *c, const struct llb_mm_feature *item) {
  llb_status st = mm_encoder_check_item(c, item);
  if (st) return st;
  const int32_t rows = llb_mm_feature_num_embeds(item);
  float *out = malloc((size_t)rows * (size_t)c->hidden_size * sizeof(float));
  if (!out) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder output of %d rows", rows);
  st = find_encoder(item->modality)(c, item, out);
  if (st) {
    free(out);
    return st;
  }
  mm_encoder_cache_drop(c, item->mm_hash);
  if (c->num_entries == c->cap_entries) {
    int32_t cap = c->cap_entries ? 2 * c->cap_entries : 16;
    void *p = realloc(c->entries, (size_t)cap * sizeof(*c->entries));
    if (!p) {
      free(out);
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache entries");
    }
    c->entries = p;
    c->cap_entries = cap;
  }
  char *h = malloc(item->mm_hash.len + 1);
  if (!h) {
    free(out);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache key");
  }
  memcpy(h, item->mm_hash.data, item->mm_hash.len);
  h[item->mm_hash.len] = '\0';
  c->entries[c->num_entries++] = (struct mm_entry){.mm_hash = h, .rows = rows, .out = out};
  c->num_rows += rows;
  c->num_encoded++;
  return LLB_STATUS_OK;
}

void mm_encoder_cache_drop(struct mm_encoder_cache *c, struct llb_str mm_hash) {
  int32_t i = find(c, mm_hash);
  if (i < 0) return;
  c->num_rows -= c->entries[i].rows;
  free(c->entries[i].mm_hash);
  free(c->entries[i].out);
  c->entries[i] = c->entries[--c->num_entries];
}

const float *mm_encoder_cache_get(const struct mm_encoder_cache *c, struct llb_str mm_hash, int32_t *rows) {
  int32_t i = find(c, mm_hash);
  if (i < 0) return NULL;
  *rows = c->entries[i].rows;
  return c->entries[i].out;
}

int32_t mm_encoder_cache_num_entries(const struct mm_encoder_cache *c) { return c->num_entries; }
int64_t mm_encoder_cache_num_rows(const struct mm_encoder_cache *c) { return c->num_rows; }
uint64_t mm_encoder_cache_num_encoded(const struct mm_encoder_cache *c) { return c->num_encoded; }

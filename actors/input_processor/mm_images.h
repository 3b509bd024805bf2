/* Images in chat messages → prompt tokens + placeholder ranges (issue 22; vLLM v1
 * multimodal processing: the prompt update that expands one image placeholder into the
 * model's image tokens, and PlaceholderRange with is_embed).
 *
 * A chat request's images are its mm_items of modality "image" (the JPEG / PNG file, dtype
 * "jpeg" or "png"); each sits in a message at a byte offset of its content
 * (ChatMessage.image_offsets, in order over all messages). Processing:
 *  1. Each file is sniffed (dtype must match the magic bytes) and decoded under the limits
 *     (model/vision/image.h): a truncated or corrupt file, a header claiming too many pixels or a
 *     type we do not decode is a field error "mm_items[i].data" and never reaches an engine.
 *  2. The chat template renders the messages with image parts (chat_render.h): first as
 *     OpenAI content lists ({"type": "image"}: SmolVLM's / Idefics3's template writes
 *     "<image>"); when that fails or does not write exactly one "<image>" per image, again
 *     with string content and mtmd's default marker "<__media__>" in place of each image.
 *  3. The text is split at the markers; the pieces are tokenized one by one (as mtmd's
 *     mtmd_tokenize does), and each marker becomes the planner's text for that image's size
 *     (clip_image_plan: tiles, rows, e.g. "<fake_token_around_image><row_1_col_1><image>..."),
 *     tokenized alone with special tokens parsed.
 *  4. One feature per image spans its expansion [offset, offset + length); is_embed marks
 *     the positions holding the embed token (the "<image>" token) -- those take the
 *     encoder's rows in order, the row/column markers keep their own embeddings. The number
 *     of 1s must equal the plan's rows.
 * Representation: one feature per image with a mask (vLLM's), not one per contiguous run of
 * image tokens: the encoder runs once per image and its output is cached under one mm_hash,
 * and the request carries the file once (a run per tile would repeat the file, or the encoder
 * run, per tile). mm_hash covers the mmproj's identity, so a different projector never
 * shares encoder outputs or KV blocks.
 */
#ifndef LLB_INPUT_PROCESSOR_MM_IMAGES_H
#define LLB_INPUT_PROCESSOR_MM_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/template/chat_render.h"
#include "model/vision/image.h"

struct tokenizer;

#define INPUT_PROCESSOR_IMAGE_MARKER "<image>"            /* what vision templates write per image */
#define INPUT_PROCESSOR_IMAGE_DEFAULT_MARKER "<__media__>" /* mtmd's, for templates without images */
#define INPUT_PROCESSOR_DEFAULT_MAX_IMAGES 8
#define INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST 64 /* hard cap of max_images (= INPUT_PROCESSOR_MAX_MM_ITEMS) */
#define INPUT_PROCESSOR_DEFAULT_MAX_IMAGE_BYTES (640 * 1024)

/* What one image becomes in the prompt: `text` (malloc'd, NUL-terminated; freed by the
 * caller) replaces its marker; `rows` encoder rows go to its embed tokens. */
struct input_processor_image_plan {
  char *text;
  int32_t rows;
};

/* The mmproj's plan for an image of width x height pixels (model/vision/clip.h clip_image_plan).
 * Errors are the client's (e.g. an image too small to tile). */
typedef llb_status (*input_processor_image_plan_fn)(void *ctx, int32_t width, int32_t height,
                                           struct input_processor_image_plan *out);

/* Image settings of a model server; plan NULL = images refused. */
struct input_processor_image_config {
  input_processor_image_plan_fn plan;
  void *plan_ctx;
  const char *embed_token;    /* the token whose positions take rows; NULL = "<image>" */
  const char *mmproj_id;      /* identity of the mmproj (enters mm_hash); NULL = "" */
  int32_t max_images;         /* per request; 0 = INPUT_PROCESSOR_DEFAULT_MAX_IMAGES */
  int64_t max_image_bytes;    /* each file; 0 = INPUT_PROCESSOR_DEFAULT_MAX_IMAGE_BYTES */
  struct llb_image_limits limits; /* 0s = model/vision/image.h defaults */
};

/* One image as the client sent it (borrowed). */
struct input_processor_image {
  const uint8_t *data;
  int64_t data_bytes;
  const char *dtype; /* "jpeg" or "png" */
};

/* A message for rendering, with its image offsets (borrowed). */
struct input_processor_image_message {
  const uint32_t *image_offsets; /* [num_image_offsets] */
  int32_t num_image_offsets;
};

/* One image's placeholder range in the tokenized prompt. */
struct input_processor_image_range {
  int32_t offset, length;
  uint8_t *is_embed; /* [length] malloc'd: 1 = takes the next encoder row */
  int32_t num_embeds;
};

/* Checks one file: size, dtype against its magic bytes, then decodes it under lim (pixels
 * dropped) for *width / *height. Errors (msg[cap] says what): TOO_LARGE (bytes or pixels),
 * UNSUPPORTED (not JPEG / PNG, dtype mismatch), MALFORMED (corrupt, truncated), OUT_OF_MEMORY. */
llb_status input_processor_image_check(const struct input_processor_image_config *cfg, const struct input_processor_image *img,
                              int32_t *width, int32_t *height, char *msg, size_t cap);

/* Splits `text` at each marker, tokenizes the pieces (special tokens parsed, no BOS) and
 * expands image k into plans[k].text; *ids_out ([*n_out], malloc'd) and ranges[num_images]
 * (is_embed malloc'd; free with input_processor_image_ranges_free) get the result. Errors:
 * INVALID_ARGUMENT (msg: the marker count differs from num_images, or a plan whose embed
 * tokens differ from its rows), OUT_OF_MEMORY, the tokenizer's. */
llb_status input_processor_image_expand(const struct tokenizer *tok, const char *embed_token, const char *text,
                               const char *marker, const struct input_processor_image_plan *plans,
                               int32_t num_images, int32_t **ids_out, int64_t *n_out,
                               struct input_processor_image_range *ranges, char *msg, size_t cap);

/* Occurrences of marker in text (non-overlapping). */
int32_t input_processor_image_count_markers(const char *text, const char *marker);

void input_processor_image_ranges_free(struct input_processor_image_range *ranges, int32_t n);

/* A chat request with images, for input_processor_images_tokenize (all borrowed). render.extras carry
 * each message's image_offsets; render.image_format / image_marker are set by the call. */
struct input_processor_image_request {
  const struct jinja_template *tmpl;
  struct chat_render_input render;
  const struct input_processor_image *images; /* [num_images] in the order of the offsets */
  int32_t num_images;
  const int32_t *item_index;         /* [num_images]: index in the request's mm_items */
};

/* Steps 1-4 of the header comment: checks the offsets and files, plans, renders, expands.
 * *ids_out ([*n_out], malloc'd) and ranges[num_images] (free with input_processor_image_ranges_free)
 * get the prompt (no BOS added) and the images' ranges. A client error returns its status
 * with field[fcap] ("mm_items[2].data", "messages[1].content") and msg[cap] set; OUT_OF_MEMORY
 * and the tokenizer's errors leave field "". */
llb_status input_processor_images_tokenize(const struct tokenizer *tok, const struct input_processor_image_config *cfg,
                                  struct input_processor_image_request *req, int32_t **ids_out, int64_t *n_out,
                                  struct input_processor_image_range *ranges, char *field, size_t fcap, char *msg,
                                  size_t cap);

#endif

/* The image encoder of a vision-language model (issue 22): a CLIP/SigLIP ViT plus its
 * projector, loaded from a GGUF "mmproj" file in the format llama.cpp's mtmd uses (`clip.*`
 * metadata, tensor names as tools/mtmd/clip-impl.h TN_*), run on the backend op table
 * (kernels/backend.h) like the text forward.
 *
 * Projector types (clip.projector_type):
 *  - "idefics3" (SmolVLM, Idefics3): SigLIP ViT, pixel shuffle by
 *    clip.vision.projector.scale_factor, one linear projection (mm.model.fc.weight); images are
 *    tiled as transformers' Idefics3ImageProcessor / llama.cpp's
 *    mtmd_image_preprocessor_idefics3 do (slices of image_size, then a global overview).
 *  - "mlp" (LLaVA-1.5): CLIP ViT (class embedding, pre-LayerNorm), features of the layer
 *    clip.vision.feature_layer says (default: the one before last), 2-layer MLP with GELU
 *    (mm.0, mm.2); the image is resized to image_size x image_size (one tile).
 * Any other projector type, or an mmproj without a vision encoder, is refused at load with
 * UNSUPPORTED naming it.
 *
 * Weights stay in the file's read-only mapping (shared by every process that maps it); only
 * run state (scratch sized for one tile) is allocated per model. A model is used by one thread
 * at a time (clip_encode_image writes its scratch); the plan functions only read it. */
#ifndef LLB_MODEL_CLIP_H
#define LLB_MODEL_CLIP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct clip_model; /* opaque: the mapped mmproj, its hyperparameters and run state */

/* clip.projector_type values we run (llama.cpp's PROJECTOR_TYPE_* of the same name). */
enum clip_projector_type {
  CLIP_PROJECTOR_TYPE_MLP = 1,      /* "mlp" */
  CLIP_PROJECTOR_TYPE_IDEFICS3 = 2, /* "idefics3" */
};

/* Loads an mmproj GGUF: mmaps it, reads the clip.vision.* hyperparameters (image_size,
 * patch_size, embedding_length, feed_forward_length, block_count, attention.head_count,
 * attention.layer_norm_epsilon, image_mean, image_std, projector.scale_factor,
 * feature_layer, preproc_image_size), checks every tensor's name, type and shape against
 * them, and prepares run state for `n_threads` CPU threads (>= 1; the worker's count).
 * Caller frees *out with clip_model_destroy. Errors (message says which): IO (cannot open or
 * map), MALFORMED (not GGUF, a missing or mis-shaped tensor or key), UNSUPPORTED (a
 * projector type other than mlp/idefics3, named; a tensor type we do not run),
 * INVALID_ARGUMENT, OUT_OF_MEMORY. On error *out is NULL. */
llb_status clip_model_load(const char *mmproj_path, int32_t n_threads, struct clip_model **out);

/* Unmaps and frees. NULL ok. */
void clip_model_destroy(struct clip_model *m);

/* Width of one embedding row the projector outputs: the text model's hidden size (the worker
 * checks that they match). */
int32_t clip_model_n_embd_out(const struct clip_model *m);

/* The projector type (see the enum). */
enum clip_projector_type clip_model_projector_type(const struct clip_model *m);

/* "mlp" / "idefics3": the clip.projector_type string of a type; "unknown" otherwise. */
const char *clip_projector_type_name(enum clip_projector_type t);

/* How one image of a given size is encoded and where its embeddings go in the prompt.
 *
 * The prompt text replaces one image marker of the rendered chat prompt. Every occurrence of
 * `image_token` in it takes one embedding row, in order (vLLM's PlaceholderRange.is_embed);
 * the other text around them (tile markers) is ordinary prompt text. Layouts:
 *  - idefics3, as transformers' Idefics3Processor and llama.cpp's mtmd (MTMD_SLICE_TMPL_IDEFICS3):
 *      for each tile row r (1-based), each column c:
 *        "<fake_token_around_image><row_r_col_c>" + "<image>" * rows_per_tile
 *      then "\n" after each row but the last,
 *      then "\n\n<fake_token_around_image><global-img>" + "<image>" * rows_per_tile
 *        + "<fake_token_around_image>" for the overview (always last);
 *  - mlp: "<image>" * rows_per_tile (one tile).
 * Embedding rows come out of clip_encode_image in the same order: the tiles row-major, then
 * the overview. */
struct clip_plan {
  enum clip_projector_type projector_type;
  int32_t grid_rows, grid_cols; /* slices of the image (idefics3); 0, 0 when it is not tiled */
  int32_t num_tiles;            /* ViT runs: grid_rows * grid_cols + 1 overview, or 1 */
  int32_t rows_per_tile;        /* embedding rows per tile (e.g. 64 for SmolVLM-256M) */
  int32_t num_rows;             /* num_tiles * rows_per_tile: rows clip_encode_image writes */
  const char *image_token;      /* "<image>": static, the placeholder each row takes */
  char *prompt;                 /* malloc'd, NUL-terminated; freed by clip_plan_free */
  size_t prompt_len;            /* strlen(prompt) */
};

/* Fills *out for an image of width x height pixels (from its header only: the input
 * processor plans before any pixel is decoded). Pure function of the model's metadata and
 * the size. INVALID_ARGUMENT for a side < 1 or over LLB_IMAGE_DEFAULT_MAX_SIDE (model/vision/image.h),
 * OUT_OF_MEMORY. On error *out is zeroed. Free with clip_plan_free. */
llb_status clip_image_plan(const struct clip_model *m, int32_t width, int32_t height,
                           struct clip_plan *out);

/* Frees what clip_image_plan allocated and zeroes *p. NULL ok. */
void clip_plan_free(struct clip_plan *p);

/* Encodes one image: decodes bytes[0..n) (JPEG or PNG, model/vision/image.c, default limits),
 * preprocesses it as the mmproj says (Pillow-bilinear resize; idefics3 tiling; normalization
 * by clip.vision.image_mean / image_std), runs the ViT and the projector on every tile and
 * writes out [*rows, n_embd_out] f32 in the plan's order. `max_rows` is out's capacity in
 * rows. Errors: those of llb_image_decode (UNSUPPORTED, TOO_LARGE, MALFORMED: a bad image),
 * TOO_LARGE when the image needs more than max_rows rows, INVALID_ARGUMENT, OUT_OF_MEMORY.
 * Not thread-safe for one model (see the file comment). */
llb_status clip_encode_image(struct clip_model *m, const uint8_t *bytes, size_t n, float *out,
                             int32_t max_rows, int32_t *rows);

/* As clip_encode_image for an image already decoded (model/vision/image.h; e.g. by a caller that
 * decoded it to read its size): preprocesses, encodes, writes out [*rows, n_embd_out]. Errors:
 * INVALID_ARGUMENT (an empty image), TOO_LARGE (more rows than max_rows), OUT_OF_MEMORY. */
struct llb_image;
llb_status clip_encode_rgb(struct clip_model *m, const struct llb_image *img, float *out, int32_t max_rows,
                           int32_t *rows);

#endif

/* State of the image encoder shared by its three files: clip.c (mmproj loading, plans),
 * clip_preproc.c (image -> tiles of normalized pixels) and vit.c (one tile through the ViT and
 * the projector). Not a public interface: model/vision/clip.h is. */
#ifndef LLB_MODEL_CLIP_INTERNAL_H
#define LLB_MODEL_CLIP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/vision/clip.h"
#include "model/gguf/gguf.h"

/* clip.vision.* hyperparameters (llama.cpp tools/mtmd/clip-model.h clip_hparams). */
struct clip_hparams {
  int32_t image_size;    /* side of one tile, pixels */
  int32_t patch_size;    /* side of one patch, pixels */
  int32_t n_embd;        /* ViT width */
  int32_t n_ff;          /* ViT MLP width */
  int32_t n_layer;       /* blocks in the file */
  int32_t n_layer_run;   /* blocks run: all, or up to the llava feature layer */
  int32_t n_head;
  float eps;             /* LayerNorm epsilon */
  float image_mean[3], image_std[3];
  int32_t scale_factor;  /* idefics3 pixel shuffle (clip.vision.projector.scale_factor) */
  int32_t longest_edge;  /* idefics3 clip.vision.preproc_image_size */
  enum backend_gelu_kind gelu;
};

/* One ViT block (clip-impl.h TN_*: v.blk.N.*). Vectors are f32 views into the mapping. */
struct clip_layer {
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* [n_embd] */
  struct backend_weight q, k, v, o;           /* [n_embd, n_embd] */
  const float *q_b, *k_b, *v_b, *o_b;         /* [n_embd], each may be NULL */
  struct backend_weight up;                   /* [n_ff, n_embd]: fc1 */
  struct backend_weight down;                 /* [n_embd, n_ff]: fc2 */
  const float *up_b, *down_b;                 /* [n_ff], [n_embd], may be NULL */
};

/* Scratch of one tile, allocated at load (no allocation per image beyond the decoded pixels). */
struct clip_run {
  const struct backend_ops *ops;
  struct backend_ctx *ctx;
  int32_t *pos_ids;   /* [n_pos] 0..n_pos-1 */
  float *patches;     /* [n_patches, 3 * patch_size^2] unfolded pixels */
  float *x;           /* [n_pos, n_embd] residual stream */
  float *h;           /* [n_pos, n_embd] normed */
  float *q, *k, *v;   /* [n_pos, n_embd] */
  float *att;         /* [n_pos, n_embd] */
  float *ff;          /* [n_pos, max(n_ff, projector widths)] */
  float *merged;      /* [rows_per_tile, projector input width] */
  float *pixels;      /* [3, image_size, image_size] one tile, normalized */
};

struct clip_model {
  struct gguf_file *gguf;
  enum clip_projector_type type;
  struct clip_hparams hp;
  int32_t n_patches;      /* (image_size / patch_size)^2 */
  int32_t n_pos;          /* n_patches (+1 with a class embedding) */
  int32_t rows_per_tile;  /* embedding rows one tile gives */
  int32_t n_embd_out;     /* projector output width */
  struct backend_weight patch_embd; /* [n_embd, 3 * patch_size^2] */
  const float *patch_b;             /* [n_embd] or NULL */
  struct backend_weight pos_embd;   /* [n_pos, n_embd] */
  const float *class_embd;          /* [n_embd] or NULL (llava) */
  const float *pre_ln_w, *pre_ln_b, *post_ln_w, *post_ln_b; /* [n_embd] or NULL */
  struct clip_layer *layers;        /* [n_layer] */
  struct backend_weight mm0, mm2;   /* mlp: [mm_hidden, n_embd], [n_embd_out, mm_hidden];
                                       idefics3: mm0 = fc [n_embd_out, n_embd * s^2] */
  const float *mm0_b, *mm2_b;       /* mlp biases */
  struct clip_run run;
};

/* Runs one tile (m->run.pixels, normalized, planar [3][image_size][image_size]) through the ViT
 * and the projector into out [rows_per_tile, n_embd_out]. vit.c. */
llb_status clip_vit_encode_tile(struct clip_model *m, float *out);

/* Allocates m->run for the model's sizes and n_threads. vit.c. */
llb_status clip_run_init(struct clip_model *m, int32_t n_threads);
void clip_run_free(struct clip_run *r);

/* The idefics3 sizes of an image: the refined size (multiples of image_size) and the grid.
 * clip.c; clip_preproc.c resizes to them. */
void clip_idefics3_sizes(const struct clip_model *m, int32_t width, int32_t height, int32_t *resized_w,
                         int32_t *resized_h, int32_t *grid_cols, int32_t *grid_rows);

#endif

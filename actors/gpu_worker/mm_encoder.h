/* The worker's multimodal encoder step (vLLM v1 gpu_model_runner.py _execute_mm_encoder and
 * _gather_mm_embeddings): a table of encoders by modality and the encoder-output cache keyed
 * by mm_hash.
 *
 * - Encoders: one function per modality turns an item (llb_mm_feature with data) into
 *   [length, hidden_size] f32 rows. "embeds" is the identity: the item's data are the
 *   outputs (f16 is widened to f32 here, the worker's job). "image" runs the mmproj's ViT
 *   (model/vision/clip.h, --mmproj) on the JPEG / PNG file; its rows go to the positions the
 *   feature's is_embed marks.
 * - Cache: filled when the scheduler lists an item in scheduled_encoder_inputs, emptied only
 *   by free_encoder_mm_hashes (the scheduler's encoder-cache accounting decides; its size
 *   bounds the rows kept here). Entries are content-addressed, so two requests sharing an
 *   item read the same rows.
 * - Gather: for one request's scheduled range [start, start + n), every item whose
 *   placeholder range overlaps it contributes the overlapping slice of its cached rows
 *   (chunked prefill may split an item across steps), marked in embeds_mask so that the
 *   forward pass takes those rows instead of the token embeddings.
 * Pure logic, not thread-safe.
 */
#ifndef LLB_GPU_WORKER_MM_ENCODER_H
#define LLB_GPU_WORKER_MM_ENCODER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "schemas/codec.h"

/* Encodes one item: out is [llb_mm_feature_num_embeds(item), hidden_size] f32, row-major
 * (item->length rows without an is_embed mask). */
struct mm_encoder_cache;
typedef llb_status (*mm_encode_fn)(struct mm_encoder_cache *c, const struct llb_mm_feature *item, float *out);
struct clip_model;

/* Creates an empty cache for outputs of hidden_size columns (the model's embedding_length).
 * Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status mm_encoder_cache_create(int32_t hidden_size, struct mm_encoder_cache **out);
void mm_encoder_cache_destroy(struct mm_encoder_cache *c); /* NULL ok */

/* Installs the "image" encoder (model/vision/clip.h; borrowed, outlives c; NULL = images refused
 * with UNSUPPORTED naming --mmproj). Its n_embd_out must equal hidden_size (the caller checks). */
void mm_encoder_cache_set_image_encoder(struct mm_encoder_cache *c, struct clip_model *clip);

/* True when a modality has an encoder. */
bool mm_encoder_supports(struct llb_str modality);

/* Checks an item can be encoded (modality known, data present, dtype, num_cols ==
 * hidden_size, bytes matching [length, num_cols]); the message names what is wrong. */
llb_status mm_encoder_check_item(const struct mm_encoder_cache *c, const struct llb_mm_feature *item);

/* Runs the item's encoder and stores the output under item->mm_hash (an existing entry is
 * replaced). Errors: mm_encoder_check_item's, OUT_OF_MEMORY, the encoder's. */
llb_status mm_encoder_cache_encode(struct mm_encoder_cache *c, const struct llb_mm_feature *item);

/* Drops the output of mm_hash; unknown hashes are ignored. */
void mm_encoder_cache_drop(struct mm_encoder_cache *c, struct llb_str mm_hash);

/* The cached output [*rows, hidden_size] of mm_hash, or NULL. Valid until it is dropped. */
const float *mm_encoder_cache_get(const struct mm_encoder_cache *c, struct llb_str mm_hash, int32_t *rows);

int32_t mm_encoder_cache_num_entries(const struct mm_encoder_cache *c);
int64_t mm_encoder_cache_num_rows(const struct mm_encoder_cache *c);
uint64_t mm_encoder_cache_num_encoded(const struct mm_encoder_cache *c); /* items encoded, cumulative */

#endif

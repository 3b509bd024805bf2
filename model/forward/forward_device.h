/* The device side of model/forward/forward.c (private to model/): placing a model's weights and
 * vectors in a device backend's memory at context creation, and checking every index of a
 * batch on the host before a device step is queued (device kernels trust their indices).
 */
#ifndef LLB_MODEL_FORWARD_DEVICE_H
#define LLB_MODEL_FORWARD_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/backend.h"
#include "model/forward/forward.h"

/* A host float vector to upload: *slot points at n floats (NULL: none, skipped) and is
 * repointed at the copy. */
struct forward_vector {
  const float **slot;
  int64_t n;
};

/* Uploads every vector of v [n] into one buffer of ops (*buf, freed with ops->buffer_free by
 * the caller; NULL when there is nothing) through bc and repoints the slots. OUT_OF_MEMORY,
 * the backend's errors. */
llb_status forward_device_upload_vectors(const struct backend_ops *ops, struct backend_ctx *bc,
                                         struct forward_vector *v, int32_t n, void **buf);

/* Uploads every weight of ws [n] into one buffer of ops (*buf, as above; *bytes its size) in
 * the backend's layout (weight_bytes / weight_upload) and sets each weight's packed. The list
 * is model/forward/forward.c's order: 7 per layer (attn_q, attn_k, attn_v, attn_output, ffn_gate,
 * ffn_up, ffn_down), then output, then token_embd; a weight with the data of an earlier one
 * (tied embeddings) shares its copy. UNSUPPORTED naming the tensor and its type when the
 * backend has no layout for it; the backend's errors, naming the tensor. */
llb_status forward_device_upload_weights(const struct backend_ops *ops, struct backend_ctx *bc,
                                         struct backend_weight **ws, int32_t n, void **buf, size_t *bytes);

/* Checks every index of b that a device step follows, on the host (model/forward/forward.c's
 * check_batch has run): token ids of rows not taken from embeddings in [0, vocab), slots in
 * [-1, num_blocks * block_size), query_start_loc from 0 to num_tokens without going back,
 * each seq_len covering its query rows and within max_context_len and its block table, and
 * the block ids it reads in [0, num_blocks). INVALID_ARGUMENT naming the field. */
llb_status forward_device_check_batch(const struct llama_batch *b, int32_t vocab, int32_t max_context_len,
                                      const struct backend_kv_layer *kv);

#endif

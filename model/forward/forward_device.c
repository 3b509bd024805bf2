/* The device side of model/forward/forward.c: uploads at context creation, host checks of a step. */
#include "model/forward/forward_device.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/quant.h"

#define DEVICE_ALIGN 256 /* bytes between uploaded tensors (cuBLAS and vector loads like 16+) */

static size_t align_up(size_t x) { return (x + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN; }

llb_status forward_device_upload_vectors(const struct backend_ops *ops, struct backend_ctx *bc,
                                         struct forward_vector *v, int32_t n, void **buf) {
  *buf = NULL;
  size_t total = 0;
  for (int32_t i = 0; i < n; i++)
    if (*v[i].slot && v[i].n > 0) total += align_up((size_t)v[i].n * sizeof(float));
  if (total == 0) return LLB_STATUS_OK;
  llb_status st = ops->buffer_alloc(total, buf);
  if (st != LLB_STATUS_OK) return st;
  uint8_t *dst = *buf;
  for (int32_t i = 0; i < n; i++) {
    if (!*v[i].slot || v[i].n <= 0) continue;
    const size_t bytes = (size_t)v[i].n * sizeof(float);
    if ((st = ops->buffer_upload(bc, dst, *v[i].slot, bytes)) != LLB_STATUS_OK) return st;
    *v[i].slot = (const float *)dst;
    dst += align_up(bytes);
  }
  return LLB_STATUS_OK;
}

/* GGUF name of weight i of the list (see forward_device.h) into buf [cap]. */
static void weight_name(int32_t i, int32_t n, char *buf, size_t cap) {
  static const char *const layer_names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                             "ffn_down"};
  if (i == n - 1) snprintf(buf, cap, "token_embd.weight");
  else if (i == n - 2) snprintf(buf, cap, "output.weight");
  else snprintf(buf, cap, "blk.%d.%s.weight", i / 7, layer_names[i % 7]);
}

/* Index of an earlier weight of ws holding the same tensor as ws[i] (tied embeddings), or -1. */
static int32_t same_as_earlier(struct backend_weight **ws, int32_t i) {
  for (int32_t j = 0; j < i; j++)
    if (ws[j]->data == ws[i]->data && ws[j]->type == ws[i]->type && ws[j]->rows == ws[i]->rows &&
        ws[j]->cols == ws[i]->cols)
      return j;
  return -1;
}

llb_status forward_device_upload_weights(const struct backend_ops *ops, struct backend_ctx *bc,
                                         struct backend_weight **ws, int32_t n, void **buf, size_t *bytes) {
  *buf = NULL;
  *bytes = 0;
  char name[96];
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    if (same_as_earlier(ws, i) >= 0) continue;
    const size_t b = ops->weight_bytes(ws[i]);
    if (b == 0) {
      weight_name(i, n, name, sizeof name);
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "backend %s: tensor %s has type %s, which it cannot hold", ops->name,
                      name, ggml_type_name(ws[i]->type));
    }
    total += align_up(b);
  }
  llb_status st = ops->buffer_alloc(total, buf);
  if (st != LLB_STATUS_OK) return st;
  uint8_t *dst = *buf;
  for (int32_t i = 0; i < n; i++) {
    const int32_t j = same_as_earlier(ws, i);
    if (j >= 0) {
      ws[i]->packed = ws[j]->packed;
      continue;
    }
    if ((st = ops->weight_upload(bc, ws[i], dst)) != LLB_STATUS_OK) {
      weight_name(i, n, name, sizeof name);
      return LLB_ERRF(st, "backend %s: upload of tensor %s (%s) failed", ops->name, name,
                      ggml_type_name(ws[i]->type));
    }
    ws[i]->packed = dst;
    dst += align_up(ops->weight_bytes(ws[i]));
  }
  *bytes = total;
  return LLB_STATUS_OK;
}

llb_status forward_device_check_batch(const struct llama_batch *b, int32_t vocab, int32_t max_context_len,
                                      const struct backend_kv_layer *kv) {
  const int32_t bs = kv->block_size, nb = kv->num_blocks;
  const int64_t n_slots = (int64_t)nb * bs;
  for (int32_t i = 0; i < b->num_tokens; i++) {
    const bool embedded = b->input_embeds && (!b->embeds_mask || b->embeds_mask[i]);
    if (!embedded && (b->token_ids[i] < 0 || b->token_ids[i] >= vocab))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token_ids[%d] = %d not in [0, %d)", i, b->token_ids[i], vocab);
    if (b->slot_mapping[i] < -1 || b->slot_mapping[i] >= n_slots)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "slot_mapping[%d] = %lld not in [-1, %lld)", i,
                      (long long)b->slot_mapping[i], (long long)n_slots);
  }
  if (b->query_start_loc[0] != 0 || b->query_start_loc[b->num_seqs] != b->num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc does not cover %d tokens", b->num_tokens);
  for (int32_t s = 0; s < b->num_seqs; s++) {
    const int32_t q0 = b->query_start_loc[s], q1 = b->query_start_loc[s + 1], len = b->seq_lens[s];
    if (q1 < q0 || len < q1 - q0 || len > max_context_len ||
        (int64_t)len > (int64_t)b->max_blocks_per_seq * bs)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d: %d query rows, seq_len %d (max context %d)", s,
                      q1 - q0, len, max_context_len);
    for (int32_t k = 0; k < (len + bs - 1) / bs; k++) {
      const int32_t id = b->block_tables[(int64_t)s * b->max_blocks_per_seq + k];
      if (id < 0 || id >= nb)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d block %d: id %d not in [0, %d)", s, k, id, nb);
    }
  }
  return LLB_STATUS_OK;
}

/* Paged causal attention with GQA over an fp16 KV cache (vLLM's paged layout).
 *
 * One (query row, head) pair is one work item; items are dealt to threads round-robin so
 * that causal rows of different lengths balance. Each item is computed the same way
 * whatever else is in the batch: scores q.k (8-lane fixed order, kernels/cpu/vec_dot.h)
 * times scale, softmax in f32 with max subtraction and the sum in double (as ggml's
 * soft_max), then out = sum_j p_j v_j by elementwise fma in key order. */
#include "kernels/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

struct attn_task {
  const struct backend_ctx *c;
  const struct backend_attn_params *p;
};

static void attention_item(const struct attn_task *t, int64_t item, float *scores) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim;
  const int32_t tok = (int32_t)(item / p->n_heads), h = (int32_t)(item % p->n_heads);
  const int32_t s = t->c->row_seq[tok];
  const int32_t q_len = p->query_start_loc[s + 1] - p->query_start_loc[s];
  const int32_t n_ctx = p->seq_lens[s] - q_len + (tok - p->query_start_loc[s]) + 1;
  const int32_t kvh = h / (p->n_heads / kv->n_kv_heads);
  const int32_t *table = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
  const float *q = p->q + ((int64_t)tok * p->n_heads + h) * hd;
  float *out = p->out + ((int64_t)tok * p->n_heads + h) * hd;
  const int64_t kv_row = (int64_t)kv->n_kv_heads * hd;

  float max = -INFINITY;
  for (int32_t j = 0; j < n_ctx; j++) {
    const int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
    const float sc = cpu_dot_f32_f16(t->c->level, hd, q, kv->k + slot * kv_row + (int64_t)kvh * hd) * p->scale;
    scores[j] = sc;
    if (sc > max) max = sc;
  }
  double sum = 0.0;
  for (int32_t j = 0; j < n_ctx; j++) {
    scores[j] = expf(scores[j] - max);
    sum += (double)scores[j];
  }
  const float inv = (float)(1.0 / sum);
  memset(out, 0, (size_t)hd * sizeof(float));
  for (int32_t j = 0; j < n_ctx; j++) {
    const int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
    cpu_axpy_f16(t->c->level, hd, scores[j] * inv, kv->v + slot * kv_row + (int64_t)kvh * hd, out);
  }
}

static void attention_run(void *arg, int ith, int nth) {
  const struct attn_task *t = arg;
  float *scores = t->c->scores + (size_t)ith * (size_t)t->c->params.max_context_len;
  const int64_t n_items = (int64_t)t->p->num_tokens * t->p->n_heads;
  for (int64_t it = ith; it < n_items; it += nth) attention_item(t, it, scores);
}

llb_status cpu_attention(struct backend_ctx *c, const struct backend_attn_params *p) {
  const struct backend_kv_layer *kv = p->kv;
  if (p->num_tokens < 0 || p->num_tokens > c->params.max_num_tokens || p->num_seqs < 0 ||
      p->n_heads < 1 || kv->n_kv_heads < 1 || p->n_heads % kv->n_kv_heads != 0 || kv->head_dim < 1 ||
      kv->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention: %d tokens, %d heads, %d kv heads",
                    p->num_tokens, p->n_heads, kv->n_kv_heads);
  if (p->query_start_loc[0] != 0 || p->query_start_loc[p->num_seqs] != p->num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc does not cover %d tokens",
                    p->num_tokens);
  for (int32_t s = 0; s < p->num_seqs; s++) {
    const int32_t q0 = p->query_start_loc[s], q1 = p->query_start_loc[s + 1];
    const int32_t len = p->seq_lens[s];
    if (q1 < q0 || len < q1 - q0 || len > c->params.max_context_len ||
        (int64_t)len > (int64_t)p->max_blocks_per_seq * kv->block_size)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "seq %d: %d query rows, seq_len %d (max context %d, %d blocks of %d)", s,
                      q1 - q0, len, c->params.max_context_len, p->max_blocks_per_seq, kv->block_size);
    const int32_t n_blocks = (len + kv->block_size - 1) / kv->block_size;
    for (int32_t b = 0; b < n_blocks; b++) {
      const int32_t id = p->block_tables[(int64_t)s * p->max_blocks_per_seq + b];
      if (id < 0 || id >= kv->num_blocks)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d block %d: id %d not in [0, %d)", s, b,
                        id, kv->num_blocks);
    }
    for (int32_t r = q0; r < q1; r++) c->row_seq[r] = s;
  }
  if (p->num_tokens == 0) return LLB_STATUS_OK;
  struct attn_task t = {c, p};
  cpu_threadpool_run(c->pool, attention_run, &t);
  return LLB_STATUS_OK;
}

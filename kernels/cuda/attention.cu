/* Paged causal GQA attention over the fp16 cache (vLLM's paged_attention v2 scheme), one
 * kernel for decode and for (chunked) prefill: a block computes one (query row, group of up
 * to 4 query heads sharing a KV head, partition of keys); rows whose context spans several partitions are
 * merged by a second kernel (split-K with the log-sum-exp rescale). The grid covers the
 * longest allowed context, so one launch shape serves every step (CUDA graphs): blocks past
 * a row's context return at once. Each row is computed in one fixed order whatever else is
 * in the batch. Scores and softmax in fp32; K/V read as 16-byte vectors of 8 halves. */
#include "kernels/cuda/cuda_common.cuh"

#include <float.h>

#define ATTN_THREADS 128
#define ATTN_GQA_MIN_ROWS 16     /* fewer rows: one query head per block (more blocks) */
#define ATTN_WARPS (ATTN_THREADS / 32)

struct attn_args {
  const float *q;               /* [num_tokens, q_stride] holding [n_heads, head_dim] */
  float *out_f32;               /* [num_tokens, n_heads, head_dim] or NULL */
  __half *out_f16;              /* [num_tokens, n_heads, head_dim] or NULL */
  const __half *kc, *vc;        /* [num_blocks, block_size, n_kv_heads, head_dim] */
  float *part_out;              /* [num_tokens, n_heads, max_parts, head_dim] */
  float *part_ml;               /* [num_tokens, n_heads, max_parts, 2] */
  const int32_t *row_seq;       /* [num_tokens] */
  const int32_t *qsl;           /* [num_seqs + 1] */
  const int32_t *seq_lens;      /* [num_seqs] */
  const int32_t *block_tables;  /* [num_seqs, max_blocks_per_seq] */
  int64_t q_stride;
  int32_t n_heads, n_kv_heads, head_dim, block_size, max_blocks_per_seq, max_parts;
  int32_t part_size;            /* keys per partition: the context's, fixed at its creation */
  float scale;
};

/* Context length seen by query row r (its causal prefix, itself included). */
__device__ __forceinline__ int32_t attn_row_ctx(const struct attn_args &a, int32_t r, int32_t *seq) {
  const int32_t s = a.row_seq[r];
  const int32_t q0 = a.qsl[s], q_len = a.qsl[s + 1] - q0;
  *seq = s;
  return a.seq_lens[s] - q_len + (r - q0) + 1;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Block-wide max (MAX) or sum of v per query head g, in the fixed order thread -> warp ->
 * warp index; every thread gets the result. red_s [GN][ATTN_WARPS]. */
template <int GN, bool MAX>
__device__ __forceinline__ void block_reduce(float (&v)[GN], float (*red_s)[ATTN_WARPS]) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int g = 0; g < GN; g++) {
    const float w = MAX ? warp_max(v[g]) : warp_sum(v[g]);
    if (tid % 32 == 0) red_s[g][tid / 32] = w;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < GN; g++) {
    float x = red_s[g][0];
    for (int w = 1; w < ATTN_WARPS; w++) x = MAX ? fmaxf(x, red_s[g][w]) : x + red_s[g][w];
    v[g] = x;
  }
  __syncthreads();
}

/* GN query heads that share one KV head (GQA) are computed by one block, so each K and V row
 * of the partition is read once for all of them (with one block per query head, a 4:1 GQA
 * model read its cache 4 times: 197 of a 300 us layer at batch 128 on the H100). Per query
 * head the arithmetic and its order are those of one head alone: scores one key per thread,
 * the dot in order over 16-byte chunks; V by key groups of D/8 threads (16-byte loads),
 * merged in group order.
 * grid: (num_tokens, n_kv_heads * (heads per KV head / GN), max_parts), block: ATTN_THREADS */
template <int GN>
__global__ void __launch_bounds__(ATTN_THREADS) paged_attention_kernel(struct attn_args a) {
  __shared__ float q_s[GN][CUDA_ATTN_MAX_HEAD_DIM];
  __shared__ float p_s[GN][CUDA_ATTN_PARTITION];
  __shared__ float red_s[GN][ATTN_WARPS];
  __shared__ float acc_s[ATTN_THREADS * 8 * GN]; /* [key groups, GN, head_dim]: KG * D <= 8 * ATTN_THREADS */
  const int32_t r = blockIdx.x, part = blockIdx.z, tid = threadIdx.x;
  const int32_t D = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int32_t kvh = blockIdx.y / (group / GN), h0 = kvh * group + (blockIdx.y % (group / GN)) * GN;
  int32_t s;
  const int32_t n_ctx = attn_row_ctx(a, r, &s);
  const int32_t start = part * a.part_size;
  if (start >= n_ctx) return;
  const int32_t n = min(a.part_size, n_ctx - start);
  const int32_t n_parts = (n_ctx + a.part_size - 1) / a.part_size;
  const int32_t *table = a.block_tables + (int64_t)s * a.max_blocks_per_seq;
  const int64_t kv_row = (int64_t)a.n_kv_heads * D;
#pragma unroll
  for (int g = 0; g < GN; g++)
    for (int d = tid; d < D; d += ATTN_THREADS) q_s[g][d] = a.q[(int64_t)r * a.q_stride + (int64_t)(h0 + g) * D + d];
  __syncthreads();

  /* scores: one key per thread, read once for the GN heads */
  float m[GN];
#pragma unroll
  for (int g = 0; g < GN; g++) m[g] = -FLT_MAX;
  for (int j = tid; j < n; j += ATTN_THREADS) {
    const int32_t t = start + j;
    const int64_t slot = (int64_t)table[t / a.block_size] * a.block_size + t % a.block_size;
    const uint4 *k = (const uint4 *)(a.kc + slot * kv_row + (int64_t)kvh * D);
    float dot[GN];
#pragma unroll
    for (int g = 0; g < GN; g++) dot[g] = 0.0f;
    for (int c = 0; c < D / 8; c++) {
      const uint4 raw = k[c];
      const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 f = __half22float2(h2[e]);
#pragma unroll
        for (int g = 0; g < GN; g++) {
          dot[g] = fmaf(q_s[g][8 * c + 2 * e], f.x, dot[g]);
          dot[g] = fmaf(q_s[g][8 * c + 2 * e + 1], f.y, dot[g]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GN; g++) {
      const float sc = dot[g] * a.scale;
      p_s[g][j] = sc;
      m[g] = fmaxf(m[g], sc);
    }
  }
  block_reduce<GN, true>(m, red_s);
  float l[GN];
#pragma unroll
  for (int g = 0; g < GN; g++) l[g] = 0.0f;
  for (int j = tid; j < n; j += ATTN_THREADS)
#pragma unroll
    for (int g = 0; g < GN; g++) {
      const float e = expf(p_s[g][j] - m[g]);
      p_s[g][j] = e;
      l[g] += e;
    }
  block_reduce<GN, false>(l, red_s);

  /* out[g][d] = sum_j p[g][j] v_j[d]: thread c of key group kg reads halves [8c, 8c + 8) of
   * V row j for j = kg, kg + KG, ... (KG = 16 for head_dim 64: 16 keys in flight at once) */
  const int TPK = D / 8, KG = ATTN_THREADS / TPK;
  const int kg = tid / TPK, c = tid % TPK;
  float acc[GN][8];
#pragma unroll
  for (int g = 0; g < GN; g++)
#pragma unroll
    for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
  if (kg < KG) {
    const __half *vbase = a.vc + (int64_t)kvh * D + 8 * c;
#pragma unroll 2
    for (int j = kg; j < n; j += KG) {
      const int32_t t = start + j;
      const int64_t slot = (int64_t)table[t / a.block_size] * a.block_size + t % a.block_size;
      const uint4 raw = *(const uint4 *)(vbase + slot * kv_row);
      const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 f = __half22float2(h2[e]);
#pragma unroll
        for (int g = 0; g < GN; g++) {
          const float pj = p_s[g][j];
          acc[g][2 * e] = fmaf(pj, f.x, acc[g][2 * e]);
          acc[g][2 * e + 1] = fmaf(pj, f.y, acc[g][2 * e + 1]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GN; g++)
#pragma unroll
      for (int e = 0; e < 8; e++) acc_s[(kg * GN + g) * D + 8 * c + e] = acc[g][e];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < GN; g++) {
    const int64_t rh = (int64_t)r * a.n_heads + h0 + g;
    for (int d = tid; d < D; d += ATTN_THREADS) {
      float sum = 0.0f;
      for (int k = 0; k < KG; k++) sum += acc_s[(k * GN + g) * D + d];
      if (n_parts == 1) {
        const float o = sum / l[g];
        if (a.out_f32) a.out_f32[rh * D + d] = o;
        if (a.out_f16) a.out_f16[rh * D + d] = __float2half_rn(o);
      } else {
        a.part_out[(rh * a.max_parts + part) * D + d] = sum;
      }
    }
    if (n_parts > 1 && tid == 0) {
      a.part_ml[(rh * a.max_parts + part) * 2] = m[g];
      a.part_ml[(rh * a.max_parts + part) * 2 + 1] = l[g];
    }
  }
}

/* grid: (num_tokens, n_heads), block: ATTN_THREADS */
__global__ void __launch_bounds__(ATTN_THREADS) paged_attention_combine_kernel(struct attn_args a) {
  const int32_t r = blockIdx.x, h = blockIdx.y;
  int32_t s;
  const int32_t n_ctx = attn_row_ctx(a, r, &s);
  const int32_t n_parts = (n_ctx + a.part_size - 1) / a.part_size;
  if (n_parts <= 1) return;
  const int64_t base = ((int64_t)r * a.n_heads + h) * a.max_parts;
  float M = -FLT_MAX;
  for (int p = 0; p < n_parts; p++) M = fmaxf(M, a.part_ml[(base + p) * 2]);
  float L = 0.0f;
  for (int p = 0; p < n_parts; p++) L += expf(a.part_ml[(base + p) * 2] - M) * a.part_ml[(base + p) * 2 + 1];
  const int64_t out_base = ((int64_t)r * a.n_heads + h) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int p = 0; p < n_parts; p++)
      acc += expf(a.part_ml[(base + p) * 2] - M) * a.part_out[(base + p) * a.head_dim + d];
    const float o = acc / L;
    if (a.out_f32) a.out_f32[out_base + d] = o;
    if (a.out_f16) a.out_f16[out_base + d] = __float2half_rn(o);
  }
}

llb_status cuda_attention(struct cuda_ctx *c, const struct cuda_attn_params *p) {
  const struct cuda_kv_layer *kv = p->kv;
  const struct cuda_ctx_params *cp = &c->params;
  if (p->num_tokens < 0 || p->n_heads < 1 || kv->n_kv_heads < 1 || p->n_heads % kv->n_kv_heads != 0 ||
      kv->block_size < 1 || p->max_blocks_per_seq < 1 || (!p->out_f32 && !p->out_f16) ||
      p->q_stride < (int64_t)p->n_heads * kv->head_dim || p->max_seq_len < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda attention: %d tokens, %d heads, %d kv heads",
                    p->num_tokens, p->n_heads, kv->n_kv_heads);
  if (kv->head_dim < 8 || kv->head_dim % 8 != 0 || kv->head_dim > cp->max_head_dim)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda attention: head_dim %d (a multiple of 8, <= %d)",
                    kv->head_dim, cp->max_head_dim);
  if (p->num_tokens > cp->max_num_tokens || p->n_heads > cp->max_num_heads ||
      p->max_seq_len > cp->max_context_len)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "cuda attention: %d tokens, %d heads, context %d over the ctx's %d, %d, %d",
                    p->num_tokens, p->n_heads, p->max_seq_len, cp->max_num_tokens, cp->max_num_heads,
                    cp->max_context_len);
  if (p->n_heads > CUDA_MAX_GRID_YZ) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "%d heads", p->n_heads);
  if (p->num_tokens == 0) return LLB_STATUS_OK;
  /* The context's partition size whatever the batch: a row is split and merged the same way
   * in every batch (batch invariance); only the grid's extent follows max_seq_len. */
  const int32_t part_size = c->attn_part_size;
  const unsigned parts = cuda_div_up(p->max_seq_len, part_size);
  /* query heads per block: the largest of 4, 3, 2, 1 that divides the GQA group, once the
   * batch has enough rows to fill the GPU with fewer blocks (the result is the same bits
   * either way: each head's arithmetic does not depend on its block's other heads) */
  const int32_t group = p->n_heads / kv->n_kv_heads;
  const int gn = p->num_tokens < ATTN_GQA_MIN_ROWS ? 1
                 : group % 4 == 0 ? 4 : group % 3 == 0 ? 3 : group % 2 == 0 ? 2 : 1;
  const struct attn_args a = {p->q, p->out_f32, (__half *)p->out_f16, (const __half *)kv->k,
                              (const __half *)kv->v, c->attn_part_out, c->attn_part_ml, p->row_seq,
                              p->query_start_loc, p->seq_lens, p->block_tables, p->q_stride, p->n_heads,
                              kv->n_kv_heads, kv->head_dim, kv->block_size, p->max_blocks_per_seq,
                              c->max_parts, part_size, p->scale};
  const dim3 grid(p->num_tokens, kv->n_kv_heads * (group / gn), parts);
  switch (gn) {
  case 4: paged_attention_kernel<4><<<grid, ATTN_THREADS, 0, c->stream>>>(a); break;
  case 3: paged_attention_kernel<3><<<grid, ATTN_THREADS, 0, c->stream>>>(a); break;
  case 2: paged_attention_kernel<2><<<grid, ATTN_THREADS, 0, c->stream>>>(a); break;
  default: paged_attention_kernel<1><<<grid, ATTN_THREADS, 0, c->stream>>>(a); break;
  }
  CUDA_TRY_LAUNCH();
  if (parts > 1) {
    paged_attention_combine_kernel<<<dim3(p->num_tokens, p->n_heads), ATTN_THREADS, 0, c->stream>>>(a);
    CUDA_TRY_LAUNCH();
  }
  return LLB_STATUS_OK;
}

/* RoPE (ggml_rope_ext, NORM and NEOX; ext_factor 0, attn_factor 1). theta_i = p *
 * theta_scale^i by ggml's repeated float products (ggml_rope_cache_init), then scaled. */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

struct rope_args {
  float *x;               /* [n_rows, row_stride] holding [n_heads, head_dim] */
  const int32_t *pos;     /* [n_rows] */
  int64_t row_stride;
  int32_t n_heads, head_dim, half;
  float theta_scale, freq_scale;
  int32_t neox;
};

/* grid: n_rows, block: 128 (threads walk the (head, pair) items of the row) */
__global__ void rope_kernel(struct rope_args a) {
  float *row = a.x + (int64_t)blockIdx.x * a.row_stride;
  const float p = (float)a.pos[blockIdx.x];
  for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
    float theta = p;
    for (int j = 0; j < i; j++) theta = __fmul_rn(theta, a.theta_scale);
    const float th = __fmul_rn(a.freq_scale, theta);
    const float cs = cosf(th), sn = sinf(th);
    const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + a.half : 2 * i + 1;
    for (int h = 0; h < a.n_heads; h++) {
      float *v = row + (int64_t)h * a.head_dim;
      const float x0 = v[ia], x1 = v[ib];
      v[ia] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
      v[ib] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
  }
}

llb_status cuda_rope(struct cuda_ctx *c, float *x_d, int64_t row_stride, const int32_t *positions_d,
                     int32_t n_rows, int32_t n_heads, int32_t head_dim,
                     const struct backend_rope_params *p) {
  if (p->n_dims < 2 || p->n_dims % 2 != 0 || p->n_dims > head_dim || n_rows < 0 || n_heads < 1 ||
      row_stride < (int64_t)n_heads * head_dim ||
      (p->style != BACKEND_ROPE_STYLE_NORM && p->style != BACKEND_ROPE_STYLE_NEOX))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda rope n_dims %d head_dim %d style %d", p->n_dims,
                    head_dim, (int)p->style);
  if (p->freq_factors)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda rope: frequency factors (rope_freqs) are refused on cuda (Llama 3.x runs on the CPU)");
  if (p->attn_factor != 0.0f && p->attn_factor != 1.0f)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda rope: attn_factor %g is refused on cuda (phi3 LongRoPE runs on the CPU)", p->attn_factor);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct rope_args a = {x_d, positions_d, row_stride, n_heads, head_dim, p->n_dims / 2,
                              powf(p->freq_base, -2.0f / (float)p->n_dims), p->freq_scale,
                              p->style == BACKEND_ROPE_STYLE_NEOX};
  rope_kernel<<<n_rows, 128, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

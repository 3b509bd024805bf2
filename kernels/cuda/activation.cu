/* SiLU-and-mul (SwiGLU) and the row gather / fp16 rounding of matmul inputs. */
#include "kernels/cuda/cuda_common.cuh"

struct silu_args {
  const float *gate, *up; /* [n_rows, stride] */
  __half *out;            /* [n_rows, n] */
  int64_t stride, n;
  int32_t n_rows;
};

/* grid: (ceil(n / 256), n_rows), block: 256 */
__global__ void silu_and_mul_kernel(struct silu_args a) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r = blockIdx.y;
  if (i >= a.n) return;
  const float g = a.gate[r * a.stride + i];
  /* ggml_silu_f32 then mul, no contraction */
  const float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  a.out[r * a.n + i] = __float2half_rn(__fmul_rn(s, a.up[r * a.stride + i]));
}

llb_status cuda_silu_and_mul(struct cuda_ctx *c, const float *gate_d, const float *up_d,
                             int64_t stride, int32_t n_rows, int64_t n, uint16_t *out_f16_d) {
  if (n_rows < 0 || n < 1 || stride < n || n_rows > CUDA_MAX_GRID_YZ)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda silu_and_mul %d x %lld (stride %lld)", n_rows,
                    (long long)n, (long long)stride);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct silu_args a = {gate_d, up_d, (__half *)out_f16_d, stride, n, n_rows};
  silu_and_mul_kernel<<<dim3(cuda_div_up(n, 256), n_rows), 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

struct gather_args {
  const float *x;      /* [*, dim] */
  const int32_t *rows; /* [n_rows] or NULL */
  __half *out;         /* [n_rows, dim] */
  int32_t dim;
};

/* grid: n_rows, block: 256 */
__global__ void gather_f16_kernel(struct gather_args a) {
  const int64_t src = a.rows ? a.rows[blockIdx.x] : blockIdx.x;
  for (int i = threadIdx.x; i < a.dim; i += blockDim.x)
    a.out[(int64_t)blockIdx.x * a.dim + i] = __float2half_rn(a.x[src * a.dim + i]);
}

llb_status cuda_gather_f16(struct cuda_ctx *c, const float *x_d, const int32_t *rows_d,
                           int32_t n_rows, int32_t dim, uint16_t *out_f16_d) {
  if (n_rows < 0 || dim < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda gather %d x %d", n_rows, dim);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct gather_args a = {x_d, rows_d, (__half *)out_f16_d, dim};
  gather_f16_kernel<<<n_rows, 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

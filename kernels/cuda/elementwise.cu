/* Elementwise ops of the op table on fp32 activations: the residual add, SwiGLU, and the row
 * gather of the logits rows. Each element's arithmetic is ggml's (no contraction), so they
 * give the bits of the fused kernels they replace (rms_norm's add, silu_and_mul). */
#include "kernels/cuda/cuda_common.cuh"

struct binary_args {
  float *out;             /* [n] */
  const float *a, *b;     /* [n] */
  int64_t n;
};

/* grid: min(ceil(n / 256), 65536) (grid-stride), block: 256 */
__global__ void add_kernel(struct binary_args a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x)
    a.out[i] = __fadd_rn(a.a[i], a.b[i]);
}

/* grid: min(ceil(n / 256), 65536) (grid-stride), block: 256 */
__global__ void swiglu_kernel(struct binary_args a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = a.a[i];
    /* ggml_silu_f32 then mul, no contraction (silu_and_mul_kernel's arithmetic) */
    const float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    a.out[i] = __fmul_rn(s, a.b[i]);
  }
}

static unsigned grid_for(int64_t n) { return cuda_div_up(n, 256) > 65536u ? 65536u : cuda_div_up(n, 256); }

llb_status cuda_add(struct cuda_ctx *c, float *x_d, const float *y_d, int64_t n) {
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda add of %lld", (long long)n);
  if (n == 0) return LLB_STATUS_OK;
  const struct binary_args a = {x_d, x_d, y_d, n};
  add_kernel<<<grid_for(n), 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

llb_status cuda_swiglu(struct cuda_ctx *c, const float *gate_d, const float *up_d, int64_t n, float *out_d) {
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda swiglu of %lld", (long long)n);
  if (n == 0) return LLB_STATUS_OK;
  const struct binary_args a = {out_d, gate_d, up_d, n};
  swiglu_kernel<<<grid_for(n), 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

struct get_rows_args {
  const float *x;      /* [*, dim] */
  const int32_t *rows; /* [n] */
  float *out;          /* [n, dim] */
  int32_t dim;
};

/* grid: n, block: 256 (threads walk the row) */
__global__ void get_rows_kernel(struct get_rows_args a) {
  const int64_t src = a.rows[blockIdx.x];
  for (int i = threadIdx.x; i < a.dim; i += blockDim.x) a.out[(int64_t)blockIdx.x * a.dim + i] = a.x[src * a.dim + i];
}

llb_status cuda_get_rows(struct cuda_ctx *c, const float *x_d, int32_t dim, const int32_t *rows_d, int32_t n,
                         float *out_d) {
  if (n < 0 || dim < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda get_rows %d x %d", n, dim);
  if (n == 0) return LLB_STATUS_OK;
  const struct get_rows_args a = {x_d, rows_d, out_d, dim};
  get_rows_kernel<<<n, 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

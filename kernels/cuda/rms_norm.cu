/* RMSNorm fused with the residual add and the fp16 rounding of the next matmul's input.
 * One block per row; the sum of squares in double (ggml_compute_forward_rms_norm_f32 sums in
 * ggml_float), reduced in a fixed tree, so a row's result does not depend on the batch. */
#include "kernels/cuda/cuda_common.cuh"

#define NORM_THREADS 256

struct rms_norm_args {
  float *x;           /* [n_rows, dim] residual, in/out */
  const float *add;   /* [n_rows, dim] or NULL */
  const float *w;     /* [dim] */
  float *out_f32;     /* [n_rows, dim] or NULL */
  __half *out_f16;    /* [n_rows, dim] or NULL */
  int32_t dim;
  float eps;
};

/* grid: n_rows, block: NORM_THREADS */
__global__ void __launch_bounds__(NORM_THREADS) rms_norm_kernel(struct rms_norm_args a) {
  __shared__ double partial[NORM_THREADS];
  float *x = a.x + (int64_t)blockIdx.x * a.dim;
  const float *add = a.add ? a.add + (int64_t)blockIdx.x * a.dim : NULL;
  double sum = 0.0;
  for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS) {
    float v = x[i];
    if (add) {
      v = __fadd_rn(v, add[i]);
      x[i] = v;
    }
    sum += (double)__fmul_rn(v, v);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = NORM_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float mean = (float)(partial[0] / a.dim);
  const float scale = 1.0f / sqrtf(mean + a.eps);
  for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS) {
    const float y = __fmul_rn(__fmul_rn(x[i], scale), a.w[i]);
    if (a.out_f32) a.out_f32[(int64_t)blockIdx.x * a.dim + i] = y;
    if (a.out_f16) a.out_f16[(int64_t)blockIdx.x * a.dim + i] = __float2half_rn(y);
  }
}

llb_status cuda_rms_norm(struct cuda_ctx *c, float *x_d, const float *add_d, const float *w_d,
                         int32_t n_rows, int32_t dim, float eps, float *out_f32_d,
                         uint16_t *out_f16_d) {
  if (n_rows < 0 || dim < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda rms_norm %d x %d", n_rows, dim);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct rms_norm_args a = {x_d, add_d, w_d, out_f32_d, (__half *)out_f16_d, dim, eps};
  rms_norm_kernel<<<n_rows, NORM_THREADS, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

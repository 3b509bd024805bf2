/* Embedding gather: rows of a dense fp16/bf16 table to fp32 activations. */
#include "kernels/cuda/cuda_common.cuh"

#include <cuda_bf16.h>

struct embed_args {
  const void *table;  /* [rows, cols] fp16 or bf16 */
  const int32_t *ids; /* [n] */
  float *out;         /* [n, cols] */
  int64_t rows, cols;
  int32_t bf16;
};

/* grid: n, block: 256 (threads walk the row) */
__global__ void embed_kernel(struct embed_args a) {
  const int64_t r = blockIdx.x;
  const int32_t id = a.ids[r];
  float *y = a.out + r * a.cols;
  if (id < 0 || id >= a.rows) {
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) y[i] = __int_as_float(0x7fc00000);
    return;
  }
  if (a.bf16) {
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)a.table + (int64_t)id * a.cols;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) y[i] = __bfloat162float(x[i]);
  } else {
    const __half *x = (const __half *)a.table + (int64_t)id * a.cols;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) y[i] = __half2float(x[i]);
  }
}

llb_status cuda_embed(struct cuda_ctx *c, const struct cuda_weight *table, const int32_t *ids_d,
                      int32_t n, float *out_d) {
  if (table->dtype != CUDA_DTYPE_F16 && table->dtype != CUDA_DTYPE_BF16)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda embed of dtype %d", (int)table->dtype);
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda embed of %d rows", n);
  if (n == 0) return LLB_STATUS_OK;
  const struct embed_args a = {table->data, ids_d, out_d, table->rows, table->cols,
                               table->dtype == CUDA_DTYPE_BF16};
  embed_kernel<<<n, 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

/* Matrix products through cuBLAS: fp16 (or bf16) weights dequantized at load, fp16/bf16
 * activations, fp32 accumulation and output (cublasGemmEx, CUBLAS_COMPUTE_32F). */
#include "kernels/cuda/cuda_common.cuh"

llb_status cuda_matmul(struct cuda_ctx *c, const void *x_d, int32_t n_rows,
                       const struct cuda_weight *w, float *out_d) {
  if (w->dtype != CUDA_DTYPE_F16 && w->dtype != CUDA_DTYPE_BF16)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda matmul of weight dtype %d", (int)w->dtype);
  if (n_rows < 0 || w->rows < 1 || w->cols < 1 || w->rows > INT32_MAX || w->cols > INT32_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda matmul %d x [%lld, %lld]", n_rows,
                    (long long)w->rows, (long long)w->cols);
  if (n_rows == 0) return LLB_STATUS_OK;
  const cudaDataType_t t = w->dtype == CUDA_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  const int m = (int)w->rows, k = (int)w->cols;
  /* Column-major view: out^T [m, n] = W [m, k] (row-major [rows, cols] read transposed)
   * times x^T [k, n] (row-major [n, cols]). */
  CUDA_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n_rows, k, &one, w->data, t, k, x_d, t, k,
                        &zero, out_d, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return LLB_STATUS_OK;
}

/* Internals shared by the kernels/cuda sources: the context, the one checked-call macro that
 * maps CUDA and cuBLAS errors to llb_status, launch checks, fp16 helpers. CUDA C++ only. */
#ifndef LLB_KERNELS_CUDA_CUDA_COMMON_CUH
#define LLB_KERNELS_CUDA_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_backend.h"

struct cuda_ctx {
  struct cuda_ctx_params params;
  cudaStream_t stream;
  cublasHandle_t blas;
  void *blas_workspace;   /* device [CUDA_BLAS_WORKSPACE_BYTES]: no allocation inside graphs */
  float *attn_part_out;   /* device [max_num_tokens, max_num_heads, max_parts, max_head_dim] */
  float *attn_part_ml;    /* device [max_num_tokens, max_num_heads, max_parts, 2] (max, sum) */
  int32_t max_parts;      /* ceil(max_context_len / attn_part_size) */
  int32_t attn_part_size; /* keys per attention partition, fixed at creation (batch invariance) */
  float *sample_w;        /* device [max_sample_rows, max_vocab] sampling weights */
};

#define CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* Status of a CUDA runtime error: memory -> OUT_OF_MEMORY, launch shape -> UNSUPPORTED,
 * everything else (no device, driver, faults) -> DEVICE. Records the call and the error. */
llb_status cuda_status_from(cudaError_t e, const char *file, const char *func, int line,
                            const char *call);
llb_status cublas_status_from(cublasStatus_t e, const char *file, const char *func, int line,
                              const char *call);

/* The one checked-call macro: evaluates a CUDA runtime or cuBLAS call and returns its mapped
 * status from the calling function on failure. */
static inline llb_status cuda_check_any(cudaError_t e, const char *file, const char *func, int line,
                                        const char *call) {
  return e == cudaSuccess ? LLB_STATUS_OK : cuda_status_from(e, file, func, line, call);
}
static inline llb_status cuda_check_any(cublasStatus_t e, const char *file, const char *func,
                                        int line, const char *call) {
  return e == CUBLAS_STATUS_SUCCESS ? LLB_STATUS_OK : cublas_status_from(e, file, func, line, call);
}
#define CUDA_TRY(call)                                                                    \
  do {                                                                                    \
    llb_status st_ = cuda_check_any((call), __FILE__, __func__, __LINE__, #call);         \
    if (st_ != LLB_STATUS_OK) return st_;                                                 \
  } while (0)

/* After a <<<>>> launch: maps a launch error (bad configuration, no device) to a status. */
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

static inline unsigned cuda_div_up(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* Grid-size guard: CUDA's grid.y and grid.z are limited to 65535. */
#define CUDA_MAX_GRID_YZ 65535

#endif

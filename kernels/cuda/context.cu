/* Device probe, memory, the execution context, copies, error mapping and the two ceilings
 * the benchmark divides by (copy bandwidth, cuBLAS fp16 rate). */
#include "kernels/cuda/cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

llb_status cuda_status_from(cudaError_t e, const char *file, const char *func, int line,
                            const char *call) {
  llb_status st = LLB_STATUS_DEVICE;
  if (e == cudaErrorMemoryAllocation) st = LLB_STATUS_OUT_OF_MEMORY;
  else if (e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidValue) st = LLB_STATUS_UNSUPPORTED;
  return llb_err_set(st, file, func, line, "%s: %s (%s)", call, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

llb_status cublas_status_from(cublasStatus_t e, const char *file, const char *func, int line,
                              const char *call) {
  llb_status st = LLB_STATUS_DEVICE;
  if (e == CUBLAS_STATUS_ALLOC_FAILED) st = LLB_STATUS_OUT_OF_MEMORY;
  else if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE) st = LLB_STATUS_UNSUPPORTED;
  return llb_err_set(st, file, func, line, "%s: %s", call, cublasGetStatusString(e));
}

llb_status cuda_device_probe(char *reason, size_t cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (reason && cap) snprintf(reason, cap, "cudaGetDeviceCount: %s (%d)", cudaGetErrorString(e), (int)e);
    (void)cudaGetLastError();
    return LLB_ERRF(LLB_STATUS_DEVICE, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
  }
  if (n < 1) {
    if (reason && cap) snprintf(reason, cap, "cudaGetDeviceCount reports 0 devices");
    return LLB_ERRF(LLB_STATUS_DEVICE, "no CUDA device");
  }
  if (reason && cap) snprintf(reason, cap, "%d device(s)", n);
  return LLB_STATUS_OK;
}

llb_status cuda_device_describe(char *buf, size_t cap) {
  llb_status st = cuda_device_probe(NULL, 0);
  if (st != LLB_STATUS_OK) return st;
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  snprintf(buf, cap, "%s, %.1f GiB, sm_%d%d, %d SMs", prop.name,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor,
           prop.multiProcessorCount);
  return LLB_STATUS_OK;
}

llb_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
  CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
  return LLB_STATUS_OK;
}

llb_status cuda_mem_alloc(size_t size_bytes, void **out) {
  *out = NULL;
  cudaError_t e = cudaMalloc(out, size_bytes ? size_bytes : 1);
  if (e != cudaSuccess) {
    *out = NULL;
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cudaMalloc of %zu bytes: %s", size_bytes,
                      cudaGetErrorString(e));
    return cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMalloc");
  }
  return LLB_STATUS_OK;
}

void cuda_mem_free(void *p) {
  if (p) (void)cudaFree(p);
}

void cuda_ctx_destroy(struct cuda_ctx *c) {
  if (!c) return;
  if (c->stream) (void)cudaStreamSynchronize(c->stream);
  if (c->blas) (void)cublasDestroy(c->blas);
  cuda_mem_free(c->blas_workspace);
  cuda_mem_free(c->attn_part_out);
  cuda_mem_free(c->attn_part_ml);
  cuda_mem_free(c->sample_w);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  free(c);
}

llb_status cuda_ctx_create(const struct cuda_ctx_params *p, struct cuda_ctx **out) {
  if (!p || !out || p->max_num_tokens < 1 || p->max_num_heads < 1 || p->max_head_dim < 1 ||
      p->max_head_dim > CUDA_ATTN_MAX_HEAD_DIM || p->max_context_len < 1 || p->max_sample_rows < 0 ||
      (p->max_sample_rows > 0 && p->max_vocab < 1))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda ctx sizes (head_dim <= %d)", CUDA_ATTN_MAX_HEAD_DIM);
  *out = NULL;
  llb_status st = cuda_device_probe(NULL, 0);
  if (st != LLB_STATUS_OK) return st;
  struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof(*c));
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda ctx");
  c->params = *p;
  /* One partition size for the context's life, so that a row is split and merged the same
   * way in every batch (batch invariance, docs/design.md §5): 128 keys (a decode row spreads over
   * more blocks) while the split-K scratch stays within CUDA_ATTN_SCRATCH_BYTES, else 512. */
  c->attn_part_size = CUDA_ATTN_SMALL_PARTITION;
  for (;;) {
    c->max_parts = (int32_t)cuda_div_up(p->max_context_len, c->attn_part_size);
    const double scratch = (double)p->max_num_tokens * p->max_num_heads * c->max_parts * (p->max_head_dim + 2) * 4.0;
    const double budget = p->attn_scratch_bytes > 0 ? p->attn_scratch_bytes : CUDA_ATTN_SCRATCH_BYTES;
    if (scratch <= budget || c->attn_part_size == CUDA_ATTN_PARTITION) break;
    c->attn_part_size = CUDA_ATTN_PARTITION;
  }
  if (c->max_parts > CUDA_MAX_GRID_YZ) {
    free(c);
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda ctx: context %d needs %d attention partitions (grid z <= %d)",
                    p->max_context_len, (int)cuda_div_up(p->max_context_len, CUDA_ATTN_PARTITION), CUDA_MAX_GRID_YZ);
  }
  const size_t rows = (size_t)p->max_num_tokens * (size_t)p->max_num_heads * (size_t)c->max_parts;
  cublasStatus_t bs;
  cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    c->stream = NULL;
    st = cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaStreamCreate");
    goto fail;
  }
  bs = cublasCreate(&c->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    c->blas = NULL;
    st = cublas_status_from(bs, __FILE__, __func__, __LINE__, "cublasCreate");
    goto fail;
  }
  if ((st = cuda_mem_alloc(CUDA_BLAS_WORKSPACE_BYTES, &c->blas_workspace)) != LLB_STATUS_OK) goto fail;
  if ((st = cuda_mem_alloc(rows * (size_t)p->max_head_dim * sizeof(float), (void **)&c->attn_part_out)) !=
      LLB_STATUS_OK)
    goto fail;
  if ((st = cuda_mem_alloc(rows * 2 * sizeof(float), (void **)&c->attn_part_ml)) != LLB_STATUS_OK) goto fail;
  if (p->max_sample_rows > 0 &&
      (st = cuda_mem_alloc((size_t)p->max_sample_rows * (size_t)p->max_vocab * sizeof(float),
                           (void **)&c->sample_w)) != LLB_STATUS_OK)
    goto fail;
  if ((bs = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS ||
      (bs = cublasSetWorkspace(c->blas, c->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS ||
      (bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
    st = cublas_status_from(bs, __FILE__, __func__, __LINE__, "cublasSet{Stream,Workspace,MathMode}");
    goto fail;
  }
  *out = c;
  return LLB_STATUS_OK;
fail:
  cuda_ctx_destroy(c);
  return st;
}

llb_status cuda_ctx_sync(struct cuda_ctx *c) {
  CUDA_TRY(cudaStreamSynchronize(c->stream));
  CUDA_TRY(cudaGetLastError());
  return LLB_STATUS_OK;
}

llb_status cuda_copy_to_device(struct cuda_ctx *c, void *dst_d, const void *src_h, size_t bytes) {
  CUDA_TRY(cudaMemcpyAsync(dst_d, src_h, bytes, cudaMemcpyHostToDevice, c->stream));
  return cuda_ctx_sync(c);
}

llb_status cuda_copy_to_host(struct cuda_ctx *c, void *dst_h, const void *src_d, size_t bytes) {
  CUDA_TRY(cudaMemcpyAsync(dst_h, src_d, bytes, cudaMemcpyDeviceToHost, c->stream));
  return cuda_ctx_sync(c);
}

/* ------------------------------------------------------------------ random fill */

struct fill_args {
  __half *dst; /* [n] */
  int64_t n;
  float amp;
  uint64_t seed;
};

/* grid: ceil(n / 256) (capped, grid-stride), block: 256 */
__global__ void fill_random_f16_kernel(struct fill_args a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t z = a.seed + (uint64_t)i * 0x9E3779B97F4A7C15ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    a.dst[i] = __float2half_rn((2.0f * u - 1.0f) * a.amp);
  }
}

llb_status cuda_fill_random_f16(struct cuda_ctx *c, uint16_t *dst_d, int64_t n_f16, float amp,
                                uint64_t seed) {
  if (n_f16 <= 0) return LLB_STATUS_OK;
  const struct fill_args a = {(__half *)dst_d, n_f16, amp, seed};
  const unsigned blocks = (unsigned)std::min<int64_t>(cuda_div_up(n_f16, 256), 65536);
  fill_random_f16_kernel<<<blocks, 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

/* ------------------------------------------------------------------ ceilings */

static double median_of(std::vector<float> &v) {
  std::sort(v.begin(), v.end());
  return (double)v[v.size() / 2];
}

llb_status cuda_measure_copy_bandwidth(struct cuda_ctx *c, size_t bytes, double *bytes_per_s) {
  void *a = NULL, *b = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  std::vector<float> ms;
  llb_status st = cuda_mem_alloc(bytes, &a);
  if (st == LLB_STATUS_OK) st = cuda_mem_alloc(bytes, &b);
  if (st != LLB_STATUS_OK) goto done;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    st = LLB_ERRF(LLB_STATUS_DEVICE, "cudaEventCreate");
    goto done;
  }
  if ((st = cuda_fill_random_f16(c, (uint16_t *)a, (int64_t)(bytes / 2), 1.0f, 1)) != LLB_STATUS_OK) goto done;
  for (int i = 0; i < 23; i++) {
    (void)cudaEventRecord(e0, c->stream);
    (void)cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, c->stream);
    (void)cudaEventRecord(e1, c->stream);
    if ((st = cuda_ctx_sync(c)) != LLB_STATUS_OK) goto done;
    float t = 0;
    (void)cudaEventElapsedTime(&t, e0, e1);
    if (i >= 3) ms.push_back(t); /* 3 warm-ups */
  }
  *bytes_per_s = 2.0 * (double)bytes / (median_of(ms) * 1e-3);
done:
  if (e0) (void)cudaEventDestroy(e0);
  if (e1) (void)cudaEventDestroy(e1);
  cuda_mem_free(a);
  cuda_mem_free(b);
  return st;
}

llb_status cuda_measure_gemm_rate(struct cuda_ctx *c, int32_t n, double *flops_per_s) {
  const size_t elems = (size_t)n * (size_t)n;
  void *a = NULL, *b = NULL, *d = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  std::vector<float> ms;
  const float one = 1.0f, zero = 0.0f;
  llb_status st = cuda_mem_alloc(elems * 2, &a);
  if (st == LLB_STATUS_OK) st = cuda_mem_alloc(elems * 2, &b);
  if (st == LLB_STATUS_OK) st = cuda_mem_alloc(elems * 4, &d);
  if (st != LLB_STATUS_OK) goto done;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    st = LLB_ERRF(LLB_STATUS_DEVICE, "cudaEventCreate");
    goto done;
  }
  if ((st = cuda_fill_random_f16(c, (uint16_t *)a, (int64_t)elems, 1.0f, 2)) != LLB_STATUS_OK ||
      (st = cuda_fill_random_f16(c, (uint16_t *)b, (int64_t)elems, 1.0f, 3)) != LLB_STATUS_OK)
    goto done;
  for (int i = 0; i < 13; i++) {
    (void)cudaEventRecord(e0, c->stream);
    cublasStatus_t bs = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b,
                                     CUDA_R_16F, n, &zero, d, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      st = cublas_status_from(bs, __FILE__, __func__, __LINE__, "cublasGemmEx");
      goto done;
    }
    (void)cudaEventRecord(e1, c->stream);
    if ((st = cuda_ctx_sync(c)) != LLB_STATUS_OK) goto done;
    float t = 0;
    (void)cudaEventElapsedTime(&t, e0, e1);
    if (i >= 3) ms.push_back(t);
  }
  *flops_per_s = 2.0 * (double)n * (double)n * (double)n / (median_of(ms) * 1e-3);
done:
  if (e0) (void)cudaEventDestroy(e0);
  if (e1) (void)cudaEventDestroy(e1);
  cuda_mem_free(a);
  cuda_mem_free(b);
  cuda_mem_free(d);
  return st;
}

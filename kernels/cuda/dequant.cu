/* GGUF block dequantization on the device, at load time (weights become dense fp16/bf16).
 * Each element is decoded by its own thread from its block, with the float operations of
 * ggml-quants.c dequantize_row_* in the same order and no contraction (__fmul_rn, __fadd_rn):
 * with an F32 destination the result is bit-exact with kernels/quant.c. */
#include "kernels/cuda/cuda_common.cuh"

#include <cuda_bf16.h>

struct dequant_args {
  const uint8_t *src; /* [n / block_elems blocks of block_bytes] */
  void *dst;          /* [n] of dtype */
  int64_t n;
  int32_t type;       /* enum ggml_type */
  int32_t block_bytes, block_elems;
  int32_t dtype;      /* enum cuda_dtype */
};

__device__ __forceinline__ float half_at(const uint8_t *p) {
  return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

/* ggml-quants.c get_scale_min_k4 */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/* Element i (< block_elems) of one block. */
__device__ float dequant_elem(int type, const uint8_t *b, int i) {
  switch (type) {
  case GGML_TYPE_F32: {
    uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    return __uint_as_float(u);
  }
  case GGML_TYPE_F16: return half_at(b);
  case GGML_TYPE_BF16: return __uint_as_float((uint32_t)(b[0] | (b[1] << 8)) << 16);
  case GGML_TYPE_Q4_0: {
    const int q = i < 16 ? (b[2 + i] & 0xF) : (b[2 + i - 16] >> 4);
    return __fmul_rn((float)(q - 8), half_at(b));
  }
  case GGML_TYPE_Q4_1: {
    const int q = i < 16 ? (b[4 + i] & 0xF) : (b[4 + i - 16] >> 4);
    return __fadd_rn(__fmul_rn((float)q, half_at(b)), half_at(b + 2));
  }
  case GGML_TYPE_Q8_0: return __fmul_rn((float)(int8_t)b[2 + i], half_at(b));
  case GGML_TYPE_Q4_K:
  case GGML_TYPE_Q5_K: {
    const int chunk = i / 64, within = i % 64, hi = within >= 32, l = within % 32;
    int sc, m;
    scale_min_k4(2 * chunk + hi, b + 4, &sc, &m);
    const float dl = __fmul_rn(half_at(b), (float)sc), ml = __fmul_rn(half_at(b + 2), (float)m);
    int q;
    if (type == GGML_TYPE_Q4_K) {
      const uint8_t byte = b[4 + K_SCALE_SIZE + chunk * 32 + l];
      q = hi ? byte >> 4 : byte & 0xF;
    } else {
      const uint8_t *qh = b + 4 + K_SCALE_SIZE, *ql = qh + QK_K / 8 + chunk * 32;
      const unsigned u = 1u << (2 * chunk + hi);
      q = (hi ? ql[l] >> 4 : ql[l] & 0xF) + ((qh[l] & u) ? 16 : 0);
    }
    return __fsub_rn(__fmul_rn(dl, (float)q), ml);
  }
  case GGML_TYPE_Q6_K: {
    const int n = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = b + n * 64, *qh = b + QK_K / 2 + n * 32;
    const int8_t *sc = (const int8_t *)(b + QK_K / 2 + QK_K / 4) + n * 8;
    const float d = half_at(b + QK_K / 2 + QK_K / 4 + QK_K / 16);
    const uint8_t lo = quarter & 1 ? ql[l + 32] : ql[l];
    const int q = ((quarter < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
    return __fmul_rn(__fmul_rn(d, (float)sc[l / 16 + 2 * quarter]), (float)q);
  }
  default: return __int_as_float(0x7fc00000);
  }
}

/* grid: min(ceil(n / 256), 65536) (grid-stride), block: 256 */
__global__ void dequantize_kernel(struct dequant_args a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t blk = i / a.block_elems;
    const float v = dequant_elem(a.type, a.src + blk * a.block_bytes, (int)(i % a.block_elems));
    if (a.dtype == CUDA_DTYPE_F32) ((float *)a.dst)[i] = v;
    else if (a.dtype == CUDA_DTYPE_F16) ((__half *)a.dst)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)a.dst)[i] = __float2bfloat16_rn(v);
  }
}

llb_status cuda_dequantize(struct cuda_ctx *c, enum ggml_type type, const void *src_d, int64_t n,
                           enum cuda_dtype dtype, void *dst_d) {
  switch (type) {
  case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0:
  case GGML_TYPE_Q4_1: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
  case GGML_TYPE_Q6_K: break;
  default:
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda dequantize of %s", ggml_type_name(type));
  }
  if (dtype != CUDA_DTYPE_F32 && dtype != CUDA_DTYPE_F16 && dtype != CUDA_DTYPE_BF16)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda dequantize to dtype %d", (int)dtype);
  const int64_t be = ggml_type_block_elems(type);
  if (n < 0 || n % be != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%lld %s weights are not whole blocks", (long long)n,
                    ggml_type_name(type));
  if (n == 0) return LLB_STATUS_OK;
  const struct dequant_args a = {(const uint8_t *)src_d, dst_d, n, (int32_t)type,
                                 (int32_t)ggml_type_block_bytes(type), (int32_t)be, (int32_t)dtype};
  const unsigned blocks = cuda_div_up(n, 256) > 65536u ? 65536u : cuda_div_up(n, 256);
  dequantize_kernel<<<blocks, 256, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

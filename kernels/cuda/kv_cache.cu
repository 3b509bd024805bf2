/* reshape_and_cache: K and V rows to the paged fp16 cache at their slots (vLLM's
 * reshape_and_cache, the CPU backend's layout [num_blocks, block_size, n_kv_heads, head_dim]). */
#include "kernels/cuda/cuda_common.cuh"

struct kv_write_args {
  const float *k, *v;   /* [n_rows, row_stride] holding [n_kv_heads, head_dim] */
  __half *kc, *vc;      /* [num_blocks * block_size, n_kv_heads * head_dim] */
  const int64_t *slots; /* [n_rows] */
  int64_t row_stride, row, n_slots;
};

/* grid: n_rows, block: 128 */
__global__ void kv_write_kernel(struct kv_write_args a) {
  const int64_t slot = a.slots[blockIdx.x];
  if (slot < 0 || slot >= a.n_slots) return;
  const float *k = a.k + (int64_t)blockIdx.x * a.row_stride, *v = a.v + (int64_t)blockIdx.x * a.row_stride;
  for (int64_t i = threadIdx.x; i < a.row; i += blockDim.x) {
    a.kc[slot * a.row + i] = __float2half_rn(k[i]);
    a.vc[slot * a.row + i] = __float2half_rn(v[i]);
  }
}

llb_status cuda_kv_write(struct cuda_ctx *c, const struct cuda_kv_layer *kv, const float *k_d,
                         const float *v_d, int64_t row_stride, const int64_t *slot_mapping_d,
                         int32_t n_rows) {
  const int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
  if (n_rows < 0 || row < 1 || row_stride < row || kv->num_blocks < 1 || kv->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda kv_write %d rows of %lld", n_rows, (long long)row);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct kv_write_args a = {k_d, v_d, (__half *)kv->k, (__half *)kv->v, slot_mapping_d, row_stride,
                                  row, (int64_t)kv->num_blocks * kv->block_size};
  kv_write_kernel<<<n_rows, 128, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

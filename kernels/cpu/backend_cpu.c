/* The CPU backend's op table. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"

/* ---- buffers: host memory (the forward reads and writes them in place; these hooks exist so
 * that code written for any backend runs here too, at the cost of a malloc / memcpy) ---- */

static llb_status cpu_buffer_alloc(size_t bytes, void **out) {
  *out = malloc(bytes ? bytes : 1);
  return *out ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cpu buffer of %zu bytes", bytes);
}

static void cpu_buffer_free(void *p) { free(p); }

static llb_status cpu_buffer_upload(struct backend_ctx *c, void *dst, const void *src, size_t bytes) {
  (void)c;
  if (bytes) memcpy(dst, src, bytes);
  return LLB_STATUS_OK;
}

static llb_status cpu_buffer_clear(struct backend_ctx *c, void *dst, size_t bytes) {
  (void)c;
  if (bytes) memset(dst, 0, bytes);
  return LLB_STATUS_OK;
}

static void cpu_idle(struct backend_ctx *c) { cpu_threadpool_park(c->pool); }

static void cpu_set_num_threads(struct backend_ctx *c, int32_t n) { cpu_threadpool_set_active(c->pool, n); }

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .embed = cpu_embed,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .lora = cpu_lora,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .kv_dtype_ok = cpu_kv_dtype_ok,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .add = cpu_add,
    .softcap = cpu_softcap,
    .pack_bytes = cpu_pack_bytes,
    .pack = cpu_pack_weight,
    .layer_norm = cpu_layer_norm,
    .gelu = cpu_gelu,
    .add_bias = cpu_add_bias,
    .attention_full = cpu_attention_full,
    .host_memory = true,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_upload = cpu_buffer_upload,
    .buffer_download = cpu_buffer_upload, /* host to host: the same copy */
    .buffer_clear = cpu_buffer_clear,
    .idle = cpu_idle,
    .set_num_threads = cpu_set_num_threads,
    /* memory_info, weight_bytes, weight_upload, get_rows, step_begin, step_end: NULL (host
     * memory; each op is done when it returns) */
};

const struct backend_ops *backend_cpu_ops(void) { return &cpu_ops; }

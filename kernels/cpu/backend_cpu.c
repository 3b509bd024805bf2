/* The CPU backend's op table. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .embed = cpu_embed,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
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
};

const struct backend_ops *backend_cpu_ops(void) { return &cpu_ops; }

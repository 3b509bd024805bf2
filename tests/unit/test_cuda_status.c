/* CUDA errors become statuses, never aborts. Runs on every machine: without a device it checks
 * that probing, context creation and allocation report LLB_STATUS_DEVICE with a reason; with
 * one, that an impossible allocation is OUT_OF_MEMORY and unsupported shapes are UNSUPPORTED. */
#include <string.h>

#include "tests/unit/test_cuda_harness.h"

static void test_no_device_is_a_device_status(void) {
  char reason[256] = "";
  if (cuda_device_probe(reason, sizeof(reason)) == LLB_STATUS_OK) return; /* covered below */
  printf("no CUDA device: %s (checking the error paths)\n", reason);
  CHECK(strlen(reason) > 0, "empty reason");
  const struct cuda_ctx_params p = {8, 4, 64, 128, 0, 0, 0};
  struct cuda_ctx *c = (struct cuda_ctx *)1;
  const llb_status st = cuda_ctx_create(&p, &c);
  CHECK(st == LLB_STATUS_DEVICE, "ctx_create gave %s", llb_strerror(st));
  CHECK(c == NULL, "out not cleared");
  void *d = (void *)1;
  const llb_status sa = cuda_mem_alloc(1024, &d);
  CHECK(sa != LLB_STATUS_OK && d == NULL, "alloc without a device gave %s", llb_strerror(sa));
  char desc[64];
  CHECK(cuda_device_describe(desc, sizeof(desc)) == LLB_STATUS_DEVICE, "describe");
}

static void test_device_errors_map_to_statuses(void) {
  if (cuda_device_probe(NULL, 0) != LLB_STATUS_OK) return;
  void *d = NULL;
  const llb_status sa = cuda_mem_alloc((size_t)1 << 60, &d);
  CHECK(sa == LLB_STATUS_OUT_OF_MEMORY && d == NULL, "1 EiB alloc gave %s", llb_strerror(sa));
  struct cuda_ctx *c = NULL;
  const struct cuda_ctx_params bad = {8, 4, 1000, 128, 0, 0, 0};
  CHECK(cuda_ctx_create(&bad, &c) == LLB_STATUS_INVALID_ARGUMENT, "head_dim 1000 accepted");
  const struct cuda_ctx_params p = {8, 4, 64, 128, 0, 0, 0};
  CHECK_OK(cuda_ctx_create(&p, &c));
  CHECK(cuda_dequantize(c, GGML_TYPE_Q2_K, NULL, 256, CUDA_DTYPE_F16, NULL) == LLB_STATUS_UNSUPPORTED,
        "q2_K accepted");
  struct cuda_kv_layer kv = {NULL, NULL, 4, 16, 2, 12};
  const struct cuda_attn_params ap = {.q = NULL, .q_stride = 48, .out_f32 = (float *)8, .kv = &kv,
                                      .num_tokens = 1, .n_heads = 4, .scale = 1.0f,
                                      .max_blocks_per_seq = 4, .max_seq_len = 16};
  CHECK(cuda_attention(c, &ap) == LLB_STATUS_UNSUPPORTED, "head_dim 12 accepted");
  const struct cuda_weight w = {CUDA_DTYPE_F32, 4, 4, NULL};
  CHECK(cuda_matmul(c, NULL, 1, &w, NULL) == LLB_STATUS_UNSUPPORTED, "f32 weight accepted");
  CHECK_OK(cuda_ctx_sync(c));
  cuda_ctx_destroy(c);
}

int main(void) {
  RUN_CASE(test_no_device_is_a_device_status);
  RUN_CASE(test_device_errors_map_to_statuses);
  return tc_finish();
}

/* EncoderStep / EncoderStepResult: scheduler <-> encoder_cache, one batched round trip per
 * step (schemas/encoder_step.fbs; vLLM v1 EncoderCacheManager). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_ENCODER_STEP_H
#define LLB_SCHEMAS_ENCODER_STEP_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

enum llb_encoder_op_kind {
  LLB_ENCODER_OP_KIND_CHECK_AND_UPDATE = 0, /* cached? then take a reference */
  LLB_ENCODER_OP_KIND_CAN_ALLOCATE = 1,     /* fits the cache and the compute budget? */
  LLB_ENCODER_OP_KIND_ALLOCATE = 2,         /* reserve num_embeds for mm_hash */
  LLB_ENCODER_OP_KIND_FREE_REQUEST = 3,     /* drop all of req_id's references */
};

struct llb_encoder_op {
  enum llb_encoder_op_kind kind;
  struct llb_str req_id;          /* required */
  struct llb_str mm_hash;         /* required except for FREE_REQUEST */
  int32_t input_id;               /* index into the request's mm_features */
  int32_t num_embeds;             /* >= 0 */
  int32_t encoder_compute_budget; /* CAN_ALLOCATE */
  int32_t num_embeds_to_schedule; /* CAN_ALLOCATE */
};

struct llb_encoder_step {
  uint16_t version;
  uint64_t step;
  const struct llb_encoder_op *ops; /* [num_ops], applied in order */
  int32_t num_ops;
  bool reset;                       /* drop every entry before the ops */
};

struct llb_encoder_step_result {
  uint16_t version;
  uint64_t step;
  const bool *results;                  /* [num_results]: ok per op, in op order */
  int32_t num_results;
  const struct llb_str *freed_mm_hashes; /* [num_freed_mm_hashes]: evicted entries */
  int32_t num_freed_mm_hashes;
  int32_t num_free_slots;
  struct llb_error_info error;
};

llb_status llb_encoder_step_encode(const struct llb_encoder_step *m, uint8_t *buf, size_t cap,
                                   size_t *len_out);
llb_status llb_encoder_step_encode_buf(const struct llb_encoder_step *m, struct llb_buf *out);
llb_status llb_encoder_step_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                   struct llb_encoder_step *out);

llb_status llb_encoder_step_result_encode(const struct llb_encoder_step_result *m, uint8_t *buf,
                                          size_t cap, size_t *len_out);
llb_status llb_encoder_step_result_encode_buf(const struct llb_encoder_step_result *m,
                                              struct llb_buf *out);
llb_status llb_encoder_step_result_decode(const uint8_t *buf, size_t len,
                                          struct llb_arena *arena,
                                          struct llb_encoder_step_result *out);

#ifdef __cplusplus
}
#endif

#endif

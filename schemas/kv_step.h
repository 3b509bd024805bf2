/* KVStep / KVStepResult: scheduler <-> kv_manager, one batched round trip per step
 * (schemas/kv_step.fbs; the operations of vLLM v1 KVCacheManager). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_KV_STEP_H
#define LLB_SCHEMAS_KV_STEP_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version both KVStep and KVStepResult carry; each side refuses an older one as malformed
 * (version 1 kept per-request block tables in the kv_manager: docs/design.md §4). */
#define LLB_KV_STEP_VERSION 2

enum llb_kv_op_kind {
  LLB_KV_OP_KIND_FREE = 0,     /* version 1 only (by request id): refused by the decoder */
  LLB_KV_OP_KIND_ALLOCATE = 1, /* give slots for num_tokens beyond num_held_blocks (lookup first if asked) */
  LLB_KV_OP_KIND_CACHE = 2,    /* register block_ids[i] under block_hashes[i] in the prefix cache */
  LLB_KV_OP_KIND_RELEASE = 3,  /* block_ids go to the free queue tail, in order */
};

struct llb_kv_op {
  enum llb_kv_op_kind kind;
  struct llb_str req_id;        /* required for ALLOCATE; optional otherwise */
  int32_t num_tokens;           /* ALLOCATE: total tokens that need slots, lookahead included */
  const uint64_t *block_hashes; /* [num_block_hashes]: ALLOCATE+lookup prefix; CACHE: one per block id */
  int32_t num_block_hashes;
  int32_t num_computed_tokens;
  bool lookup;                  /* ALLOCATE: look the prefix cache up first */
  const int32_t *block_ids;     /* [num_block_ids], each >= 0: RELEASE / CACHE (as many as hashes) */
  int32_t num_block_ids;
  int32_t num_held_blocks;      /* ALLOCATE: blocks the request holds already, >= 0 */
};

struct llb_kv_step {
  uint16_t version;            /* encode: 0 writes LLB_KV_STEP_VERSION (tests write older ones) */
  uint64_t step;
  const struct llb_kv_op *ops; /* [num_ops], applied in order */
  int32_t num_ops;
  bool reset;                  /* before the ops: drop every hash (the KV contents were lost);
                                  the held list applies as with resync */
  const int32_t *held_block_ids; /* [num_held_block_ids], each >= 0; only with resync or reset */
  int32_t num_held_block_ids;
  bool resync;                 /* before the ops: the free queue = every block not held */
};

struct llb_kv_op_result {
  struct llb_str req_id;      /* the op's (may be empty for RELEASE / CACHE) */
  int32_t status;             /* llb_status of this op */
  int32_t num_cached_tokens;  /* prefix-cache hit, tokens */
  const int32_t *block_ids;   /* [num_block_ids]: blocks newly given, in order */
  int32_t num_block_ids;
};

struct llb_kv_step_result {
  uint16_t version;                       /* encode: 0 writes LLB_KV_STEP_VERSION */
  uint64_t step;                          /* the KVStep answered */
  const struct llb_kv_op_result *results; /* [num_results], one per op in op order */
  int32_t num_results;
  int32_t num_free_blocks;
  int32_t num_total_blocks;
  uint64_t prefix_cache_queries;          /* tokens, cumulative */
  uint64_t prefix_cache_hits;
  struct llb_error_info error;            /* code 0 = none */
};

llb_status llb_kv_step_encode(const struct llb_kv_step *m, uint8_t *buf, size_t cap,
                              size_t *len_out);
llb_status llb_kv_step_encode_buf(const struct llb_kv_step *m, struct llb_buf *out);
llb_status llb_kv_step_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                              struct llb_kv_step *out);

llb_status llb_kv_step_result_encode(const struct llb_kv_step_result *m, uint8_t *buf,
                                     size_t cap, size_t *len_out);
llb_status llb_kv_step_result_encode_buf(const struct llb_kv_step_result *m, struct llb_buf *out);
llb_status llb_kv_step_result_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                     struct llb_kv_step_result *out);

#ifdef __cplusplus
}
#endif

#endif

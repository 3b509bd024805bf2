/* Control plane: Heartbeat, SchedulerStats, ErrorReply (schemas/control.fbs).
 * Conventions: codec.h. */
#ifndef LLB_SCHEMAS_CONTROL_H
#define LLB_SCHEMAS_CONTROL_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One LoRA adapter a worker serves (control.fbs LoRAAdapter): name and id checked as
 * llb_lora_request's (id >= 1), rank >= 1; a dynamic one (loaded by a LoRAUpdate) carries its
 * path and owning tenant, checked as LoRAUpdate's. */
struct llb_lora_adapter {
  struct llb_str lora_name;
  int32_t lora_int_id;
  int32_t rank;
  bool dynamic;
  struct llb_str lora_path; /* dynamic: relative to the worker's --lora-dir */
  struct llb_str tenant;    /* dynamic: the owning tenant */
};

#define LLB_LORA_PATH_MAX 1024 /* bytes of a LoRAUpdate's lora_path */
#define LLB_LORA_TENANT_MAX 64 /* bytes of a LoRAUpdate's tenant */

enum llb_lora_update_op { LLB_LORA_UPDATE_LOAD = 0, LLB_LORA_UPDATE_UNLOAD = 1 };

/* <prefix>.lora.update: load or unload a LoRA adapter on every worker (control.fbs LoRAUpdate).
 * Checked both ways: op known; lora_name a model name; for a load, lora_path 1..LLB_LORA_PATH_MAX
 * bytes, relative, without a ".." component or NUL, and tenant 1..LLB_LORA_TENANT_MAX letters,
 * digits, '-' and '_'. */
struct llb_lora_update {
  uint16_t version;
  int8_t op; /* enum llb_lora_update_op */
  struct llb_str lora_name;
  struct llb_str lora_path;
  struct llb_str tenant;
};

/* A worker's answer to a LoRAUpdate: error.code 0 = done. */
struct llb_lora_update_reply {
  uint16_t version;
  struct llb_str engine_id;
  struct llb_error_info error;
};

struct llb_heartbeat {
  uint16_t version;
  struct llb_str actor;    /* required: "scheduler", ... */
  struct llb_str instance;
  struct llb_str host;
  int32_t pid;
  double uptime_s;
  uint64_t seq;
  double timestamp;        /* seconds since the epoch */
  bool ready;
  int32_t inflight;
  struct llb_str engine_id; /* <eid> of the actor's engine (may be empty) */
  int32_t num_gpu_blocks;   /* gpu_worker: KV blocks allocated, the engine's geometry (0 = unknown) */
  int32_t block_size;       /* gpu_worker: tokens per KV block */
  const struct llb_lora_adapter *lora_adapters; /* [num_lora_adapters]: gpu_worker's --lora-modules */
  int32_t num_lora_adapters;                    /* <= LLB_MAX_LORA_ADAPTERS */
};

/* What an engine serves (control.fbs EngineRole; docs/scaling.md, disaggregated prefill/decode). */
enum llb_engine_role {
  LLB_ENGINE_ROLE_BOTH = 0,    /* aggregated: prompt and decode (the default) */
  LLB_ENGINE_ROLE_PREFILL = 1, /* prompts; hands requests to a decode engine after the first token */
  LLB_ENGINE_ROLE_DECODE = 2,  /* continues requests handed over by prefill engines */
};

/* "both", "prefill", "decode"; NULL for a value out of range. */
const char *llb_engine_role_name(enum llb_engine_role r);
/* Parses those names into *out. Errors: INVALID_ARGUMENT naming the value. */
llb_status llb_engine_role_parse(const char *name, enum llb_engine_role *out);

/* vLLM v1 SchedulerStats + cumulative counters for Prometheus. */
struct llb_scheduler_stats {
  uint16_t version;
  struct llb_str engine_id;
  uint64_t step;
  double timestamp;
  int32_t num_running_reqs;
  int32_t num_waiting_reqs;
  float kv_cache_usage; /* [0, 1] */
  int32_t num_free_blocks;
  int32_t num_total_blocks;
  uint64_t prefix_cache_queries; /* tokens, cumulative */
  uint64_t prefix_cache_hits;
  uint64_t num_preemptions;
  uint64_t prompt_tokens_total;
  uint64_t generation_tokens_total;
  uint64_t encoder_cache_queries;
  uint64_t encoder_cache_hits;
  uint64_t encoder_inputs_computed; /* items sent to the worker's encoder, cumulative */
  uint64_t encoder_embeds_computed; /* their embedding rows, cumulative */
  /* Engine membership (read by routers and `llmbus status`). */
  struct llb_str model;             /* the model's file name, no directory */
  int32_t block_size;               /* tokens per KV block */
  int32_t max_num_seqs;
  int32_t max_num_batched_tokens;
  int32_t max_model_len;
  int32_t stats_interval_ms;        /* longest gap between two SchedulerStats (idle) */
  struct llb_str instance;          /* the scheduler's instance id */
  bool draining;                    /* stopping: routers send nothing new (its last stats) */
  enum llb_engine_role role;        /* what it serves (absent on the wire: BOTH) */
};

/* The generic error reply to any request subject. */
struct llb_error_reply {
  uint16_t version;
  struct llb_error_info error; /* required, code != 0 */
  struct llb_str request_id;
};

llb_status llb_heartbeat_encode(const struct llb_heartbeat *m, uint8_t *buf, size_t cap,
                                size_t *len_out);
llb_status llb_heartbeat_encode_buf(const struct llb_heartbeat *m, struct llb_buf *out);
llb_status llb_heartbeat_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                struct llb_heartbeat *out);

llb_status llb_scheduler_stats_encode(const struct llb_scheduler_stats *m, uint8_t *buf,
                                      size_t cap, size_t *len_out);
llb_status llb_scheduler_stats_encode_buf(const struct llb_scheduler_stats *m,
                                          struct llb_buf *out);
llb_status llb_scheduler_stats_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                      struct llb_scheduler_stats *out);

llb_status llb_error_reply_encode(const struct llb_error_reply *m, uint8_t *buf, size_t cap,
                                  size_t *len_out);
llb_status llb_error_reply_encode_buf(const struct llb_error_reply *m, struct llb_buf *out);
llb_status llb_error_reply_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                  struct llb_error_reply *out);

llb_status llb_lora_update_encode(const struct llb_lora_update *m, uint8_t *buf, size_t cap, size_t *len_out);
llb_status llb_lora_update_encode_buf(const struct llb_lora_update *m, struct llb_buf *out);
llb_status llb_lora_update_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                  struct llb_lora_update *out);

llb_status llb_lora_update_reply_encode(const struct llb_lora_update_reply *m, uint8_t *buf, size_t cap,
                                        size_t *len_out);
llb_status llb_lora_update_reply_encode_buf(const struct llb_lora_update_reply *m, struct llb_buf *out);
llb_status llb_lora_update_reply_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                        struct llb_lora_update_reply *out);

/* Builds an ErrorReply from this thread's last error (llb_err_last()) and `status` into
 * `out`: the one-liner an actor uses to answer a bad request. */
llb_status llb_error_reply_encode_status(llb_status status, const char *request_id,
                                         const char *field, struct llb_buf *out);

#ifdef __cplusplus
}
#endif

#endif

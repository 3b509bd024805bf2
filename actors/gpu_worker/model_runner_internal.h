/* Private to actors/gpu_worker/model_runner*.c: the runner's state and the helpers that
 * model_runner.c (create, apply, prepare, forward, sample) and model_runner_check.c (phase 1:
 * the SchedulerOutput checked against the batch before anything changes) share. */
#ifndef LLB_GPU_WORKER_MODEL_RUNNER_INTERNAL_H
#define LLB_GPU_WORKER_MODEL_RUNNER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/gpu_worker/model_runner.h"
#include "actors/gpu_worker/mm_encoder.h"
#include "actors/gpu_worker/pooler.h"
#include "actors/gpu_worker/prompt_logprobs.h"
#include "actors/gpu_worker/runner_backend.h"
#include "actors/gpu_worker/runner_sim.h"
#include "actors/gpu_worker/runner_so.h"
#include "model/sampling/sampler.h"

/* One request of the persistent batch. Buffers are owned by the row and reused when the row
 * is reused (rows are swapped, never freed, until the runner is destroyed). */
struct mr_request {
  char *req_id;                 /* [req_id_len + 1], NUL-terminated */
  size_t req_id_len, req_id_cap;
  int32_t *token_ids;           /* [num_tokens]: prompt then outputs */
  int64_t num_prompt_tokens, num_tokens, token_cap;
  int32_t *block_ids;           /* [num_block_ids]: the block table row */
  int32_t num_block_ids, block_cap;
  int32_t num_computed_tokens;
  struct sampler_params sampler_params; /* of its sampling_params (mr_sampler_params) */
  int32_t prompt_logprobs;      /* its sampling_params.prompt_logprobs: -1 = none */
  struct mr_mm *mm;             /* [num_mm] multimodal placeholders, by offset */
  int64_t num_mm, mm_cap;
  struct runner_so_req so;      /* structured output: its matcher (runner_so.h) */
  struct pooler_req pool;       /* a pooling request's state (type NONE: it samples) */
  int32_t spec_ids[LLB_MAX_SPEC_TOKENS]; /* this step's drafts to verify (scheduled_spec_decode_tokens) */
  int32_t num_spec;             /* 0 = none this step */
  uint64_t sim_key;             /* SIM: the key of its tokens (sim_request_key) */
  bool stepped;                 /* it ran a step on this worker (sim_step_shape.first) */
  const struct llama_lora *lora; /* its adapter (model_runner_set_loras), NULL = the base model */
};

/* A multimodal item of a request: placeholder range and encoder-output key. */
struct mr_mm {
  int32_t offset, length;
  char *hash;
  int32_t *row_of;   /* [length] encoder row of each position, -1 = keeps its token embedding
                        (is_embed 0); NULL = position i takes row i */
  int32_t num_embeds; /* rows of the encoder output */
};

/* What phase 1 (checking) resolves for one scheduled entry, used by phase 2. */
struct mr_sched {
  int32_t new_index;  /* index into scheduled_new_reqs, or -1 */
  int32_t row;        /* row of the persistent batch once updated */
  int32_t num_tokens; /* scheduled this step */
};

struct model_runner {
  struct model_runner_config cfg;
  struct runner_backend be;  /* KV cache and forward state on the CPU or the device */
  int32_t vocab_size;
  struct sampler *sampler;

  struct mr_request **rows; /* [num_rows] live, [num_rows, rows_cap) spare */
  int32_t num_rows, rows_cap;

  /* per-step scratch, grow-only */
  int32_t step_cap;           /* capacity of the per-row / per-entry arrays below */
  int8_t *row_removed;        /* [step_cap] phase 1 marks */
  int32_t *row_cached;        /* [step_cap] cached entry index of a row, -1 */
  int32_t *row_sched;         /* [step_cap] scheduled tokens of a row (phase 2) */
  int32_t *cached_row;        /* [step_cap] row of each cached entry */
  struct mr_sched *sched;     /* [step_cap] */
  int32_t *token_ids;         /* [max_num_batched_tokens] */
  int32_t *positions;         /* [max_num_batched_tokens] */
  int64_t *slot_mapping;      /* [max_num_batched_tokens] */
  int32_t *query_start_loc;   /* [step_cap + 1] */
  int32_t *seq_lens;          /* [step_cap] */
  int32_t *logits_indices;    /* [step_cap] */
  int32_t *logits_rows;       /* [step_cap] row sampled from each logits row */
  int32_t *block_tables;      /* [block_tables_cap] as [num_seqs, max_blocks_per_seq] */
  int64_t block_tables_cap;
  float *logits;              /* [logits_cap] as [num_logits, vocab_size]: sampled rows, then prompt rows */
  int64_t logits_cap;
  int32_t num_sample_logits;  /* the first rows of logits: one per request that samples */
  struct prompt_logprobs plp; /* the step's prompt-logprob rows (the rest of logits) */
  struct llama_batch batch;
  struct mm_encoder_cache *mm;  /* encoder outputs by mm_hash */
  int32_t hidden_size;
  float *embeds;                /* [max_num_batched_tokens, hidden_size], allocated on first use */
  uint8_t *embeds_mask;         /* [max_num_batched_tokens] */
  struct runner_so *so;         /* structured output (NULL = no vocabulary: refused) */
  struct runner_so_step_row *so_rows; /* [so_rows_cap] this step's constrained sampled rows */
  int64_t so_rows_cap;
  uint32_t *so_masks;           /* [so_rows_cap, mask words] */
  int64_t so_masks_cap;
  int32_t *so_row_of_logits;    /* [step_cap] index into so_rows of a logits row, -1 = none */
  double so_mask_seconds, so_wait_seconds; /* of the last step; -1 = no constrained row */
  struct pooler_step pool;      /* the step's pooled rows and vectors (pooler.h) */
  int32_t *out_num_pooled;      /* [step_cap] */
  uint8_t *logits_used;         /* [step_cap] a sampled logits row whose token is an output (a
                                   rejected draft's later rows are not) */
  int32_t *out_num_spec;        /* [step_cap] drafts proposed per output request */
  int32_t *out_spec_ids;        /* [out_spec_cap] flattened drafts */
  int64_t out_spec_cap;

  /* output, grow-only: valid until the next execute */
  struct llb_str *out_req_ids;   /* [step_cap] */
  int32_t *out_num_sampled;      /* [step_cap] */
  int32_t *out_sampled;          /* [step_cap] */
  struct sampler_result *results; /* [step_cap] */
  int32_t *lp_token_ids;         /* [lp_cap] as [rows, 1 + max_n] */
  float *lp_logprobs;            /* [lp_cap] */
  int32_t *lp_ranks;             /* [step_cap] */
  int64_t lp_ids_cap, lp_cap;
  struct sim_cost_model sim_cost; /* SIM: the step-time model */
  struct sim_vocab sim_vocab;     /* SIM: the tokens a step may emit */
  struct sim_step_shape last_shape; /* of the last step that ran a batch (all 0 otherwise) */
  int32_t *lora_ids;            /* [num_loras] model_runner_set_loras */
  const struct llama_lora **loras; /* [num_loras], borrowed */
  int32_t num_loras;
  const struct llama_lora **seq_loras; /* [step_cap] each sequence's adapter this step */
  char err_message[512];
  char err_field[128];
  char err_req_id[256];  /* the request a failed step is blamed on (its input), "" = none */
};

/* The helpers every phase shares (model_runner_base.c). */
/* *p grown (doubling, from 16) to hold `need` elements of `elem` bytes; false on OOM. */
bool mr_grow(void **p, int64_t *cap, int64_t need, size_t elem);
/* a[0..alen) == b. */
bool mr_str_eq(const char *a, size_t alen, struct llb_str b);
/* The row of request `id` in the persistent batch, -1 = none. */
int32_t mr_find_row(const struct model_runner *r, struct llb_str id);
/* The index of `id` among so->scheduled_new_reqs[0..limit), -1 = none. */
int32_t mr_find_new(const struct llb_scheduler_output *so, struct llb_str id, int32_t limit);
/* The sampler's view of a request's wire sampling params: the one place the worker converts
 * them (the fields of struct sampler_params, logit_bias entries copied when their count is
 * within bounds; an out-of-range count is kept so that the sampler refuses it). */
void mr_sampler_params(const struct llb_sampling_params *wire, struct sampler_params *out);
/* Records an error with the offending field (r->err_*) and returns `st` (message via LLB_ERRF). */
llb_status mr_fail(struct model_runner *r, llb_status st, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Names the request whose input fails the step (failed_req_id): the scheduler finishes it. */
void mr_blame(struct model_runner *r, const char *id, size_t len);
/* The adapter served for lora_int_id `id` (>= 1), or NULL (model_runner_base.c). */
const struct llama_lora *mr_find_lora(const struct model_runner *r, int32_t id);
/* Phase 1: every id, row, block, token and size of `so` checked against the batch; nothing
 * changes. INVALID_ARGUMENT / UNSUPPORTED / OUT_OF_MEMORY through mr_fail (model_runner_check.c). */
llb_status mr_check_output(struct model_runner *r, const struct llb_scheduler_output *so);

/* Speculative decoding (runner_spec.c). */
/* Checks entry s's drafts (resolved as e): only for a request of the batch that samples
 * unconstrained (no grammar, pooling or prompt logprobs), ids in the vocabulary, at most
 * num_speculative_tokens, fewer than num_tokens, with spec decoding on (that they follow the
 * known tokens is checked by the caller). INVALID_ARGUMENT through mr_fail. */
llb_status mr_spec_check(struct model_runner *r, const struct llb_scheduled_tokens *s, const struct mr_sched *e,
                         const char *field);
/* Samples the logits rows [l, l + q->num_spec] of q (its drafts' positions, then the bonus):
 * rejection sampling into r->results[l ..], r->logits_used marking the outputs; sets *rows to
 * q->num_spec + 1. Errors: the sampler's, through mr_fail, blamed on q. */
llb_status mr_spec_sample(struct model_runner *r, struct mr_request *q, const struct sampler_params *p,
                          int32_t l, int32_t *rows);
/* Proposes q's drafts for its next step into the output arrays (entry k of the output, the
 * drafts flattened at *off, advanced); none unless spec decoding is on and q samples
 * unconstrained. Errors: OUT_OF_MEMORY. */
llb_status mr_spec_propose(struct model_runner *r, const struct mr_request *q, int32_t k, int32_t *off);

#endif

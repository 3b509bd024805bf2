/* Prompt logprobs of one worker step (vLLM gpu_model_runner._get_prompt_logprobs_dict): for a
 * request with sampling_params.prompt_logprobs = k >= 0, every prompt position p of this
 * step's chunk with p + 1 < the prompt length gets a logits row; from it the log-softmax value
 * and rank of prompt token p + 1 and the k most likely tokens. Chunked prefill needs nothing
 * more: each chunk scores its own positions.
 *
 * Memory: the logits rows live in the model runner's buffer, [rows, vocab] floats, so one step
 * costs (sampled rows + prompt rows) * vocab * 4 bytes; prompt rows <= the step's tokens
 * (max_num_batched_tokens bounds it). The output lists are [rows, 1 + k] each.
 * Use: reset, add per scheduled request in batch order, then (after the forward) compute.
 */
#ifndef LLB_ACTORS_GPU_WORKER_PROMPT_LOGPROBS_H
#define LLB_ACTORS_GPU_WORKER_PROMPT_LOGPROBS_H

#include <stdint.h>

#include "base/status.h"
#include "schemas/model_runner_output.h"

struct prompt_logprobs {
  int32_t *rows;       /* [num_rows] token rows of the step batch whose logits score a prompt token */
  int32_t *targets;    /* [num_rows] the prompt token each row scores */
  int32_t *row_k;      /* [num_rows] the k of the request each row belongs to */
  int32_t num_rows;
  int32_t *num_per_req;   /* [num_reqs] rows of each scheduled request */
  int32_t *start_per_req; /* [num_reqs] prompt index of its first row (1 when it has none) */
  int32_t num_reqs;
  int32_t max_k;          /* the largest k among this step's rows; -1 = no rows */
  int32_t *lp_ids;        /* [num_rows, 1 + max_k] prompt token, then top-k ids (-1 pads) */
  float *lp_values;       /* [num_rows, 1 + max_k] logprobs (-inf pads) */
  int32_t *ranks;         /* [num_rows] rank of the prompt token (1 = most likely) */
  int32_t *all_indices;   /* [num_sample + num_rows] the step's logits rows (prompt_logprobs_indices) */
  int64_t rows_cap, targets_cap, row_k_cap, per_req_cap, start_cap, ids_cap, values_cap, ranks_cap, all_cap;
};

/* Starts a step: no requests, no rows. */
void prompt_logprobs_reset(struct prompt_logprobs *pl);

/* Adds the next scheduled request (batch order): k = its prompt_logprobs (-1: none, it gets 0
 * rows), prompt[num_prompt], this step computes positions [start, start + len) whose token
 * rows begin at batch row row_base. Errors: OUT_OF_MEMORY. */
llb_status prompt_logprobs_add(struct prompt_logprobs *pl, int32_t k, const int32_t *prompt, int64_t num_prompt,
                               int32_t start, int32_t len, int32_t row_base);

/* The step's logits rows: sample[num_sample] (the rows that sample), then the prompt rows;
 * *out is sample itself when there are no prompt rows, else pl's buffer (valid until the next
 * call). Errors: OUT_OF_MEMORY. */
llb_status prompt_logprobs_indices(struct prompt_logprobs *pl, const int32_t *sample, int32_t num_sample,
                                   const int32_t **out, int32_t *num_out);

/* Fills the lists from logits [num_rows, vocab] (row i = rows[i]'s logits), each row's k from
 * the request it belongs to (every row gets the step's max_k columns, the extra ones padded).
 * Errors: OUT_OF_MEMORY; INVALID_ARGUMENT on a target outside the vocabulary. */
llb_status prompt_logprobs_compute(struct prompt_logprobs *pl, const float *logits, int32_t vocab);

/* Points out's prompt_logprobs, num_prompt_logprobs and prompt_logprobs_start at the lists
 * (valid until the next reset); leaves them empty when the step has no rows. */
void prompt_logprobs_output(const struct prompt_logprobs *pl, struct llb_model_runner_output *out);

/* Frees the buffers (the struct itself is the caller's). */
void prompt_logprobs_free(struct prompt_logprobs *pl);

#endif

/* The worker's pooler (vLLM v1 model_executor/layers/pooler.py for the embed task: LAST /
 * MEAN / CLS pooling of the final-norm hidden states, then L2 normalization): per request,
 * which prompt rows a step must hand over and the running state across prefill chunks.
 *
 * Pure logic: no bus, no FlatBuffers, no model. The runner keeps one pooler_req per request
 * of its persistent batch, asks pooler_req_rows which rows of each scheduled chunk it needs
 * (llama_batch.hidden_indices), adds those rows in prompt order with pooler_req_add and, on
 * the step that completes the prompt, writes the vector with pooler_req_finish.
 *
 * MEAN accumulates in double, one row at a time in prompt order, so that the vector does not
 * depend on how the prompt was cut into chunks (or on the batch around it): the same text
 * gives the same floats alone or in any batch. LAST and CLS keep their one row exactly.
 */
#ifndef LLB_GPU_WORKER_POOLER_H
#define LLB_GPU_WORKER_POOLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "schemas/codec.h"

struct pooler_req {
  struct llb_pooling_params params; /* pooling_type NONE: not a pooling request */
  int32_t hidden_size;              /* floats per hidden row */
  double *acc;                      /* [hidden_size]: the sum of the rows added so far */
  int32_t acc_cap;
  int64_t num_rows;                 /* rows added since the last reset */
};

/* Starts the request over with params (a copy) for rows of hidden_size floats; a request
 * of type NONE holds nothing. Reuses p's buffer. Errors: INVALID_ARGUMENT (hidden_size < 1,
 * an unknown type, dimensions < 0), OUT_OF_MEMORY. */
llb_status pooler_req_reset(struct pooler_req *p, const struct llb_pooling_params *params, int32_t hidden_size);

/* Frees p's buffer; a zeroed p is fine. */
void pooler_req_free(struct pooler_req *p);

static inline bool pooler_req_active(const struct pooler_req *p) {
  return p->params.pooling_type != LLB_POOLING_NONE;
}

/* The rows of a chunk [start, start + len) of a num_prompt_tokens-token prompt that the
 * pooler needs, as offsets from start into offsets[] (room for len); returns their number
 * (LAST: the prompt's last token, MEAN: every row, CLS: position 0). */
int32_t pooler_req_rows(const struct pooler_req *p, int32_t start, int32_t len, int32_t num_prompt_tokens,
                        int32_t *offsets);

/* Adds one hidden row [hidden_size] (the rows of pooler_req_rows, in prompt order). */
void pooler_req_add(struct pooler_req *p, const float *row);

/* Floats of the finished vector: dimensions when 0 < dimensions < hidden_size (Matryoshka
 * truncation), else hidden_size. */
int32_t pooler_req_dims(const struct pooler_req *p);

/* Writes the pooled vector (out [pooler_req_dims]): the mean of the rows for MEAN, the row
 * for LAST / CLS, truncated to dims, then divided by its L2 norm when params.normalize
 * (torch.nn.functional.normalize: max(norm, 1e-12)). Errors: INVALID_ARGUMENT when no row was
 * added or the result is not finite (naming the element). */
llb_status pooler_req_finish(const struct pooler_req *p, float *out);

/* One step's pooling: the batch rows whose hidden states the forward copies out
 * (llama_batch.hidden_indices / hidden_states), the request each belongs to, and the vectors
 * of the requests that finish in the step. Buffers are allocated on first use and reused. */
struct pooler_step {
  int32_t max_rows, hidden_size;
  float *hidden;              /* [max_rows, hidden_size] */
  int32_t *indices;           /* [max_rows] batch rows */
  struct pooler_req **reqs;   /* [max_rows] the request of each row (borrowed for the step) */
  int32_t num_rows;
  float *out;                 /* [num_out] the step's vectors, one after another */
  int64_t num_out, out_cap;
};

/* Sets up s for steps of at most max_rows batch rows of hidden_size floats (nothing allocated). */
void pooler_step_init(struct pooler_step *s, int32_t max_rows, int32_t hidden_size);
void pooler_step_free(struct pooler_step *s); /* a zeroed s is fine */

/* Starts a step: no rows, no vectors. */
static inline void pooler_step_begin(struct pooler_step *s) { s->num_rows = 0, s->num_out = 0; }

/* Adds the rows of p's chunk [start, start + len) (pooler_req_rows), which sit at batch rows
 * from `at`. OUT_OF_MEMORY; INVALID_ARGUMENT past max_rows. */
llb_status pooler_step_add_chunk(struct pooler_step *s, struct pooler_req *p, int32_t start, int32_t len,
                                 int32_t num_prompt_tokens, int32_t at);

/* After the forward filled s->hidden: adds every row to its request, in batch order (which
 * is each request's prompt order). */
void pooler_step_accumulate(struct pooler_step *s);

/* Appends p's finished vector (pooler_req_finish) to s->out; *dims = its floats. Errors of
 * pooler_req_finish, OUT_OF_MEMORY. */
llb_status pooler_step_finish(struct pooler_step *s, const struct pooler_req *p, int32_t *dims);

#endif

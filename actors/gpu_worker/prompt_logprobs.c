/* Prompt logprobs of a worker step; see prompt_logprobs.h. */
#include "actors/gpu_worker/prompt_logprobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"

void prompt_logprobs_reset(struct prompt_logprobs *pl) {
  pl->num_rows = 0;
  pl->num_reqs = 0;
  pl->max_k = -1;
}

llb_status prompt_logprobs_add(struct prompt_logprobs *pl, int32_t k, const int32_t *prompt, int64_t num_prompt,
                               int32_t start, int32_t len, int32_t row_base) {
  const int64_t nr = (int64_t)pl->num_reqs + 1;
  if (llb_array_reserve((void **)&pl->num_per_req, &pl->per_req_cap, nr, sizeof(int32_t)) != LLB_STATUS_OK ||
      llb_array_reserve((void **)&pl->start_per_req, &pl->start_cap, nr, sizeof(int32_t)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs");
  const int32_t r = pl->num_reqs++;
  pl->num_per_req[r] = 0;
  pl->start_per_req[r] = start + 1;
  if (k < 0) return LLB_STATUS_OK;
  /* position p scores prompt token p + 1: p in [start, min(start + len, num_prompt - 1)) */
  const int64_t end = (int64_t)start + len < num_prompt - 1 ? (int64_t)start + len : num_prompt - 1;
  if (end <= start) return LLB_STATUS_OK;
  const int32_t n = (int32_t)(end - start);
  const int64_t need = (int64_t)pl->num_rows + n;
  if (llb_array_reserve((void **)&pl->rows, &pl->rows_cap, need, sizeof(int32_t)) != LLB_STATUS_OK ||
      llb_array_reserve((void **)&pl->targets, &pl->targets_cap, need, sizeof(int32_t)) != LLB_STATUS_OK ||
      llb_array_reserve((void **)&pl->row_k, &pl->row_k_cap, need, sizeof(int32_t)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs");
  for (int32_t t = 0; t < n; t++) {
    pl->rows[pl->num_rows + t] = row_base + t;
    pl->targets[pl->num_rows + t] = prompt[start + t + 1];
    pl->row_k[pl->num_rows + t] = k;
  }
  pl->num_rows += n;
  pl->num_per_req[r] = n;
  if (k > pl->max_k) pl->max_k = k;
  return LLB_STATUS_OK;
}

llb_status prompt_logprobs_indices(struct prompt_logprobs *pl, const int32_t *sample, int32_t num_sample,
                                   const int32_t **out, int32_t *num_out) {
  *out = sample;
  *num_out = num_sample;
  if (pl->num_rows == 0) return LLB_STATUS_OK;
  const int64_t all = (int64_t)num_sample + pl->num_rows;
  if (llb_array_reserve((void **)&pl->all_indices, &pl->all_cap, all, sizeof(int32_t)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "logits rows");
  memcpy(pl->all_indices, sample, (size_t)num_sample * sizeof(int32_t));
  memcpy(pl->all_indices + num_sample, pl->rows, (size_t)pl->num_rows * sizeof(int32_t));
  *out = pl->all_indices;
  *num_out = (int32_t)all;
  return LLB_STATUS_OK;
}

/* log(sum(exp(row - max))) + max: the log-softmax normalizer, in double. */
static double log_normalizer(const float *row, int32_t vocab) {
  float mx = row[0];
  for (int32_t t = 1; t < vocab; t++) mx = row[t] > mx ? row[t] : mx;
  double sum = 0;
  for (int32_t t = 0; t < vocab; t++) sum += exp((double)row[t] - mx);
  return log(sum) + mx;
}

/* The k largest of row into ids/vals, best first (ties: the lower id first). k <= 20, so a
 * sorted insertion per token is cheap next to the forward. */
static void top_k(const float *row, int32_t vocab, int32_t k, int32_t *ids, float *vals) {
  int32_t n = 0;
  for (int32_t t = 0; t < vocab; t++) {
    const float v = row[t];
    if (n == k && !(v > vals[k - 1])) continue;
    int32_t at = n < k ? n++ : k - 1;
    while (at > 0 && v > vals[at - 1]) {
      vals[at] = vals[at - 1];
      ids[at] = ids[at - 1];
      at--;
    }
    vals[at] = v;
    ids[at] = t;
  }
}

llb_status prompt_logprobs_compute(struct prompt_logprobs *pl, const float *logits, int32_t vocab) {
  if (pl->num_rows == 0) return LLB_STATUS_OK;
  const int32_t cols = 1 + pl->max_k;
  const int64_t cells = (int64_t)pl->num_rows * cols;
  if (llb_array_reserve((void **)&pl->lp_ids, &pl->ids_cap, cells, sizeof(int32_t)) != LLB_STATUS_OK ||
      llb_array_reserve((void **)&pl->lp_values, &pl->values_cap, cells, sizeof(float)) != LLB_STATUS_OK ||
      llb_array_reserve((void **)&pl->ranks, &pl->ranks_cap, pl->num_rows, sizeof(int32_t)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs of %d rows", pl->num_rows);
  for (int32_t i = 0; i < pl->num_rows; i++) {
    const float *row = logits + (int64_t)i * vocab;
    const int32_t target = pl->targets[i], k = pl->row_k[i];
    if (target < 0 || target >= vocab)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "prompt token %d outside the vocabulary of %d", target, vocab);
    const double norm = log_normalizer(row, vocab);
    int32_t *ids = pl->lp_ids + (int64_t)i * cols;
    float *vals = pl->lp_values + (int64_t)i * cols;
    ids[0] = target;
    vals[0] = (float)((double)row[target] - norm);
    int32_t rank = 0; /* vLLM's rank: tokens at least as likely as this one (1-based) */
    for (int32_t t = 0; t < vocab; t++) rank += row[t] >= row[target];
    pl->ranks[i] = rank;
    if (k > 0) top_k(row, vocab, k, ids + 1, vals + 1);
    for (int32_t c = 0; c < k; c++) vals[1 + c] = (float)((double)vals[1 + c] - norm);
    for (int32_t c = k; c < pl->max_k; c++) {
      ids[1 + c] = -1;
      vals[1 + c] = -INFINITY;
    }
  }
  return LLB_STATUS_OK;
}

void prompt_logprobs_output(const struct prompt_logprobs *pl, struct llb_model_runner_output *out) {
  if (pl->num_rows == 0) return;
  out->prompt_logprobs = (struct llb_logprobs_lists){.num_tokens = pl->num_rows,
                                                     .num_logprobs_per_token = 1 + pl->max_k,
                                                     .logprob_token_ids = pl->lp_ids, .logprobs = pl->lp_values,
                                                     .sampled_token_ranks = pl->ranks};
  out->num_prompt_logprobs = pl->num_per_req;
  out->prompt_logprobs_start = pl->start_per_req;
}

void prompt_logprobs_free(struct prompt_logprobs *pl) {
  free(pl->rows);
  free(pl->targets);
  free(pl->row_k);
  free(pl->num_per_req);
  free(pl->start_per_req);
  free(pl->lp_ids);
  free(pl->lp_values);
  free(pl->ranks);
  free(pl->all_indices);
  memset(pl, 0, sizeof *pl);
}

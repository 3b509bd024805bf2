/* Gathering prompt logprobs per request; see prompt_logprobs.h. */
#include "actors/scheduler/prompt_logprobs.h"

#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/req_meta.h"
#include "base/log.h"
#include "schemas/model_runner_output.h"

static bool reserve(struct sched_prompt_logprobs *p, int64_t rows) {
  if (rows <= p->cap) return true;
  int64_t n = p->cap > 0 ? p->cap : 64;
  while (n < rows) n *= 2;
  int32_t *ids = realloc(p->ids, (size_t)(n * p->cols) * sizeof(int32_t));
  if (ids) p->ids = ids;
  float *values = realloc(p->values, (size_t)(n * p->cols) * sizeof(float));
  if (values) p->values = values;
  int32_t *ranks = realloc(p->ranks, (size_t)n * sizeof(int32_t));
  if (ranks) p->ranks = ranks;
  if (!ids || !values || !ranks) return false;
  p->cap = n;
  return true;
}

/* Appends rows [first, first + count) of ll to p; they score prompt tokens [start, start + count). */
static bool append(struct sched_prompt_logprobs *p, const struct llb_logprobs_lists *ll, int64_t first,
                   int32_t count, int32_t start) {
  const int32_t skip = p->rows + 1 - start; /* rows p holds already (a chunk computed again) */
  if (skip < 0 || skip >= count) return skip >= 0; /* a gap never happens; nothing new is fine */
  if (!reserve(p, (int64_t)p->rows + count - skip)) return false;
  const int64_t in_cols = ll->num_logprobs_per_token;
  for (int32_t j = skip; j < count; j++) {
    const int64_t src = (first + j) * in_cols, dst = (int64_t)p->rows * p->cols;
    memcpy(p->ids + dst, ll->logprob_token_ids + src, (size_t)p->cols * sizeof(int32_t));
    memcpy(p->values + dst, ll->logprobs + src, (size_t)p->cols * sizeof(float));
    p->ranks[p->rows++] = ll->sampled_token_ranks[first + j];
  }
  return true;
}

void sched_prompt_logprobs_collect(const struct scheduler *sched, const struct llb_model_runner_output *mro) {
  const struct llb_logprobs_lists *ll = &mro->prompt_logprobs;
  if (ll->num_tokens == 0) return;
  int64_t first = 0;
  for (int32_t i = 0; i < mro->num_reqs; first += mro->num_prompt_logprobs[i], i++) {
    const int32_t count = mro->num_prompt_logprobs[i];
    if (count == 0) continue;
    struct req_meta *m = req_meta_find(sched, mro->req_ids[i].data);
    if (!m) continue;
    const int32_t cols = 1 + m->params.prompt_logprobs;
    if (m->plp.sent || cols < 1 || cols > ll->num_logprobs_per_token) continue;
    m->plp.cols = cols;
    if (!append(&m->plp, ll, first, count, mro->prompt_logprobs_start[i]))
      LLB_LOG_ERROR("prompt_logprobs_dropped", "request_id=%s rows=%d reason=out_of_memory", m->id, count);
  }
}

struct llb_logprobs_lists sched_prompt_logprobs_take(struct sched_prompt_logprobs *p) {
  if (p->sent || p->rows == 0) return (struct llb_logprobs_lists){0};
  p->sent = true;
  return (struct llb_logprobs_lists){.num_tokens = p->rows, .num_logprobs_per_token = p->cols,
                                     .logprob_token_ids = p->ids, .logprobs = p->values,
                                     .sampled_token_ranks = p->ranks};
}

void sched_prompt_logprobs_free(struct sched_prompt_logprobs *p) {
  free(p->ids);
  free(p->values);
  free(p->ranks);
  memset(p, 0, sizeof *p);
}

/* Prompt logprobs in the scheduler actor: the worker scores a request's prompt chunk by chunk
 * (ModelRunnerOutput.prompt_logprobs); the rows are gathered per request and go out once, all
 * together, with the request's first output that has a token (EngineCoreOutput.prompt_logprobs,
 * rows = prompt tokens 1..P-1), as vLLM's first RequestOutput carries prompt_logprobs. A chunk
 * computed again (preemption by recompute, a replay) adds nothing: rows are kept by prompt
 * index. Size: (P - 1) rows of 1 + k columns, bounded by the input processor's limit. */
#ifndef LLB_ACTORS_SCHEDULER_PROMPT_LOGPROBS_H
#define LLB_ACTORS_SCHEDULER_PROMPT_LOGPROBS_H

#include <stdbool.h>
#include <stdint.h>

#include "schemas/codec.h"

struct scheduler;
struct llb_model_runner_output;

struct sched_prompt_logprobs {
  int32_t *ids;    /* [rows, cols]: the prompt token, then the top-k */
  float *values;   /* [rows, cols] */
  int32_t *ranks;  /* [rows] the prompt token's rank */
  int32_t rows;    /* prompt tokens 1..rows are scored */
  int32_t cols;    /* 1 + the request's k */
  int64_t cap;     /* rows allocated */
  bool sent;       /* went out with an output */
};

/* Adds the rows of mro (this step's worker reply) to the gathered rows of each request's meta
 * (req_meta.h, found in sched; requests it does not know, or whose rows went out already, are
 * skipped). OUT_OF_MEMORY drops the rows and is logged: the request then gets its output
 * without prompt logprobs. Step thread. */
void sched_prompt_logprobs_collect(const struct scheduler *sched, const struct llb_model_runner_output *mro);

/* The gathered rows as lists (valid until p is freed), marking them sent; empty when there are
 * none or they were sent already. */
struct llb_logprobs_lists sched_prompt_logprobs_take(struct sched_prompt_logprobs *p);

/* Frees the rows; the struct is the caller's. */
void sched_prompt_logprobs_free(struct sched_prompt_logprobs *p);

#endif

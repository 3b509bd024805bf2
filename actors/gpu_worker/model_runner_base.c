/* What the model runner's phases share (model_runner_internal.h): the step's error record
 * (mr_fail, mr_blame: the field and the request a failed step is blamed on), request lookups
 * by id in the persistent batch and the scheduler output, array growth, and the conversion of
 * a request's wire sampling params to the sampler's (model/sampling/sampler.h). A leaf: phase 1
 * (model_runner_check.c), phase 2 (model_runner.c) and speculative decoding (runner_spec.c)
 * call it, it calls none of them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gpu_worker/model_runner_internal.h"

bool mr_grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return true;
  int64_t n = *cap > 0 ? *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

bool mr_str_eq(const char *a, size_t alen, struct llb_str b) {
  return alen == b.len && (alen == 0 || memcmp(a, b.data, alen) == 0);
}

int32_t mr_find_row(const struct model_runner *r, struct llb_str id) {
  for (int32_t i = 0; i < r->num_rows; i++)
    if (mr_str_eq(r->rows[i]->req_id, r->rows[i]->req_id_len, id)) return i;
  return -1;
}

int32_t mr_find_new(const struct llb_scheduler_output *so, struct llb_str id, int32_t limit) {
  for (int32_t i = 0; i < limit; i++)
    if (mr_str_eq(so->scheduled_new_reqs[i].req_id.data, so->scheduled_new_reqs[i].req_id.len, id)) return i;
  return -1;
}

/* The wire's limits are the sampler's: a request the input processor accepts fits its params. */
_Static_assert(LLB_MAX_LOGPROBS == SAMPLER_MAX_LOGPROBS, "logprobs width");
_Static_assert(LLB_MAX_LOGIT_BIAS == SAMPLER_MAX_LOGIT_BIAS, "logit_bias entries");
_Static_assert((int)LLB_MAX_LOGIT_BIAS_VALUE == (int)SAMPLER_MAX_LOGIT_BIAS_VALUE, "logit_bias range");

void mr_sampler_params(const struct llb_sampling_params *wire, struct sampler_params *out) {
  sampler_params_init(out);
  out->temperature = wire->temperature;
  out->top_k = wire->top_k;
  out->top_p = wire->top_p;
  out->min_p = wire->min_p;
  out->seed = wire->seed;
  out->presence_penalty = wire->presence_penalty;
  out->frequency_penalty = wire->frequency_penalty;
  out->repetition_penalty = wire->repetition_penalty;
  out->logprobs = wire->logprobs;
  out->num_logit_bias = wire->num_logit_bias;
  for (int32_t i = 0; i < wire->num_logit_bias && i < SAMPLER_MAX_LOGIT_BIAS; i++)
    out->logit_bias[i] = (struct sampler_logit_bias){wire->logit_bias[i].token_id, wire->logit_bias[i].bias};
}

/* Records an error with the offending field; the message goes through LLB_ERRF too. */
llb_status mr_fail(struct model_runner *r, llb_status st, const char *field, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err_message, sizeof(r->err_message), fmt, ap);
  va_end(ap);
  snprintf(r->err_field, sizeof(r->err_field), "%s", field);
  return LLB_ERRF(st, "%s: %s", field, r->err_message);
}

/* Names the request whose input fails the step (failed_req_id): the scheduler finishes it. */
void mr_blame(struct model_runner *r, const char *id, size_t len) {
  snprintf(r->err_req_id, sizeof(r->err_req_id), "%.*s", (int)(len < 255 ? len : 255), id ? id : "");
}

bool model_runner_lora_in_use(const struct model_runner *r, const struct llama_lora *adapter) {
  for (int32_t i = 0; i < r->num_rows; i++)
    if (r->rows[i]->lora == adapter) return true;
  return false;
}

const struct llama_lora *mr_find_lora(const struct model_runner *r, int32_t id) {
  for (int32_t i = 0; i < r->num_loras; i++)
    if (r->lora_ids[i] == id) return r->loras[i];
  return NULL;
}

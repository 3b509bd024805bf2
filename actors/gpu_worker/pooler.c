/* LAST / MEAN / CLS pooling and L2 normalization (vLLM pooler.py semantics; our code). */
#include "actors/gpu_worker/pooler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

llb_status pooler_req_reset(struct pooler_req *p, const struct llb_pooling_params *params, int32_t hidden_size) {
  p->params = params ? *params : (struct llb_pooling_params){0};
  p->num_rows = 0;
  p->hidden_size = hidden_size;
  if (!pooler_req_active(p)) return LLB_STATUS_OK;
  if (hidden_size < 1 || p->params.pooling_type > LLB_POOLING_CLS || p->params.dimensions < 0) {
    const int type = (int)p->params.pooling_type;
    p->params.pooling_type = LLB_POOLING_NONE;
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pooling: hidden_size %d, pooling_type %d, dimensions %d",
                    hidden_size, type, params->dimensions);
  }
  if (p->acc_cap < hidden_size) {
    double *a = realloc(p->acc, (size_t)hidden_size * sizeof(double));
    if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pooling accumulator of %d", hidden_size);
    p->acc = a;
    p->acc_cap = hidden_size;
  }
  memset(p->acc, 0, (size_t)hidden_size * sizeof(double));
  return LLB_STATUS_OK;
}

void pooler_req_free(struct pooler_req *p) {
  free(p->acc);
  p->acc = NULL;
  p->acc_cap = 0;
}

int32_t pooler_req_rows(const struct pooler_req *p, int32_t start, int32_t len, int32_t num_prompt_tokens,
                        int32_t *offsets) {
  int32_t want = -1;
  switch (p->params.pooling_type) {
  case LLB_POOLING_MEAN: {
    int32_t n = 0;
    for (int32_t t = 0; t < len && start + t < num_prompt_tokens; t++) offsets[n++] = t;
    return n;
  }
  case LLB_POOLING_LAST: want = num_prompt_tokens - 1; break;
  case LLB_POOLING_CLS: want = 0; break;
  default: return 0;
  }
  if (want < start || want >= start + len) return 0;
  offsets[0] = want - start;
  return 1;
}

void pooler_req_add(struct pooler_req *p, const float *row) {
  for (int32_t i = 0; i < p->hidden_size; i++) p->acc[i] += (double)row[i];
  p->num_rows++;
}

int32_t pooler_req_dims(const struct pooler_req *p) {
  const int32_t d = p->params.dimensions;
  return d > 0 && d < p->hidden_size ? d : p->hidden_size;
}

llb_status pooler_req_finish(const struct pooler_req *p, float *out) {
  if (!pooler_req_active(p) || p->num_rows < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pooling: no hidden row was added");
  const int32_t dims = pooler_req_dims(p);
  const double inv_rows = 1.0 / (double)p->num_rows;
  double sum_sq = 0.0;
  for (int32_t i = 0; i < dims; i++) {
    const double v = p->acc[i] * inv_rows;
    sum_sq += v * v;
  }
  const double norm = sqrt(sum_sq);
  const double scale = p->params.normalize ? 1.0 / (norm > 1e-12 ? norm : 1e-12) : 1.0;
  for (int32_t i = 0; i < dims; i++) {
    /* one row (LAST / CLS) without normalization keeps its float exactly */
    out[i] = p->num_rows == 1 && !p->params.normalize ? (float)p->acc[i] : (float)(p->acc[i] * inv_rows * scale);
    if (!isfinite(out[i]))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pooling: element %d of the pooled vector is not finite", i);
  }
  return LLB_STATUS_OK;
}

void pooler_step_init(struct pooler_step *s, int32_t max_rows, int32_t hidden_size) {
  memset(s, 0, sizeof(*s));
  s->max_rows = max_rows;
  s->hidden_size = hidden_size;
}

void pooler_step_free(struct pooler_step *s) {
  free(s->hidden);
  free(s->indices);
  free(s->reqs);
  free(s->out);
  memset(s, 0, sizeof(*s));
}

llb_status pooler_step_add_chunk(struct pooler_step *s, struct pooler_req *p, int32_t start, int32_t len,
                                 int32_t num_prompt_tokens, int32_t at) {
  if (!s->hidden) {
    s->hidden = malloc((size_t)s->max_rows * (size_t)s->hidden_size * sizeof(float));
    s->indices = malloc((size_t)s->max_rows * sizeof(int32_t));
    s->reqs = malloc((size_t)s->max_rows * sizeof(*s->reqs));
    if (!s->hidden || !s->indices || !s->reqs) {
      pooler_step_free(s);
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pooling rows");
    }
  }
  if (len < 0 || s->num_rows + len > s->max_rows)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pooling: %d rows after %d, at most %d", len, s->num_rows, s->max_rows);
  const int32_t k = pooler_req_rows(p, start, len, num_prompt_tokens, s->indices + s->num_rows);
  for (int32_t j = s->num_rows; j < s->num_rows + k; j++) {
    s->indices[j] += at;
    s->reqs[j] = p;
  }
  s->num_rows += k;
  return LLB_STATUS_OK;
}

void pooler_step_accumulate(struct pooler_step *s) {
  for (int32_t h = 0; h < s->num_rows; h++) pooler_req_add(s->reqs[h], s->hidden + (size_t)h * (size_t)s->hidden_size);
}

llb_status pooler_step_finish(struct pooler_step *s, const struct pooler_req *p, int32_t *dims) {
  *dims = pooler_req_dims(p);
  if (s->num_out + *dims > s->out_cap) {
    int64_t cap = s->out_cap > 0 ? s->out_cap : 1024;
    while (cap < s->num_out + *dims) cap *= 2;
    float *o = realloc(s->out, (size_t)cap * sizeof(float));
    if (!o) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pooled vectors");
    s->out = o;
    s->out_cap = cap;
  }
  llb_status st = pooler_req_finish(p, s->out + s->num_out);
  if (st == LLB_STATUS_OK) s->num_out += *dims;
  return st;
}

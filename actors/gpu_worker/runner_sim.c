/* The simulated device: cost model, its fit and file, the deterministic tokens (runner_sim.h). */
#include "actors/gpu_worker/runner_sim.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hash.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

enum { SIM_TERMS = 6 }; /* fixed, token, sampled_row, attention, context, first_step */
#define SIM_MAX_COEFF_S 60.0

void sim_cost_model_default(struct sim_cost_model *m) {
  /* ops/sim/cpu-smollm2-135m-q4_1-1t.json: `llmbus-kernel-bench --fit --threads 1` (the forward
   * thread's CPU time) on the 2-core development machine (AMD EPYC, AVX-512 VNNI),
   * SmolLM2-135M-Instruct Q4_1; see ops/sim/README.md */
  *m = (struct sim_cost_model){.fixed_s = 0.00234051, .token_s = 0.000941041, .weights_s = 0.0,
                               .sampled_row_s = 0.000178184, .random_row_s = 0.000173429,
                               .attention_s = 1.25225e-06, .context_s = 1.81159e-06};
  snprintf(m->name, sizeof m->name, "smollm2-135m-instruct-q4_1 cpu 1 thread (built-in)");
  snprintf(m->source, sizeof m->source, "ops/sim/cpu-smollm2-135m-q4_1-1t.json (llmbus-kernel-bench --fit --threads 1)");
}

/* ---- the file ---- */

static llb_status read_coeff(json_t *root, const char *path, const char *key, bool required, double *out) {
  json_t *v = json_object_get(root, key);
  if (!v) {
    if (!required) return LLB_STATUS_OK;
    return LLB_ERRF(LLB_STATUS_MALFORMED, "sim cost model %s: \"%s\" missing", path, key);
  }
  if (!json_is_number(v))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "sim cost model %s: \"%s\" is not a number", path, key);
  const double x = json_number_value(v);
  if (!isfinite(x) || x < 0.0 || x > SIM_MAX_COEFF_S)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "sim cost model %s: \"%s\" = %g: seconds in [0, %g]", path, key, x,
                    SIM_MAX_COEFF_S);
  *out = x;
  return LLB_STATUS_OK;
}

static void read_text(json_t *root, const char *key, char *buf, size_t cap) {
  const char *s = json_string_value(json_object_get(root, key));
  if (s) snprintf(buf, cap, "%s", s);
}

llb_status sim_cost_model_load(const char *path, struct sim_cost_model *m) {
  FILE *f = fopen(path, "rb");
  if (!f) return LLB_ERRF(LLB_STATUS_IO, "sim cost model %s: %s", path, strerror(errno));
  json_error_t err;
  json_t *root = json_loadf(f, 0, &err);
  fclose(f);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return LLB_ERRF(LLB_STATUS_MALFORMED, "sim cost model %s: not a JSON object (line %d: %s)", path, err.line,
                    err.text);
  }
  struct sim_cost_model c = {0};
  snprintf(c.name, sizeof c.name, "%s", path);
  read_text(root, "name", c.name, sizeof c.name);
  read_text(root, "source", c.source, sizeof c.source);
  llb_status st = read_coeff(root, path, "fixed_s", true, &c.fixed_s);
  if (!st) st = read_coeff(root, path, "token_s", true, &c.token_s);
  if (!st) st = read_coeff(root, path, "sampled_row_s", true, &c.sampled_row_s);
  if (!st) st = read_coeff(root, path, "attention_s", true, &c.attention_s);
  if (!st) st = read_coeff(root, path, "weights_s", false, &c.weights_s);
  if (!st) st = read_coeff(root, path, "random_row_s", false, &c.random_row_s);
  if (!st) st = read_coeff(root, path, "context_s", false, &c.context_s);
  if (!st) st = read_coeff(root, path, "first_step_s", false, &c.first_step_s);
  json_decref(root);
  if (!st) *m = c;
  return st;
}

llb_status sim_cost_model_write(const char *path, const struct sim_cost_model *m, const struct sim_fit_quality *q) {
  json_t *root = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "name", m->name, "source",
                           m->source, "fixed_s", m->fixed_s, "token_s", m->token_s, "weights_s", m->weights_s,
                           "sampled_row_s", m->sampled_row_s, "random_row_s", m->random_row_s, "attention_s",
                           m->attention_s, "context_s", m->context_s, "first_step_s", m->first_step_s, "formula",
                           "t = fixed_s + max(weights_s, token_s*T) + sampled_row_s*R + random_row_s*S + "
                           "attention_s*A + context_s*K + first_step_s*F");
  if (root && q)
    json_object_set_new(root, "fit", json_pack("{s:i, s:f, s:f}", "points", q->num_points, "rms_rel_error",
                                               q->rms_rel_error, "max_rel_error", q->max_rel_error));
  if (!root) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "sim cost model JSON");
  const int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  json_decref(root);
  return rc == 0 ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_IO, "sim cost model: cannot write %s", path);
}

/* ---- the model ---- */

struct sim_step_shape sim_step_shape_of(const struct llama_batch *b) {
  struct sim_step_shape s = {.num_tokens = b->num_tokens, .num_seqs = b->num_seqs, .num_sampled = b->num_logits};
  for (int32_t i = 0; i < b->num_seqs; i++) {
    const double len = (double)(b->query_start_loc[i + 1] - b->query_start_loc[i]);
    const double start = (double)b->seq_lens[i] - len; /* keys before the first query row */
    s.attention_pairs += len * start + len * (len + 1.0) / 2.0;
    s.context_tokens += (double)b->seq_lens[i];
  }
  return s;
}

double sim_cost_seconds(const struct sim_cost_model *m, const struct sim_step_shape *s) {
  const double tokens = m->token_s * s->num_tokens;
  return m->fixed_s + (tokens > m->weights_s ? tokens : m->weights_s) + m->sampled_row_s * s->num_sampled +
         m->random_row_s * s->num_random + m->attention_s * s->attention_pairs + m->context_s * s->context_tokens +
         m->first_step_s * s->first;
}

/* ---- the fit ---- */

static void features(const struct sim_step_shape *s, double x[SIM_TERMS]) {
  x[0] = 1.0;
  x[1] = s->num_tokens;
  x[2] = s->num_sampled;
  x[3] = s->attention_pairs;
  x[4] = s->context_tokens;
  x[5] = s->first;
}

/* Solves the k x k system a c = b (Gaussian elimination, partial pivoting); false when singular. */
static bool solve(double a[SIM_TERMS][SIM_TERMS], double b[SIM_TERMS], int k, double c[SIM_TERMS]) {
  for (int col = 0; col < k; col++) {
    int piv = col;
    for (int r = col + 1; r < k; r++)
      if (fabs(a[r][col]) > fabs(a[piv][col])) piv = r;
    if (fabs(a[piv][col]) < 1e-300) return false;
    for (int j = 0; j < k; j++) {
      const double t = a[col][j];
      a[col][j] = a[piv][j], a[piv][j] = t;
    }
    const double t = b[col];
    b[col] = b[piv], b[piv] = t;
    for (int r = col + 1; r < k; r++) {
      const double f = a[r][col] / a[col][col];
      for (int j = col; j < k; j++) a[r][j] -= f * a[col][j];
      b[r] -= f * b[col];
    }
  }
  for (int r = k - 1; r >= 0; r--) {
    double s = b[r];
    for (int j = r + 1; j < k; j++) s -= a[r][j] * c[j];
    c[r] = s / a[r][r];
  }
  return true;
}

/* What a point leaves to the fitted terms: its measurement less its random rows' sampling. */
static double fit_target(const struct sim_fit_point *p, double random_row_s) {
  return p->seconds - random_row_s * p->shape.num_random;
}

/* The weight of a point's squared error: its own, or 1/seconds^2 (its relative error). */
static double fit_weight(const struct sim_fit_point *p) {
  return p->weight > 0.0 ? p->weight : 1.0 / (p->seconds * p->seconds);
}

/* Weighted least squares over the terms in mask; coefficients of the other terms 0. Returns the
 * weighted sum of squared errors, or INFINITY when the solution is singular or has a negative
 * coefficient. Each column is scaled to unit size first (the terms differ by 10 orders of
 * magnitude). */
static double fit_subset(const struct sim_fit_point *pts, int32_t n, double random_row_s, unsigned mask,
                         double coef[SIM_TERMS]) {
  int idx[SIM_TERMS], k = 0;
  for (int t = 0; t < SIM_TERMS; t++)
    if (mask & (1u << t)) idx[k++] = t;
  double scale[SIM_TERMS] = {0};
  for (int32_t i = 0; i < n; i++) {
    double x[SIM_TERMS];
    features(&pts[i].shape, x);
    const double sw = sqrt(fit_weight(&pts[i]));
    for (int j = 0; j < k; j++) scale[j] = fmax(scale[j], fabs(x[idx[j]]) * sw);
  }
  double a[SIM_TERMS][SIM_TERMS] = {{0}}, b[SIM_TERMS] = {0}, c[SIM_TERMS] = {0};
  for (int j = 0; j < k; j++)
    if (scale[j] == 0.0) return INFINITY; /* a term that is 0 everywhere cannot be fitted */
  for (int32_t i = 0; i < n; i++) {
    double x[SIM_TERMS], z[SIM_TERMS];
    features(&pts[i].shape, x);
    const double sw = sqrt(fit_weight(&pts[i])), target = fit_target(&pts[i], random_row_s) * sw;
    for (int j = 0; j < k; j++) z[j] = x[idx[j]] * sw / scale[j];
    for (int j = 0; j < k; j++) {
      b[j] += z[j] * target;
      for (int l = 0; l < k; l++) a[j][l] += z[j] * z[l];
    }
  }
  if (!solve(a, b, k, c)) return INFINITY;
  for (int t = 0; t < SIM_TERMS; t++) coef[t] = 0.0;
  for (int j = 0; j < k; j++) {
    if (c[j] < 0.0) return INFINITY;
    coef[idx[j]] = c[j] / scale[j];
  }
  double sse = 0.0;
  for (int32_t i = 0; i < n; i++) {
    double x[SIM_TERMS], p = 0.0;
    features(&pts[i].shape, x);
    for (int t = 0; t < SIM_TERMS; t++) p += coef[t] * x[t];
    const double e = p - fit_target(&pts[i], random_row_s);
    sse += fit_weight(&pts[i]) * e * e;
  }
  return sse;
}

llb_status sim_cost_fit(const struct sim_fit_point *pts, int32_t n, struct sim_cost_model *out,
                        struct sim_fit_quality *q) {
  if (!pts || n < SIM_TERMS) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sim fit: %d points, at least %d", n, SIM_TERMS);
  for (int32_t i = 0; i < n; i++)
    if (!(pts[i].seconds > 0.0) || !isfinite(pts[i].seconds) || !(fit_target(&pts[i], out->random_row_s) > 0.0) ||
        !(pts[i].weight >= 0.0) || !isfinite(pts[i].weight))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sim fit: point %d measured %g s", i, pts[i].seconds);
  double best[SIM_TERMS] = {0}, best_sse = INFINITY;
  for (unsigned mask = 1; mask < (1u << SIM_TERMS); mask++) {
    double c[SIM_TERMS];
    const double sse = fit_subset(pts, n, out->random_row_s, mask, c);
    if (sse < best_sse) best_sse = sse, memcpy(best, c, sizeof best);
  }
  if (!isfinite(best_sse)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sim fit: no non-negative solution");
  out->fixed_s = best[0], out->token_s = best[1], out->sampled_row_s = best[2], out->attention_s = best[3];
  out->context_s = best[4], out->first_step_s = best[5];
  out->weights_s = 0.0;
  if (q) {
    *q = (struct sim_fit_quality){.num_points = n};
    for (int32_t i = 0; i < n; i++) {
      const double e = fabs(sim_cost_seconds(out, &pts[i].shape) / pts[i].seconds - 1.0);
      q->rms_rel_error += e * e;
      if (e > q->max_rel_error) q->max_rel_error = e;
    }
    q->rms_rel_error = sqrt(q->rms_rel_error / n);
  }
  return LLB_STATUS_OK;
}

/* ---- tokens ---- */

llb_status sim_vocab_from_tokenizer(const struct tokenizer *tok, struct sim_vocab *v) {
  *v = (struct sim_vocab){0};
  const int32_t n = tokenizer_vocab_size(tok);
  if (n < 1 || !(v->ids = malloc((size_t)n * sizeof(int32_t))))
    return LLB_ERRF(n < 1 ? LLB_STATUS_INVALID_ARGUMENT : LLB_STATUS_OUT_OF_MEMORY, "sim vocabulary of %d", n);
  for (int32_t id = 0; id < n; id++)
    if (!tokenizer_is_control(tok, id) && !tokenizer_is_eog(tok, id)) v->ids[v->num_ids++] = id;
  if (v->num_ids == 0) {
    sim_vocab_free(v);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sim vocabulary: no ordinary token among %d", n);
  }
  return LLB_STATUS_OK;
}

void sim_vocab_free(struct sim_vocab *v) {
  free(v->ids);
  *v = (struct sim_vocab){0};
}

/* splitmix64 of x: its generator's output from state x - gamma. */
static uint64_t splitmix64(uint64_t x) { return llb_mix64(x + LLB_SPLITMIX64_GAMMA); }

uint64_t sim_request_key(const struct llb_sampling_params *p, const int32_t *prompt_ids, int64_t num_prompt) {
  uint64_t h = LLB_FNV1A64_INIT; /* FNV-1a 64 over the ids' bytes, little endian whatever the host */
  for (int64_t i = 0; i < num_prompt; i++) {
    const uint32_t t = (uint32_t)prompt_ids[i];
    const uint8_t le[4] = {(uint8_t)t, (uint8_t)(t >> 8), (uint8_t)(t >> 16), (uint8_t)(t >> 24)};
    h = llb_fnv1a64(h, le, sizeof le);
  }
  return p->temperature < SAMPLER_GREEDY_EPS ? h : splitmix64(h ^ splitmix64(p->seed));
}

int32_t sim_token(const struct sim_vocab *v, uint64_t key, int64_t output_pos) {
  const uint32_t ctr[4] = {(uint32_t)output_pos, (uint32_t)((uint64_t)output_pos >> 32), 0, 0x73696d74u /* 'simt' */};
  const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
  uint32_t r[4];
  sampler_philox4x32_10(ctr, k, r);
  const uint64_t x = ((uint64_t)r[0] << 32) | r[1];
  /* multiply-high: an index in [0, num_ids) without the bias of a modulo worth mentioning */
  return v->ids[(int64_t)(((unsigned __int128)x * (uint64_t)v->num_ids) >> 64)];
}

void sim_wait_until(int64_t deadline_ns) {
  const struct timespec ts = {.tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

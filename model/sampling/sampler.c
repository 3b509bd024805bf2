/* Token sampler (see sampler.h for the order of processing and the sources followed). */
#include "model/sampling/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
  int32_t vocab_size;
  int32_t *counts;   /* [vocab_size] output-token counts; all zero between calls */
  uint8_t *seen;     /* [vocab_size] prompt ∪ output mask; all zero between calls */
  float *cand_val;   /* [vocab_size] candidate logits / temperature, later their weights */
  int32_t *cand_id;  /* [vocab_size] candidate token ids, paired with cand_val */
  int32_t max_num_logprobs; /* the batch's width (sampler_set_max_num_logprobs); -1 = each row's own */
};

/* ---- Philox4x32-10 (Random123's philox4x32_R(10, ctr, key)) ---------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define SAMPLER_DOMAIN_TAG 0x73616d70u /* 'samp': keeps other users of (seed, ...) apart */

void sampler_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Both 53-bit uniforms of one Philox block: u[0] from words 0-1 (the draw), u[1] from words
 * 2-3 (a draft's acceptance test), independent of each other. */
static void uniform_pair(uint64_t seed, uint32_t stream, int64_t output_pos, double u[2]) {
  uint64_t pos = (uint64_t)output_pos;
  const uint32_t ctr[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), stream, SAMPLER_DOMAIN_TAG};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t r[4];
  sampler_philox4x32_10(ctr, key, r);
  u[0] = (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * 0x1.0p-53;
  u[1] = (double)((((uint64_t)r[2] << 32) | r[3]) >> 11) * 0x1.0p-53;
}

double sampler_uniform(uint64_t seed, uint32_t stream, int64_t output_pos) {
  double u[2];
  uniform_pair(seed, stream, output_pos, u);
  return u[0];
}

/* ---- create / destroy ------------------------------------------------------------------ */

llb_status sampler_create(int32_t vocab_size, struct sampler **out) {
  if (!out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler_create: out is NULL");
  *out = NULL;
  if (vocab_size <= 0 || vocab_size > (1 << 30))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler_create: vocab_size %d out of range",
                    (int)vocab_size);
  struct sampler *s = calloc(1, sizeof *s);
  if (!s) goto fail;
  s->vocab_size = vocab_size;
  s->max_num_logprobs = -1;
  s->counts = calloc((size_t)vocab_size, sizeof *s->counts);
  s->seen = calloc((size_t)vocab_size, sizeof *s->seen);
  s->cand_val = malloc((size_t)vocab_size * sizeof *s->cand_val);
  s->cand_id = malloc((size_t)vocab_size * sizeof *s->cand_id);
  if (!s->counts || !s->seen || !s->cand_val || !s->cand_id) goto fail;
  *out = s;
  return LLB_STATUS_OK;
fail:
  sampler_destroy(s);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "sampler_create: scratch for vocab %d",
                  (int)vocab_size);
}

void sampler_destroy(struct sampler *s) {
  if (!s) return;
  free(s->counts);
  free(s->seen);
  free(s->cand_val);
  free(s->cand_id);
  free(s);
}

int32_t sampler_vocab_size(const struct sampler *s) { return s ? s->vocab_size : 0; }

llb_status sampler_set_max_num_logprobs(struct sampler *s, int32_t n) {
  if (!s || n < -1 || n > SAMPLER_MAX_LOGPROBS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler_set_max_num_logprobs: %d outside [-1, %d]", (int)n,
                    SAMPLER_MAX_LOGPROBS);
  s->max_num_logprobs = n;
  return LLB_STATUS_OK;
}

/* ---- validation ------------------------------------------------------------------------ */

static llb_status check_ids(const int32_t *ids, int64_t n, int32_t vocab, const char *what) {
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: negative %s count", what);
  if (n > 0 && !ids) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: %s is NULL", what);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: %s[%lld] = %d outside vocab %d",
                      what, (long long)i, (int)ids[i], (int)vocab);
  return LLB_STATUS_OK;
}

/* logit_bias: a bounded count, ids inside the vocabulary, finite biases in [-100, 100]. */
static llb_status check_logit_bias(const struct sampler_params *p, int32_t vocab) {
  if (p->num_logit_bias < 0 || p->num_logit_bias > SAMPLER_MAX_LOGIT_BIAS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: %d logit_bias entries, at most %d",
                    (int)p->num_logit_bias, SAMPLER_MAX_LOGIT_BIAS);
  for (int32_t i = 0; i < p->num_logit_bias; i++) {
    const struct sampler_logit_bias *b = &p->logit_bias[i];
    if (b->token_id < 0 || b->token_id >= vocab)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: logit_bias token %d outside vocab %d",
                      (int)b->token_id, (int)vocab);
    if (!(fabsf(b->bias) <= SAMPLER_MAX_LOGIT_BIAS_VALUE))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: logit_bias of token %d is %g, not in [-100, 100]",
                      (int)b->token_id, (double)b->bias);
  }
  return LLB_STATUS_OK;
}

llb_status sampler_check_params(const struct sampler_params *p) {
  if (!(p->temperature >= 0.0f) || isinf(p->temperature))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: temperature %g", p->temperature);
  if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: top_p %g not in (0, 1]", p->top_p);
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: min_p %g not in [0, 1]", p->min_p);
  if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: repetition_penalty %g",
                    p->repetition_penalty);
  if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: presence/frequency penalty not finite");
  if (p->logprobs > SAMPLER_MAX_LOGPROBS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: logprobs %d > %d", (int)p->logprobs,
                    SAMPLER_MAX_LOGPROBS);
  return LLB_STATUS_OK;
}

/* ---- penalties (vLLM v1 ops/penalties.py: repetition, then frequency, then presence) ---- */

static void apply_repetition(struct sampler *s, float penalty, float *logits, const int32_t *ids,
                             int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int32_t t = ids[i];
    if (s->seen[t]) continue;
    s->seen[t] = 1;
    logits[t] = logits[t] > 0.0f ? logits[t] / penalty : logits[t] * penalty;
  }
}

static void clear_seen(struct sampler *s, const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++) s->seen[ids[i]] = 0;
}

static void apply_penalties(struct sampler *s, const struct sampler_params *p, float *logits,
                            const int32_t *prompt_ids, int64_t num_prompt,
                            const int32_t *output_ids, int64_t num_output) {
  if (p->repetition_penalty != 1.0f) {
    apply_repetition(s, p->repetition_penalty, logits, prompt_ids, num_prompt);
    apply_repetition(s, p->repetition_penalty, logits, output_ids, num_output);
    clear_seen(s, prompt_ids, num_prompt);
    clear_seen(s, output_ids, num_output);
  }
  if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
    for (int64_t i = 0; i < num_output; i++) s->counts[output_ids[i]]++;
    for (int64_t i = 0; i < num_output; i++) {
      int32_t t = output_ids[i];
      int32_t c = s->counts[t];
      if (c == 0) continue; /* already applied for an earlier occurrence */
      logits[t] -= p->frequency_penalty * (float)c;
      logits[t] -= p->presence_penalty;
      s->counts[t] = 0;
    }
  }
}

/* ---- exp ------------------------------------------------------------------------------- */

/* e^x for x <= 0 (weights relative to the max), branch-free so that loops over the vocab
 * vectorize (glibc's expf does not). Cephes expf: range reduction by ln 2 in two parts and a
 * degree-6 polynomial, relative error < 3e-7 (checked against expf in the unit test);
 * x < -87 (and -inf) gives 0. */
static inline float exp_nonpos(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  float n = (float)(int32_t)(xc * 1.44269504088896341f - 0.5f); /* round(x / ln 2), x <= 0 */
  float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  float y = q * r * r + r + 1.0f;
  union { uint32_t u; float f; } scale = {.u = (uint32_t)((int32_t)n + 127) << 23};
  return x < -87.0f ? 0.0f : y * scale.f;
}

/* w[i] = e^(v[i] - max) for v [n] (every v[i] <= max), then their sum in double. */
static double exp_weights(const float *v, float *w, int64_t n, float max) {
  for (int64_t i = 0; i < n; i++) w[i] = exp_nonpos(v[i] - max);
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += w[i];
  return sum;
}

float sampler_exp_nonpos(float x) { return exp_nonpos(x); }

/* ---- selection helpers ----------------------------------------------------------------- */

/* Candidate a ranks before b: higher value first, then lower id. */
static inline bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

static inline void cand_swap(float *v, int32_t *id, int64_t a, int64_t b) {
  float tv = v[a];
  v[a] = v[b];
  v[b] = tv;
  int32_t ti = id[a];
  id[a] = id[b];
  id[b] = ti;
}

/* Value of the k-th largest (0-based) of v[0..n), by quickselect with a three-way
 * partition (so runs of equal values cost O(n)); reorders v/id [n]. Expected O(n). */
static float select_kth_largest(float *v, int32_t *id, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n;
  for (;;) {
    if (hi - lo <= 1) return v[lo];
    float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
    float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
    /* [lo, gt) > pivot, [gt, i) == pivot, [lt, hi) < pivot */
    int64_t gt = lo, i = lo, lt = hi;
    while (i < lt) {
      if (v[i] > pivot) cand_swap(v, id, gt++, i++);
      else if (v[i] < pivot) cand_swap(v, id, i, --lt);
      else i++;
    }
    if (k < gt) hi = gt;
    else if (k < lt) return pivot;
    else lo = lt;
  }
}

static void heap_sift_down(float *v, int32_t *id, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, best = i;
    if (l < n && ranks_before(v[l], id[l], v[best], id[best])) best = l;
    if (r < n && ranks_before(v[r], id[r], v[best], id[best])) best = r;
    if (best == i) return;
    cand_swap(v, id, i, best);
    i = best;
  }
}

/* Top-p over candidate weights w [n] (unnormalized probabilities, total `sum`): keeps the
 * smallest descending prefix whose mass reaches top_p, i.e. every token whose higher-ranked
 * mass is < top_p (vLLM/HF: drop tokens whose ascending cumulative probability <= 1 - p).
 * Heap selection: O(n + m log n) for m kept. Moves the kept ones, in descending order, to
 * the front; returns m and their total mass in *kept_sum. */
static int64_t top_p_select(float *w, int32_t *id, int64_t n, double sum, float top_p,
                            double *kept_sum) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) heap_sift_down(w, id, n, i);
  double limit = (double)top_p * sum, cum = 0.0;
  int64_t heap_n = n;
  while (heap_n > 0 && cum < limit) {
    cum += w[0];
    cand_swap(w, id, 0, --heap_n); /* popped max lands at the end, in descending order */
    heap_sift_down(w, id, heap_n, 0);
  }
  int64_t m = n - heap_n;
  /* [heap_n, n) holds the kept ones, largest last. Swapping i with n-1-i (stopping at the
   * middle, which makes it a full reversal when the ranges overlap) puts rank i at i. */
  for (int64_t i = 0; i < m && i < n - 1 - i; i++) cand_swap(w, id, i, n - 1 - i);
  *kept_sum = cum;
  return m;
}

/* Keeps the top-n (value desc, id asc) of logits [vocab] in top [n], sorted. */
static void select_top_n(const float *logits, int32_t vocab, int32_t n, float *top_val,
                         int32_t *top_id) {
  int32_t have = 0;
  for (int32_t i = 0; i < vocab; i++) {
    float x = logits[i];
    if (have == n && !ranks_before(x, i, top_val[n - 1], top_id[n - 1])) continue;
    int32_t j = have < n ? have++ : n - 1;
    while (j > 0 && ranks_before(x, i, top_val[j - 1], top_id[j - 1])) {
      top_val[j] = top_val[j - 1];
      top_id[j] = top_id[j - 1];
      j--;
    }
    top_val[j] = x;
    top_id[j] = i;
  }
}

/* ---- sample ---------------------------------------------------------------------------- */

/* Rejection sampling of one draft against the filtered candidates val/id [n] (weights, total
 * mass `total`): vLLM v1 rejection_sampler.py with a one-hot draft distribution q (an n-gram
 * proposer's), so accept with probability min(1, p/q) = p(draft); on rejection draw from
 * max(0, p - q) normalized = p without the draft. u[0] is the draw, u[1] the acceptance test. */
static int32_t verify_draft(float *val, const int32_t *id, int64_t n, double total, int32_t draft,
                            const double u[2], bool *accepted) {
  double w_draft = 0.0;
  for (int64_t i = 0; i < n; i++)
    if (id[i] == draft) {
      w_draft = val[i];
      val[i] = 0.0f; /* out of the recovery draw */
      break;
    }
  if (w_draft > 0.0 && u[1] * total < w_draft) {
    *accepted = true;
    return draft;
  }
  double target = u[0] * (total - w_draft), acc = 0.0;
  int32_t token = -1;
  for (int64_t i = 0; i < n; i++) {
    if (val[i] <= 0.0f) continue;
    token = id[i]; /* the last positive one, should rounding leave acc <= target */
    acc += val[i];
    if (acc > target) break;
  }
  return token >= 0 ? token : draft; /* only the draft had mass: it was accepted above */
}

static llb_status sample_impl(struct sampler *s, const struct sampler_params *p, float *logits,
                              const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                              int64_t num_output, uint32_t stream, int64_t output_pos, int32_t draft,
                              bool *accepted, struct sampler_result *out);

llb_status sampler_sample(struct sampler *s, const struct sampler_params *p, float *logits,
                          const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                          int64_t num_output, uint32_t stream, int64_t output_pos,
                          struct sampler_result *out) {
  return sample_impl(s, p, logits, prompt_ids, num_prompt, output_ids, num_output, stream, output_pos, -1,
                     NULL, out);
}

llb_status sampler_verify_draft(struct sampler *s, const struct sampler_params *p, float *logits,
                                const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                                int64_t num_output, uint32_t stream, int64_t output_pos, int32_t draft,
                                bool *accepted, struct sampler_result *out) {
  if (!accepted || !s || draft < 0 || draft >= s->vocab_size)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler_verify_draft: draft %d outside the vocabulary or NULL",
                    (int)draft);
  *accepted = false;
  return sample_impl(s, p, logits, prompt_ids, num_prompt, output_ids, num_output, stream, output_pos, draft,
                     accepted, out);
}

static llb_status sample_impl(struct sampler *s, const struct sampler_params *p, float *logits,
                              const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                              int64_t num_output, uint32_t stream, int64_t output_pos, int32_t draft,
                              bool *accepted, struct sampler_result *out) {
  if (!s || !p || !logits || !out)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler_sample: NULL argument");
  if (output_pos < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: output_pos %lld < 0",
                    (long long)output_pos);
  llb_status st = sampler_check_params(p);
  if (st == LLB_STATUS_OK) st = check_ids(prompt_ids, num_prompt, s->vocab_size, "prompt_ids");
  if (st == LLB_STATUS_OK) st = check_ids(output_ids, num_output, s->vocab_size, "output_ids");
  if (st == LLB_STATUS_OK) st = check_logit_bias(p, s->vocab_size);
  if (st != LLB_STATUS_OK) return st;
  const int32_t vocab = s->vocab_size;

  /* logit_bias first, then the penalties (vLLM v1 sampler: the non-argmax-invariant
   * logits processors, LogitBiasLogitsProcessor among them, run before apply_penalties). */
  for (int32_t i = 0; i < p->num_logit_bias; i++) logits[p->logit_bias[i].token_id] += p->logit_bias[i].bias;
  apply_penalties(s, p, logits, prompt_ids, num_prompt, output_ids, num_output);

  /* Argmax (ties to the lowest id) of the penalized logits; one pass that also rejects NaN
   * and +inf (which penalties cannot create from finite values). */
  int32_t argmax = 0;
  bool bad = false;
  for (int32_t i = 0; i < vocab; i++) {
    float x = logits[i];
    bad |= isnan(x) || x == INFINITY;
    if (x > logits[argmax]) argmax = i;
  }
  if (bad) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: a logit is NaN or +inf");
  const float max_logit = logits[argmax];
  if (max_logit == -INFINITY)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: every logit is -inf");
  /* Log-partition for logprobs, only when they are asked for (a pass of expf). */
  double log_z = 0.0;
  const int32_t num_logprobs = s->max_num_logprobs >= 0 ? s->max_num_logprobs : p->logprobs;
  if (num_logprobs >= 0) {
    double z = exp_weights(logits, s->cand_val /* [vocab] scratch, reused below */, vocab,
                           max_logit);
    log_z = (double)max_logit + log(z);
  }

  int32_t num_top = num_logprobs > 0 ? num_logprobs : 0;
  if (num_top > vocab) num_top = vocab;
  out->num_top = num_top;
  if (num_top > 0) {
    float top_val[SAMPLER_MAX_LOGPROBS];
    int32_t top_id[SAMPLER_MAX_LOGPROBS];
    select_top_n(logits, vocab, num_top, top_val, top_id);
    for (int32_t j = 0; j < num_top; j++) {
      out->top[j].token_id = top_id[j];
      out->top[j].logprob = (float)((double)top_val[j] - log_z);
    }
  }

  int32_t token = argmax;
  if (p->temperature >= SAMPLER_GREEDY_EPS) {
    const float temp = p->temperature;
    const float max_scaled = max_logit / temp; /* = max of logits[i] / temp: rounding is monotonic */
    const float min_scaled = p->min_p > 0.0f ? max_scaled + logf(p->min_p) : -INFINITY;
    float *val = s->cand_val;  /* [n] */
    int32_t *id = s->cand_id;  /* [n] */
    int64_t n = 0;
    for (int32_t i = 0; i < vocab; i++) {
      float x = logits[i] / temp;
      if (x == -INFINITY || x < min_scaled) continue;
      val[n] = x;
      id[n] = i;
      n++;
    }
    if (p->top_k > 0 && p->top_k < n) {
      float kth = select_kth_largest(val, id, n, p->top_k - 1);
      int64_t m = 0;
      for (int64_t i = 0; i < n; i++)
        if (val[i] >= kth) {
          val[m] = val[i];
          id[m] = id[i];
          m++;
        }
      n = m;
    }
    double total = exp_weights(val, val, n, max_scaled); /* val holds weights from here on */
    if (p->top_p < 1.0f) n = top_p_select(val, id, n, total, p->top_p, &total);
    double u[2];
    uniform_pair(p->seed, stream, output_pos, u);
    if (draft >= 0) {
      token = verify_draft(val, id, n, total, draft, u, accepted);
    } else {
      double target = u[0] * total;
      double acc = 0.0;
      token = id[n - 1];
      for (int64_t i = 0; i < n; i++) {
        acc += val[i];
        if (acc > target) {
          token = id[i];
          break;
        }
      }
    }
  } else if (draft >= 0) {
    *accepted = token == draft; /* greedy: the draft stands while it is the argmax */
  }
  out->token_id = token;
  out->logprob = num_logprobs >= 0 ? (float)((double)logits[token] - log_z) : 0.0f;
  return LLB_STATUS_OK;
}

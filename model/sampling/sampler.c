/* Token sampler (see sampler.h for the order of processing and the sources followed). */
#include "model/sampling/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { SUM_BLOCK = 16 }; /* weights summed a block at a time (weight_sums) */

struct sampler {
  int32_t vocab_size;
  int32_t *counts;   /* [vocab_size] output-token counts; all zero between calls */
  uint8_t *seen;     /* [vocab_size] prompt ∪ output mask; all zero between calls */
  float *cand_val;   /* [vocab_size] candidate logits / temperature, later their weights */
  int32_t *cand_id;  /* [vocab_size] candidate token ids, paired with cand_val */
  double *cum;       /* [blocks of vocab_size] running sums of candidate weights (weight_sums) */
  float *bmax;       /* [blocks of vocab_size] block maxima (block_max) */
  float *sel;        /* [vocab_size] values copied for a selection that reorders them */
  float *short_val;  /* [vocab_size] a shortlist of candidates (shortlist) */
  int32_t *short_id; /* [vocab_size] its token ids */
  int32_t *sort_id;  /* [vocab_size] sort_desc's scratch for ids (s->sel for values) */
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
  s->cum = malloc((size_t)(vocab_size / SUM_BLOCK + 1) * sizeof *s->cum);
  s->bmax = malloc((size_t)(vocab_size / SUM_BLOCK + 1) * sizeof *s->bmax);
  s->sel = malloc((size_t)vocab_size * sizeof *s->sel);
  s->short_val = malloc((size_t)vocab_size * sizeof *s->short_val);
  s->short_id = malloc((size_t)vocab_size * sizeof *s->short_id);
  s->sort_id = malloc((size_t)vocab_size * sizeof *s->sort_id);
  if (!s->counts || !s->seen || !s->cand_val || !s->cand_id || !s->cum || !s->bmax || !s->sel || !s->short_val ||
      !s->short_id || !s->sort_id)
    goto fail;
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
  free(s->cum);
  free(s->bmax);
  free(s->sel);
  free(s->short_val);
  free(s->short_id);
  free(s->sort_id);
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

/* The loops over a whole row that the compiler vectorizes, built once for each vector width
 * and picked at load time (GCC / Clang target_clones on x86-64). Their results do not depend
 * on the width: element-wise IEEE operations, no reassociation, and no contraction into FMA
 * (sampler.c is built with -ffp-contract=off), so a draw is the same on every CPU. GCC on glibc
 * only (clones need ifunc), and not under AddressSanitizer (whose start-up runs after ifunc
 * resolvers): elsewhere the one baseline build. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && \
    !defined(__SANITIZE_ADDRESS__)
#define SAMPLER_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SAMPLER_CLONES
#endif

/* ---- exp ------------------------------------------------------------------------------- */

/* e^x for x <= 0 (weights relative to the max), branch-free so that loops over the vocab
 * vectorize (glibc's expf does not). Cephes expf: range reduction by ln 2 in two parts and a
 * degree-6 polynomial, relative error < 3e-7 (checked against expf in the unit test);
 * x < -87 (and -inf) gives 0. */
static inline float exp_nonpos(float x) {
  union { float f; uint32_t u; } in = {.f = x}, lo = {.f = -87.0f};
  const uint32_t below = 0u - (uint32_t)(x < -87.0f); /* all ones below -87: select bits, no branch */
  in.u = (lo.u & below) | (in.u & ~below);
  const float xc = in.f;
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
  return y * scale.f * (float)(x >= -87.0f); /* a multiply, not a branch: every width vectorizes it */
}

/* One block of SUM_BLOCK weights summed in double as a fixed tree (w[j] + w[j + 8], then
 * pairs 4 apart, 2 apart, 1 apart): the same bits with SSE2 as without. */
static double block_sum(const float *w) {
#if defined(__SSE2__)
  const __m128 a = _mm_loadu_ps(w), b = _mm_loadu_ps(w + 4), c = _mm_loadu_ps(w + 8), d = _mm_loadu_ps(w + 12);
  const __m128d p01 = _mm_add_pd(_mm_cvtps_pd(a), _mm_cvtps_pd(c));
  const __m128d p23 = _mm_add_pd(_mm_cvtps_pd(_mm_movehl_ps(a, a)), _mm_cvtps_pd(_mm_movehl_ps(c, c)));
  const __m128d p45 = _mm_add_pd(_mm_cvtps_pd(b), _mm_cvtps_pd(d));
  const __m128d p67 = _mm_add_pd(_mm_cvtps_pd(_mm_movehl_ps(b, b)), _mm_cvtps_pd(_mm_movehl_ps(d, d)));
  const __m128d r = _mm_add_pd(_mm_add_pd(p01, p45), _mm_add_pd(p23, p67));
  return _mm_cvtsd_f64(r) + _mm_cvtsd_f64(_mm_unpackhi_pd(r, r));
#else
  double p[8];
  for (int j = 0; j < 8; j++) p[j] = (double)w[j] + (double)w[j + 8];
  for (int j = 0; j < 4; j++) p[j] += p[j + 4];
  for (int j = 0; j < 2; j++) p[j] += p[j + 2];
  return p[0] + p[1];
#endif
}

/* Running sums of the weights w [n] (each >= 0) a block of SUM_BLOCK at a time: cum[b] = the
 * sum of blocks 0..b, the last block possibly short (its weights added in order); cum holds
 * ceil(n / SUM_BLOCK). Returns the total, 0 for n = 0. Blocks are independent, so the sums
 * overlap; one dependent add a block, not one a weight. */
static double weight_sums(const float *w, int64_t n, double *cum) {
  double run = 0.0;
  int64_t b = 0, i = 0;
  for (; i + SUM_BLOCK <= n; i += SUM_BLOCK) {
    run += block_sum(w + i);
    cum[b++] = run;
  }
  if (i < n) {
    double tail = 0.0;
    for (; i < n; i++) tail += w[i];
    run += tail;
    cum[b] = run;
  }
  return run;
}

/* w[i] = e^(w[i] - max) for w [n] (every w[i] <= max), in place: a loop the compiler
 * vectorizes without an alias check. */
SAMPLER_CLONES static void exp_row(float *w, int64_t n, float max) {
  for (int64_t i = 0; i < n; i++) w[i] = exp_nonpos(w[i] - max);
}

/* w[i] = e^(v[i] - max) for v [n] (every v[i] <= max; w may be v), then their running sums
 * (weight_sums into cum); returns the total. */
static double exp_weights(const float *v, float *w, int64_t n, float max, double *cum) {
  if (w != v) memcpy(w, v, (size_t)n * sizeof *w);
  exp_row(w, n, max);
  return weight_sums(w, n, cum);
}

/* Inverse CDF over the weights w [n] with weight_sums' cum: the first index whose running sum
 * exceeds target, found by a binary search over the blocks and then the block's weights added
 * one by one to the sum of the blocks before it. Those adds may round apart from the block's
 * tree: a block passed through without exceeding target gives its last weighted index (there
 * is one: its sum is > 0). The last weighted index when no block's sum exceeds target (target
 * rounded up to the total). */
static int64_t draw_index(const float *w, int64_t n, const double *cum, double target) {
  const int64_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
  int64_t lo = 0, hi = nb;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cum[mid] > target) hi = mid;
    else lo = mid + 1;
  }
  if (lo == nb) { /* target rounded up to the total: the last index with weight */
    int64_t i = n - 1;
    while (i > 0 && !(w[i] > 0.0f)) i--;
    return i;
  }
  const int64_t start = lo * SUM_BLOCK, end = start + SUM_BLOCK < n ? start + SUM_BLOCK : n;
  double acc = lo > 0 ? cum[lo - 1] : 0.0;
  int64_t last = start;
  for (int64_t i = start; i < end; i++) {
    if (!(w[i] > 0.0f)) continue;
    last = i;
    acc += w[i];
    if (acc > target) return i;
  }
  return last;
}

/* The argmax of v [n] (n >= 1; the lowest index among equal maxima, -0 equal to +0), and
 * *bad = whether any v[i] is NaN or +inf. Two passes: the maximum (SSE2 max over 16 lanes,
 * NaN noted apart), then the first index holding it. Exact: max and == do not round. */
static int32_t argmax_checked(const float *v, int32_t n, bool *bad) {
  float max = -INFINITY;
  bool nan = false;
  int32_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0, unord = _mm_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m128 x0 = _mm_loadu_ps(v + i), x1 = _mm_loadu_ps(v + i + 4);
    const __m128 x2 = _mm_loadu_ps(v + i + 8), x3 = _mm_loadu_ps(v + i + 12);
    m0 = _mm_max_ps(x0, m0), m1 = _mm_max_ps(x1, m1), m2 = _mm_max_ps(x2, m2), m3 = _mm_max_ps(x3, m3);
    unord = _mm_or_ps(unord, _mm_or_ps(_mm_cmpunord_ps(x0, x1), _mm_cmpunord_ps(x2, x3)));
  }
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (int j = 0; j < 4; j++) max = lanes[j] > max ? lanes[j] : max;
  nan = _mm_movemask_ps(unord) != 0;
#endif
  for (; i < n; i++) {
    nan |= isnan(v[i]);
    max = v[i] > max ? v[i] : max;
  }
  *bad = nan || max == INFINITY;
  int32_t j = 0;
#if defined(__SSE2__)
  const __m128 mx = _mm_set1_ps(max);
  for (; j + 16 <= n; j += 16) {
    const __m128 e01 = _mm_or_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + j), mx), _mm_cmpeq_ps(_mm_loadu_ps(v + j + 4), mx));
    const __m128 e23 = _mm_or_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + j + 8), mx), _mm_cmpeq_ps(_mm_loadu_ps(v + j + 12), mx));
    if (_mm_movemask_ps(_mm_or_ps(e01, e23))) break;
  }
#endif
  for (; j < n; j++)
    if (v[j] == max) return j;
  return 0; /* every v[i] NaN: *bad is set */
}

float sampler_exp_nonpos(float x) { return exp_nonpos(x); }

/* ---- selection helpers ----------------------------------------------------------------- */

/* Candidate a ranks before b: higher value first, then lower id. */
static inline bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

/* Value of the k-th largest (0-based) of v [n], by quickselect with a three-way partition (so
 * runs of equal values cost O(n)); reorders v. Expected O(n). */
static float select_kth_largest(float *v, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n;
  for (;;) {
    if (hi - lo <= 1) return v[lo];
    float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
    float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
    /* [lo, gt) > pivot, [gt, i) == pivot, [lt, hi) < pivot */
    int64_t gt = lo, i = lo, lt = hi;
    while (i < lt) {
      const float x = v[i];
      if (x > pivot) v[i++] = v[gt], v[gt++] = x;
      else if (x < pivot) v[i] = v[--lt], v[lt] = x;
      else i++;
    }
    if (k < gt) hi = gt;
    else if (k < lt) return pivot;
    else lo = lt;
  }
}

/* Maxima of v [n] (no NaN) by blocks of SUM_BLOCK, the last possibly short, into
 * bmax [ceil(n / SUM_BLOCK)]: what lets a selection skip whole blocks (shortlist). */
static void block_max(const float *v, int64_t n, float *bmax) {
  int64_t b = 0, i = 0;
#if defined(__SSE2__)
  for (; i + SUM_BLOCK <= n; i += SUM_BLOCK) {
    __m128 m = _mm_max_ps(_mm_max_ps(_mm_loadu_ps(v + i), _mm_loadu_ps(v + i + 4)),
                          _mm_max_ps(_mm_loadu_ps(v + i + 8), _mm_loadu_ps(v + i + 12)));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    bmax[b++] = _mm_cvtss_f32(m);
  }
#endif
  for (; i < n; b++) { /* without SSE2 every block, with it the short last one */
    const int64_t end = i + SUM_BLOCK < n ? i + SUM_BLOCK : n;
    float m = v[i];
    for (i++; i < end; i++) m = v[i] > m ? v[i] : m;
    bmax[b] = m;
  }
}

/* Copies every candidate of val/id [n] whose value is >= t to dst_val/dst_id, in order (dst may
 * be val/id themselves: n only shrinks), reading only the blocks whose maximum in bmax (block_max
 * of val) is >= t. Returns the count. */
static int64_t shortlist(const float *val, const int32_t *id, int64_t n, const float *bmax, float t, float *dst_val,
                         int32_t *dst_id) {
  int64_t m = 0;
  for (int64_t b = 0, start = 0; start < n; b++, start += SUM_BLOCK) {
    if (bmax[b] < t) continue;
    const int64_t end = start + SUM_BLOCK < n ? start + SUM_BLOCK : n;
    for (int64_t i = start; i < end; i++) { /* branch-free: written always, kept when >= t */
      dst_val[m] = val[i];
      dst_id[m] = id[i];
      m += val[i] >= t;
    }
  }
  return m;
}

/* The k-th largest (1-based, counting equal values apart) of v [n], k in [1, min(n, 64)], by a
 * sorted buffer: after the first k, a value at or below the buffer's last costs one compare. */
static float kth_largest_small(const float *v, int64_t n, int32_t k) {
  float top[64];
  int32_t have = 0;
  for (int64_t i = 0; i < n; i++) {
    const float x = v[i];
    if (have == k && !(x > top[k - 1])) continue;
    int32_t j = have < k ? have++ : k - 1;
    for (; j > 0 && x > top[j - 1]; j--) top[j] = top[j - 1];
    top[j] = x;
  }
  return top[k - 1];
}

/* top_k (k in [1, n)): keeps every candidate of val/id [n] whose value is >= the k-th largest
 * (ties at the boundary kept, as vLLM and HF), in id order; returns the count. For k <= 64 the
 * k-th largest block maximum bounds it from below (k blocks each hold a value that large), so
 * the selection runs over the blocks that reach it, not the whole row. */
static int64_t top_k_keep(struct sampler *s, float *val, int32_t *id, int64_t n, int32_t k) {
  const int64_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
  block_max(val, n, s->bmax);
  const float bound = k <= 64 && nb >= k ? kth_largest_small(s->bmax, nb, k) : -INFINITY;
  const int64_t c = shortlist(val, id, n, s->bmax, bound, val, id);
  memcpy(s->sel, val, (size_t)c * sizeof *val);
  const float kth = select_kth_largest(s->sel, c, k - 1);
  int64_t m = 0;
  for (int64_t i = 0; i < c; i++) { /* in place, branch-free as shortlist */
    val[m] = val[i];
    id[m] = id[i];
    m += val[i] >= kth;
  }
  return m;
}

/* Sorts val/id [n] by value, descending and stable (equal values keep their order: by id when
 * they came in id order), for values >= 0, whose bit patterns order as they do: an LSD radix
 * sort on the complemented bits, three passes of 11 bits (one skipped when every value falls in
 * one bucket). tmp_val / tmp_id [n]: scratch. O(n), no branch on the data. */
static void sort_desc(float *val, int32_t *id, int64_t n, float *tmp_val, int32_t *tmp_id) {
  float *sv = val, *dv = tmp_val;
  int32_t *si = id, *di = tmp_id;
  for (int shift = 0; shift < 33 && n > 1; shift += 11) {
    int64_t count[2048] = {0};
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &sv[i], sizeof u);
      count[(~u >> shift) & 2047]++;
    }
    uint32_t u0;
    memcpy(&u0, &sv[0], sizeof u0);
    if (count[(~u0 >> shift) & 2047] == n) continue;
    for (int64_t d = 0, at = 0; d < 2048; d++) {
      const int64_t c = count[d];
      count[d] = at;
      at += c;
    }
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &sv[i], sizeof u);
      const int64_t to = count[(~u >> shift) & 2047]++;
      dv[to] = sv[i];
      di[to] = si[i];
    }
    float *fv = sv;
    sv = dv, dv = fv;
    int32_t *fi = si;
    si = di, di = fi;
  }
  if (sv != val) {
    memcpy(val, sv, (size_t)n * sizeof *val);
    memcpy(id, si, (size_t)n * sizeof *id);
  }
}

/* Top-p over candidate weights w [n] (unnormalized probabilities, in id order): keeps the
 * smallest prefix by descending weight (equal weights by id) whose mass reaches `limit` (top_p
 * times the total), i.e. every token whose higher-ranked mass is below it (vLLM/HF: drop tokens
 * whose ascending cumulative probability <= 1 - p). Sorts all n (sort_desc, s->sel / s->sort_id
 * as scratch), so the kept ones lie at the front in descending order; returns their count m and
 * their mass, added in that order, in *kept_sum (below limit only when m = n). */
static int64_t top_p_select(struct sampler *s, float *w, int32_t *id, int64_t n, double limit, double *kept_sum) {
  sort_desc(w, id, n, s->sel, s->sort_id);
  double cum = 0.0;
  int64_t m = 0;
  while (m < n && cum < limit) cum += w[m++];
  *kept_sum = cum;
  return m;
}

/* top_p over the weights *pval / *pid [n] (total `total`, the largest 1): top_p_select's kept
 * set, found in a shortlist of the weights at or above a threshold (s->short_val / short_id).
 * Where the kept mass is reached inside the shortlist, its sorted front is the whole row's (all
 * it left out is smaller): the same tokens kept, their mass added in the same order.
 * Thresholds from 2^-10 down by 2^-3 until the shortlist weighs more than the limit (by its
 * block sums, with a margin far above their rounding), at the latest one low enough that what
 * it leaves out (fewer than n weights, each below it) weighs under half of 1 - top_p of the
 * total; the whole row when a shortlist would hold it all, or should rounding leave the
 * shortlist short. Returns the count kept; *pval / *pid then point at the arrays whose front
 * holds them, in descending order. */
static int64_t top_p_keep(struct sampler *s, float **pval, int32_t **pid, int64_t n, double total, float top_p,
                          double *kept_sum) {
  const double limit = (double)top_p * total;
  const float sure = (float)((1.0 - (double)top_p) * total * 0.5 / (double)n);
  block_max(*pval, n, s->bmax);
  for (float t = 0x1p-10f;; t *= 0x1p-3f) {
    t = t > sure ? t : sure;
    const int64_t c = shortlist(*pval, *pid, n, s->bmax, t, s->short_val, s->short_id);
    if (c == n) break;
    if (t > sure && weight_sums(s->short_val, c, s->cum) < limit * (1.0 + 1e-9)) continue;
    const int64_t m = top_p_select(s, s->short_val, s->short_id, c, limit, kept_sum);
    if (*kept_sum < limit) break;
    *pval = s->short_val;
    *pid = s->short_id;
    return m;
  }
  return top_p_select(s, *pval, *pid, n, limit, kept_sum);
}

/* Keeps the top-n (value desc, id asc) of logits [vocab] in top [n], sorted. Blocks whose
 * maximum (bmax: block_max of logits) is below the n-th kept so far are skipped whole. */
static void select_top_n(const float *logits, int32_t vocab, int32_t n, const float *bmax, float *top_val,
                         int32_t *top_id) {
  int32_t have = 0;
  for (int32_t b = 0, start = 0; start < vocab; b++, start += SUM_BLOCK) {
    if (have == n && bmax[b] < top_val[n - 1]) continue;
    const int32_t end = start + SUM_BLOCK < vocab ? start + SUM_BLOCK : vocab;
    for (int32_t i = start; i < end; i++) {
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
}


/* val[i] = logits[i] / temp for the whole row (a loop that vectorizes); returns how many of
 * them are -inf or below min_scaled. */
SAMPLER_CLONES static int32_t scaled_row(const float *logits, int32_t vocab, float temp, float min_scaled,
                                         float *val) {
  int32_t dropped = 0;
  for (int32_t i = 0; i < vocab; i++) {
    const float x = logits[i] / temp;
    val[i] = x;
    dropped += (x == -INFINITY) | (x < min_scaled);
  }
  return dropped;
}

/* The candidates of a random draw: val[n] = logits[i] / temp and id[n] = i for each i whose
 * scaled logit is neither -inf nor below min_scaled (min_p), in id order; returns n. Most rows
 * drop nothing; the others keep what a shortlist (s->bmax) finds. */
static int64_t scaled_candidates(struct sampler *s, const float *logits, int32_t vocab, float temp, float min_scaled,
                                 float *val, int32_t *id) {
  const int32_t dropped = scaled_row(logits, vocab, temp, min_scaled, val);
  for (int32_t i = 0; i < vocab; i++) id[i] = i;
  if (dropped == 0) return vocab;
  block_max(val, vocab, s->bmax);
  return shortlist(val, id, vocab, s->bmax, min_scaled > -FLT_MAX ? min_scaled : -FLT_MAX, val, id);
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
  bool bad;
  const int32_t argmax = argmax_checked(logits, vocab, &bad);
  if (bad) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: a logit is NaN or +inf");
  const float max_logit = logits[argmax];
  if (max_logit == -INFINITY)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: every logit is -inf");
  /* Log-partition for logprobs, only when they are asked for (a pass of expf). */
  double log_z = 0.0;
  const int32_t num_logprobs = s->max_num_logprobs >= 0 ? s->max_num_logprobs : p->logprobs;
  if (num_logprobs >= 0) {
    double z = exp_weights(logits, s->cand_val /* [vocab] scratch, reused below */, vocab, max_logit, s->cum);
    log_z = (double)max_logit + log(z);
  }

  int32_t num_top = num_logprobs > 0 ? num_logprobs : 0;
  if (num_top > vocab) num_top = vocab;
  out->num_top = num_top;
  if (num_top > 0) {
    float top_val[SAMPLER_MAX_LOGPROBS];
    int32_t top_id[SAMPLER_MAX_LOGPROBS];
    block_max(logits, vocab, s->bmax);
    select_top_n(logits, vocab, num_top, s->bmax, top_val, top_id);
    for (int32_t j = 0; j < num_top; j++) {
      out->top[j].token_id = top_id[j];
      out->top[j].logprob = (float)((double)top_val[j] - log_z);
    }
  }

  int32_t token = argmax;
  if (p->temperature >= SAMPLER_GREEDY_EPS) {
    const float temp = p->temperature;
    const float max_scaled = max_logit / temp; /* = max of logits[i] / temp: rounding is monotonic */
    if (!isfinite(max_scaled)) /* every weight would be exp(x - inf): no distribution to draw from */
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sampler: logit %g / temperature %g overflows a float",
                      (double)max_logit, (double)temp);
    const float min_scaled = p->min_p > 0.0f ? max_scaled + logf(p->min_p) : -INFINITY;
    float *val = s->cand_val;  /* [n]; top_p may move both to the shortlist's arrays */
    int32_t *id = s->cand_id;  /* [n] */
    int64_t n = scaled_candidates(s, logits, vocab, temp, min_scaled, val, id);
    if (p->top_k > 0 && p->top_k < n) n = top_k_keep(s, val, id, n, p->top_k);
    double total = exp_weights(val, val, n, max_scaled, s->cum); /* val holds weights from here on */
    if (p->top_p < 1.0f) {
      n = top_p_keep(s, &val, &id, n, total, p->top_p, &total);
      total = weight_sums(val, n, s->cum);
    }
    double u[2];
    uniform_pair(p->seed, stream, output_pos, u);
    if (draft >= 0) token = verify_draft(val, id, n, total, draft, u, accepted);
    else token = id[draw_index(val, n, s->cum, u[0] * total)];
  } else if (draft >= 0) {
    *accepted = token == draft; /* greedy: the draft stands while it is the argmax */
  }
  out->token_id = token;
  out->logprob = num_logprobs >= 0 ? (float)((double)logits[token] - log_z) : 0.0f;
  return LLB_STATUS_OK;
}

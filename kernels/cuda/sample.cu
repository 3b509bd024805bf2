/* Sampling on the device: one block per row of logits, the steps of
 * model/sampling/sampler.c (without penalties): argmax (ties to the lowest id); else
 * logits / temperature, min_p, top_k (ties at the k-th value kept), weights e^(x - max)
 * with the sampler's exp, top_p over the descending order (ties by id), and one inverse-CDF
 * draw with the sampler's Philox4x32-10 uniform. Thresholds are found by bisection over the
 * 32-bit keys of the values (and over ids for ties), each step a deterministic block
 * reduction (fixed tree, double sums): no sort, the same result on every run. */
#include "kernels/cuda/cuda_common.cuh"

#include <float.h>

#define SAMPLE_THREADS 1024
#define SAMPLE_GREEDY_EPS 1e-5f
#define SAMPLE_DOMAIN_TAG 0x73616d70u /* 'samp', as sampler.c */

struct sample_args {
  const float *logits;                     /* [n_rows, vocab] */
  const struct cuda_sample_params *params; /* [n_rows] */
  float *w;                                /* [n_rows, vocab] scratch: weight, or -1 = dropped */
  int32_t *tokens;                         /* [n_rows] */
  int32_t vocab;
};

/* Random123 philox4x32_R(10, ...), as sampler_philox4x32_10. */
__device__ void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
  }
}

/* sampler_uniform(seed, stream, output_pos) */
__device__ double sample_uniform(uint64_t seed, uint32_t stream, int64_t output_pos) {
  const uint64_t pos = (uint64_t)output_pos;
  uint32_t c[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), stream, SAMPLE_DOMAIN_TAG};
  philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  const uint64_t bits = ((uint64_t)c[0] << 32) | c[1];
  return (double)(bits >> 11) * 0x1.0p-53;
}

/* sampler.c exp_nonpos (Cephes expf), operation by operation without contraction. */
__device__ float exp_nonpos(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  const float n = (float)(int32_t)__fsub_rn(__fmul_rn(xc, 1.44269504088896341f), 0.5f);
  const float r = __fadd_rn(__fsub_rn(xc, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
  float q = 1.9875691500e-4f;
  q = __fadd_rn(__fmul_rn(q, r), 1.3981999507e-3f);
  q = __fadd_rn(__fmul_rn(q, r), 8.3334519073e-3f);
  q = __fadd_rn(__fmul_rn(q, r), 4.1665795894e-2f);
  q = __fadd_rn(__fmul_rn(q, r), 1.6666665459e-1f);
  q = __fadd_rn(__fmul_rn(q, r), 5.0000001201e-1f);
  const float y = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(q, r), r), r), 1.0f);
  const float scale = __uint_as_float((uint32_t)((int32_t)n + 127) << 23);
  return x < -87.0f ? 0.0f : __fmul_rn(y, scale);
}

/* Order-preserving key of a float (-0 folded into +0, as `>=` compares them). */
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Fixed-tree block reductions (all threads call; result in every thread). */
__device__ double block_sum_d(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}
__device__ int64_t block_sum_i(int64_t v, double *sh) {
  int64_t *s64 = (int64_t *)sh;
  s64[threadIdx.x] = v;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) s64[threadIdx.x] += s64[threadIdx.x + s];
    __syncthreads();
  }
  const int64_t r = s64[0];
  __syncthreads();
  return r;
}

/* Best (value desc, id asc) of (v, id) pairs; with `lowest`, (value asc, id desc). */
__device__ void block_best(float *v, int32_t *id, bool lowest, double *sh) {
  float *vs = (float *)sh;
  int32_t *is = (int32_t *)(vs + SAMPLE_THREADS);
  vs[threadIdx.x] = *v;
  is[threadIdx.x] = *id;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      const float a = vs[threadIdx.x], b = vs[threadIdx.x + s];
      const int32_t ia = is[threadIdx.x], ib = is[threadIdx.x + s];
      const bool take_b = ib >= 0 && (ia < 0 || (lowest ? (b < a || (b == a && ib > ia))
                                                        : (b > a || (b == a && ib < ia))));
      if (take_b) {
        vs[threadIdx.x] = b;
        is[threadIdx.x] = ib;
      }
    }
    __syncthreads();
  }
  *v = vs[0];
  *id = is[0];
  __syncthreads();
}

/* grid: n_rows, block: SAMPLE_THREADS */
__global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(struct sample_args a) {
  __shared__ double sh[SAMPLE_THREADS];
  const int32_t V = a.vocab, tid = threadIdx.x;
  const float *x = a.logits + (int64_t)blockIdx.x * V;
  float *w = a.w + (int64_t)blockIdx.x * V;
  const struct cuda_sample_params p = a.params[blockIdx.x];

  /* argmax and validity */
  float best = -INFINITY;
  int32_t best_id = -1;
  int64_t bad = 0;
  for (int32_t i = tid; i < V; i += SAMPLE_THREADS) {
    const float v = x[i];
    bad += isnan(v) || v == INFINITY;
    if (best_id < 0 || v > best) {
      best = v;
      best_id = i;
    }
  }
  bad = block_sum_i(bad, sh);
  block_best(&best, &best_id, false, sh);
  if (bad || best == -INFINITY) {
    if (tid == 0) a.tokens[blockIdx.x] = -1;
    return;
  }
  if (p.temperature < SAMPLE_GREEDY_EPS) {
    if (tid == 0) a.tokens[blockIdx.x] = best_id;
    return;
  }
  const float temp = p.temperature, max_scaled = best / temp;
  const float min_scaled = p.min_p > 0.0f ? max_scaled + logf(p.min_p) : -INFINITY;
#define CAND(v) ((v) != -INFINITY && !((v) < min_scaled))

  /* top_k: largest key K with #{candidates >= K} >= k */
  uint32_t kth_key = 0;
  if (p.top_k > 0) {
    int64_t n_cand = 0;
    for (int32_t i = tid; i < V; i += SAMPLE_THREADS) n_cand += CAND(x[i] / temp);
    n_cand = block_sum_i(n_cand, sh);
    if (p.top_k < n_cand) {
      for (int bit = 31; bit >= 0; bit--) {
        const uint32_t trial = kth_key | (1u << bit);
        int64_t cnt = 0;
        for (int32_t i = tid; i < V; i += SAMPLE_THREADS) {
          const float v = x[i] / temp;
          cnt += CAND(v) && order_key(v) >= trial;
        }
        if (block_sum_i(cnt, sh) >= p.top_k) kth_key = trial;
      }
    }
  }
  double total = 0.0;
  for (int32_t i = tid; i < V; i += SAMPLE_THREADS) {
    const float v = x[i] / temp;
    const float wi = CAND(v) && order_key(v) >= kth_key ? exp_nonpos(v - max_scaled) : -1.0f;
    w[i] = wi;
    if (wi >= 0.0f) total += wi;
  }
#undef CAND
  __syncthreads();
  total = block_sum_d(total, sh);

  /* mass of kept weights with key >= K (weights are >= 0, so their bits order them) */
#define MASS_GE(K, out)                                                                    \
  do {                                                                                     \
    double m_ = 0.0;                                                                       \
    for (int32_t i = tid; i < V; i += SAMPLE_THREADS)                                      \
      if (w[i] >= 0.0f && __float_as_uint(w[i]) >= (K)) m_ += w[i];                       \
    (out) = block_sum_d(m_, sh);                                                           \
  } while (0)
  /* smallest id I such that #{kept ties at key T with id <= I} >= rank + 1 */
#define TIE_ID(T, rank, out)                                                               \
  do {                                                                                     \
    int32_t lo_ = 0, hi_ = V - 1;                                                          \
    while (lo_ < hi_) {                                                                    \
      const int32_t mid_ = lo_ + (hi_ - lo_) / 2;                                          \
      int64_t c_ = 0;                                                                      \
      for (int32_t i = tid; i <= mid_; i += SAMPLE_THREADS)                                \
        c_ += w[i] >= 0.0f && __float_as_uint(w[i]) == (T);                               \
      if (block_sum_i(c_, sh) >= (int64_t)(rank) + 1) hi_ = mid_;                          \
      else lo_ = mid_ + 1;                                                                 \
    }                                                                                      \
    (out) = lo_;                                                                           \
  } while (0)

  if (p.top_p < 1.0f) {
    const double limit = (double)p.top_p * total;
    uint32_t kp = 0;
    for (int bit = 31; bit >= 0; bit--) {
      const uint32_t trial = kp | (1u << bit);
      double m;
      MASS_GE(trial, m);
      if (m >= limit) kp = trial;
    }
    double above;
    MASS_GE(kp + 1, above);
    const float wt = __uint_as_float(kp);
    int64_t ties = 0;
    for (int32_t i = tid; i < V; i += SAMPLE_THREADS) ties += w[i] >= 0.0f && __float_as_uint(w[i]) == kp;
    ties = block_sum_i(ties, sh);
    int64_t n_t = ties;
    if (wt > 0.0f) {
      const double need = ceil((limit - above) / (double)wt);
      n_t = need < 1.0 ? 1 : (need < (double)ties ? (int64_t)need : ties);
    }
    int32_t id_cut = V;
    if (n_t < ties) TIE_ID(kp, n_t, id_cut); /* the first tie left out */
    total = 0.0;
    for (int32_t i = tid; i < V; i += SAMPLE_THREADS) {
      const uint32_t k = __float_as_uint(w[i]);
      if (w[i] < 0.0f) continue;
      if (k < kp || (k == kp && i >= id_cut)) w[i] = -1.0f;
      else total += w[i];
    }
    __syncthreads();
    total = block_sum_d(total, sh);
  }

  const double target = sample_uniform(p.seed, p.stream, p.output_pos) * total;
  int32_t token = -1;
  if (p.top_p < 1.0f) {
    /* descending order: the first element whose cumulative mass exceeds target */
    uint32_t kd = 0;
    bool found = false;
    for (int bit = 31; bit >= 0; bit--) {
      const uint32_t trial = kd | (1u << bit);
      double m;
      MASS_GE(trial, m);
      if (m > target) kd = trial;
    }
    double m0;
    MASS_GE(kd, m0);
    found = m0 > target;
    if (found) {
      double above;
      MASS_GE(kd + 1, above);
      const float wt = __uint_as_float(kd);
      int64_t ties = 0;
      for (int32_t i = tid; i < V; i += SAMPLE_THREADS) ties += w[i] >= 0.0f && __float_as_uint(w[i]) == kd;
      ties = block_sum_i(ties, sh);
      int64_t j = wt > 0.0f ? (int64_t)floor((target - above) / (double)wt) : 0;
      j = j < 0 ? 0 : (j >= ties ? ties - 1 : j);
      TIE_ID(kd, j, token);
    }
  } else {
    /* id order: the first id whose prefix mass exceeds target */
    int32_t lo = 0, hi = V - 1;
    const double all = total;
    if (all > target) {
      while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        double m = 0.0;
        for (int32_t i = tid; i <= mid; i += SAMPLE_THREADS)
          if (w[i] >= 0.0f) m += w[i];
        if (block_sum_d(m, sh) > target) hi = mid;
        else lo = mid + 1;
      }
      token = lo;
    }
  }
#undef MASS_GE
#undef TIE_ID
  if (token < 0) {
    /* rounding put target at the very end: the sampler takes the last candidate in order */
    float v = 0.0f;
    int32_t id = -1;
    for (int32_t i = tid; i < V; i += SAMPLE_THREADS) {
      if (w[i] < 0.0f) continue;
      const float key = p.top_p < 1.0f ? w[i] : (float)i;
      const bool better = id < 0 || (p.top_p < 1.0f ? (key < v || (key == v && i > id)) : key > v);
      if (better) {
        v = key;
        id = i;
      }
    }
    if (p.top_p < 1.0f) block_best(&v, &id, true, sh);
    else block_best(&v, &id, false, sh);
    token = id;
  }
  if (tid == 0) a.tokens[blockIdx.x] = token;
}

llb_status cuda_sample(struct cuda_ctx *c, const float *logits_d, int32_t n_rows, int32_t vocab,
                       const struct cuda_sample_params *params_d, int32_t *tokens_d) {
  if (n_rows < 0 || vocab < 1 || n_rows > c->params.max_sample_rows || vocab > c->params.max_vocab)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "cuda sample: %d rows of %d (ctx made for %d rows of %d)", n_rows, vocab,
                    c->params.max_sample_rows, c->params.max_vocab);
  if (n_rows == 0) return LLB_STATUS_OK;
  const struct sample_args a = {logits_d, params_d, c->sample_w, tokens_d, vocab};
  sample_kernel<<<n_rows, SAMPLE_THREADS, 0, c->stream>>>(a);
  CUDA_TRY_LAUNCH();
  return LLB_STATUS_OK;
}

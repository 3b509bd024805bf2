/* KL divergence in llama-perplexity's format and method (see perplexity_kld.h). */
#include "cmd/client/perplexity_kld.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

int64_t kld_row_values(int32_t n_vocab) { return 2 * (((int64_t)n_vocab + 1) / 2) + 4; }

llb_status kld_write_header(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens) {
  const size_t nt = (size_t)n_chunk * (size_t)n_ctx;
  if (fwrite(MAGIC, 1, 8, f) != 8 || fwrite(&n_ctx, 4, 1, f) != 1 || fwrite(&n_vocab, 4, 1, f) != 1 ||
      fwrite(&n_chunk, 4, 1, f) != 1 || fwrite(tokens, sizeof *tokens, nt, f) != nt)
    return LLB_ERRF(LLB_STATUS_IO, "writing the KL-divergence base header");
  return LLB_STATUS_OK;
}

void kld_quantize_row(const float *row, int32_t n_vocab, uint16_t *out) {
  float mx = row[0], mn = row[0];
  for (int32_t i = 1; i < n_vocab; i++) mx = row[i] > mx ? row[i] : mx, mn = row[i] < mn ? row[i] : mn;
  mn = mn > mx - 16 ? mn : mx - 16;
  double sum_exp = 0;
  for (int32_t i = 0; i < n_vocab; i++) sum_exp += expf(row[i] - mx);
  const float log_sum_exp = (float)log(sum_exp);
  const float min_log_prob = mn - mx - log_sum_exp, scale = (mx - mn) / 65535.f;
  memcpy(out, &scale, 4);
  memcpy(out + 2, &min_log_prob, 4);
  uint16_t *q = out + 4;
  memset(q, 0, (size_t)(kld_row_values(n_vocab) - 4) * sizeof *q);
  if (scale == 0.0f) return;
  const float inv = 1 / scale;
  for (int32_t i = 0; i < n_vocab; i++)
    if (row[i] > mn) q[i] = (uint16_t)lrintf(inv * (row[i] - mn));
}

llb_status kld_read_header(FILE *f, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens) {
  char magic[8];
  *tokens = NULL;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MAGIC, 8) != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "not a llama-perplexity log-probability file (no _logits_ magic)");
  if (fread(n_ctx, 4, 1, f) != 1 || fread(n_vocab, 4, 1, f) != 1 || fread(n_chunk, 4, 1, f) != 1)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "truncated header");
  if (*n_ctx < 4 || *n_ctx > (1 << 20) || *n_vocab < 1 || *n_vocab > (1 << 22) || *n_chunk < 1 ||
      (int64_t)*n_chunk * *n_ctx > (1LL << 28))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "header n_ctx %d n_vocab %d n_chunk %d out of range", *n_ctx, *n_vocab,
                    *n_chunk);
  const size_t nt = (size_t)*n_chunk * (size_t)*n_ctx;
  *tokens = malloc(nt * sizeof **tokens);
  if (!*tokens) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%zu tokens", nt);
  if (fread(*tokens, sizeof **tokens, nt, f) != nt) {
    free(*tokens);
    *tokens = NULL;
    return LLB_ERRF(LLB_STATUS_MALFORMED, "truncated tokens (%zu expected)", nt);
  }
  for (size_t i = 0; i < nt; i++)
    if ((*tokens)[i] < 0 || (*tokens)[i] >= *n_vocab) {
      free(*tokens);
      *tokens = NULL;
      return LLB_ERRF(LLB_STATUS_MALFORMED, "token %zu: id out of the vocabulary", i);
    }
  return LLB_STATUS_OK;
}

void kld_add_row(struct kld_stats *s, const float *row, int32_t n_vocab, const uint16_t *base, int32_t tok) {
  float mx = row[0];
  int32_t imax = 0;
  for (int32_t i = 1; i < n_vocab; i++)
    if (row[i] > mx) mx = row[i], imax = i;
  double sum_exp = 0;
  for (int32_t i = 0; i < n_vocab; i++) sum_exp += exp((double)row[i] - mx);
  const double lse = mx + log(sum_exp); /* log q_i = row[i] - lse */
  float scale, min_log_prob;
  memcpy(&scale, base, 4);
  memcpy(&min_log_prob, base + 2, 4);
  const uint16_t *q = base + 4;
  const double nll = lse - row[tok], nll_base = -((double)scale * q[tok] + min_log_prob);
  s->sum_nll += nll, s->sum_nll2 += nll * nll;
  s->sum_nll_base += nll_base, s->sum_nll_base2 += nll_base * nll_base;
  double kld = 0, best = 0;
  int32_t imax_base = 0;
  for (int32_t i = 0; i < n_vocab; i++) {
    const double lp_base = (double)scale * q[i] + min_log_prob;
    if (i == 0 || lp_base > best) best = lp_base, imax_base = i;
    if (lp_base > -16.0) kld += exp(lp_base) * (lp_base - (row[i] - lse));
  }
  s->sum_kld += kld, s->sum_kld2 += kld * kld;
  if (s->count < s->capacity) s->kld_values[s->count] = (float)kld;
  s->count++;
  s->n_same_top += imax == imax_base;
  const double p_diff = exp(-nll) - exp(-nll_base);
  s->sum_p_diff += p_diff, s->sum_p_diff2 += p_diff * p_diff;
  if (fabs(p_diff) > s->max_p_diff) s->max_p_diff = fabs(p_diff);
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Linear interpolation between order statistics, as llama.cpp's percentile(). */
static double percentile(const float *v, int64_t n, double fraction) {
  if (n < 1) return 0;
  const double p = fraction * (double)(n - 1);
  const int64_t i = (int64_t)p;
  const double t = p - (double)i;
  return (1 - t) * v[i] + t * v[i + 1 < n ? i + 1 : n - 1];
}

static void mean_unc(double sum, double sum2, int64_t n, double *mean, double *unc) {
  *mean = n > 0 ? sum / (double)n : 0;
  const double var = n > 0 ? sum2 / (double)n - *mean * *mean : 0;
  *unc = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

void kld_print(struct kld_stats *s, bool json) {
  const int64_t n = s->count < s->capacity ? s->count : s->capacity;
  qsort(s->kld_values, (size_t)n, sizeof *s->kld_values, cmp_float);
  double lp, lp_unc, lpb, lpb_unc, kl, kl_unc, pd, pd_unc;
  mean_unc(s->sum_nll, s->sum_nll2, s->count, &lp, &lp_unc);
  mean_unc(s->sum_nll_base, s->sum_nll_base2, s->count, &lpb, &lpb_unc);
  mean_unc(s->sum_kld, s->sum_kld2, s->count, &kl, &kl_unc);
  mean_unc(s->sum_p_diff, s->sum_p_diff2, s->count, &pd, &pd_unc);
  const double same_top = s->count ? (double)s->n_same_top / (double)s->count : 0;
  const double rms_p = s->count ? sqrt(s->sum_p_diff2 / (double)s->count) : 0;
  const double median = percentile(s->kld_values, n, 0.5), p99 = percentile(s->kld_values, n, 0.99);
  const double kmax = n ? s->kld_values[n - 1] : 0;
  if (json) {
    json_t *j = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "ppl", exp(lp), "ppl_base",
                          exp(lpb), "ppl_ratio", exp(lp - lpb), "kld_mean", kl, "kld_mean_stderr", kl_unc,
                          "kld_median", median, "kld_p99", p99, "kld_max", kmax, "same_top_p", same_top, "p_diff_mean",
                          pd, "p_diff_rms", rms_p, "tokens_scored", (json_int_t)s->count);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(j);
    return;
  }
  printf("\n====== Perplexity statistics ======\n");
  printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", exp(lp), exp(lp) * lp_unc);
  printf("Mean PPL(base)                : %10.6f ± %10.6f\n", exp(lpb), exp(lpb) * lpb_unc);
  printf("Mean PPL(Q)/PPL(base)         : %10.6f\n", exp(lp - lpb));
  printf("\n====== KL divergence statistics ======\n");
  printf("Mean    KLD: %10.6f ± %10.6f\n", kl, kl_unc);
  printf("Maximum KLD: %10.6f\n", kmax);
  printf("99.0%%   KLD: %10.6f\n", p99);
  printf("Median  KLD: %10.6f\n", median);
  printf("Minimum KLD: %10.6f\n", n ? s->kld_values[0] : 0.0);
  printf("\n====== Token probability statistics ======\n");
  printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * pd, 100 * pd_unc);
  printf("Maximum |Δp|: %6.3f%%\n", 100 * s->max_p_diff);
  printf("RMS Δp    : %6.3f %%\n", 100 * rms_p);
  printf("Same top p: %6.3f %%\n", 100 * same_top);
}

/* KL divergence against saved base log-probabilities, in llama.cpp's llama-perplexity file
 * format and method (tools/perplexity/perplexity.cpp: --kl-divergence-base FILE writes it,
 * --kl-divergence compares), so a file written by either engine can be the base of the other.
 *
 * File (little-endian): "_logits_", int32 n_ctx, int32 n_vocab, int32 n_chunk, int32
 * tokens[n_chunk * n_ctx] (as tokenized: the BOS that replaces each chunk's first token is not
 * written), then per chunk and per scored row (positions n_ctx/2 .. n_ctx-2) nv = 2 *
 * ((n_vocab + 1) / 2) + 4 uint16: float32 scale and float32 min_log_prob in the first four,
 * then each token's log-probability quantized as round((logit - min_logit) / scale), 0 below
 * min_logit = max(min logit, max logit - 16). */
#ifndef LLB_CMD_PERPLEXITY_KLD_H
#define LLB_CMD_PERPLEXITY_KLD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* uint16 values per saved row. */
int64_t kld_row_values(int32_t n_vocab);

/* Writes the header and the tokens. Errors: IO. */
llb_status kld_write_header(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens);

/* Quantizes row[n_vocab] (logits) into out[kld_row_values] as llama.cpp does. */
void kld_quantize_row(const float *row, int32_t n_vocab, uint16_t *out);

/* Reads the header: *n_ctx, *n_vocab, *n_chunk and the malloc'd tokens (*tokens, freed by the
 * caller). Errors: MALFORMED (not such a file, sizes out of range), IO, OUT_OF_MEMORY. */
llb_status kld_read_header(FILE *f, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens);

/* Running statistics of the comparison (llama.cpp kl_divergence_result). */
struct kld_stats {
  double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_kld, sum_kld2, sum_p_diff, sum_p_diff2;
  double max_p_diff;
  int64_t n_same_top, count;
  float *kld_values; /* [capacity] each row's KL divergence, for the median and percentiles */
  int64_t capacity;
};

/* Adds one row: logits row[n_vocab] of the model under test, base[kld_row_values] from the
 * file, tok the token that follows. */
void kld_add_row(struct kld_stats *s, const float *row, int32_t n_vocab, const uint16_t *base, int32_t tok);

/* Prints llama.cpp's summary (PPL(Q), PPL(base), their ratio, mean / median / max KLD and
 * percentiles, same top token, mean and RMS of the token probability difference), or one JSON
 * object with the same figures. Sorts s->kld_values. */
void kld_print(struct kld_stats *s, bool json);

#endif

/* Token sampler: one row of logits in, one token (and its logprobs) out.
 *
 * Follows vLLM v1's sampler (vllm/v1/sample/sampler.py, ops/penalties.py,
 * ops/topk_topp_sampler.py, logits_processor MinP) for the order of processing and the
 * meaning of every parameter:
 *   0. logit_bias (OpenAI): each entry's bias is added to its token's logit, in place
 *      (vLLM LogitBiasLogitsProcessor, which runs before the penalties);
 *   1. penalties, applied in place to `logits`:
 *        repetition (over prompt + output tokens, HF/vLLM: positive logits are divided by
 *        the penalty, negative ones multiplied), then frequency and presence (over output
 *        tokens only, OpenAI: l -= frequency * count + presence * (count > 0));
 *   2. logprobs: log-softmax of these penalized logits, before temperature and before any
 *      filter (see "Logprobs" below);
 *   3. temperature < 1e-5 (vLLM's _SAMPLING_EPS): greedy, argmax with ties to the lowest id;
 *   4. otherwise logits / temperature, then min_p (keep p >= min_p * p_max), top_k (keep
 *      every token >= the k-th largest value, ties at the boundary kept, as vLLM and HF),
 *      top_p over the distribution renormalized after top_k (keep the smallest prefix, by
 *      descending probability, whose mass reaches top_p; equal values ordered by id);
 *   5. one draw by inverse CDF with a uniform double from a counter-based generator.
 *
 * Randomness: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) with key = seed and counter = (output_pos, stream, domain tag). A draw depends on
 * nothing but (seed, stream, output_pos) and the logits: the same request gets the same
 * tokens alone, in any batch, after preemption or replay (docs/design.md §5).
 *
 * Logprobs: vLLM v1's default logprobs_mode is "raw_logprobs" (before every processor).
 * We report the log-softmax after penalties and before temperature/filters, as llmbus's
 * contract fixes: it equals vLLM's raw logprobs whenever no penalty is set (the common
 * case), it does not depend on temperature (so logprobs of the same text compare across
 * temperatures) and it is never -inf for a token that top-k/top-p would have cut.
 *
 * Allocation: all scratch is made in sampler_create; sampler_sample never allocates.
 * A sampler is not thread-safe: use one per thread.
 */
#ifndef LLB_MODEL_SAMPLING_SAMPLER_H
#define LLB_MODEL_SAMPLING_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* Temperatures below this are greedy (vLLM's _SAMPLING_EPS). */
#define SAMPLER_GREEDY_EPS 1e-5f
#define SAMPLER_MAX_LOGPROBS 20            /* top-n logprobs per token, as OpenAI */
#define SAMPLER_MAX_LOGIT_BIAS 300         /* logit_bias entries per row */
#define SAMPLER_MAX_LOGIT_BIAS_VALUE 100.0f /* |bias| at most this (OpenAI's [-100, 100]) */

/* One logit_bias entry: `bias` is added to the logit of `token_id` (OpenAI logit_bias). */
struct sampler_logit_bias {
  int32_t token_id; /* [0, vocab size) */
  float bias;       /* finite, [-SAMPLER_MAX_LOGIT_BIAS_VALUE, SAMPLER_MAX_LOGIT_BIAS_VALUE] */
};

/* What the sampler reads of a request's SamplingParams: the fields keep vLLM's names and
 * meanings (vllm/sampling_params.py). A plain value with no pointers, copied freely; the
 * engine's worker fills it from the wire's sampling params in one function
 * (actors/gpu_worker), the tools directly. sampler_check_params (and, for logit_bias,
 * sampler_sample) refuse what is out of range. */
struct sampler_params {
  float temperature;        /* >= 0; < SAMPLER_GREEDY_EPS = greedy (default 1) */
  int32_t top_k;            /* <= 0 = off (default 0) */
  float top_p;              /* (0, 1]; 1 = off (default 1) */
  float min_p;              /* [0, 1]; 0 = off (default 0) */
  uint64_t seed;            /* Philox key of every draw (default 0) */
  float presence_penalty;   /* finite, 0 = off */
  float frequency_penalty;  /* finite, 0 = off */
  float repetition_penalty; /* > 0 and finite, 1 = off */
  int32_t logprobs;         /* -1 = none (default); 0..SAMPLER_MAX_LOGPROBS = sampled + top-n */
  int32_t num_logit_bias;   /* entries of logit_bias in use, 0..SAMPLER_MAX_LOGIT_BIAS */
  struct sampler_logit_bias logit_bias[SAMPLER_MAX_LOGIT_BIAS]; /* [num_logit_bias] */
};

/* Fills `p` with vLLM's defaults: temperature 1, top_p 1, repetition_penalty 1, logprobs -1,
 * every filter and penalty off, seed 0, no logit_bias. */
static inline void sampler_params_init(struct sampler_params *p) {
  *p = (struct sampler_params){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f, .logprobs = -1};
}

struct sampler_logprob {
  int32_t token_id;
  float logprob; /* natural log */
};

struct sampler_result {
  int32_t token_id;                                 /* the sampled token */
  float logprob;                                    /* of token_id, after penalties, before
                                                       temperature; 0 when not asked for
                                                       (p->logprobs < 0) */
  int32_t num_top;                                  /* = max(p->logprobs, 0) */
  struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* [num_top], descending logprob, ties by id */
};

struct sampler; /* opaque: scratch for vocab-size work */

/* Creates a sampler for rows of `vocab_size` logits (1 .. 2^30). Allocates all scratch now
 * (about 34 bytes per vocab entry). *out: caller frees with sampler_destroy.
 * Errors: INVALID_ARGUMENT (vocab_size), OUT_OF_MEMORY. */
llb_status sampler_create(int32_t vocab_size, struct sampler **out);

/* Frees a sampler; NULL is a no-op. */
void sampler_destroy(struct sampler *s);

/* The batch's logprobs width, as vLLM v1's SamplingMetadata.max_num_logprobs: with n >= 0,
 * every row sampled afterwards gets its logprob and a top-n of width n whatever its params'
 * logprobs (the rows of a batch share one width on the wire); -1 (the default) = each row as
 * its params ask. Errors: INVALID_ARGUMENT for n outside [-1, SAMPLER_MAX_LOGPROBS] (unchanged). */
llb_status sampler_set_max_num_logprobs(struct sampler *s, int32_t n);

/* Vocabulary size the sampler was created for. */
int32_t sampler_vocab_size(const struct sampler *s);

/* Checks the parameters sampler_sample would refuse (temperature finite and >= 0, top_p in
 * (0, 1], min_p in [0, 1], penalties finite, logprobs <= SAMPLER_MAX_LOGPROBS), so that a caller
 * can refuse a request before its step. Errors: INVALID_ARGUMENT naming the value. */
llb_status sampler_check_params(const struct sampler_params *p);

/* Samples one token from `logits` [vocab_size], which is modified in place (penalties are
 * applied to it; temperature and filters are not: on return it holds the penalized logits).
 * prompt_ids [num_prompt] and output_ids [num_output] (tokens generated so far) feed the
 * penalties; either may be NULL when its count is 0. Randomness is keyed by (p->seed,
 * stream, output_pos): same key, same draw, whatever else was sampled before or beside it.
 * stream is the completion index for n > 1; output_pos the index of the token being
 * sampled among this completion's outputs. Fills *out (top-n when p->logprobs > 0).
 * Never allocates. Errors: INVALID_ARGUMENT for a bad parameter (temperature < 0 or
 * inf, top_p outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0, a non-finite
 * presence/frequency penalty, logprobs > SAMPLER_MAX_LOGPROBS, a logit_bias entry with a token
 * outside the vocabulary or a bias not finite in [-100, 100]), a token id outside [0, vocab),
 * a negative count or a negative output_pos (all checked before logits are touched), or a
 * NaN / +inf logit, a row whose logits are all -inf (found after the penalties), or a largest
 * logit that overflows a float once divided by the temperature. */
llb_status sampler_sample(struct sampler *s, const struct sampler_params *p, float *logits,
                          const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                          int64_t num_output, uint32_t stream, int64_t output_pos,
                          struct sampler_result *out);

/* Verifies one draft token (speculative decoding) at this position: the same processing as
 * sampler_sample (bias, penalties, logprobs, temperature, min_p, top_k, top_p), then vLLM v1's
 * rejection sampling with a one-hot draft distribution (an n-gram proposer's): greedy accepts
 * when the draft is the argmax, else the argmax is the token; random accepts with probability
 * p(draft) (uniform from words 2-3 of the position's Philox block) and otherwise draws from p
 * with the draft removed and renormalized (words 0-1), so the token's distribution is exactly
 * p. out->token_id is the draft when *accepted, else the correction token. Same arguments and
 * errors as sampler_sample, plus INVALID_ARGUMENT for a draft outside the vocabulary. */
llb_status sampler_verify_draft(struct sampler *s, const struct sampler_params *p, float *logits,
                                const int32_t *prompt_ids, int64_t num_prompt, const int32_t *output_ids,
                                int64_t num_output, uint32_t stream, int64_t output_pos, int32_t draft,
                                bool *accepted, struct sampler_result *out);

/* The uniform double in [0, 1) that sampler_sample draws for this key: 53 bits of
 * Philox4x32-10(key = seed, counter = {pos lo, pos hi, stream, 0x73616d70 'samp'}).
 * Pure function; exposed for tests and for anything that must replay a draw. */
double sampler_uniform(uint64_t seed, uint32_t stream, int64_t output_pos);

/* e^x for x <= 0 as the sampler computes weights (vectorizable Cephes expf, relative error
 * < 3e-7 against expf, 0 below -87); exposed for tests. */
float sampler_exp_nonpos(float x);

/* One Philox4x32-10 block: ctr [4] (in), key [2], out [4]. Random123's philox4x32_R(10, ...). */
void sampler_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif

/* SamplingParams as a plain C struct: the view that every actor's pure logic uses.
 *
 * Field names and meanings follow vLLM v1 (vllm/sampling_params.py) and OpenAI's API.
 * The struct is self-contained (fixed-size arrays, no pointers), so it is copied by value
 * and needs no ownership rules; the limits below are enforced by the input processor with
 * a clear error naming the field. The wire form is in the schemas/ .fbs files; the codec converts.
 */
#ifndef LLB_SAMPLING_PARAMS_H
#define LLB_SAMPLING_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#define LLB_MAX_STOP_STRINGS 16    /* stop strings per request */
#define LLB_MAX_STOP_STRING_BYTES 255
#define LLB_MAX_STOP_TOKEN_IDS 64
#define LLB_MAX_LOGPROBS 20        /* top-n logprobs per token, as OpenAI */
#define LLB_MAX_LOGIT_BIAS 300     /* logit_bias entries per request */
#define LLB_MAX_LOGIT_BIAS_VALUE 100.0f /* |bias| at most this (OpenAI's [-100, 100]) */

/* How a request's outputs are streamed (vLLM RequestOutputKind). */
enum llb_output_kind {
  LLB_OUTPUT_KIND_CUMULATIVE = 0, /* each output holds everything so far */
  LLB_OUTPUT_KIND_DELTA = 1,      /* each output holds only what is new */
  LLB_OUTPUT_KIND_FINAL_ONLY = 2, /* one output, when finished */
};

/* One logit_bias entry: `bias` is added to the logit of `token_id`. */
struct llb_logit_bias {
  int32_t token_id;             /* [0, vocab size) */
  float bias;                   /* finite, [-LLB_MAX_LOGIT_BIAS_VALUE, LLB_MAX_LOGIT_BIAS_VALUE] */
};

struct llb_sampling_params {
  int32_t n;                    /* completions per prompt, >= 1 (default 1) */
  float temperature;            /* >= 0; 0 = greedy (default 1) */
  int32_t top_k;                /* <= 0 = off (default 0) */
  float top_p;                  /* (0, 1]; 1 = off (default 1) */
  float min_p;                  /* [0, 1]; 0 = off (default 0) */
  bool has_seed;                /* when false the input processor draws one at random */
  uint64_t seed;
  float presence_penalty;       /* [-2, 2], 0 = off */
  float frequency_penalty;      /* [-2, 2], 0 = off */
  float repetition_penalty;     /* > 0, 1 = off */
  int32_t max_tokens;           /* >= 1; -1 = up to the context length (default 16) */
  int32_t min_tokens;           /* >= 0; EOS and stop ids ignored before this many */
  int32_t num_stop;             /* stop strings in use */
  char stop[LLB_MAX_STOP_STRINGS][LLB_MAX_STOP_STRING_BYTES + 1]; /* NUL-terminated */
  int32_t num_stop_token_ids;
  int32_t stop_token_ids[LLB_MAX_STOP_TOKEN_IDS];
  bool ignore_eos;
  bool include_stop_str_in_output;
  bool skip_special_tokens;     /* detokenizer drops control tokens (default true) */
  int32_t logprobs;             /* -1 = none; 0..LLB_MAX_LOGPROBS = sampled + top-n */
  int32_t prompt_logprobs;      /* -1 = none (only -1 supported so far) */
  enum llb_output_kind output_kind;
  int32_t num_logit_bias;       /* entries of logit_bias in use, distinct token ids */
  struct llb_logit_bias logit_bias[LLB_MAX_LOGIT_BIAS]; /* OpenAI logit_bias (vLLM applies it
                                   before the penalties; so does the sampler) */
  int32_t truncate_prompt_tokens; /* > 0: the input processor keeps the last N prompt tokens
                                     (vLLM); 0 = off */
};

/* Fills `p` with vLLM's defaults (n=1, temperature=1, top_p=1, max_tokens=16, ...). */
static inline void llb_sampling_params_init(struct llb_sampling_params *p) {
  *p = (struct llb_sampling_params){
      .n = 1, .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
      .repetition_penalty = 1.0f, .max_tokens = 16, .skip_special_tokens = true,
      .logprobs = -1, .prompt_logprobs = -1, .output_kind = LLB_OUTPUT_KIND_CUMULATIVE,
  };
}

#endif

/* `--speculative-config JSON` as vLLM spells it (vllm/config SpeculativeConfig), for the
 * scheduler and the worker mains: {"method": "ngram", "num_speculative_tokens": K,
 * "prompt_lookup_max": N, "prompt_lookup_min": M}. */
#ifndef LLB_CMD_SPEC_CONFIG_H
#define LLB_CMD_SPEC_CONFIG_H

#include "actors/gpu_worker/ngram_proposer.h"
#include "base/status.h"

/* Parses `json` into *out. method must be "ngram" (the only proposer here);
 * num_speculative_tokens is required, in [1, LLB_MAX_SPEC_TOKENS]; prompt_lookup_min/max
 * default as vLLM's: both 5 when neither is given, else the one given. Unknown keys are
 * refused. NULL or "" = off (all zero). Errors: INVALID_ARGUMENT naming the key. */
llb_status spec_config_parse(const char *json, struct ngram_proposer_config *out);

#endif

/* What one engine request (a sub) already forwarded to the HTTP client, per completion, so
 * that a completion output marked `resync` (its output processor restarted and rebuilt it from
 * the engine's token history: text, token ids and logprobs start from the beginning again,
 * schemas/request_output.fbs) adds only what is new. The detokenizer is deterministic, so the
 * text already sent is a prefix of the repeated text. Loop thread only; pure. */
#ifndef LLB_ACTORS_API_SERVER_API_DELTA_H
#define LLB_ACTORS_API_SERVER_API_DELTA_H

#include <stdint.h>

#include "schemas/request_output.h"

#define API_DELTA_MAX_N 16 /* completions tracked per request (the input processor's max n) */

struct api_delta {
  int64_t text_bytes[API_DELTA_MAX_N]; /* text forwarded, by completion index */
  int64_t num_tokens[API_DELTA_MAX_N]; /* token ids forwarded */
  int64_t num_resyncs;                 /* resync outputs seen (for the log) */
};

/* Points ro->outputs at scratch[0..ro->num_outputs) (caller-provided, same count): copies of
 * the completions in which a `resync` one keeps only the text bytes, token ids and logprobs
 * beyond what `d` says was forwarded (logprobs aligned with the tail of the token ids), then
 * counts everything forwarded. Completions with an index outside [0, API_DELTA_MAX_N) pass
 * unchanged and uncounted. */
void api_delta_apply(struct api_delta *d, struct llb_request_output *ro, struct llb_completion_output *scratch);

#endif

/* What one engine request (a sub) already forwarded to the HTTP client, per completion, so
 * that a repeated output adds only what is new: a completion output marked `resync` (its
 * output processor restarted and rebuilt it from the engine's token history: text, token ids
 * and logprobs start from the beginning again, schemas/request_output.fbs), or every output of
 * a request the api server sent again (api_server_delta_restart: after a NATS reconnect, the same
 * seeded request runs again from the start). The engine and the detokenizer are deterministic
 * for a seeded request, so what was sent is a prefix of the repeated stream. Loop thread
 * only; pure. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_DELTA_H
#define LLB_ACTORS_API_SERVER_API_SERVER_DELTA_H

#include <stdint.h>

#include "schemas/request_output.h"

#define API_SERVER_DELTA_MAX_N 16 /* completions tracked per request (the input processor's max n) */

struct api_server_delta {
  int64_t text_bytes[API_SERVER_DELTA_MAX_N]; /* text forwarded, by completion index */
  int64_t num_tokens[API_SERVER_DELTA_MAX_N]; /* token ids forwarded */
  int64_t recv_text_bytes[API_SERVER_DELTA_MAX_N]; /* text received from the current stream */
  int64_t recv_tokens[API_SERVER_DELTA_MAX_N];     /* token ids received from the current stream */
  int64_t num_resyncs;                 /* resync outputs seen (for the log) */
  int64_t num_restarts;                /* api_server_delta_restart calls (for the log) */
};

/* The request was sent again: its next outputs start from the beginning of every completion,
 * and only what lies beyond what was forwarded reaches the client. */
void api_server_delta_restart(struct api_server_delta *d);

/* Points ro->outputs at scratch[0..ro->num_outputs) (caller-provided, same count): copies of
 * the completions, each keeping only the text bytes, token ids and logprobs beyond what `d`
 * says was forwarded (logprobs aligned with the tail of the token ids); a `resync` one first
 * restarts its completion's stream. Counts what was received and forwarded. Completions with an index outside [0, API_SERVER_DELTA_MAX_N) pass
 * unchanged and uncounted. */
void api_server_delta_apply(struct api_server_delta *d, struct llb_request_output *ro, struct llb_completion_output *scratch);

#endif

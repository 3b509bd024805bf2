/* The api server's header gate (the `gate` of http_guard.h): what a request's headers alone
 * decide, before its body is read. With API keys, a request whose Authorization carries none of
 * them is answered 401 in OpenAI's shape (a CORS preflight carries no key and passes: the route
 * answers it before authentication); a key's tenant over its HTTP request rate (struct
 * api_request_rate, api_options.h: a token bucket of `burst` requests refilled at `per_s`, full
 * at start) is answered 429 rate_limit_exceeded with the bucket's Retry-After. So a client
 * without a key, or a tenant flooding large bodies, costs the server a header read each.
 *
 * Threading: api_gate_check runs on the evhttp loop thread only (the buckets and the last 429
 * are unlocked). */
#ifndef LLB_ACTORS_API_SERVER_API_GATE_H
#define LLB_ACTORS_API_SERVER_API_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_options.h"
#include "base/status.h"

struct api_keys;
struct api_gate;

/* keys: required, borrowed (outlives the gate); rates [num_rates] copied (0..API_MAX_REQUEST_RATES,
 * each a tenant, per_s in (0, 1e9], burst in [1, 1e9]). *out: api_gate_destroy. Errors:
 * INVALID_ARGUMENT naming the rate, OUT_OF_MEMORY. */
llb_status api_gate_create(const struct api_keys *keys, const struct api_request_rate *rates, int32_t num_rates,
                           struct api_gate **out);

/* http_guard's gate with `gate` an api_gate: NULL lets the request through, else the whole HTTP
 * answer to refuse it with (the gate's, valid until the next call). */
const char *api_gate_check(void *gate, bool is_options, const char *authorization);

/* NULL ok. */
void api_gate_destroy(struct api_gate *g);

#endif

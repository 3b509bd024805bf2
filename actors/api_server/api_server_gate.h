/* The api server's header gate (the `gate` of http_guard.h): what a request's headers alone
 * decide, before its body is read. With API keys, a request whose Authorization carries none of
 * them is answered 401 in OpenAI's shape (a CORS preflight carries no key and passes: the route
 * answers it before authentication). A key's tenant with front-door limits (struct
 * api_server_request_rate, api_server_options.h) is answered 429 rate_limit_exceeded with Retry-After when
 * - it is over its HTTP request rate (a token bucket of `burst` requests refilled at `per_s`,
 *   full at start; Retry-After: the bucket's refill time), or
 * - the request is a generation (POST /v1/completions, /v1/chat/completions, /v1/responses,
 *   /v1/embeddings) and max_concurrent of the tenant's generations are already in flight at this
 *   api server (from their headers until their answer is written or their connection goes;
 *   Retry-After: 1). The input processor's max_concurrent (which counts each prompt of a batch)
 *   stays the binding limit; this one refuses before the body is read, the NATS hop and the
 *   input processor, the work a refused request cost before.
 * Such a 429 is held (a tarpit, as HAProxy's `http-request tarpit` with `deny_status 429` and
 * `timeout tarpit`): answered only after min(Retry-After, API_SERVER_GATE_HOLD_MS), nothing more read
 * from the connection meanwhile, so a client that retries as soon as it is answered comes back
 * once per hold instead of spinning the event loop; at most API_SERVER_GATE_MAX_HELD refusals of one
 * tenant are held at a time (the rest are answered at once), so what the holds keep open stays
 * bounded per tenant (and by --max-connections in all). A 401 is answered at once (no tenant to
 * bound its holds by). So a client without a key, or a tenant over its limits, costs the server
 * a header read each, at most API_SERVER_GATE_MAX_HELD / hold a second per tenant while it waits.
 *
 * Threading: everything runs on the evhttp loop thread only (the counts, the buckets and the
 * last 429 are unlocked). */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_GATE_H
#define LLB_ACTORS_API_SERVER_API_SERVER_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_server_options.h"
#include "actors/api_server/http_guard.h"
#include "base/status.h"

#define API_SERVER_GATE_HOLD_MS 1000 /* the longest a refusal is held */
#define API_SERVER_GATE_MAX_HELD 32  /* refusals of one tenant held at a time */
/* A request body at least this long that the engine refuses as the client's error (a 4xx: a
 * prompt over the context, images the model cannot take) has its answer held like a 429 (the
 * api server's call_fail_or_hold): the front door parsed it and the input processor worked on it,
 * so a tenant sending such requests as fast as they are answered gets at most max_concurrent of
 * them a hold, not as many as the two can refuse. */
#define API_SERVER_GATE_COSTLY_BODY_BYTES (64 * 1024)

struct api_server_keys;
struct api_server_gate;

/* keys: required, borrowed (outlives the gate); rates [num_rates] copied (0..API_SERVER_MAX_REQUEST_RATES,
 * each a tenant; per_s 0 (no rate) or in (0, 1e9] with burst in [1, 1e9]; max_concurrent
 * 0..1e6). *out: api_server_gate_destroy. Errors: INVALID_ARGUMENT naming the rate, OUT_OF_MEMORY. */
llb_status api_server_gate_create(const struct api_server_keys *keys, const struct api_server_request_rate *rates, int32_t num_rates,
                           struct api_server_gate **out);

/* http_guard's gate with `gate` an api_server_gate (the verdict as http_guard.h says). */
void api_server_gate_check(void *gate, const struct http_gate_request *r, struct http_gate_verdict *v);

/* http_guard's release: gives back the ticket of a verdict (a held refusal sent, a passed
 * generation answered). */
void api_server_gate_release(void *gate, int32_t ticket);

/* A 429 the engine answered for `tenant` (its max_concurrent, max_queued or tokens_per_s in the
 * input processor), held the same way before the api server sends it: the ticket of one of the
 * tenant's held slots (api_server_gate_release it when the answer is sent or the call ends) with
 * *hold_ms = min(retry_after_s (>= 1), the longest hold); -1 when the tenant has no front-door
 * limits, its holds are full, or holds are off: answer at once. */
int32_t api_server_gate_hold(struct api_server_gate *g, const char *tenant, int64_t retry_after_s, int64_t *hold_ms);

/* The longest a refusal is held from now on (ms, >= 0; 0 = answered at once); API_SERVER_GATE_HOLD_MS
 * at creation. Any thread (tests lengthen it). */
void api_server_gate_set_hold_ms(struct api_server_gate *g, int64_t hold_ms);

/* NULL ok. */
void api_server_gate_destroy(struct api_server_gate *g);

#endif

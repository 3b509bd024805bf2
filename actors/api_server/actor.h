/* The api server actor: OpenAI-compatible HTTP + SSE (libevent evhttp) over the bus.
 *
 * Routes: POST /v1/completions, POST /v1/chat/completions (stream false/true), GET /v1/models,
 * GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /version, GET /health,
 * GET /metrics. It talks to the engine only over NATS, like any client:
 *   - each prompt of a request becomes one GenerateRequest (output_kind DELTA) published on
 *     <prefix>.generate.<tenant> with reply = <inbox>.<seq>; one wildcard subscription on
 *     <inbox>.* receives every RequestOutput of this server;
 *   - a client that goes away (evhttp close callback) gets its engine requests aborted with
 *     AbortRequest{request_id = RequestOutput.request_id} on <prefix>.abort.<tenant> (at once,
 *     or on the first output when none arrived yet), which frees their KV blocks;
 *   - /tokenize, /detokenize and /v1/models/{id} send one GenerateRequest on
 *     <prefix>.tokenize.<tenant> (same inbox) and render its one RequestOutput (api_server_tokenize.h);
 *   - <prefix>.engine.*.stats (SchedulerStats) feeds the engine gauges of /metrics;
 *     <prefix>.health.*.* (Heartbeat) feeds /health: 200 once every actor named in
 *     health_actors sent a ready heartbeat within health_window_ms, 503 naming the missing
 *     ones otherwise, and 503 naming an actor whose latest heartbeat says not ready (a
 *     scheduler recovering from a gpu_worker / kv_manager failure) until it beats ready again.
 * Status codes: 400 invalid JSON / parameters (the error names the field), 404 unknown model
 * or route, 405 wrong method, 413 body over max_body_bytes, 429 engine queue full
 * (RequestOutput.error QUEUE_FULL) or more than max_concurrent requests here (with
 * Retry-After: 1), 503 no input
 * processor subscribed (NATS "no responders", after resending for about 5 s), no first output
 * within first_output_timeout_s, or an engine failure it could not hide (ABORTED: a request
 * dead-lettered after killing its scheduler, an output processor that lost a finished
 * request), with the reason, 500 otherwise. Streams start (200 + headers) only with the first
 * output, so engine-side validation errors keep their status; an error after that is sent as
 * an SSE `data: {"error": ...}` event followed by `data: [DONE]`.
 * A request's X-Request-Id header is echoed on its response.
 * Limits of evhttp (libevent 2.1): bodies larger than 4 x max_body_bytes, oversized headers
 * and unparseable HTTP are refused by evhttp itself (413 / 400 with its HTML page); an idle
 * connection, or one whose request (headers + body) is not complete within
 * request_timeout_s of its accept or of the previous response (a client trickling bytes),
 * is closed without a response (http_deadline.h).
 *
 * Threading: HTTP callbacks and all request state live on the bus loop thread
 * (bus_event_base). NATS handlers (delivery threads) only copy the payload into a locked queue
 * and activate an event; decoding and writing happen on the loop thread. Setup and teardown
 * are marshalled onto the loop thread too.
 */
#ifndef LLB_ACTORS_API_SERVER_ACTOR_H
#define LLB_ACTORS_API_SERVER_ACTOR_H

#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_options.h"
#include "base/status.h"
#include "bus/bus.h"

struct api_server_actor;

/* Checks the options and creates the actor (nothing bound yet). Errors: INVALID_ARGUMENT
 * naming the option, OUT_OF_MEMORY. *out: api_server_actor_destroy(). */
llb_status api_server_actor_create(const struct api_server_actor_options *o,
                                   struct api_server_actor **out);

/* Subscribes the inbox, stats and health handlers on `bus` (borrowed; outlives the actor's
 * use of it) and binds the HTTP listener on the bus loop. Errors: IO naming the address when
 * it cannot be bound, those of bus_subscribe. */
llb_status api_server_actor_start(struct api_server_actor *a, struct bus *bus);

/* The port the listener is bound to (useful with port 0); 0 before start. */
int api_server_actor_port(const struct api_server_actor *a);

/* What the actor counts (its histograms are rendered on GET /metrics: api_server_metrics.h). */
struct api_server_actor_stats {
  int64_t inflight; /* requests being served now (at most options.max_concurrent) */
};

/* A snapshot of the counters; thread-safe. */
void api_server_actor_stats(const struct api_server_actor *a, struct api_server_actor_stats *out);

/* Ends every request in flight (503 "shutting down", or an error event + [DONE] on a stream)
 * and closes the listener, on the loop thread; waits for it. Call after the bus drained and
 * before bus_destroy. Idempotent; no-op if never started. */
void api_server_actor_stop(struct api_server_actor *a);

/* Frees the actor. Call after bus_destroy(). NULL ok. */
void api_server_actor_destroy(struct api_server_actor *a);

#endif

/* A GenerateRequest that no input processor took (NATS "no responders": every replica is
 * restarting, or the nats-server just came back), or one in flight when the bus reconnected,
 * is sent again instead of failing the client:
 * the sub keeps a copy of what it sent, and a retry timer on the loop thread publishes it once
 * more after 50 ms, doubling to 1 s, API_SERVER_RESEND_MAX_TRIES times (about 5 s in all). Only then
 * does the client get the 503. docs/design.md §6 ("the client's request is retried").
 * Loop thread only. Takes the bus, subjects and subs as arguments (api_server_call.h). */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_RESEND_H
#define LLB_ACTORS_API_SERVER_API_SERVER_RESEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define API_SERVER_RESEND_MAX_TRIES 8

struct api_server_call;
struct api_server_sub;
struct api_server_sub_table;
struct bus;
struct event;      /* libevent */
struct event_base; /* libevent */

/* The copy a sub may send again: subject, reply and the encoded request. */
struct api_server_resend {
  char *subject, *reply;
  void *data;
  size_t len;
  int tries;          /* resends so far */
  int lost_tries;     /* resends after STATE_LOST so far */
  struct event *timer; /* NULL until the first resend */
  struct bus *bus;    /* the timer's bus (api_server_resend_schedule); borrowed */
};

/* Where a sub sent again under a new reply subject goes: the bus, this server's reply inbox
 * (replies are <inbox>.<seq>) and the seq table that gives the new seq. Borrowed. */
struct api_server_resend_ctx {
  struct bus *bus;
  const char *inbox;
  struct api_server_sub_table *table;
};

/* Keeps a copy of a sent request in s->resend. Errors: OUT_OF_MEMORY (the request was sent;
 * it just cannot be resent). */
llb_status api_server_resend_keep(struct api_server_sub *s, const char *subject, const char *reply, const void *data,
                           size_t len);

/* Schedules the next resend of s on `bus` by a timer on `base` (the bus loop); false when none
 * is left (or nothing was kept): answer the client with the 503 then. Logs each resend
 * (event=generate_resent). */
bool api_server_resend_schedule(struct bus *bus, struct event_base *base, struct api_server_sub *s);

/* After the bus reconnected: a restarted nats-server has forgotten the reply mappings of its
 * service imports (serve's accounts), so the outputs of requests in flight may never arrive.
 * Sends each unfinished sub of `c` that kept a copy again under a new reply subject (late
 * outputs on the old one are dropped as stale), aborts the engine request it had, and makes
 * its api_server_delta skip what the client already has: the request is seeded (the api server draws
 * the seed when the client gave none), so it repeats the same tokens. Logs
 * event=generate_resent reason=reconnected. Returns how many subs were sent again. */
int api_server_resend_after_reconnect(const struct api_server_resend_ctx *x, struct api_server_call *c);

/* Sends one unfinished sub of c again as api_server_resend_after_reconnect does, for the output
 * processor's STATE_LOST (it restarted and the engine had finished the request before it could
 * be rebuilt from the scheduler's history). At most API_SERVER_RESEND_MAX_TRIES times per sub; false
 * when nothing was sent (no copy kept, tries used up, out of memory): fail the client then.
 * Logs event=generate_resent reason=state_lost. */
bool api_server_resend_state_lost(const struct api_server_resend_ctx *x, struct api_server_call *c, struct api_server_sub *s);

/* After a reconnect, the resend waits for an input processor's heartbeat at most this long. */
#define API_SERVER_RESEND_WAIT_INPUT_NS (10LL * 1000000000LL)

/* How long after an output processor restart a sub that heard nothing since is sent again:
 * one that was streaming (it had outputs: a running request, which the new output processor
 * rebuilds at its next step's output, within a step) after API_SERVER_OP_RESTART_GRACE_STREAMING_NS;
 * one still waiting for its first output (it may be queued behind others) after
 * API_SERVER_OP_RESTART_GRACE_NS. */
#define API_SERVER_OP_RESTART_GRACE_NS (5LL * 1000000000LL)
#define API_SERVER_OP_RESTART_GRACE_STREAMING_NS (1LL * 1000000000LL)

/* An output processor that restarted lost every output published while it was down: a
 * request that finished then never reaches its client. Sends again (as
 * api_server_resend_after_reconnect does) each unfinished sub of c that kept a copy and heard nothing
 * since the restart seen at restart_ns, once its grace above has passed (a request still
 * running is rebuilt by the new output processor from the scheduler's history and talks
 * again within that time), once per restart. Logs event=generate_resent
 * reason=output_processor_restarted. Returns how many subs were sent again. */
int api_server_resend_after_op_restart(const struct api_server_resend_ctx *x, struct api_server_call *c, int64_t restart_ns,
                                int64_t now_ns);

/* A call's periodic check (its probe, every 250 ms): notes a bus reconnect since its requests
 * were sent and, once an input processor beat after it (ip_beat_ns: llb_now_ns of the latest
 * input processor heartbeat; it has subscribed again: a request published before that is
 * dropped without a "no responders" across the accounts' service import) or
 * API_SERVER_RESEND_WAIT_INPUT_NS after it at the latest, sends c's requests again
 * (api_server_resend_after_reconnect); then those an output processor restart at op_restart_ns (0 =
 * none) may have lost (api_server_resend_after_op_restart). Returns how many subs were sent again. */
int api_server_resend_poll(const struct api_server_resend_ctx *x, struct api_server_call *c, int64_t ip_beat_ns, int64_t op_restart_ns,
                    int64_t now_ns);

/* Frees the copy and the timer (before the sub's memory goes). */
void api_server_resend_free(struct api_server_sub *s);

#endif

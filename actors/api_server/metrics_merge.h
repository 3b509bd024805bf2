/* The whole stack's series on the api server's /metrics: every actor publishes its registry
 * (Prometheus' text format 0.0.4) on <prefix>.health.<actor>.<instance>.metrics
 * (bus_metrics_publish_start); the api server keeps the latest text of each and renders its own
 * series followed by theirs, so that one vLLM-style scrape job of the API port sees everything,
 * as vLLM serves every process's metrics on its API port.
 *
 * Merging follows the text format's rules (https://prometheus.io/docs/instrumenting/
 * exposition_formats/): the samples of one family stay together under one HELP and one TYPE
 * line, whichever actors they come from; another actor's samples get two labels first,
 * actor="<actor>" and actor_instance="<instance>" (the series of two input processors then
 * differ, and `instance` stays Prometheus' own target label). What arrives is untrusted: a line
 * that is not a HELP, TYPE or sample line of the format, a sample whose name is not of its
 * family, one that already has an actor or actor_instance label, or a family whose TYPE differs
 * from the first one seen is dropped (and counted). A text not refreshed within the window
 * (its actor died or stopped) is forgotten, as Prometheus forgets a target that is down.
 *
 * Threading: put() runs on the bus's delivery threads, render() on the HTTP loop: both take the
 * merger's mutex.
 */
#ifndef LLB_ACTORS_API_SERVER_METRICS_MERGE_H
#define LLB_ACTORS_API_SERVER_METRICS_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_request.h"
#include "base/status.h"

#define METRICS_MERGE_MAX_SOURCES 256        /* actor instances kept at most */
#define METRICS_MERGE_MAX_TEXT (1024 * 1024) /* bytes of one actor's text at most */

struct metrics_merge;

/* A merger that forgets a text after window_ms without a new one. *out: metrics_merge_destroy.
 * OUT_OF_MEMORY. */
llb_status metrics_merge_create(int64_t window_ms, struct metrics_merge **out);

void metrics_merge_destroy(struct metrics_merge *m); /* NULL ok */

/* Keeps text[len] as the latest of (actor, instance), received at now_ns (llb_now_ns). A text
 * over METRICS_MERGE_MAX_TEXT, names that are not subject tokens, or a new source past
 * METRICS_MERGE_MAX_SOURCES are refused (INVALID_ARGUMENT / TOO_LARGE / QUEUE_FULL). */
llb_status metrics_merge_put(struct metrics_merge *m, const char *actor, const char *instance, const char *text,
                             size_t len, int64_t now_ns);

/* Appends to `out` the merge of every text received within the window of now_ns (labels added),
 * own[own_len] (this process's series: process, bus; lines as they are) and view[view_len] (the
 * api server's view of the engine: requests, tokens, latencies, the engines' stats). A family of
 * the view that an actor publishes is the actor's: the view's series of it are left out, so that
 * a sum over the scrape counts each request once, NATS or HTTP (as vLLM's engine-wide series).
 * false when out of memory. */
bool metrics_merge_render(struct metrics_merge *m, const char *view, size_t view_len, const char *own, size_t own_len,
                          int64_t now_ns, struct api_buf *out);

/* Lines dropped as malformed or conflicting so far (all renders). */
uint64_t metrics_merge_dropped(const struct metrics_merge *m);

#endif

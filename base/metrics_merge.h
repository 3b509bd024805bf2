/* The whole stack's series on one /metrics page: every actor publishes its registry (Prometheus'
 * text format 0.0.4) on <prefix>.health.<actor>.<instance>.metrics (bus_metrics_publish_start);
 * the api server keeps the latest text of each here and renders its own registries followed by
 * theirs, so that one vLLM-style scrape job of the API port sees everything, as vLLM serves every
 * process's metrics on its API port.
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
#ifndef LLB_BASE_METRICS_MERGE_H
#define LLB_BASE_METRICS_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/metrics.h"
#include "base/status.h"

#define LLB_METRICS_MERGE_MAX_SOURCES 256        /* actor instances kept at most */
#define LLB_METRICS_MERGE_MAX_TEXT (1024 * 1024) /* bytes of one actor's text at most */

struct llb_metrics_merge;

/* A merger that forgets a text after window_ms without a new one. *out: llb_metrics_merge_destroy.
 * OUT_OF_MEMORY. */
llb_status llb_metrics_merge_create(int64_t window_ms, struct llb_metrics_merge **out);

void llb_metrics_merge_destroy(struct llb_metrics_merge *m); /* NULL ok */

/* Keeps text[len] as the latest of (actor, instance), received at now_ns (llb_now_ns). A text
 * over LLB_METRICS_MERGE_MAX_TEXT, names that are not subject tokens, or a new source past
 * LLB_METRICS_MERGE_MAX_SOURCES are refused (INVALID_ARGUMENT / TOO_LARGE / QUEUE_FULL). */
llb_status llb_metrics_merge_put(struct llb_metrics_merge *m, const char *actor, const char *instance, const char *text,
                                 size_t len, int64_t now_ns);

/* Renders `own` (this process's series: process, bus; as they are) and `view` (the api server's
 * view of the engine: requests, tokens, latencies, the engines' stats), either NULL = none, and
 * merges them with every text received within the window of now_ns (labels added) into one
 * exposition: *text (malloc'd, NUL-terminated; caller frees), *len bytes without the NUL. A
 * family of the view that an actor publishes is the actor's: the view's series of it are left
 * out, so that a sum over the scrape counts each request once, NATS or HTTP (as vLLM's
 * engine-wide series). OUT_OF_MEMORY. */
llb_status llb_metrics_merge_render(struct llb_metrics_merge *m, struct llb_metrics *own, struct llb_metrics *view,
                                    int64_t now_ns, char **text, size_t *len);

/* Lines dropped as malformed or conflicting so far (all renders). */
uint64_t llb_metrics_merge_dropped(const struct llb_metrics_merge *m);

#endif

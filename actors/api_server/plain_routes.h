/* The api server's routes answered from what it knows, without the engine (loop thread):
 * GET /v1/models, GET /metrics, GET /version. Each takes what it renders as arguments. */
#ifndef LLB_ACTORS_API_SERVER_PLAIN_ROUTES_H
#define LLB_ACTORS_API_SERVER_PLAIN_ROUTES_H

#include <stdint.h>

#include "actors/api_server/api_metrics.h"
#include "base/metrics.h"

struct evhttp_request; /* libevent */

/* OpenAI's model list: the served model's names[0, num) (--served-model-name a b: both, as
 * vLLM lists them), each with max_model_len when known (> 0). */
void api_route_models(struct evhttp_request *req, const char *const *names, int num, int32_t max_model_len);

/* Prometheus text: the server's own metrics (its view of the engine, then `registry`'s: NULL =
 * none; the process and bus metrics), merged with every engine actor's (`merge`, NULL = none;
 * metrics_merge.h: a family an actor publishes replaces the view's). 500 when rendering fails. */
struct metrics_merge;
void api_route_metrics(struct evhttp_request *req, struct api_metrics *metrics, struct llb_metrics *registry,
                       struct metrics_merge *merge);

/* {"version": "<project version>"} (CMakeLists.txt project()). */
void api_route_version(struct evhttp_request *req);

#endif

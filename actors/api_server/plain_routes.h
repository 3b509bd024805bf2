/* The api server's routes answered from what it knows, without the engine (loop thread):
 * GET /v1/models, GET /metrics, GET /version. Each takes what it renders as arguments. */
#ifndef LLB_ACTORS_API_SERVER_PLAIN_ROUTES_H
#define LLB_ACTORS_API_SERVER_PLAIN_ROUTES_H

#include <stdint.h>

#include "base/metrics_merge.h"
#include "schemas/codec.h"

struct evhttp_request; /* libevent */

/* OpenAI's model list: the served model's names[0, num) (--served-model-name a b: both, as
 * vLLM lists them), then the LoRA adapters loras[0, num_loras) with parent names[0] (vLLM's
 * ModelCard of an adapter), each with max_model_len when known (> 0). */
void api_server_route_models(struct evhttp_request *req, const char *const *names, int num, int32_t max_model_len,
                      const char (*loras)[LLB_LORA_NAME_MAX + 1], int num_loras);

/* Prometheus text (base/metrics_merge.h): the server's view of the engine (`view`), the process
 * and bus metrics (`own`: NULL = none) and every engine actor's series kept by `merge`; a family
 * an actor publishes replaces the view's. 500 when rendering fails. */
void api_server_route_metrics(struct evhttp_request *req, struct llb_metrics_merge *merge, struct llb_metrics *view,
                       struct llb_metrics *own);

/* {"version": "<project version>"} (CMakeLists.txt project()). */
void api_server_route_version(struct evhttp_request *req);

#endif

/* Routes answered without the engine; see plain_routes.h. */
#include "actors/api_server/plain_routes.h"

#include <event2/http.h>
#include <stdlib.h>
#include <time.h>

#include "actors/api_server/api_server_tokenize.h"
#include "actors/api_server/http_reply.h"
#include "base/log.h"

void api_server_route_version(struct evhttp_request *req) {
  static const char body[] = "{\"version\":\"" LLB_VERSION_STRING "\"}";
  api_server_http_send_body(req, 200, "application/json", body, sizeof body - 1);
}

void api_server_route_models(struct evhttp_request *req, const char *const *names, int num, int32_t max_model_len,
                      const char (*loras)[LLB_LORA_NAME_MAX + 1], int num_loras) {
  struct api_server_buf b = {0};
  const int64_t now = (int64_t)time(NULL);
  bool ok = api_server_buf_printf(&b, "{\"object\":\"list\",\"data\":[");
  for (int i = 0; ok && i < num; i++)
    ok = (i == 0 || api_server_buf_printf(&b, ",")) &&
         api_server_model_object_render(names[i], NULL, now, max_model_len, &b) == LLB_STATUS_OK;
  for (int i = 0; ok && i < num_loras; i++) /* vLLM's LoRA ModelCard: its parent, the base model */
    ok = api_server_buf_printf(&b, ",") && api_server_model_object_render(loras[i], names[0], now, max_model_len, &b) == LLB_STATUS_OK;
  ok = ok && api_server_buf_printf(&b, "]}");
  if (ok) api_server_http_send_body(req, 200, "application/json", b.data, b.len);
  else evhttp_send_error(req, 500, NULL);
  api_server_buf_free(&b);
}

void api_server_route_metrics(struct evhttp_request *req, struct llb_metrics_merge *merge, struct llb_metrics *view,
                       struct llb_metrics *own) {
  char *text = NULL;
  size_t len = 0;
  if (llb_metrics_merge_render(merge, own, view, llb_now_ns(), &text, &len) == LLB_STATUS_OK)
    api_server_http_send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
  else
    evhttp_send_error(req, 500, NULL);
  free(text);
}

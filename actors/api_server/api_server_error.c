/* OpenAI's error object; see api_server_error.h. */
#include "actors/api_server/api_server_error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

static const char *error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

int api_server_error_set(struct api_server_error *e, int http_status, const char *param, const char *fmt, ...) {
  e->http_status = http_status;
  snprintf(e->type, sizeof e->type, "%s", error_type(http_status));
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  e->code[0] = '\0';
  e->retry_after_s = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return http_status;
}

void api_server_error_from_status(int32_t code, const char *message, const char *field,
                           struct api_server_error *e) {
  int status;
  switch (code) {
    case LLB_STATUS_INVALID_ARGUMENT:
    case LLB_STATUS_MALFORMED:
    case LLB_STATUS_UNSUPPORTED:
    case LLB_STATUS_TOO_LARGE: status = 400; break;
    case LLB_STATUS_NOT_FOUND: status = 404; break;
    case LLB_STATUS_QUEUE_FULL: status = 429; break;
    case LLB_STATUS_TIMEOUT:
    case LLB_STATUS_NO_SERVER:
    case LLB_STATUS_CONNECTION:
    case LLB_STATUS_CLOSED:
    case LLB_STATUS_STATE_LOST:
    case LLB_STATUS_ABORTED: status = 503; break; /* the engine failed it (dead letter, lost state) */
    default: status = 500; break;
  }
  const char *what = code > 0 && code < LLB_STATUS_COUNT ? llb_strerror((llb_status)code) : "error";
  char param[sizeof e->param];
  /* the input processor names items "mm_items[i].x"; over HTTP they are "prompt_embeds[i].x" */
  if (field && strncmp(field, "mm_items", 8) == 0)
    snprintf(param, sizeof param, "prompt_embeds%.80s", field + 8);
  else
    snprintf(param, sizeof param, "%s", field ? field : "");
  api_server_error_set(e, status, param, "%s", message && *message ? message : what);
  if (code == LLB_STATUS_QUEUE_FULL) snprintf(e->code, sizeof e->code, "queue_full");
}

bool api_server_error_render(const struct api_server_error *e, struct api_server_buf *out) {
  char message[sizeof e->message], param[sizeof e->param], type[sizeof e->type], code[sizeof e->code];
  /* error texts quote the client's bytes; JSON holds UTF-8 only */
  llb_utf8_sanitize(e->message, '?', message, sizeof message);
  llb_utf8_sanitize(e->type, '?', type, sizeof type);
  llb_utf8_sanitize(e->param, '?', param, sizeof param);
  llb_utf8_sanitize(e->code, '?', code, sizeof code);
  json_t *inner = json_pack("{s:s, s:s, s:o, s:o}", "message", message, "type", type, "param",
                            param[0] ? json_string(param) : json_null(), "code",
                            code[0] ? json_string(code) : json_integer(e->http_status));
  json_t *root = inner ? json_pack("{s:o}", "error", inner) : NULL;
  char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  bool ok = s && api_server_buf_append(out, s, strlen(s));
  free(s);
  return ok;
}

llb_status api_server_error_bad(struct api_server_error *err, const char *param, const char *fmt, ...) {
  char msg[sizeof err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  api_server_error_set(err, 400, param, "%s", msg);
  return LLB_STATUS_INVALID_ARGUMENT;
}

llb_status api_server_error_oom(struct api_server_error *err) {
  api_server_error_set(err, 500, NULL, "out of memory");
  return LLB_STATUS_OUT_OF_MEMORY;
}

/* Chat fields for the Jinja chat template (api_server_chat_fields.h), following vLLM's
 * ChatCompletionRequest (protocol.py) and OpenAI's message objects. */
#include "actors/api_server/api_server_chat_fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Compact JSON of v, owned by the request. */
static llb_status dump_owned(json_t *v, api_server_own_fn own, void *owner, struct llb_str *out, struct api_server_error *err) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!s || !own(owner, s)) {
    free(s);
    api_server_error_set(err, 500, NULL, "out of memory");
    return LLB_STATUS_OUT_OF_MEMORY;
  }
  *out = (struct llb_str){s, strlen(s)};
  return LLB_STATUS_OK;
}

llb_status api_server_chat_template_field(const char *key, json_t *v, struct api_server_request *r, api_server_own_fn own,
                                   void *owner, bool *handled, struct api_server_error *err) {
  *handled = true;
  if (!strcmp(key, "chat_template_kwargs")) {
    if (json_is_null(v)) return LLB_STATUS_OK;
    if (!json_is_object(v)) return api_server_error_bad(err, key, "'chat_template_kwargs' must be an object");
    if (json_object_size(v) == 0) return LLB_STATUS_OK;
    return dump_owned(v, own, owner, &r->chat_template_kwargs, err);
  }
  bool *flag = !strcmp(key, "continue_final_message") ? &r->continue_final_message
             : !strcmp(key, "add_generation_prompt")  ? &r->no_generation_prompt : NULL;
  if (!flag) {
    *handled = false;
    return LLB_STATUS_OK;
  }
  if (json_is_null(v)) return LLB_STATUS_OK;
  if (!json_is_boolean(v)) return api_server_error_bad(err, key, "'%s' must be a boolean", key);
  *flag = flag == &r->no_generation_prompt ? json_is_false(v) : json_is_true(v);
  return LLB_STATUS_OK;
}

llb_status api_server_chat_check(const struct api_server_request *r, struct api_server_error *err) {
  if (r->continue_final_message && !r->no_generation_prompt)
    return api_server_error_bad(err, "continue_final_message",
               "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  return LLB_STATUS_OK;
}

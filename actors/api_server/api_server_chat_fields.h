/* Chat request fields for the model's own Jinja chat template (vLLM's chat completion
 * extras): `chat_template_kwargs` (object), `continue_final_message` and
 * `add_generation_prompt` (booleans; vLLM refuses both true). The tool fields of messages and
 * `tools` / `tool_choice` are api_server_tools.h's. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_CHAT_FIELDS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_CHAT_FIELDS_H

#include <jansson.h>
#include <stdbool.h>

#include "actors/api_server/api_server_request.h"

/* Takes ownership of a malloc'd string for the request's lifetime; false on OOM. */
typedef bool (*api_server_own_fn)(void *owner, char *s);

/* If `key` is one of the fields above, parses v into r (*handled = true); 400 in err on a
 * wrong type or on continue_final_message with add_generation_prompt. */
llb_status api_server_chat_template_field(const char *key, json_t *v, struct api_server_request *r, api_server_own_fn own,
                                   void *owner, bool *handled, struct api_server_error *err);

/* After every field is read: 400 for continue_final_message with add_generation_prompt
 * (true by default), as vLLM. */
llb_status api_server_chat_check(const struct api_server_request *r, struct api_server_error *err);

#endif

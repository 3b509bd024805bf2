/* vLLM's prompt_logprobs in OpenAI responses (vllm/entrypoints/openai/protocol.py
 * CompletionResponseChoice.prompt_logprobs: list[dict[int, Logprob] | None]); see api_server_response.h. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "actors/api_server/api_server_response.h"

static json_t *logprob_entry(float logprob, int32_t rank, struct llb_str decoded) {
  double x = isfinite(logprob) && logprob > -9999.0f ? (double)logprob : -9999.0;
  return json_pack("{s:f, s:i, s:s%}", "logprob", x, "rank", (int)rank, "decoded_token",
                   decoded.data ? decoded.data : "", decoded.len);
}

void *api_server_prompt_logprobs_json(const struct llb_request_output *ro, int64_t num_prompt_tokens) {
  json_t *list = json_array();
  if (!list || json_array_append_new(list, json_null()) != 0) goto fail;
  for (int32_t i = 0; i < ro->num_prompt_logprobs; i++) {
    const struct llb_token_logprobs *t = &ro->prompt_logprobs[i];
    json_t *pos = json_object();
    char key[16];
    for (int32_t k = 0; pos && k < t->num_top; k++) {
      snprintf(key, sizeof key, "%d", t->top[k].token_id);
      json_object_set_new(pos, key, logprob_entry(t->top[k].logprob, k + 1, t->top[k].decoded));
    }
    snprintf(key, sizeof key, "%d", t->token_id); /* the prompt token, with its own rank */
    if (pos) json_object_set_new(pos, key, logprob_entry(t->logprob, t->rank, t->decoded));
    if (!pos || json_array_append_new(list, pos) != 0) goto fail;
  }
  /* a one-token prompt (or rows the engine could not send): null for the positions without */
  while ((int64_t)json_array_size(list) < num_prompt_tokens)
    if (json_array_append_new(list, json_null()) != 0) goto fail;
  return list;
fail:
  json_decref(list);
  return NULL;
}

/* {decoded: logprob} of a token's top entries (at most num_top) and the token itself. */
static json_t *top_map(const struct llb_token_logprobs *t, int32_t num_top) {
  json_t *top = json_object();
  char key[512];
  for (int32_t k = 0; top && k < t->num_top && k < num_top; k++) {
    snprintf(key, sizeof key, "%.*s", (int)t->top[k].decoded.len, t->top[k].decoded.data ? t->top[k].decoded.data : "");
    if (!json_object_get(top, key)) json_object_set_new(top, key, json_real((double)t->top[k].logprob));
  }
  snprintf(key, sizeof key, "%.*s", (int)t->decoded.len, t->decoded.data ? t->decoded.data : "");
  if (top && !json_object_get(top, key)) json_object_set_new(top, key, json_real((double)t->logprob));
  return top;
}

void *api_server_echo_logprobs_json(const struct llb_request_output *ro, const char *prompt_text, int32_t num_top,
                             int64_t *offset) {
  json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
  json_t *obj = json_pack("{s:o, s:o, s:o, s:o}", "text_offset", offs, "token_logprobs", lps, "tokens", tokens,
                          "top_logprobs", tops);
  if (!obj) return NULL;
  /* the first prompt token has no logprob, and no decoded text comes with it: the prompt text
   * that the others' texts do not cover */
  size_t rest = 0, len = strlen(prompt_text);
  for (int32_t i = 0; i < ro->num_prompt_logprobs; i++) rest += ro->prompt_logprobs[i].decoded.len;
  size_t first = len > rest ? len - rest : 0;
  json_array_append_new(tokens, json_stringn(prompt_text, first));
  json_array_append_new(lps, json_null());
  json_array_append_new(tops, json_null());
  json_array_append_new(offs, json_integer(*offset));
  *offset += (int64_t)first;
  for (int32_t i = 0; i < ro->num_prompt_logprobs; i++) {
    const struct llb_token_logprobs *t = &ro->prompt_logprobs[i];
    json_array_append_new(tokens, json_stringn(t->decoded.data ? t->decoded.data : "", t->decoded.len));
    json_array_append_new(lps, json_real(isfinite(t->logprob) ? (double)t->logprob : -9999.0));
    json_array_append_new(tops, top_map(t, num_top));
    json_array_append_new(offs, json_integer(*offset));
    *offset += (int64_t)t->decoded.len;
  }
  if (json_array_size(offs) != (size_t)ro->num_prompt_logprobs + 1) {
    json_decref(obj);
    return NULL;
  }
  return obj;
}

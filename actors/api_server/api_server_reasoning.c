/* Reasoning content of chat outputs (see api_server_reasoning.h). */
#include "actors/api_server/api_server_reasoning.h"

#include <jansson.h>
#include <string.h>

void api_server_reasoning_stream_free(struct api_server_reasoning_stream *s) {
  if (!s) return;
  api_server_buf_free(&s->text);
}

llb_status api_server_reasoning_stream_feed(struct api_server_reasoning_stream *s, enum reasoning_parser p, const char *delta,
                                     size_t n, bool final, struct llb_str *reasoning, struct llb_str *content) {
  if (n && !api_server_buf_append(&s->text, delta, n))
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "reasoning stream: out of memory");
  const char *t = s->text.data ? s->text.data : "";
  struct reasoning_split sp;
  reasoning_split_text(p, t, s->text.len, final, &sp);
  /* each part only grows (reasoning_split_text holds back what could change) */
  const size_t rlen = sp.reasoning_end - sp.reasoning_begin, clen = sp.content_end - sp.content_begin;
  *reasoning = (struct llb_str){"", 0};
  *content = (struct llb_str){"", 0};
  if (rlen > s->reasoning_sent) {
    *reasoning = (struct llb_str){t + sp.reasoning_begin + s->reasoning_sent, rlen - s->reasoning_sent};
    s->reasoning_sent = rlen;
  }
  if (clen > s->content_sent) {
    *content = (struct llb_str){t + sp.content_begin + s->content_sent, clen - s->content_sent};
    s->content_sent = clen;
  }
  return LLB_STATUS_OK;
}

bool api_server_reasoning_thinking_enabled(struct llb_str chat_template_kwargs) {
  if (!chat_template_kwargs.len) return true;
  json_t *kw = json_loadb(chat_template_kwargs.data, chat_template_kwargs.len, 0, NULL);
  const bool off = json_is_false(json_object_get(kw, "enable_thinking")) || json_is_false(json_object_get(kw, "thinking"));
  json_decref(kw);
  return !off;
}

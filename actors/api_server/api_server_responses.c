/* POST /v1/responses: the response object and its stream events (see api_server_responses.h). */
#include "actors/api_server/api_server_responses.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/tool_parser.h"

#define OOM() LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_responses: out of memory")

/* Ids of the response's items, from its own id ("resp_<hex>"): msg_<hex>, rs_<hex>,
 * fc_<hex>_<i>, call_<hex>_<i>. */
static void item_id(const struct api_server_response *r, const char *kind, int32_t i, char *buf, size_t cap) {
  const char *hex = strchr(r->id, '_');
  hex = hex ? hex + 1 : r->id;
  if (i < 0) snprintf(buf, cap, "%s_%s", kind, hex);
  else snprintf(buf, cap, "%s_%s_%d", kind, hex, i);
}

static const struct api_server_choice_state *choice0(const struct api_server_response *r) { return &r->choices[0]; }

static bool incomplete(const struct api_server_response *r) {
  return choice0(r)->finished && choice0(r)->finish_reason == LLB_FINISH_REASON_LENGTH;
}

static json_t *usage_json(const struct api_server_response *r) {
  const int64_t in = r->prompt_tokens[0] > 0 ? r->prompt_tokens[0] : 0;
  /* reasoning_tokens: the split is made on text, not counted in tokens (0) */
  return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)in, "input_tokens_details",
                   "cached_tokens", (json_int_t)r->cached_tokens[0], "output_tokens", (json_int_t)r->completion_tokens,
                   "output_tokens_details", "reasoning_tokens", (json_int_t)0, "total_tokens",
                   (json_int_t)(in + r->completion_tokens));
}

static json_t *echo_or(const struct api_server_responses *q, const char *key, json_t *dflt) {
  json_t *v = json_object_get(q->echo, key);
  if (v && !json_is_null(v)) {
    json_decref(dflt);
    return json_incref(v);
  }
  return dflt;
}

/* The response object around `output` (stolen); status "in_progress" while streaming. */
static json_t *response_json(const struct api_server_response *r, const struct api_server_responses *q, json_t *output,
                             const char *status) {
  const bool inc = !strcmp(status, "incomplete");
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:n, s:o, s:s, s:o}", "id", r->id, "object", "response", "created_at",
                        (json_int_t)r->created, "status", status, "error", "incomplete_details",
                        inc ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "model", r->model, "output",
                        output);
  if (!o) return NULL;
  json_object_set_new(o, "instructions", echo_or(q, "instructions", json_null()));
  json_object_set_new(o, "max_output_tokens", echo_or(q, "max_output_tokens", json_null()));
  json_object_set_new(o, "temperature", echo_or(q, "temperature", json_real(1.0)));
  json_object_set_new(o, "top_p", echo_or(q, "top_p", json_real(1.0)));
  json_object_set_new(o, "tools", echo_or(q, "tools", json_array()));
  json_object_set_new(o, "tool_choice", echo_or(q, "tool_choice", json_string("auto")));
  json_object_set_new(o, "parallel_tool_calls", echo_or(q, "parallel_tool_calls", json_true()));
  json_object_set_new(o, "text", echo_or(q, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
  json_object_set_new(o, "metadata", echo_or(q, "metadata", json_object()));
  json_object_set_new(o, "user", echo_or(q, "user", json_null()));
  json_object_set_new(o, "reasoning", echo_or(q, "reasoning", json_pack("{s:n, s:n}", "effort", "summary")));
  json_object_set_new(o, "previous_response_id", json_null());
  json_object_set_new(o, "store", json_false());
  json_object_set_new(o, "background", json_false());
  json_object_set_new(o, "truncation", json_string("disabled"));
  json_object_set_new(o, "usage", strcmp(status, "in_progress") ? usage_json(r) : json_null());
  return o;
}

static json_t *reasoning_item(const struct api_server_response *r, const char *text, size_t len, const char *status) {
  char id[96];
  item_id(r, "rs", -1, id, sizeof id);
  json_t *content = text ? json_pack("[{s:s, s:s%}]", "type", "reasoning_text", "text", text, len) : json_array();
  return json_pack("{s:s, s:s, s:[], s:o, s:s}", "id", id, "type", "reasoning", "summary", "content", content, "status",
                   status);
}

static json_t *text_part(const char *text, size_t len) {
  return json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

static json_t *message_item(const struct api_server_response *r, const char *text, size_t len, const char *status) {
  char id[96];
  item_id(r, "msg", -1, id, sizeof id);
  return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "role", "assistant", "status", status,
                   "content", text ? json_pack("[o]", text_part(text, len)) : json_array());
}

static json_t *call_item(const struct api_server_response *r, int32_t i, const struct tool_call_snap *c, bool done) {
  char id[96], call[96];
  item_id(r, "fc", i, id, sizeof id);
  item_id(r, "call", i, call, sizeof call);
  return json_pack("{s:s, s:s, s:s, s:s%, s:s%, s:s}", "id", id, "type", "function_call", "call_id", call, "name",
                   c->name.data, c->name.len, "arguments", done ? c->arguments.data : "", done ? c->arguments.len : 0,
                   "status", done ? "completed" : "in_progress");
}

static bool all_space(const char *t, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (t[i] != ' ' && t[i] != '\n' && t[i] != '\t' && t[i] != '\r') return false;
  return true;
}

/* The output items of the whole text: reasoning (with a parser), then the message, then the
 * tool calls (with tools; a text that does not parse stays the message). NULL when out of memory. */
static json_t *output_items(const struct api_server_response *r, const char *text, size_t len) {
  json_t *items = json_array();
  const char *status = incomplete(r) ? "incomplete" : "completed";
  if (!items) return NULL;
  if (r->reasoning) {
    struct reasoning_split sp;
    reasoning_split_text((enum reasoning_parser)r->reasoning, text, len, true, &sp);
    if (sp.has_reasoning)
      json_array_append_new(items, reasoning_item(r, text + sp.reasoning_begin, sp.reasoning_end - sp.reasoning_begin, status));
    text += sp.content_begin;
    len = sp.content_end - sp.content_begin;
  }
  struct tool_snapshot *snap = r->tools ? calloc(1, sizeof *snap) : NULL;
  if (snap && tool_parse(r->tool_format, r->tool_named, text, len, true, snap) == LLB_STATUS_OK && snap->num_calls > 0) {
    if (!all_space(snap->content.data, snap->content.len))
      json_array_append_new(items, message_item(r, snap->content.data, snap->content.len, status));
    const int32_t n = r->tool_single_call && snap->num_calls > 1 ? 1 : snap->num_calls;
    for (int32_t i = 0; i < n; i++) json_array_append_new(items, call_item(r, i, &snap->calls[i], true));
  } else if (len > 0 || json_array_size(items) == 0) {
    json_array_append_new(items, message_item(r, text, len, status));
  }
  tool_snapshot_free(snap);
  free(snap);
  return items;
}

static json_t *final_response(const struct api_server_response *r, const struct api_server_responses *q) {
  const struct api_server_choice_state *cs = choice0(r);
  json_t *items = output_items(r, cs->text.data ? cs->text.data : "", cs->text.len);
  return items ? response_json(r, q, items, incomplete(r) ? "incomplete" : "completed") : NULL;
}

static llb_status dump(json_t *o, struct api_server_buf *out) {
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(o);
  const bool ok = s && api_server_buf_append(out, s, strlen(s));
  free(s);
  return ok ? LLB_STATUS_OK : OOM();
}

llb_status api_server_responses_render(struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out) {
  return dump(final_response(r, q), out);
}

/* ---- streaming ---- */

/* `event: <type>` + data (o stolen: its type and sequence_number are set here). */
static llb_status event(struct api_server_responses *q, const char *type, json_t *o, struct api_server_buf *out) {
  if (!o) return OOM();
  json_object_set_new(o, "type", json_string(type));
  json_object_set_new(o, "sequence_number", json_integer(q->seq++));
  char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(o);
  const bool ok = s && api_server_buf_printf(out, "event: %s\ndata: %s\n\n", type, s);
  free(s);
  return ok ? LLB_STATUS_OK : OOM();
}

static llb_status item_event(struct api_server_responses *q, const char *type, int32_t index, json_t *item, struct api_server_buf *out) {
  return event(q, type, item ? json_pack("{s:i, s:o}", "output_index", index, "item", item) : NULL, out);
}

static llb_status close_reasoning(const struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out) {
  if (q->reasoning_index < 0 || q->reasoning_done) return LLB_STATUS_OK;
  q->reasoning_done = true;
  char id[96];
  item_id(r, "rs", -1, id, sizeof id);
  const char *t = q->reasoning.data ? q->reasoning.data : "";
  llb_status st = event(q, "response.reasoning_text.done",
                        json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", q->reasoning_index,
                                  "content_index", 0, "text", t, q->reasoning.len),
                        out);
  if (st == LLB_STATUS_OK)
    st = item_event(q, "response.output_item.done", q->reasoning_index, reasoning_item(r, t, q->reasoning.len, "completed"), out);
  return st;
}

static llb_status reasoning_delta(const struct api_server_response *r, struct api_server_responses *q, struct llb_str d, struct api_server_buf *out) {
  llb_status st = LLB_STATUS_OK;
  char id[96];
  item_id(r, "rs", -1, id, sizeof id);
  if (q->reasoning_index < 0) {
    q->reasoning_index = q->num_items++;
    st = item_event(q, "response.output_item.added", q->reasoning_index, reasoning_item(r, NULL, 0, "in_progress"), out);
  }
  if (st == LLB_STATUS_OK && !api_server_buf_append(&q->reasoning, d.data, d.len)) st = OOM();
  if (st == LLB_STATUS_OK)
    st = event(q, "response.reasoning_text.delta",
               json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", q->reasoning_index, "content_index", 0,
                         "delta", d.data, d.len),
               out);
  return st;
}

static llb_status text_delta(const struct api_server_response *r, struct api_server_responses *q, struct llb_str d, struct api_server_buf *out) {
  char id[96];
  item_id(r, "msg", -1, id, sizeof id);
  llb_status st = close_reasoning(r, q, out);
  if (st == LLB_STATUS_OK && q->message_index < 0) {
    q->message_index = q->num_items++;
    st = item_event(q, "response.output_item.added", q->message_index, message_item(r, NULL, 0, "in_progress"), out);
    if (st == LLB_STATUS_OK)
      st = event(q, "response.content_part.added",
                 json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", q->message_index, "content_index", 0,
                           "part", text_part("", 0)),
                 out);
  }
  if (st == LLB_STATUS_OK && !api_server_buf_append(&q->content, d.data, d.len)) st = OOM();
  if (st == LLB_STATUS_OK && d.len)
    st = event(q, "response.output_text.delta",
               json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index", q->message_index, "content_index",
                         0, "delta", d.data, d.len, "logprobs"),
               out);
  return st;
}

static llb_status close_message(const struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out) {
  if (q->message_index < 0 || q->message_done) return LLB_STATUS_OK;
  q->message_done = true;
  char id[96];
  item_id(r, "msg", -1, id, sizeof id);
  const char *t = q->content.data ? q->content.data : "", *status = incomplete(r) ? "incomplete" : "completed";
  llb_status st = event(q, "response.output_text.done",
                        json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index", q->message_index,
                                  "content_index", 0, "text", t, q->content.len, "logprobs"),
                        out);
  if (st == LLB_STATUS_OK)
    st = event(q, "response.content_part.done",
               json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", q->message_index, "content_index", 0,
                         "part", text_part(t, q->content.len)),
               out);
  if (st == LLB_STATUS_OK)
    st = item_event(q, "response.output_item.done", q->message_index, message_item(r, t, q->content.len, status), out);
  return st;
}

/* With tools, at the end: the held text through the tool parser, whole items out. */
static llb_status flush_tools(const struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out) {
  struct tool_snapshot *snap = calloc(1, sizeof *snap);
  if (!snap) return OOM();
  const char *t = q->content.data ? q->content.data : "";
  const size_t len = q->content.len;
  q->content.len = 0; /* text_delta collects the message's own text again */
  llb_status st = LLB_STATUS_OK;
  if (tool_parse(r->tool_format, r->tool_named, t, len, true, snap) == LLB_STATUS_OK && snap->num_calls > 0) {
    struct llb_str text = {snap->content.data, snap->content.len};
    if (!all_space(text.data, text.len)) st = text_delta(r, q, text, out);
    if (st == LLB_STATUS_OK) st = close_message(r, q, out);
    const int32_t n = r->tool_single_call && snap->num_calls > 1 ? 1 : snap->num_calls;
    for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) {
      const struct tool_call_snap *c = &snap->calls[i];
      const int32_t index = q->num_items++;
      char id[96];
      item_id(r, "fc", i, id, sizeof id);
      st = item_event(q, "response.output_item.added", index, call_item(r, i, c, false), out);
      if (st == LLB_STATUS_OK)
        st = event(q, "response.function_call_arguments.delta",
                   json_pack("{s:s, s:i, s:s%}", "item_id", id, "output_index", index, "delta", c->arguments.data,
                             c->arguments.len),
                   out);
      if (st == LLB_STATUS_OK)
        st = event(q, "response.function_call_arguments.done",
                   json_pack("{s:s, s:i, s:s%}", "item_id", id, "output_index", index, "arguments", c->arguments.data,
                             c->arguments.len),
                   out);
      if (st == LLB_STATUS_OK) st = item_event(q, "response.output_item.done", index, call_item(r, i, c, true), out);
    }
  } else if (len > 0) { /* no calls: the text is the message (output_items reads it so too) */
    char *copy = malloc(len);
    if (!copy) st = OOM();
    if (st == LLB_STATUS_OK) {
      memcpy(copy, t, len);
      st = text_delta(r, q, (struct llb_str){copy, len}, out);
    }
    free(copy);
  }
  tool_snapshot_free(snap);
  free(snap);
  return st;
}

llb_status api_server_responses_stream_output(struct api_server_response *r, struct api_server_responses *q,
                                       const struct llb_request_output *ro, struct api_server_buf *out) {
  api_server_response_count(r, 0, ro);
  llb_status st = LLB_STATUS_OK;
  if (!q->started) {
    q->started = true;
    st = event(q, "response.created", json_pack("{s:o}", "response", response_json(r, q, json_array(), "in_progress")), out);
    if (st == LLB_STATUS_OK)
      st = event(q, "response.in_progress", json_pack("{s:o}", "response", response_json(r, q, json_array(), "in_progress")),
                 out);
  }
  for (int32_t i = 0; i < ro->num_outputs && st == LLB_STATUS_OK; i++) {
    const struct llb_completion_output *c = &ro->outputs[i];
    if (c->index != 0) continue;
    struct api_server_choice_state *cs = &r->choices[0];
    const bool finishing = c->finish_reason != LLB_FINISH_REASON_NONE;
    cs->seen = true;
    if (c->text.len && !api_server_buf_append(&cs->text, c->text.data, c->text.len)) return OOM();
    if (finishing) cs->finished = true, cs->finish_reason = (int32_t)c->finish_reason;
    struct llb_str reasoning = {"", 0}, content = c->text;
    if (r->reasoning)
      st = api_server_reasoning_stream_feed(&q->split, (enum reasoning_parser)r->reasoning, c->text.data, c->text.len, finishing,
                                     &reasoning, &content);
    if (st == LLB_STATUS_OK && reasoning.len) st = reasoning_delta(r, q, reasoning, out);
    if (st == LLB_STATUS_OK && content.len) {
      if (r->tools) st = api_server_buf_append(&q->content, content.data, content.len) ? LLB_STATUS_OK : OOM();
      else st = text_delta(r, q, content, out);
    }
    if (st == LLB_STATUS_OK && finishing) {
      st = close_reasoning(r, q, out);
      if (st == LLB_STATUS_OK && r->tools) st = flush_tools(r, q, out);
      if (st == LLB_STATUS_OK && q->message_index < 0 && q->reasoning_index < 0) st = text_delta(r, q, (struct llb_str){"", 0}, out);
      if (st == LLB_STATUS_OK) st = close_message(r, q, out);
    }
  }
  return st;
}

llb_status api_server_responses_stream_end(struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out) {
  json_t *resp = final_response(r, q);
  if (!resp) return OOM();
  return event(q, incomplete(r) ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", resp), out);
}

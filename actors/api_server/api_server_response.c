/* RequestOutput → OpenAI JSON / SSE (see api_server_response.h). */
#include "actors/api_server/api_server_response.h"

#include "actors/api_server/api_server_tools.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM() LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_response: out of memory")

llb_status api_server_response_init(struct api_server_response *r, const struct api_server_request *req,
                             const char *id, int64_t created) {
  memset(r, 0, sizeof *r);
  r->endpoint = req->endpoint;
  snprintf(r->id, sizeof r->id, "%s", id);
  snprintf(r->model, sizeof r->model, "%s", req->model);
  r->created = created;
  r->stream = req->stream;
  r->include_usage = req->include_usage;
  r->n = req->sampling_params.n > 0 ? req->sampling_params.n : 1;
  r->num_prompts = req->endpoint == API_SERVER_ENDPOINT_CHAT ? 1 : req->num_prompts;
  if (r->num_prompts < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_response: no prompt");
  r->logprobs = req->endpoint == API_SERVER_ENDPOINT_CHAT ? (req->chat_logprobs ? req->top_logprobs : -1)
                                                    : req->top_logprobs;
  size_t nc = (size_t)r->num_prompts * (size_t)r->n;
  r->choices = calloc(nc, sizeof *r->choices);
  r->prompt_tokens = malloc((size_t)r->num_prompts * sizeof *r->prompt_tokens);
  r->cached_tokens = calloc((size_t)r->num_prompts, sizeof *r->cached_tokens);
  if (!r->choices || !r->prompt_tokens || !r->cached_tokens) {
    api_server_response_free(r);
    return OOM();
  }
  for (int32_t i = 0; i < r->num_prompts; i++) r->prompt_tokens[i] = -1;
  const char *named = NULL;
  r->tools = api_server_tools_output_format(req, &r->tool_format, &named, &r->tool_single_call);
  r->reasoning = req->endpoint == API_SERVER_ENDPOINT_CHAT ? req->reasoning : 0;
  snprintf(r->tool_named, sizeof r->tool_named, "%s", named ? named : "");
  if (req->prompt_logprobs >= 0) {
    r->prompt_logprobs = calloc((size_t)r->num_prompts, sizeof *r->prompt_logprobs);
    r->prompt_logprobs_sent = calloc(nc, sizeof *r->prompt_logprobs_sent);
    if (!r->prompt_logprobs || !r->prompt_logprobs_sent) {
      api_server_response_free(r);
      return OOM();
    }
  }
  if (req->echo && req->endpoint == API_SERVER_ENDPOINT_COMPLETIONS) {
    r->echo = calloc((size_t)r->num_prompts, sizeof *r->echo);
    for (int32_t i = 0; r->echo && i < r->num_prompts; i++) {
      const struct api_server_prompt *p = &req->prompts[i];
      r->echo[i] = p->text ? strndup(p->text, p->text_len) : strdup("");
      if (!r->echo[i]) break;
    }
    if (!r->echo || !r->echo[r->num_prompts - 1]) {
      api_server_response_free(r);
      return OOM();
    }
    if (r->logprobs >= 0) {
      r->echo_logprobs = calloc((size_t)r->num_prompts, sizeof *r->echo_logprobs);
      r->echo_offset = calloc((size_t)r->num_prompts, sizeof *r->echo_offset);
      if (!r->echo_logprobs || !r->echo_offset) {
        api_server_response_free(r);
        return OOM();
      }
    }
  }
  return LLB_STATUS_OK;
}

void api_server_response_free(struct api_server_response *r) {
  if (!r) return;
  for (int64_t i = 0; r->choices && i < (int64_t)r->num_prompts * r->n; i++) {
    api_server_buf_free(&r->choices[i].text);
    json_decref(r->choices[i].logprobs);
    tool_stream_free(r->choices[i].tool_stream);
    free(r->choices[i].tool_stream);
    api_server_reasoning_stream_free(&r->choices[i].reasoning_stream);
  }
  free(r->choices);
  for (int32_t i = 0; r->echo && i < r->num_prompts; i++) free(r->echo[i]);
  free(r->echo);
  free(r->prompt_tokens);
  free(r->cached_tokens);
  for (int32_t i = 0; r->prompt_logprobs && i < r->num_prompts; i++) json_decref(r->prompt_logprobs[i]);
  free(r->prompt_logprobs);
  free(r->prompt_logprobs_sent);
  for (int32_t i = 0; r->echo_logprobs && i < r->num_prompts; i++) json_decref(r->echo_logprobs[i]);
  free(r->echo_logprobs);
  free(r->echo_offset);
  memset(r, 0, sizeof *r);
}

bool api_server_response_done(const struct api_server_response *r) { return r->num_finished >= r->num_prompts; }

int64_t api_server_response_count(struct api_server_response *r, int32_t prompt_index,
                           const struct llb_request_output *ro) {
  if (prompt_index < 0 || prompt_index >= r->num_prompts) return 0;
  if (r->prompt_tokens[prompt_index] < 0) {
    if (ro->num_prompt_token_ids > 0)
      r->prompt_tokens[prompt_index] = ro->num_prompt_token_ids;
    else if (ro->metrics.num_prompt_tokens > 0)
      r->prompt_tokens[prompt_index] = ro->metrics.num_prompt_tokens;
  }
  if (ro->metrics.num_cached_tokens > r->cached_tokens[prompt_index])
    r->cached_tokens[prompt_index] = ro->metrics.num_cached_tokens;
  /* prompt logprobs come once, with the first token; a one-token prompt has none to come */
  if (r->prompt_logprobs && !r->prompt_logprobs[prompt_index] &&
      (ro->num_prompt_logprobs > 0 || r->prompt_tokens[prompt_index] == 1))
    r->prompt_logprobs[prompt_index] = api_server_prompt_logprobs_json(ro, r->prompt_tokens[prompt_index]);
  if (r->echo_logprobs && !r->echo_logprobs[prompt_index] &&
      (ro->num_prompt_logprobs > 0 || r->prompt_tokens[prompt_index] == 1))
    r->echo_logprobs[prompt_index] =
        api_server_echo_logprobs_json(ro, r->echo[prompt_index], r->logprobs, &r->echo_offset[prompt_index]);
  int64_t gen = 0;
  for (int32_t i = 0; i < ro->num_outputs; i++) gen += ro->outputs[i].num_token_ids;
  r->completion_tokens += gen;
  if (ro->finished) r->num_finished++;
  return gen;
}

/* ---- JSON pieces -------------------------------------------------------------------- */

static json_t *lp_json(float x) { return json_real(isfinite(x) && x > -9999.0f ? (double)x : -9999.0); }

static json_t *bytes_json(struct llb_str s) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < s.len; i++) json_array_append_new(a, json_integer((unsigned char)s.data[i]));
  return a;
}

static json_t *str_json(struct llb_str s) { return json_stringn(s.data ? s.data : "", s.len); }

/* Completions logprobs of `c` (text_offset continues from *offset). */
static json_t *completion_logprobs(const struct llb_completion_output *c, int64_t *offset) {
  json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
  for (int32_t i = 0; i < c->num_logprobs; i++) {
    const struct llb_token_logprobs *t = &c->logprobs[i];
    json_array_append_new(tokens, str_json(t->decoded));
    json_array_append_new(lps, lp_json(t->logprob));
    json_t *top = json_object();
    for (int32_t k = 0; k < t->num_top; k++) {
      const struct llb_top_logprob *tp = &t->top[k];
      char key[512];
      snprintf(key, sizeof key, "%.*s", (int)tp->decoded.len, tp->decoded.data ? tp->decoded.data : "");
      if (!json_object_get(top, key)) json_object_set_new(top, key, lp_json(tp->logprob));
    }
    char key[512];
    snprintf(key, sizeof key, "%.*s", (int)t->decoded.len, t->decoded.data ? t->decoded.data : "");
    if (!json_object_get(top, key)) json_object_set_new(top, key, lp_json(t->logprob));
    json_array_append_new(tops, top);
    json_array_append_new(offs, json_integer(*offset));
    *offset += (int64_t)t->decoded.len;
  }
  return json_pack("{s:o, s:o, s:o, s:o}", "text_offset", offs, "token_logprobs", lps, "tokens",
                   tokens, "top_logprobs", tops);
}

/* Chat logprobs of `c`: {"content": [{token, logprob, bytes, top_logprobs}]} with up to
 * `num_top` alternatives each. */
static json_t *chat_logprobs(const struct llb_completion_output *c, int32_t num_top) {
  json_t *content = json_array();
  for (int32_t i = 0; i < c->num_logprobs; i++) {
    const struct llb_token_logprobs *t = &c->logprobs[i];
    json_t *top = json_array();
    for (int32_t k = 0; k < t->num_top && k < num_top; k++) {
      const struct llb_top_logprob *tp = &t->top[k];
      json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", str_json(tp->decoded), "logprob",
                                           lp_json(tp->logprob), "bytes", bytes_json(tp->decoded)));
    }
    json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:o}", "token", str_json(t->decoded),
                                             "logprob", lp_json(t->logprob), "bytes",
                                             bytes_json(t->decoded), "top_logprobs", top));
  }
  return json_pack("{s:o}", "content", content);
}

static json_t *logprobs_json(struct api_server_response *r, const struct llb_completion_output *c,
                             struct api_server_choice_state *cs) {
  if (r->logprobs < 0 || c->num_logprobs <= 0) return json_null();
  return r->endpoint == API_SERVER_ENDPOINT_CHAT ? chat_logprobs(c, r->logprobs)
                                          : completion_logprobs(c, &cs->text_offset);
}

static json_t *finish_json(const struct llb_completion_output *c) {
  const char *f = llb_finish_reason_name(c->finish_reason);
  return f ? json_string(f) : json_null();
}

static json_t *stop_reason_json(const struct llb_completion_output *c) {
  return c->stop_reason.len ? str_json(c->stop_reason) : json_null();
}

static json_t *usage_json(const struct api_server_response *r) {
  int64_t prompt = 0, cached = 0;
  for (int32_t i = 0; i < r->num_prompts; i++) {
    prompt += r->prompt_tokens[i] > 0 ? r->prompt_tokens[i] : 0;
    cached += r->cached_tokens[i];
  }
  return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                   (json_int_t)r->completion_tokens, "total_tokens", (json_int_t)(prompt + r->completion_tokens),
                   "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
}

/* The choice slot of output `c` of sub-request `prompt_index`, or -1. */
static int64_t choice_index(const struct api_server_response *r, int32_t prompt_index,
                            const struct llb_completion_output *c) {
  if (prompt_index < 0 || prompt_index >= r->num_prompts || c->index < 0 || c->index >= r->n) return -1;
  return (int64_t)prompt_index * r->n + c->index;
}

/* Serializes `obj` (stolen) as `data: <json>\n\n` into out. */
static llb_status emit_event(json_t *obj, struct api_server_buf *out) {
  char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(obj);
  bool ok = s && api_server_buf_append(out, "data: ", 6) && api_server_buf_append(out, s, strlen(s)) &&
            api_server_buf_append(out, "\n\n", 2);
  free(s);
  return ok ? LLB_STATUS_OK : OOM();
}

/* echo: the prompt's part of a choice's logprobs, first (vLLM): a copy of the prompt's (null
 * when not asked), the choice's text offset then past the prompt. NULL when out of memory. */
static json_t *echo_logprobs_of(const struct api_server_response *r, int32_t prompt_index, struct api_server_choice_state *cs) {
  if (!r->echo_logprobs) return json_null();
  json_t *lp = r->echo_logprobs[prompt_index];
  if (!lp) return json_null(); /* the engine sent none (an output processor that restarted) */
  cs->text_offset = r->echo_offset[prompt_index];
  return json_deep_copy(lp);
}

/* ---- non-streaming ------------------------------------------------------------------ */

/* Appends the arrays of `delta` (stolen) to those of the same keys in *acc. */
static bool merge_logprobs(json_t **acc, json_t *delta) {
  if (!delta) return false;
  if (json_is_null(delta)) {
    json_decref(delta);
    return true;
  }
  if (!*acc) {
    *acc = delta;
    return true;
  }
  const char *key;
  json_t *arr;
  bool ok = true;
  json_object_foreach(delta, key, arr) {
    json_t *dst = json_object_get(*acc, key);
    ok = ok && dst && json_array_extend(dst, arr) == 0;
  }
  json_decref(delta);
  return ok;
}

llb_status api_server_response_add_output(struct api_server_response *r, int32_t prompt_index,
                                   const struct llb_request_output *ro) {
  if (prompt_index < 0 || prompt_index >= r->num_prompts)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_response: prompt index %d of %d", prompt_index,
                    r->num_prompts);
  api_server_response_count(r, prompt_index, ro);
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    const struct llb_completion_output *c = &ro->outputs[i];
    int64_t idx = choice_index(r, prompt_index, c);
    if (idx < 0) continue;
    struct api_server_choice_state *cs = &r->choices[idx];
    cs->seen = true;
    json_t *acc = cs->logprobs;
    if (r->echo && !cs->echoed) {
      cs->echoed = true;
      if (!api_server_buf_append(&cs->text, r->echo[prompt_index], strlen(r->echo[prompt_index]))) return OOM();
      if (!merge_logprobs(&acc, echo_logprobs_of(r, prompt_index, cs))) return OOM();
      cs->logprobs = acc;
    }
    if (!api_server_buf_append(&cs->text, c->text.data ? c->text.data : "", c->text.len)) return OOM();
    if (!merge_logprobs(&acc, logprobs_json(r, c, cs))) return OOM();
    cs->logprobs = acc;
    if (c->finish_reason != LLB_FINISH_REASON_NONE) {
      cs->finished = true;
      cs->finish_reason = (int32_t)c->finish_reason;
      snprintf(cs->stop_reason, sizeof cs->stop_reason, "%.*s", (int)c->stop_reason.len,
               c->stop_reason.data ? c->stop_reason.data : "");
    }
  }
  return LLB_STATUS_OK;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* The tool calls of `snap` as the message's tool_calls array (fresh ids; only the first
 * with parallel_tool_calls false). */
static json_t *tool_calls_json(const struct api_server_response *r, const struct tool_snapshot *snap) {
  json_t *calls = json_array();
  int32_t n = r->tool_single_call && snap->num_calls > 1 ? 1 : snap->num_calls;
  for (int32_t i = 0; calls && i < n; i++) {
    const struct tool_call_snap *c = &snap->calls[i];
    char id[TOOL_ID_BYTES];
    tool_call_id(r->tool_format, id);
    json_t *call = json_pack("{s:s, s:s, s:{s:s%, s:s%}}", "id", id, "type", "function", "function", "name",
                             c->name.data, c->name.len, "arguments", c->arguments.data, c->arguments.len);
    if (!call || json_array_append_new(calls, call) != 0) {
      json_decref(calls);
      return NULL;
    }
  }
  return calls;
}

/* The message of a finished chat choice whose text is parsed for tool calls: with tool_calls
 * (content null when only whitespace is left; *finish replaced by "tool_calls") when it
 * parses, else the text as content (vLLM's fallback). NULL when out of memory. */
static json_t *tool_message(const struct api_server_response *r, struct llb_str text, json_t **finish) {
  struct tool_snapshot *snap = calloc(1, sizeof *snap);
  json_t *msg = NULL;
  if (snap && tool_parse(r->tool_format, r->tool_named, text.data, text.len, true, snap) == LLB_STATUS_OK) {
    const char *t = snap->content.data ? snap->content.data : "";
    size_t a = 0, b = snap->content.len;
    while (a < b && is_ws(t[a])) a++;
    while (b > a && is_ws(t[b - 1])) b--;
    json_t *content = snap->num_calls == 0 ? json_stringn(t, snap->content.len)
                      : a < b             ? json_stringn(t + a, b - a)
                                          : json_null();
    json_t *calls = snap->num_calls > 0 ? tool_calls_json(r, snap) : NULL;
    msg = calls ? json_pack("{s:s, s:o, s:o}", "role", "assistant", "content", content, "tool_calls", calls)
                : json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    if (msg && calls) {
      json_decref(*finish);
      *finish = json_string("tool_calls");
    }
  }
  tool_snapshot_free(snap);
  free(snap);
  return msg;
}

/* The message of a finished chat choice: its text split into reasoning_content and content
 * (with a reasoning parser), the content parsed for tool calls (with tools). NULL when out of
 * memory. */
static json_t *chat_message(const struct api_server_response *r, const struct api_server_choice_state *cs, json_t **finish) {
  struct llb_str content = {cs->text.data ? cs->text.data : "", cs->text.len};
  json_t *reasoning = NULL;
  if (r->reasoning) {
    struct reasoning_split sp;
    reasoning_split_text((enum reasoning_parser)r->reasoning, content.data, content.len, true, &sp);
    reasoning = sp.has_reasoning ? json_stringn(content.data + sp.reasoning_begin, sp.reasoning_end - sp.reasoning_begin)
                                 : json_null();
    content = (struct llb_str){content.data + sp.content_begin, sp.content_end - sp.content_begin};
  }
  json_t *msg = r->tools ? tool_message(r, content, finish)
                         : json_pack("{s:s, s:o}", "role", "assistant", "content",
                                     content.len || !reasoning || json_is_null(reasoning) ? json_stringn(content.data, content.len)
                                                                                          : json_null());
  if (msg && reasoning) json_object_set_new(msg, "reasoning_content", reasoning);
  else json_decref(reasoning);
  return msg;
}

llb_status api_server_response_render(struct api_server_response *r, struct api_server_buf *out) {
  json_t *choices = json_array();
  bool chat = r->endpoint == API_SERVER_ENDPOINT_CHAT;
  for (int64_t i = 0; choices && i < (int64_t)r->num_prompts * r->n; i++) {
    struct api_server_choice_state *cs = &r->choices[i];
    if (!cs->seen) continue;
    const char *fin = llb_finish_reason_name((enum llb_finish_reason)cs->finish_reason);
    json_t *text = json_stringn(cs->text.data ? cs->text.data : "", cs->text.len);
    json_t *lp = cs->logprobs ? json_incref(cs->logprobs) : json_null();
    json_t *fr = fin ? json_string(fin) : json_null();
    json_t *sr = cs->stop_reason[0] ? json_string(cs->stop_reason) : json_null();
    json_t *msg = chat ? chat_message(r, cs, &fr) : NULL;
    if (chat) json_decref(text);
    json_t *choice = chat ? json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)i, "message", msg,
                                      "logprobs", lp, "finish_reason", fr, "stop_reason", sr)
                          : json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)i, "text", text,
                                      "logprobs", lp, "finish_reason", fr, "stop_reason", sr);
    json_t *plp = r->prompt_logprobs ? r->prompt_logprobs[i / r->n] : NULL;
    if (choice && r->prompt_logprobs && !chat) /* vLLM CompletionResponseChoice.prompt_logprobs */
      json_object_set_new(choice, "prompt_logprobs", plp ? json_incref(plp) : json_null());
    if (!choice || json_array_append_new(choices, choice) != 0) {
      json_decref(choices);
      return OOM();
    }
  }
  json_t *obj = choices ? json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", r->id, "object",
                                    chat ? "chat.completion" : "text_completion", "created",
                                    (json_int_t)r->created, "model", r->model, "choices", choices,
                                    "usage", usage_json(r))
                        : NULL;
  if (obj && chat && r->prompt_logprobs) /* vLLM ChatCompletionResponse.prompt_logprobs */
    json_object_set_new(obj, "prompt_logprobs",
                        r->prompt_logprobs[0] ? json_incref(r->prompt_logprobs[0]) : json_null());
  char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(obj);
  bool ok = s && api_server_buf_append(out, s, strlen(s));
  free(s);
  return ok ? LLB_STATUS_OK : OOM();
}

/* ---- streaming ---------------------------------------------------------------------- */

static json_t *chunk_head(const struct api_server_response *r, json_t *choices) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", r->id, "object",
                        r->endpoint == API_SERVER_ENDPOINT_CHAT ? "chat.completion.chunk" : "text_completion",
                        "created", (json_int_t)r->created, "model", r->model, "choices", choices);
  if (o && r->include_usage) json_object_set_new(o, "usage", json_null());
  return o;
}

/* Chat with tools: the choice's text through its tool_stream; one chunk per delta (logprobs
 * on the first, the finish reason on the last: "tool_calls" once a call went out, unless
 * max_tokens cut the output). `lp` is stolen. */
static llb_status stream_tool_deltas(struct api_server_response *r, struct api_server_choice_state *cs, int64_t idx,
                                     const struct llb_completion_output *c, json_t *lp, struct api_server_buf *out) {
  bool finishing = c->finish_reason != LLB_FINISH_REASON_NONE;
  if (!cs->tool_stream) {
    cs->tool_stream = malloc(sizeof *cs->tool_stream);
    if (!cs->tool_stream) {
      json_decref(lp);
      return OOM();
    }
    tool_stream_init(cs->tool_stream, r->tool_format, r->tool_named, r->tool_single_call);
  }
  json_t *deltas = NULL;
  llb_status st = tool_stream_feed(cs->tool_stream, c->text.data, c->text.len, finishing, &deltas);
  if (st != LLB_STATUS_OK) {
    json_decref(lp);
    return st;
  }
  size_t nd = json_array_size(deltas);
  bool called = tool_stream_called(cs->tool_stream);
  for (size_t i = 0; st == LLB_STATUS_OK && i < (nd ? nd : 1); i++) {
    bool last = i + 1 >= nd;
    if (nd == 0 && json_is_null(lp) && !finishing) break;
    json_t *delta = nd ? json_incref(json_array_get(deltas, i)) : json_object();
    /* a call cut by max_tokens keeps "length": the client must not run a partial call */
    json_t *fin = !last || !finishing                                        ? json_null()
                  : called && c->finish_reason != LLB_FINISH_REASON_LENGTH ? json_string("tool_calls")
                                                                           : finish_json(c);
    json_t *choice = json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)idx, "delta", delta, "logprobs",
                               i == 0 ? json_incref(lp) : json_null(), "finish_reason", fin, "stop_reason",
                               last && finishing ? stop_reason_json(c) : json_null());
    json_t *choices = choice ? json_pack("[o]", choice) : NULL;
    st = emit_event(choices ? chunk_head(r, choices) : NULL, out);
  }
  json_decref(lp);
  json_decref(deltas);
  return st;
}

/* Chat with a reasoning parser: feeds c's text to the choice's split and sends its new
 * reasoning as a `reasoning_content` delta (with *lp, then null); *content_part becomes c with
 * the text that is content. */
static llb_status stream_reasoning(struct api_server_response *r, struct api_server_choice_state *cs, int64_t idx,
                                   const struct llb_completion_output *c, json_t **lp,
                                   struct llb_completion_output *content_part, struct api_server_buf *out) {
  struct llb_str reasoning, content;
  llb_status st = api_server_reasoning_stream_feed(&cs->reasoning_stream, (enum reasoning_parser)r->reasoning, c->text.data,
                                            c->text.len, c->finish_reason != LLB_FINISH_REASON_NONE, &reasoning, &content);
  if (st != LLB_STATUS_OK) return st;
  *content_part = *c;
  content_part->text = content;
  if (reasoning.len == 0) return LLB_STATUS_OK;
  json_t *choice = json_pack("{s:I, s:{s:o}, s:o, s:n, s:n}", "index", (json_int_t)idx, "delta", "reasoning_content",
                             str_json(reasoning), "logprobs", *lp, "finish_reason", "stop_reason");
  *lp = json_null();
  json_t *choices = choice ? json_pack("[o]", choice) : NULL;
  return emit_event(choices ? chunk_head(r, choices) : NULL, out);
}

llb_status api_server_response_stream_output(struct api_server_response *r, int32_t prompt_index,
                                      const struct llb_request_output *ro, struct api_server_buf *out) {
  if (prompt_index < 0 || prompt_index >= r->num_prompts)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_response: prompt index %d of %d", prompt_index,
                    r->num_prompts);
  api_server_response_count(r, prompt_index, ro);
  bool chat = r->endpoint == API_SERVER_ENDPOINT_CHAT;
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    const struct llb_completion_output *c = &ro->outputs[i];
    int64_t idx = choice_index(r, prompt_index, c);
    if (idx < 0) continue;
    struct api_server_choice_state *cs = &r->choices[idx];
    cs->seen = true;
    llb_status st;
    if (chat && !cs->role_sent) {
      cs->role_sent = true;
      json_t *role = json_pack("[{s:I, s:{s:s, s:s}, s:n, s:n}]", "index", (json_int_t)idx, "delta",
                               "role", "assistant", "content", "", "logprobs", "finish_reason");
      if ((st = emit_event(role ? chunk_head(r, role) : NULL, out)) != LLB_STATUS_OK) return st;
    }
    bool finishing = c->finish_reason != LLB_FINISH_REASON_NONE;
    struct llb_str text = c->text;
    char *joined = NULL;
    json_t *echo_lp = NULL;
    if (r->echo && !cs->echoed) { /* the prompt goes out with the choice's first chunk */
      cs->echoed = true;
      json_t *e = echo_logprobs_of(r, prompt_index, cs);
      if (!e) return OOM();
      if (json_is_null(e)) json_decref(e);
      else echo_lp = e;
      size_t pn = strlen(r->echo[prompt_index]);
      joined = malloc(pn + c->text.len + 1);
      if (!joined) {
        json_decref(echo_lp);
        return OOM();
      }
      memcpy(joined, r->echo[prompt_index], pn);
      if (c->text.len) memcpy(joined + pn, c->text.data, c->text.len);
      text = (struct llb_str){joined, pn + c->text.len};
    }
    if (text.len == 0 && c->num_logprobs == 0 && !finishing && !echo_lp) {
      free(joined);
      continue;
    }
    if (finishing) {
      cs->finished = true;
      cs->finish_reason = (int32_t)c->finish_reason; /* the request's metrics read it */
    }
    json_t *lp = logprobs_json(r, c, cs);
    if (echo_lp) { /* the prompt's logprobs, then the first tokens' */
      if (!merge_logprobs(&echo_lp, lp)) {
        json_decref(echo_lp);
        free(joined);
        return OOM();
      }
      lp = echo_lp;
    }
    json_t *choice;
    struct llb_completion_output content_part;
    if (chat && r->reasoning) { /* reasoning_content out first; the rest goes on as content */
      free(joined);
      joined = NULL;
      if ((st = stream_reasoning(r, cs, idx, c, &lp, &content_part, out)) != LLB_STATUS_OK) return st;
      c = &content_part;
      if (c->text.len == 0 && json_is_null(lp) && !finishing) {
        json_decref(lp);
        continue;
      }
    }
    if (chat && r->tools) {
      free(joined);
      if ((st = stream_tool_deltas(r, cs, idx, c, lp, out)) != LLB_STATUS_OK) return st;
      continue;
    }
    if (chat) {
      json_t *delta = c->text.len ? json_pack("{s:o}", "content", str_json(c->text)) : json_object();
      choice = json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)idx, "delta", delta,
                         "logprobs", lp, "finish_reason", finish_json(c), "stop_reason",
                         stop_reason_json(c));
    } else {
      choice = json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)idx, "text", str_json(text),
                         "logprobs", lp, "finish_reason", finish_json(c), "stop_reason",
                         stop_reason_json(c));
    }
    free(joined);
    json_t *plp = r->prompt_logprobs ? r->prompt_logprobs[prompt_index] : NULL;
    if (choice && plp && !chat && !r->prompt_logprobs_sent[idx]) { /* once, with the choice's first text */
      r->prompt_logprobs_sent[idx] = true;
      json_object_set_new(choice, "prompt_logprobs", json_incref(plp));
    }
    json_t *choices = choice ? json_pack("[o]", choice) : NULL;
    if ((st = emit_event(choices ? chunk_head(r, choices) : NULL, out)) != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

llb_status api_server_response_stream_error(const struct api_server_error *e, struct api_server_buf *out) {
  bool ok = api_server_buf_append(out, "data: ", 6) && api_server_error_render(e, out) && api_server_buf_append(out, "\n\n", 2);
  return ok ? LLB_STATUS_OK : OOM();
}

llb_status api_server_response_stream_end(struct api_server_response *r, struct api_server_buf *out) {
  if (r->include_usage) {
    json_t *o = chunk_head(r, json_array());
    if (o) json_object_set_new(o, "usage", usage_json(r));
    llb_status st = emit_event(o, out);
    if (st != LLB_STATUS_OK) return st;
  }
  return api_server_buf_append(out, "data: [DONE]\n\n", 14) ? LLB_STATUS_OK : OOM();
}

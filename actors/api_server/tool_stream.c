/* Streamed tool calls: snapshots of the text so far → OpenAI deltas (see tool_parser.h). */
#include "actors/api_server/tool_parser.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void tool_call_id(enum tool_format format, char out[TOOL_ID_BYTES]) {
  unsigned char r[16];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) /* never on Linux >= 3.17 for 16 bytes */
    for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)rand();
  if (format == TOOL_FORMAT_MISTRAL) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (int i = 0; i < 9; i++) out[i] = alnum[r[i] % 62];
    out[9] = '\0';
    return;
  }
  int k = snprintf(out, TOOL_ID_BYTES, "chatcmpl-tool-");
  for (size_t i = 0; i < sizeof r; i++) k += snprintf(out + k, (size_t)(TOOL_ID_BYTES - k), "%02x", r[i]);
}

void tool_stream_init(struct tool_stream *s, enum tool_format format, const char *named, bool single_call) {
  memset(s, 0, sizeof *s);
  s->format = format;
  snprintf(s->named, sizeof s->named, "%s", named ? named : "");
  s->single_call = single_call;
}

void tool_stream_free(struct tool_stream *s) {
  if (!s) return;
  api_server_buf_free(&s->text);
  memset(s, 0, sizeof *s);
}

bool tool_stream_called(const struct tool_stream *s) { return s->num_started > 0; }

/* Appends `obj` (stolen) to `arr`; false when either is NULL or out of memory. */
static bool push(json_t *arr, json_t *obj) { return obj && json_array_append_new(arr, obj) == 0; }

static json_t *call_start(const struct tool_stream *s, int32_t i, const struct tool_call_snap *c) {
  return json_pack("{s:[{s:i, s:s, s:s, s:{s:s%}}]}", "tool_calls", "index", (int)i, "id", s->ids[i], "type",
                   "function", "function", "name", c->name.data, c->name.len);
}

static json_t *call_args(int32_t i, const char *piece, size_t n) {
  return json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", (int)i, "function", "arguments", piece, n);
}

/* The deltas of snapshot `snap` beyond what s sent, into arr. */
static bool diff(struct tool_stream *s, const struct tool_snapshot *snap, json_t *arr) {
  /* Content only while no call went out or the snapshot extends what was sent: a malformed
   * final text falls back to content only when it still starts with what the client has. */
  if (snap->content.len > s->content_sent && (s->num_started == 0 || !snap->malformed)) {
    if (!push(arr, json_pack("{s:s%}", "content", snap->content.data + s->content_sent,
                             snap->content.len - s->content_sent)))
      return false;
    s->content_sent = snap->content.len;
  }
  int32_t limit = s->single_call && snap->num_calls > 1 ? 1 : snap->num_calls;
  for (int32_t i = 0; i < limit; i++) {
    const struct tool_call_snap *c = &snap->calls[i];
    if (i >= s->num_started) {
      if (c->name.len == 0 || i > s->num_started) break; /* calls go out in order */
      tool_call_id(s->format, s->ids[i]);
      if (!push(arr, call_start(s, i, c))) return false;
      s->num_started = i + 1;
    }
    if (c->arguments.len > s->args_sent[i]) {
      if (!push(arr, call_args(i, c->arguments.data + s->args_sent[i], c->arguments.len - s->args_sent[i])))
        return false;
      s->args_sent[i] = c->arguments.len;
    }
  }
  return true;
}

llb_status tool_stream_feed(struct tool_stream *s, const char *delta, size_t n, bool final, json_t **deltas) {
  *deltas = NULL;
  if (!api_server_buf_append(&s->text, delta ? delta : "", delta ? n : 0))
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tool_stream: out of memory");
  struct tool_snapshot *snap = calloc(1, sizeof *snap);
  json_t *arr = json_array();
  llb_status st = snap && arr ? tool_parse(s->format, s->named, s->text.data, s->text.len, final, snap)
                              : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tool_stream: out of memory");
  /* Argument text only grows: an open object or array is sent raw as it comes; a
   * string-encoded value is sent once, decoded, when complete. */
  if (st == LLB_STATUS_OK && !diff(s, snap, arr)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tool_stream: out of memory");
  tool_snapshot_free(snap);
  free(snap);
  if (st != LLB_STATUS_OK) {
    json_decref(arr);
    return st;
  }
  *deltas = arr;
  return LLB_STATUS_OK;
}

/* libFuzzer target for the tool-call parsers (actors/api_server/tool_parser.h): any model
 * output in any format, parsed final and streamed in pieces, must never crash (ASan/UBSan);
 * a final parse either has calls whose arguments are valid JSON or, when malformed, the whole
 * text as content; the streamed deltas are valid JSON objects of one kind each. The first input
 * byte picks the format and the piece size; the rest is the text, used only when it is valid
 * UTF-8 and cut only between characters, as the output processor delivers text. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/tool_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_final(enum tool_format f, const char *text, size_t len) {
  struct tool_snapshot s = {0};
  if (tool_parse(f, "f", text, len, true, &s) != LLB_STATUS_OK) abort();
  if (s.malformed && (s.num_calls != 0 || s.content.len != len || (len && memcmp(s.content.data, text, len))))
    abort();
  for (int32_t i = 0; i < s.num_calls; i++) {
    json_t *j = json_loadb(s.calls[i].arguments.data, s.calls[i].arguments.len, JSON_DECODE_ANY, NULL);
    if (!j || s.calls[i].name.len == 0 || !s.calls[i].complete) abort();
    json_decref(j);
  }
  tool_snapshot_free(&s);
}

static void check_stream(enum tool_format f, const char *text, size_t len, size_t step) {
  struct tool_stream s;
  tool_stream_init(&s, f, "f", (step & 1) != 0);
  for (size_t i = 0, k; i < len || i == 0; i += k) {
    k = i + step < len ? step : len - i;
    while (i + k < len && ((unsigned char)text[i + k] & 0xC0) == 0x80) k++; /* whole characters */
    bool final = i + k >= len;
    json_t *deltas = NULL;
    if (tool_stream_feed(&s, text + i, k, final, &deltas) != LLB_STATUS_OK) abort();
    size_t j;
    json_t *d;
    json_array_foreach(deltas, j, d) {
      if (!json_is_object(d) || json_object_size(d) != 1) abort();
    }
    json_decref(deltas);
    if (final) break;
  }
  tool_stream_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  enum tool_format f = (enum tool_format)(data[0] % 5);
  size_t step = 1 + (data[0] >> 3) % 16;
  const char *text = (const char *)data + 1;
  json_t *utf8 = json_stringn(text, size - 1); /* NULL: not valid UTF-8 */
  if (!utf8) return 0;
  json_decref(utf8);
  check_final(f, text, size - 1);
  check_stream(f, text, size - 1, step);
  return 0;
}

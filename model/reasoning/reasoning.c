/* Reasoning markup (see reasoning.h). */
#include "model/reasoning/reasoning.h"

#include <string.h>

struct format {
  const char *name;
  const char *starts[3]; /* NULL-terminated */
  const char *ends[3];
  bool implicit_start;   /* the output may begin inside the reasoning */
  bool special;          /* markers are special tokens */
};

static const struct format formats[] = {
    [REASONING_DEEPSEEK_R1] = {"deepseek_r1", {"<think>"}, {"</think>"}, true, false},
    [REASONING_QWEN3] = {"qwen3", {"<think>"}, {"</think>"}, false, false},
    [REASONING_GRANITE] = {"granite",
                           {"Here's my thought process:", "Here is my thought process:"},
                           {"Here's my response:", "Here is my response:"},
                           false,
                           false},
    [REASONING_GPT_OSS] = {"gpt_oss",
                           {"<|channel|>analysis<|message|>"},
                           {"<|end|><|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"},
                           false,
                           true},
};

static const struct format *format_of(enum reasoning_parser p) {
  return p > REASONING_NONE && p <= REASONING_MAX_PARSER ? &formats[p] : NULL;
}

enum reasoning_parser reasoning_parser_from_name(const char *name) {
  for (int p = 1; p <= REASONING_MAX_PARSER; p++)
    if (name && strcmp(name, formats[p].name) == 0) return (enum reasoning_parser)p;
  return REASONING_NONE;
}

const char *reasoning_parser_name(enum reasoning_parser p) {
  const struct format *f = format_of(p);
  return f ? f->name : "";
}

const char *reasoning_parser_names(void) { return "deepseek_r1, qwen3, granite, gpt_oss"; }

bool reasoning_needs_special_tokens(enum reasoning_parser p) {
  const struct format *f = format_of(p);
  return f && f->special;
}

/* ---- text ---- */

static bool starts_with(const char *s, size_t n, const char *prefix) {
  const size_t k = strlen(prefix);
  return n >= k && memcmp(s, prefix, k) == 0;
}

/* Is s[0..n) a proper prefix of one of the markers (more text could complete it)? */
static bool partial_marker(const char *s, size_t n, const char *const *markers) {
  for (; *markers; markers++)
    if (n < strlen(*markers) && memcmp(*markers, s, n) == 0) return true;
  return false;
}

/* The earliest of the markers in s[from..n): its position (*at) and length; false when none. */
static bool find_marker(const char *s, size_t n, size_t from, const char *const *markers, size_t *at, size_t *len) {
  bool found = false;
  for (; *markers; markers++) {
    const size_t k = strlen(*markers);
    for (size_t i = from; i + k <= n && (!found || i <= *at); i++) {
      if (memcmp(s + i, *markers, k) != 0) continue;
      if (!found || i < *at || k > *len) *at = i, *len = k;
      found = true;
      break;
    }
  }
  return found;
}

/* Bytes at the end of s[from..n) that could begin one of the markers. */
static size_t held_back(const char *s, size_t n, size_t from, const char *const *markers) {
  for (size_t k = n - from; k > 0; k--)
    if (partial_marker(s + n - k, k, markers)) return k;
  return 0;
}

void reasoning_split_text(enum reasoning_parser p, const char *text, size_t len, bool final,
                          struct reasoning_split *out) {
  const struct format *f = format_of(p);
  *out = (struct reasoning_split){.content_end = len};
  if (!f) return;
  size_t lead = 0;
  while (lead < len && (text[lead] == ' ' || text[lead] == '\n' || text[lead] == '\r' || text[lead] == '\t')) lead++;
  size_t begin = 0;
  bool started = false;
  for (const char *const *s = f->starts; *s && !started; s++)
    if (starts_with(text + lead, len - lead, *s)) begin = lead + strlen(*s), started = true;
  if (!started && !final && partial_marker(text + lead, len - lead, f->starts)) {
    *out = (struct reasoning_split){0}; /* "<thi": too early to tell */
    return;
  }
  if (!started && !f->implicit_start) return; /* no reasoning block: all content */
  out->has_reasoning = true;
  out->reasoning_begin = begin;
  size_t at = 0, mlen = 0;
  if (find_marker(text, len, begin, f->ends, &at, &mlen)) {
    out->ended = true;
    out->reasoning_end = at;
    out->content_begin = at + mlen;
    return;
  }
  out->reasoning_end = final ? len : len - held_back(text, len, begin, f->ends);
  out->content_begin = out->content_end = len;
}

/* ---- token ids ---- */

bool reasoning_marker_texts(enum reasoning_parser p, const char *const **starts, const char *const **ends) {
  const struct format *f = format_of(p);
  if (!f) return false;
  *starts = f->starts;
  *ends = f->ends;
  return true;
}

/* Length of the marker of ids[0..lens[k]) that ends at ids[i] (inclusive), or 0. */
static int32_t marker_ending_at(const int32_t *ids, int64_t i, int32_t num, const int32_t *lens,
                                const int32_t (*m)[REASONING_MAX_MARKER_IDS]) {
  for (int32_t k = 0; k < num; k++) {
    const int32_t l = lens[k];
    if (i + 1 >= l && memcmp(ids + i + 1 - l, m[k], (size_t)l * sizeof(int32_t)) == 0) return l;
  }
  return 0;
}

bool reasoning_scan_ids(const struct reasoning_marker_ids *m, const int32_t *ids, int64_t n, bool in_reasoning,
                        int64_t *end_at) {
  *end_at = -1;
  for (int64_t i = 0; i < n; i++) {
    if (in_reasoning && marker_ending_at(ids, i, m->num_end, m->end_len, m->end)) {
      in_reasoning = false;
      if (*end_at < 0) *end_at = i + 1;
    } else if (!in_reasoning && marker_ending_at(ids, i, m->num_start, m->start_len, m->start)) {
      in_reasoning = true;
    }
  }
  return in_reasoning;
}

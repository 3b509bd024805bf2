/* llmbus-bench pure parts: RNG, arrivals, statistics, chunked + SSE decoding, chunk parse.
 * See bench.h. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "cmd/bench/bench.h"

/* --- random numbers, arrivals, statistics ------------------------------------------- */

void bench_rng_seed(struct bench_rng *r, uint64_t seed) { r->state = seed; }

uint64_t bench_rng_next(struct bench_rng *r) {
  return llb_splitmix64_next(&r->state);
}

double bench_rng_uniform(struct bench_rng *r) {
  /* 53 random bits -> (0, 1]. */
  return (double)((bench_rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

int64_t bench_rng_range(struct bench_rng *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  if (span == 0) return (int64_t)bench_rng_next(r); /* the whole int64 range */
  return lo + (int64_t)(bench_rng_next(r) % span);
}

void bench_poisson_arrivals(uint64_t seed, double rate, int64_t n, double *out) {
  struct bench_rng r;
  bench_rng_seed(&r, seed);
  double t = 0;
  bool all_at_once = !(rate > 0) || isinf(rate);
  for (int64_t i = 0; i < n; i++) {
    if (!all_at_once) t += -log(bench_rng_uniform(&r)) / rate;
    out[i] = t;
  }
}

double bench_percentile(const double *sorted, size_t n, double p) {
  if (n == 0) return 0;
  if (p <= 0) return sorted[0];
  if (p >= 100) return sorted[n - 1];
  double rank = p / 100.0 * (double)(n - 1);
  size_t lo = (size_t)floor(rank);
  size_t hi = lo + 1 < n ? lo + 1 : lo;
  double frac = rank - (double)lo;
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_dist_of(double *vals, size_t n, struct bench_dist *out) {
  memset(out, 0, sizeof *out);
  out->n = n;
  if (n == 0) return;
  qsort(vals, n, sizeof *vals, cmp_double);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += vals[i];
  out->mean = sum / (double)n;
  double var = 0;
  for (size_t i = 0; i < n; i++) var += (vals[i] - out->mean) * (vals[i] - out->mean);
  out->std = sqrt(var / (double)n);
  out->median = bench_percentile(vals, n, 50);
  out->p99 = bench_percentile(vals, n, 99);
}

/* --- chunked body -------------------------------------------------------------------- */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_TRAILER_LINE, CH_DONE };

void bench_chunked_init(struct bench_chunked *c) {
  memset(c, 0, sizeof *c);
  c->state = CH_SIZE;
}

static int hex_val(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

size_t bench_chunked_feed(struct bench_chunked *c, char *buf, size_t len) {
  size_t out = 0, i = 0;
  while (i < len && !c->done && !c->error) {
    char ch = buf[i];
    switch (c->state) {
      case CH_SIZE: {
        int v = hex_val(ch);
        if (v >= 0) {
          if (c->remaining >> 60) { c->error = true; break; }
          c->remaining = c->remaining * 16 + (uint64_t)v;
        } else if (ch == ';' || ch == ' ' || ch == '\t') {
          c->state = CH_EXT;
        } else if (ch == '\r') {
          c->state = CH_SIZE_LF;
        } else if (ch == '\n') {
          c->state = c->remaining ? CH_DATA : CH_TRAILER;
        } else {
          c->error = true;
        }
        i++;
        break;
      }
      case CH_EXT:
        if (ch == '\n') c->state = c->remaining ? CH_DATA : CH_TRAILER;
        i++;
        break;
      case CH_SIZE_LF:
        if (ch != '\n') { c->error = true; break; }
        c->state = c->remaining ? CH_DATA : CH_TRAILER;
        i++;
        break;
      case CH_DATA: {
        size_t n = len - i;
        if ((uint64_t)n > c->remaining) n = (size_t)c->remaining;
        memmove(buf + out, buf + i, n);
        out += n;
        i += n;
        c->remaining -= n;
        if (c->remaining == 0) c->state = CH_DATA_CR;
        break;
      }
      case CH_DATA_CR:
        if (ch == '\r') c->state = CH_DATA_LF;
        else if (ch == '\n') c->state = CH_SIZE;
        else { c->error = true; break; }
        i++;
        break;
      case CH_DATA_LF:
        if (ch != '\n') { c->error = true; break; }
        c->state = CH_SIZE;
        i++;
        break;
      case CH_TRAILER: /* at the start of a trailer line: an empty line ends the body */
        if (ch == '\r') { i++; break; }
        if (ch == '\n') { c->state = CH_DONE; c->done = true; i++; break; }
        c->state = CH_TRAILER_LINE;
        i++;
        break;
      case CH_TRAILER_LINE:
        if (ch == '\n') c->state = CH_TRAILER;
        i++;
        break;
      default:
        c->done = true;
        break;
    }
  }
  return out;
}

/* --- server-sent events ------------------------------------------------------------- */

void bench_sse_init(struct bench_sse *s, bench_sse_event_fn on_event, void *user) {
  memset(s, 0, sizeof *s);
  s->on_event = on_event;
  s->user = user;
}

void bench_sse_free(struct bench_sse *s) {
  free(s->line);
  free(s->data);
  s->line = s->data = NULL;
}

static bool grow(char **p, size_t *cap, size_t need) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  char *n = realloc(*p, c);
  if (!n) return false;
  *p = n;
  *cap = c;
  return true;
}

/* Handles one complete line (without its end). */
static bool sse_line(struct bench_sse *s) {
  const char *l = s->line;
  size_t n = s->line_len;
  if (n == 0) { /* blank line: dispatch */
    if (s->has_data) {
      if (!grow(&s->data, &s->data_cap, s->data_len + 1)) return false;
      s->data[s->data_len] = '\0';
      s->on_event(s->user, s->data, s->data_len);
    }
    s->data_len = 0;
    s->has_data = false;
    return true;
  }
  if (l[0] == ':') return true; /* comment */
  size_t colon = 0;
  while (colon < n && l[colon] != ':') colon++;
  if (colon != 4 || memcmp(l, "data", 4) != 0) {
    /* "data" with no colon is an empty data line; other fields are ignored. */
    if (!(n == 4 && memcmp(l, "data", 4) == 0)) return true;
  }
  size_t v = colon < n ? colon + 1 : n;
  if (v < n && l[v] == ' ') v++;
  size_t add = n - v + (s->has_data ? 1 : 0);
  if (!grow(&s->data, &s->data_cap, s->data_len + add + 1)) return false;
  if (s->has_data) s->data[s->data_len++] = '\n';
  memcpy(s->data + s->data_len, l + v, n - v);
  s->data_len += n - v;
  s->has_data = true;
  return true;
}

llb_status bench_sse_feed(struct bench_sse *s, const char *buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    char ch = buf[i];
    if (ch == '\n' && s->last_cr) {
      s->last_cr = false;
      continue;
    }
    s->last_cr = ch == '\r';
    if (ch == '\r' || ch == '\n') {
      if (!sse_line(s)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "SSE event of %zu bytes", s->data_len);
      s->line_len = 0;
      continue;
    }
    if (!grow(&s->line, &s->line_cap, s->line_len + 1))
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "SSE line of %zu bytes", s->line_len);
    s->line[s->line_len++] = ch;
  }
  return LLB_STATUS_OK;
}

/* --- one streamed chunk ------------------------------------------------------------- */

static int64_t json_int_or(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

llb_status bench_parse_chunk(const char *data, size_t len, struct bench_chunk_info *out) {
  memset(out, 0, sizeof *out);
  out->prompt_tokens = out->completion_tokens = -1;
  while (len > 0 && (data[len - 1] == ' ' || data[len - 1] == '\n' || data[len - 1] == '\r')) len--;
  if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
    out->done = true;
    return LLB_STATUS_OK;
  }
  json_error_t jerr;
  json_t *root = json_loadb(data, len, 0, &jerr);
  if (!json_is_object(root)) {
    json_decref(root);
    return LLB_ERRF(LLB_STATUS_MALFORMED, "SSE data is not a JSON object: %.60s", data);
  }
  json_t *choices = json_object_get(root, "choices");
  if (json_is_array(choices) && json_array_size(choices) > 0) {
    out->has_choices = true;
    json_t *c0 = json_array_get(choices, 0);
    json_t *text = json_object_get(c0, "text");
    if (!json_is_string(text)) text = json_object_get(json_object_get(c0, "delta"), "content");
    if (json_is_string(text)) out->text_len = json_string_length(text);
  }
  json_t *usage = json_object_get(root, "usage");
  if (json_is_object(usage)) {
    out->prompt_tokens = json_int_or(usage, "prompt_tokens");
    out->completion_tokens = json_int_or(usage, "completion_tokens");
  }
  json_t *err = json_object_get(root, "error");
  if (err && !json_is_null(err)) {
    json_t *msg = json_is_object(err) ? json_object_get(err, "message") : err;
    snprintf(out->error, sizeof out->error, "%s", json_is_string(msg) ? json_string_value(msg) : "error");
  }
  json_decref(root);
  return LLB_STATUS_OK;
}

bool bench_endpoint_is_chat(const char *endpoint) {
  static const char suffix[] = "/chat/completions";
  size_t n = endpoint ? strlen(endpoint) : 0, k = sizeof suffix - 1;
  while (n > 0 && endpoint[n - 1] == '/') n--;
  return n >= k && memcmp(endpoint + n - k, suffix, k) == 0;
}

char *bench_request_body(const char *endpoint, const struct bench_request_spec *s) {
  bool chat = bench_endpoint_is_chat(endpoint);
  json_t *input;
  if (chat) {
    if (!s->text) return NULL; /* a chat message is text; ids have no chat form */
    input = json_pack("[{s:s, s:s}]", "role", "user", "content", s->text);
  } else if (s->ids) {
    input = json_array();
    for (int32_t i = 0; input && i < s->num_ids; i++) json_array_append_new(input, json_integer(s->ids[i]));
  } else {
    input = json_string(s->text ? s->text : "");
  }
  json_t *b = json_pack("{s:s, s:o, s:i, s:f, s:b, s:{s:b}}", "model", s->model, chat ? "messages" : "prompt",
                        input, "max_tokens", s->max_tokens, "temperature", s->temperature, "stream", 1,
                        "stream_options", "include_usage", 1);
  if (!b) return NULL;
  if (s->response_format) {
    json_t *rf = json_loads(s->response_format, 0, NULL);
    if (!rf || json_object_set_new(b, "response_format", rf) != 0) {
      json_decref(b);
      return NULL;
    }
  }
  if (s->ignore_eos) {
    json_object_set_new(b, "ignore_eos", json_true());
    json_object_set_new(b, "min_tokens", json_integer(s->max_tokens));
  }
  char *out = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  return out;
}

bool bench_prom_value(const char *text, const char *name, double *out) {
  const size_t len = strlen(name);
  bool found = false;
  *out = 0.0;
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, name, len) != 0 || (p[len] != ' ' && p[len] != '{')) continue;
    const char *v = p[len] == '{' ? strchr(p + len, '}') : p + len;
    if (!v) continue;
    char *end;
    double x = strtod(v + 1, &end);
    if (end == v + 1) continue;
    *out += x;
    found = true;
  }
  return found;
}

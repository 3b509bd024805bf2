/* Every actor's Prometheus text merged into the api server's /metrics; see metrics_merge.h. */
#include "base/metrics_merge.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics_text.h"
#include "base/strmap.h"

#define MERGE_MAX_FAMILIES 8192
#define MERGE_NAME_MAX 200

struct source {
  char actor[64], instance[96];
  char *text; /* [len] the latest text, owned */
  size_t len;
  int64_t at_ns;
};

struct llb_metrics_merge {
  pthread_mutex_t mu;
  int64_t window_ns;
  struct source sources[LLB_METRICS_MERGE_MAX_SOURCES];
  int num_sources;
  atomic_uint_fast64_t dropped;
};

llb_status llb_metrics_merge_create(int64_t window_ms, struct llb_metrics_merge **out) {
  struct llb_metrics_merge *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics merge");
  pthread_mutex_init(&m->mu, NULL);
  m->window_ns = (window_ms > 0 ? window_ms : 10000) * 1000000LL;
  *out = m;
  return LLB_STATUS_OK;
}

void llb_metrics_merge_destroy(struct llb_metrics_merge *m) {
  if (!m) return;
  for (int i = 0; i < m->num_sources; i++) free(m->sources[i].text);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

uint64_t llb_metrics_merge_dropped(const struct llb_metrics_merge *m) { return atomic_load(&m->dropped); }

/* Letters, digits, '_' and '-': safe inside a quoted label value without escapes. */
static bool plain_token(const char *s, size_t cap) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
          s[n] == '_' || s[n] == '-'))
      return false;
  return n > 0 && n < cap;
}

llb_status llb_metrics_merge_put(struct llb_metrics_merge *m, const char *actor, const char *instance, const char *text,
                                 size_t len, int64_t now_ns) {
  if (!plain_token(actor, sizeof m->sources[0].actor) || !plain_token(instance, sizeof m->sources[0].instance))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics from an actor or instance with an unusual name");
  if (len > LLB_METRICS_MERGE_MAX_TEXT) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "metrics text of %zu bytes", len);
  char *copy = malloc(len + 1);
  if (!copy) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics text");
  memcpy(copy, text, len);
  copy[len] = '\0';
  pthread_mutex_lock(&m->mu);
  int i = 0;
  while (i < m->num_sources && (strcmp(m->sources[i].actor, actor) || strcmp(m->sources[i].instance, instance))) i++;
  if (i == m->num_sources) { /* a new source takes the slot of one gone quiet, if any */
    for (int k = 0; k < m->num_sources && i == m->num_sources; k++)
      if (now_ns - m->sources[k].at_ns > m->window_ns) i = k;
    if (i == m->num_sources && m->num_sources == LLB_METRICS_MERGE_MAX_SOURCES) {
      pthread_mutex_unlock(&m->mu);
      free(copy);
      return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "more than %d actors publish metrics", LLB_METRICS_MERGE_MAX_SOURCES);
    }
    if (i == m->num_sources) m->num_sources++;
    snprintf(m->sources[i].actor, sizeof m->sources[i].actor, "%s", actor);
    snprintf(m->sources[i].instance, sizeof m->sources[i].instance, "%s", instance);
  }
  free(m->sources[i].text);
  m->sources[i].text = copy;
  m->sources[i].len = len;
  m->sources[i].at_ns = now_ns;
  pthread_mutex_unlock(&m->mu);
  return LLB_STATUS_OK;
}

/* ---- one render ---------------------------------------------------------------------- */

struct family {
  char name[MERGE_NAME_MAX];
  char *help;          /* the whole "# HELP ..." line, owned; NULL = none yet */
  char type[16];       /* "" = not yet typed */
  bool foreign;        /* holds another actor's samples: the api server's view of it yields */
  struct llb_text samples;
};

/* Whose text is being added. */
enum text_kind {
  TEXT_OWN,     /* this process's own series (process, bus): kept as they are */
  TEXT_VIEW,    /* the api server's view of the engine: a family an actor publishes is the actor's */
  TEXT_FOREIGN, /* another actor's: labelled */
};

struct render {
  struct family **fams; /* [num] in the order first seen */
  int num, cap;
  struct llb_strmap *by_name;
  bool oom;
  uint64_t dropped;
};

static struct family *family_get(struct render *r, const char *name, size_t len) {
  char key[MERGE_NAME_MAX];
  if (len == 0 || len >= sizeof key) return NULL;
  memcpy(key, name, len);
  key[len] = '\0';
  struct family *f = llb_strmap_get(r->by_name, key);
  if (f || r->num >= MERGE_MAX_FAMILIES) return f;
  if (r->num == r->cap) {
    int cap = r->cap ? 2 * r->cap : 64;
    struct family **p = realloc(r->fams, (size_t)cap * sizeof *p);
    if (!p) return r->oom = true, NULL;
    r->fams = p, r->cap = cap;
  }
  if (!(f = calloc(1, sizeof *f))) return r->oom = true, NULL;
  memcpy(f->name, key, len + 1);
  if (llb_strmap_put(r->by_name, f->name, f) != LLB_STATUS_OK) {
    free(f);
    return r->oom = true, NULL;
  }
  return r->fams[r->num++] = f;
}

static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* The metric name at the start of s[len]; 0 when there is none. */
static size_t metric_name(const char *s, size_t len) {
  size_t n = 0;
  if (len == 0 || !name_start(s[0])) return 0;
  while (n < len && name_char(s[n])) n++;
  return n;
}

/* A label set "{a="x",b="y"}" at s[0, len): its end (just after '}'), 0 when malformed or when a
 * label is named actor or actor_instance (the merge adds those). */
static size_t label_set(const char *s, size_t len) {
  size_t i = 1;
  while (i < len && s[i] != '}') {
    const size_t start = i;
    while (i < len && name_char(s[i]) && s[i] != ':') i++;
    const size_t n = i - start;
    if (n == 0 || (n == 5 && !memcmp(s + start, "actor", 5)) || (n == 14 && !memcmp(s + start, "actor_instance", 14)))
      return 0;
    if (i + 1 >= len || s[i] != '=' || s[i + 1] != '"') return 0;
    for (i += 2; i < len && s[i] != '"'; i++)
      if (s[i] == '\\' && ++i < len && s[i] != '\\' && s[i] != '"' && s[i] != 'n') return 0;
    if (i >= len) return 0;
    i++; /* the closing quote */
    if (i < len && s[i] == ',') i++;
  }
  return i < len ? i + 1 : 0;
}

/* " VALUE" or " VALUE TIMESTAMP" to the end of the line: a number (Inf, NaN) and an integer. */
static bool sample_value(const char *s, size_t len) {
  if (len < 2 || s[0] != ' ') return false;
  char buf[64];
  size_t n = len - 1 < sizeof buf - 1 ? len - 1 : sizeof buf - 1;
  memcpy(buf, s + 1, n);
  buf[n] = '\0';
  char *end;
  (void)strtod(buf, &end);
  if (end == buf) return false;
  if (*end == ' ') {
    const char *ts = end + 1;
    (void)strtoll(ts, &end, 10);
    if (end == ts) return false;
  }
  return *end == '\0' && n == len - 1;
}

/* Whether sample `name` belongs to family f: its name, or a histogram's / summary's part. */
static bool of_family(const struct family *f, const char *name, size_t len) {
  const size_t fl = strlen(f->name);
  if (len == fl) return !memcmp(name, f->name, len);
  static const char *const parts[] = {"_bucket", "_sum", "_count"};
  for (size_t k = 0; k < 3; k++)
    if (len == fl + strlen(parts[k]) && !memcmp(name, f->name, fl) && !memcmp(name + fl, parts[k], len - fl)) return true;
  return false;
}

/* One sample line of the current family; with `labels` (foreign text) they go in first. */
static void add_sample(struct render *r, struct family *cur, const char *line, size_t len, const char *labels) {
  const size_t n = metric_name(line, len);
  if (!cur || !cur->type[0] || !n || !of_family(cur, line, n)) {
    r->dropped++;
    return;
  }
  if (!labels) { /* ours: as it is */
    llb_text_append(&cur->samples, line, len);
    llb_text_append(&cur->samples, "\n", 1);
    return;
  }
  size_t end = n; /* after the name's label set, if any */
  if (n < len && line[n] == '{' && !(end = label_set(line + n, len - n))) {
    r->dropped++;
    return;
  }
  if (n < len && line[n] == '{') end += n;
  if (!sample_value(line + end, len - end)) {
    r->dropped++;
    return;
  }
  cur->foreign = true;
  const bool inner = end > n + 2; /* a non-empty "{...}" of its own */
  llb_text_printf(&cur->samples, "%.*s{%s%s%.*s}%.*s\n", (int)n, line, labels, inner ? "," : "",
                            inner ? (int)(end - n - 2) : 0, inner ? line + n + 1 : "", (int)(len - end), line + end);
}

/* "# HELP name ..." / "# TYPE name type": the family, and *cur for the samples that follow.
 * Returns true when those samples are to be left out quietly: the api server's view meets a
 * family an actor publishes (the engine's own series count each request once). */
static bool add_comment(struct render *r, struct family **cur, const char *line, size_t len, enum text_kind kind) {
  const bool help = len > 7 && !memcmp(line, "# HELP ", 7), type = len > 7 && !memcmp(line, "# TYPE ", 7);
  if (!help && !type) return false; /* another comment: ignored, as Prometheus does */
  const size_t n = metric_name(line + 7, len - 7);
  struct family *f = n ? family_get(r, line + 7, n) : NULL;
  *cur = NULL;
  if (!f) {
    r->dropped++;
    return false;
  }
  if (kind == TEXT_VIEW && f->foreign) return true;
  if (help) {
    if (!f->help && !(f->help = strndup(line, len))) r->oom = true;
    *cur = f;
    return false;
  }
  const char *t = line + 7 + n;
  const size_t tl = len - 7 - n;
  static const char *const types[] = {" counter", " gauge", " histogram", " summary", " untyped"};
  bool known = false;
  for (size_t k = 0; k < 5; k++) known |= tl == strlen(types[k]) && !memcmp(t, types[k], tl);
  if (!known || (f->type[0] && (strlen(f->type) != tl - 1 || memcmp(f->type, t + 1, tl - 1)))) {
    r->dropped++; /* an unknown type, or not the one the first text said: its samples go too */
    return false;
  }
  if (!f->type[0]) memcpy(f->type, t + 1, tl - 1), f->type[tl - 1] = '\0';
  *cur = f;
  return false;
}

/* Every line of text[len] into the families; labels: those of a TEXT_FOREIGN text, else NULL. */
static void add_text(struct render *r, const char *text, size_t len, enum text_kind kind, const char *labels) {
  struct family *cur = NULL;
  bool yield = false; /* the view's samples of a family an actor publishes */
  for (size_t at = 0; at < len && !r->oom;) {
    const char *nl = memchr(text + at, '\n', len - at);
    const size_t l = nl ? (size_t)(nl - (text + at)) : len - at;
    const char *line = text + at;
    at += l + 1;
    if (l == 0) continue;
    if (line[0] == '#') yield = add_comment(r, &cur, line, l, kind);
    else if (!yield) add_sample(r, cur, line, l, labels);
  }
}

static void render_free(struct render *r) {
  for (int i = 0; i < r->num; i++) {
    free(r->fams[i]->help);
    llb_text_free(&r->fams[i]->samples);
    free(r->fams[i]);
  }
  free(r->fams);
  llb_strmap_destroy(r->by_name);
}

/* Merges the texts into `out`; false when out of memory. */
static bool merge_texts(struct llb_metrics_merge *m, const char *view, size_t view_len, const char *own, size_t own_len,
                        int64_t now_ns, struct llb_text *out) {
  struct render r = {0};
  if (llb_strmap_create(MERGE_MAX_FAMILIES, &r.by_name) != LLB_STATUS_OK) return false;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->num_sources && !r.oom; i++) {
    const struct source *s = &m->sources[i];
    if (!s->text || now_ns - s->at_ns > m->window_ns) continue;
    char labels[256];
    snprintf(labels, sizeof labels, "actor=\"%s\",actor_instance=\"%s\"", s->actor, s->instance);
    add_text(&r, s->text, s->len, TEXT_FOREIGN, labels);
  }
  pthread_mutex_unlock(&m->mu);
  add_text(&r, own, own_len, TEXT_OWN, NULL);
  add_text(&r, view, view_len, TEXT_VIEW, NULL);
  for (int i = 0; i < r.num && !r.oom; i++) {
    const struct family *f = r.fams[i];
    r.oom |= f->samples.oom;
    if (!f->samples.len) continue;
    if (f->help) llb_text_printf(out, "%s\n", f->help);
    llb_text_printf(out, "# TYPE %s %s\n", f->name, f->type);
    llb_text_append(out, f->samples.data, f->samples.len);
  }
  const bool ok = !r.oom && !out->oom;
  atomic_fetch_add(&m->dropped, r.dropped);
  render_free(&r);
  return ok;
}

llb_status llb_metrics_merge_render(struct llb_metrics_merge *m, struct llb_metrics *own, struct llb_metrics *view,
                                    int64_t now_ns, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  char *own_text = NULL, *view_text = NULL;
  size_t own_len = 0, view_len = 0;
  llb_status st = own ? llb_metrics_render(own, &own_text, &own_len) : LLB_STATUS_OK;
  if (st == LLB_STATUS_OK && view) st = llb_metrics_render(view, &view_text, &view_len);
  struct llb_text out = {0};
  llb_text_append(&out, "", 0); /* nothing at all renders as "" */
  if (st == LLB_STATUS_OK && !merge_texts(m, view_text, view_len, own_text, own_len, now_ns, &out))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics merge: out of memory rendering");
  free(own_text);
  free(view_text);
  if (st != LLB_STATUS_OK) {
    llb_text_free(&out);
    return st;
  }
  *text = out.data;
  *len = out.len;
  return LLB_STATUS_OK;
}

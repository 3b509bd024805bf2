/* Structured output in the worker (see runner_so.h). */
#include "actors/gpu_worker/runner_so.h"

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "model/structured/structured_output.h"

struct runner_so_grammar {
  uint64_t hash;
  enum llb_structured_outputs_kind kind;
  char *spec;
  size_t spec_len;
  struct so_grammar *g;
  int32_t refs;       /* requests using it */
  uint64_t last_use;  /* eviction order of unused ones */
};

struct runner_so {
  struct so_vocab *vocab;
  struct runner_so_grammar **grammars; /* [num_grammars] */
  int32_t num_grammars, cap_grammars;
  uint64_t clock;
  struct reasoning_marker_ids markers[REASONING_MAX_PARSER + 1]; /* by parser; num_end 0 = not set */
};

void runner_so_set_reasoning_markers(struct runner_so *s, enum reasoning_parser p, const struct reasoning_marker_ids *m) {
  if (p > REASONING_NONE && p <= REASONING_MAX_PARSER) s->markers[p] = *m;
}

/* The markers of `reasoning`, or an error naming why the gate cannot work. */
static llb_status markers_of(const struct runner_so *s, uint8_t reasoning, const struct reasoning_marker_ids **out) {
  if (reasoning > REASONING_MAX_PARSER)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "reasoning parser %d out of range", (int)reasoning);
  if (s->markers[reasoning].num_end == 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "reasoning parser %s: this model's vocabulary spells no end-of-reasoning marker",
                    reasoning_parser_name((enum reasoning_parser)reasoning));
  *out = &s->markers[reasoning];
  return LLB_STATUS_OK;
}

llb_status runner_so_create(struct so_vocab *vocab, struct runner_so **out) {
  *out = NULL;
  struct runner_so *s = calloc(1, sizeof(*s));
  if (!s) {
    so_vocab_destroy(vocab);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output state");
  }
  s->vocab = vocab;
  *out = s;
  return LLB_STATUS_OK;
}

static void grammar_free(struct runner_so_grammar *e) {
  if (!e) return;
  so_grammar_destroy(e->g);
  free(e->spec);
  free(e);
}

void runner_so_destroy(struct runner_so *s) {
  if (!s) return;
  for (int32_t i = 0; i < s->num_grammars; i++) grammar_free(s->grammars[i]);
  free(s->grammars);
  so_vocab_destroy(s->vocab);
  free(s);
}

int32_t runner_so_vocab_size(const struct runner_so *s) { return so_vocab_size(s->vocab); }

int32_t runner_so_mask_words(const struct runner_so *s) { return (so_vocab_size(s->vocab) + 31) / 32; }

/* FNV-1a over the kind byte then the spec. */
static uint64_t spec_hash(enum llb_structured_outputs_kind kind, const char *spec, size_t len) {
  const uint8_t k = (uint8_t)kind;
  return llb_fnv1a64(llb_fnv1a64(LLB_FNV1A64_INIT, &k, 1), spec, len);
}

static llb_status compile(const struct llb_structured_outputs *so, struct so_grammar **g) {
  switch (so->kind) {
    case LLB_SO_JSON: return so_grammar_compile_json_schema(so->spec.data, so->spec.len, g);
    case LLB_SO_JSON_OBJECT: return so_grammar_compile_json_object(g);
    case LLB_SO_CHOICE: return so_grammar_compile_choice(so->spec.data, so->spec.len, g);
    case LLB_SO_REGEX: return so_grammar_compile_regex(so->spec.data, so->spec.len, g);
    case LLB_SO_GRAMMAR: return so_grammar_compile_gbnf(so->spec.data, so->spec.len, g);
    default: return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "structured output kind %d is not supported", (int)so->kind);
  }
}

/* Drops unused grammars, oldest first, while more than RUNNER_SO_MAX_GRAMMARS are cached. */
static void evict(struct runner_so *s) {
  while (s->num_grammars > RUNNER_SO_MAX_GRAMMARS) {
    int32_t victim = -1;
    for (int32_t i = 0; i < s->num_grammars; i++)
      if (s->grammars[i]->refs == 0 && (victim < 0 || s->grammars[i]->last_use < s->grammars[victim]->last_use))
        victim = i;
    if (victim < 0) return; /* all in use: the cache grows with the batch */
    grammar_free(s->grammars[victim]);
    s->grammars[victim] = s->grammars[--s->num_grammars];
  }
}

/* The cached grammar of `so`, compiled and added when absent. */
static llb_status grammar_get(struct runner_so *s, const struct llb_structured_outputs *so,
                              struct runner_so_grammar **out) {
  const uint64_t h = spec_hash(so->kind, so->spec.data, so->spec.len);
  for (int32_t i = 0; i < s->num_grammars; i++) {
    struct runner_so_grammar *e = s->grammars[i];
    if (e->hash == h && e->kind == so->kind && e->spec_len == so->spec.len &&
        (so->spec.len == 0 || memcmp(e->spec, so->spec.data, so->spec.len) == 0)) {
      *out = e;
      return LLB_STATUS_OK;
    }
  }
  if (s->num_grammars == s->cap_grammars) {
    int32_t cap = s->cap_grammars ? 2 * s->cap_grammars : 16;
    void *p = realloc(s->grammars, (size_t)cap * sizeof(*s->grammars));
    if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar cache");
    s->grammars = p;
    s->cap_grammars = cap;
  }
  struct runner_so_grammar *e = calloc(1, sizeof(*e));
  if (!e || !(e->spec = malloc(so->spec.len + 1))) {
    free(e);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar cache entry");
  }
  llb_status st = compile(so, &e->g);
  if (st != LLB_STATUS_OK) {
    grammar_free(e);
    return st;
  }
  if (so->spec.len) memcpy(e->spec, so->spec.data, so->spec.len);
  e->spec[so->spec.len] = '\0';
  e->spec_len = so->spec.len;
  e->hash = h;
  e->kind = so->kind;
  s->grammars[s->num_grammars++] = e;
  *out = e;
  return LLB_STATUS_OK;
}

llb_status runner_so_req_init(struct runner_so *s, struct runner_so_req *q, const struct llb_structured_outputs *so,
                              const int32_t *prompt, int64_t num_prompt) {
  *q = (struct runner_so_req){0};
  if (so->kind == LLB_SO_NONE) return LLB_STATUS_OK;
  if (!s) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "structured output needs the model's tokenizer (none loaded)");
  const struct reasoning_marker_ids *mk = NULL;
  llb_status st = so->reasoning ? markers_of(s, so->reasoning, &mk) : LLB_STATUS_OK;
  if (st != LLB_STATUS_OK) return st;
  struct runner_so_grammar *e;
  if ((st = grammar_get(s, so, &e)) != LLB_STATUS_OK) return st;
  struct so_matcher *m;
  if ((st = so_matcher_create(e->g, &m)) != LLB_STATUS_OK) {
    evict(s);
    return st;
  }
  e->refs++;
  e->last_use = ++s->clock;
  int64_t unused;
  const bool open = mk && reasoning_scan_ids(mk, prompt, num_prompt, true, &unused);
  *q = (struct runner_so_req){.grammar = e, .matcher = m, .num_accepted = 0, .reasoning = so->reasoning,
                              .prompt_in_reasoning = open, .grammar_start = open ? -1 : 0};
  evict(s);
  return LLB_STATUS_OK;
}

void runner_so_req_free(struct runner_so *s, struct runner_so_req *q) {
  if (!q->grammar) return;
  so_matcher_destroy(q->matcher);
  q->grammar->refs--;
  q->grammar->last_use = ++s->clock;
  *q = (struct runner_so_req){0};
  evict(s);
}

/* Finds where the grammar starts among outputs[0..n): q->grammar_start stays -1 while the
 * reasoning goes on. A marker may straddle the last search: it restarts a marker's length back. */
static void find_grammar_start(const struct runner_so *s, struct runner_so_req *q, const int32_t *outputs, int64_t n) {
  if (q->grammar_start >= 0 || !q->reasoning) return;
  const struct reasoning_marker_ids *mk = &s->markers[q->reasoning];
  int64_t from = q->num_scanned - REASONING_MAX_MARKER_IDS;
  if (from < 0) from = 0;
  int64_t end_at;
  /* within the overlap the reasoning is still open (no end was found there before) */
  reasoning_scan_ids(mk, outputs + from, n - from, q->prompt_in_reasoning || from > 0, &end_at);
  if (end_at >= 0) q->grammar_start = from + end_at;
  q->num_scanned = n;
}

llb_status runner_so_req_sync(struct runner_so *s, struct runner_so_req *q, const int32_t *outputs, int64_t n) {
  if (!q->grammar) return LLB_STATUS_OK;
  if (q->num_accepted < 0 || q->num_accepted > n) {
    so_matcher_reset(q->matcher);
    q->num_accepted = 0;
    if (q->reasoning) q->grammar_start = q->prompt_in_reasoning ? -1 : 0, q->num_scanned = 0;
  }
  find_grammar_start(s, q, outputs, n);
  if (q->grammar_start < 0) return LLB_STATUS_OK; /* still reasoning: nothing to match */
  if (q->num_accepted < q->grammar_start) q->num_accepted = q->grammar_start;
  for (int64_t i = q->num_accepted; i < n; i++) {
    if (!so_matcher_accept_token(q->matcher, s->vocab, outputs[i])) {
      so_matcher_reset(q->matcher);
      q->num_accepted = -1;
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "output token %d (position %lld) is not allowed by the structured output grammar",
                      outputs[i], (long long)i);
    }
    q->num_accepted = i + 1;
  }
  return LLB_STATUS_OK;
}

int32_t runner_so_fill_mask(struct runner_so *s, const struct runner_so_req *q, uint32_t *mask) {
  if (q->grammar_start < 0) return -1;
  return so_vocab_fill_mask(s->vocab, q->matcher, mask);
}

void runner_so_apply_mask(float *logits, int32_t vocab_size, const uint32_t *mask, int32_t mask_vocab_size) {
  const int32_t n = vocab_size < mask_vocab_size ? vocab_size : mask_vocab_size;
  for (int32_t w = 0; w * 32 < n; w++) {
    const uint32_t bits = mask[w];
    if (bits == 0xffffffffu && w * 32 + 32 <= n) continue;
    for (int32_t b = 0; b < 32 && w * 32 + b < n; b++)
      if (!(bits >> b & 1u)) logits[w * 32 + b] = -INFINITY;
  }
  for (int32_t i = n; i < vocab_size; i++) logits[i] = -INFINITY;
}

llb_status runner_so_prepare(struct runner_so *s, const struct llb_structured_outputs *so) {
  if (so->kind == LLB_SO_NONE) return LLB_STATUS_OK;
  if (!s) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "structured output needs the model's tokenizer (none loaded)");
  const struct reasoning_marker_ids *mk;
  llb_status st = so->reasoning ? markers_of(s, so->reasoning, &mk) : LLB_STATUS_OK;
  if (st != LLB_STATUS_OK) return st;
  struct runner_so_grammar *e;
  st = grammar_get(s, so, &e);
  if (st == LLB_STATUS_OK) e->last_use = ++s->clock;
  return st;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *step_main(void *arg) {
  struct runner_so_step *st = arg;
  const double t0 = now_seconds();
  for (int32_t i = 0; i < st->num_rows; i++) {
    struct runner_so_step_row *row = &st->rows[i];
    row->message[0] = '\0';
    row->masked = false;
    row->status = runner_so_req_sync(st->s, row->req, row->outputs, row->num_outputs);
    if (row->status != LLB_STATUS_OK) {
      snprintf(row->message, sizeof row->message, "%s", llb_err_last());
      continue;
    }
    row->masked = runner_so_fill_mask(st->s, row->req, row->mask) >= 0;
  }
  st->mask_seconds = now_seconds() - t0;
  return NULL;
}

void runner_so_step_start(struct runner_so_step *st, struct runner_so *s, struct runner_so_step_row *rows,
                          int32_t num_rows) {
  *st = (struct runner_so_step){.s = s, .rows = rows, .num_rows = num_rows};
  if (num_rows == 0) return;
  if (pthread_create(&st->thread, NULL, step_main, st) == 0) {
    st->threaded = true;
    return;
  }
  step_main(st); /* no thread to be had: the masks still come, only not overlapped */
}

void runner_so_step_join(struct runner_so_step *st) {
  if (!st->threaded) return;
  pthread_join(st->thread, NULL);
  st->threaded = false;
}

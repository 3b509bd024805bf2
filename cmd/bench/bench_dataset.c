/* llmbus-bench datasets: random (optionally with a shared prefix) and JSONL. See bench.h. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench/bench.h"
#include "model/tokenizer/tokenizer.h"

#define ADJUST_ROUNDS 8 /* re-encode rounds to reach an exact token count */

/* Common English words, about one token each in any BPE vocabulary: the text dataset without
 * a tokenizer. */
static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each",
    "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first",
    "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get",
    "come", "made", "may", "part"};
#define NUM_WORDS (int64_t)(sizeof words / sizeof words[0])

void bench_dataset_free(struct bench_dataset *d) {
  if (!d) return;
  for (int64_t i = 0; i < d->num; i++) {
    free(d->prompts[i].text);
    free(d->prompts[i].ids);
  }
  free(d->prompts);
  d->prompts = NULL;
  d->num = 0;
}

/* Length drawn uniformly in [len * (1 - r), len * (1 + r)], at least `floor_len`. */
static int32_t draw_len(struct bench_rng *rng, int32_t len, double r, int32_t floor_len) {
  int64_t lo = (int64_t)floor(len * (1.0 - r)), hi = (int64_t)ceil(len * (1.0 + r));
  if (lo < floor_len) lo = floor_len;
  if (hi < lo) hi = lo;
  return (int32_t)bench_rng_range(rng, lo, hi);
}

/* Valid UTF-8 as JSON wants it (no overlong forms, no surrogates): jansson's own check. */
static bool utf8_valid(const char *s, int64_t n) {
  json_t *j = json_stringn(s, (size_t)n);
  json_decref(j);
  return j != NULL;
}

/* Ids whose piece is non-empty valid UTF-8 without a NUL byte and not a control token: random
 * text of them is valid UTF-8 that servers take whole (a "\u0000" in a JSON prompt ends it as a C
 * string: one random prompt in ~100 came back as a 400 "prompt ... is required"). *out malloc'd. */
static llb_status good_ids(const struct tokenizer *tok, int32_t **out, int32_t *n_out) {
  int32_t vocab = tokenizer_vocab_size(tok);
  int32_t *ids = malloc((size_t)(vocab > 0 ? vocab : 1) * sizeof *ids);
  if (!ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "vocabulary list");
  int32_t n = 0;
  char piece[256];
  for (int32_t id = 0; id < vocab; id++) {
    if (tokenizer_is_control(tok, id)) continue;
    int64_t len = tokenizer_token_to_piece(tok, id, false, piece, sizeof piece);
    if (len <= 0 || len >= (int64_t)sizeof piece || !utf8_valid(piece, len) || memchr(piece, 0, (size_t)len)) continue;
    ids[n++] = id;
  }
  if (n == 0) {
    free(ids);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the tokenizer has no plain text token");
  }
  *out = ids;
  *n_out = n;
  return LLB_STATUS_OK;
}

/* Growable id list. */
struct ids {
  int32_t *v;
  int64_t n, cap;
};

static bool ids_push(struct ids *a, int32_t id) {
  if (a->n == a->cap) {
    int64_t cap = a->cap ? a->cap * 2 : 64;
    int32_t *p = realloc(a->v, (size_t)cap * sizeof *p);
    if (!p) return false;
    a->v = p;
    a->cap = cap;
  }
  a->v[a->n++] = id;
  return true;
}

/* prefix_text (may be "") + decode(suffix) as one malloc'd string. */
static llb_status join_text(const struct tokenizer *tok, const char *prefix_text, const struct ids *suffix,
                            char **out) {
  char *st = NULL;
  size_t sl = 0;
  llb_status s = tokenizer_decode(tok, suffix->v, suffix->n, false, &st, &sl);
  if (s != LLB_STATUS_OK) return s;
  size_t pl = strlen(prefix_text);
  char *t = malloc(pl + sl + 1);
  if (!t) {
    free(st);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt text");
  }
  memcpy(t, prefix_text, pl);
  memcpy(t + pl, st, sl);
  t[pl + sl] = '\0';
  free(st);
  *out = t;
  return LLB_STATUS_OK;
}

/* Builds the text whose encoding is `target` tokens: prefix_text + a suffix of random ids,
 * trimmed or extended over a few re-encode rounds. p->text, p->ids, p->num_ids, p->input_len. */
static llb_status exact_prompt(const struct tokenizer *tok, struct bench_rng *rng, const int32_t *pool,
                               int32_t pool_n, const char *prefix_text, int32_t target, int32_t suffix_len,
                               struct bench_prompt *p) {
  struct ids suf = {0};
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < suffix_len && st == LLB_STATUS_OK; i++)
    if (!ids_push(&suf, pool[bench_rng_range(rng, 0, pool_n - 1)])) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "ids");
  char *text = NULL;
  int32_t *enc = NULL;
  int64_t n_enc = 0;
  for (int round = 0; st == LLB_STATUS_OK && round < ADJUST_ROUNDS; round++) {
    free(text);
    free(enc);
    text = NULL;
    enc = NULL;
    st = join_text(tok, prefix_text, &suf, &text);
    if (st == LLB_STATUS_OK) st = tokenizer_encode(tok, text, strlen(text), false, false, &enc, &n_enc);
    if (st != LLB_STATUS_OK || n_enc == target) break;
    if (n_enc > target) {
      int64_t cut = n_enc - target;
      suf.n = suf.n > cut ? suf.n - cut : 0;
    } else {
      for (int64_t k = n_enc; k < target && st == LLB_STATUS_OK; k++)
        if (!ids_push(&suf, pool[bench_rng_range(rng, 0, pool_n - 1)])) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "ids");
    }
  }
  free(suf.v);
  if (st != LLB_STATUS_OK) {
    free(text);
    free(enc);
    return st;
  }
  p->text = text;
  p->ids = enc;
  p->num_ids = (int32_t)n_enc;
  p->input_len = (int32_t)n_enc;
  return LLB_STATUS_OK;
}

/* n random words (with a leading prefix string) as one malloc'd text. */
static char *word_text(struct bench_rng *rng, const char *prefix, int32_t n) {
  size_t pl = strlen(prefix), cap = pl + (size_t)n * 8 + 2, len = pl;
  char *t = malloc(cap);
  if (!t) return NULL;
  memcpy(t, prefix, pl);
  for (int32_t i = 0; i < n; i++) {
    const char *w = words[bench_rng_range(rng, 0, NUM_WORDS - 1)];
    size_t wl = strlen(w);
    if (len + wl + 2 > cap) {
      cap = cap * 2 + wl;
      char *q = realloc(t, cap);
      if (!q) {
        free(t);
        return NULL;
      }
      t = q;
    }
    if (len > 0) t[len++] = ' ';
    memcpy(t + len, w, wl);
    len += wl;
  }
  t[len] = '\0';
  return t;
}

llb_status bench_dataset_random(const struct tokenizer *tok, const struct bench_random_spec *spec,
                                struct bench_dataset *out) {
  memset(out, 0, sizeof *out);
  if (!spec || spec->num_prompts < 1 || spec->input_len < 0 || spec->output_len < 1 || spec->prefix_len < 0 ||
      !(spec->range_ratio >= 0 && spec->range_ratio < 1) || spec->input_len + spec->prefix_len < 1 ||
      spec->num_prefixes < 0 || spec->num_prefixes > 100000)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "random dataset: num_prompts >= 1, output_len >= 1, input_len + prefix_len >= 1, "
                    "range_ratio in [0, 1), num_prefixes in [0, 100000]");
  struct bench_rng rng;
  bench_rng_seed(&rng, spec->seed);
  int32_t *pool = NULL, pool_n = 0;
  const int32_t groups = spec->num_prefixes > 1 ? spec->num_prefixes : 1;
  char **prefix_texts = calloc((size_t)groups, sizeof *prefix_texts);
  llb_status st = LLB_STATUS_OK;
  out->prompts = calloc((size_t)spec->num_prompts, sizeof *out->prompts);
  if (!out->prompts || !prefix_texts) {
    free(prefix_texts);
    free(out->prompts);
    out->prompts = NULL;
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%lld prompts", (long long)spec->num_prompts);
  }
  if (tok) {
    st = good_ids(tok, &pool, &pool_n);
    if (st != LLB_STATUS_OK) goto fail;
  }
  for (int32_t g = 0; g < groups; g++) {
    if (tok && spec->prefix_len > 0) {
      struct bench_prompt pp = {0};
      st = exact_prompt(tok, &rng, pool, pool_n, "", spec->prefix_len, spec->prefix_len, &pp);
      if (st != LLB_STATUS_OK) goto fail;
      free(pp.ids);
      prefix_texts[g] = pp.text;
    } else if (!tok) {
      prefix_texts[g] = word_text(&rng, "", spec->prefix_len);
    }
    if (!prefix_texts[g] && !(prefix_texts[g] = strdup(""))) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prefix");
      goto fail;
    }
  }
  for (int64_t i = 0; i < spec->num_prompts; i++) {
    struct bench_prompt *p = &out->prompts[i];
    const char *prefix_text = prefix_texts[i % groups];
    int32_t in_len = draw_len(&rng, spec->input_len, spec->range_ratio, spec->prefix_len > 0 ? 0 : 1);
    p->output_len = draw_len(&rng, spec->output_len, spec->range_ratio, 1);
    out->num = i + 1;
    if (tok) {
      st = exact_prompt(tok, &rng, pool, pool_n, prefix_text, spec->prefix_len + in_len, in_len, p);
      if (st != LLB_STATUS_OK) goto fail;
    } else {
      p->text = word_text(&rng, prefix_text, in_len);
      if (!p->text) {
        st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt text");
        goto fail;
      }
      p->input_len = spec->prefix_len + in_len;
    }
  }
fail:
  free(pool);
  for (int32_t g = 0; g < groups; g++) free(prefix_texts[g]);
  free(prefix_texts);
  if (st != LLB_STATUS_OK) bench_dataset_free(out);
  return st;
}

static int32_t word_count(const char *s) {
  int32_t n = 0;
  bool in_word = false;
  for (; *s; s++) {
    bool sp = *s == ' ' || *s == '\n' || *s == '\t' || *s == '\r';
    if (!sp && !in_word) n++;
    in_word = !sp;
  }
  return n;
}

llb_status bench_dataset_jsonl(const char *path, const struct tokenizer *tok, int32_t default_output_len,
                               int64_t max_prompts, struct bench_dataset *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f) return LLB_ERRF(LLB_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int64_t lineno = 0, room = 0;
  llb_status st = LLB_STATUS_OK;
  while ((max_prompts <= 0 || out->num < max_prompts) && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    bool blank = true;
    for (ssize_t k = 0; k < len && blank; k++) blank = line[k] == ' ' || line[k] == '\n' || line[k] == '\r' || line[k] == '\t';
    if (blank) continue;
    json_error_t jerr;
    json_t *o = json_loadb(line, (size_t)len, 0, &jerr);
    json_t *pr = json_object_get(o, "prompt");
    if (!json_is_string(pr)) pr = json_object_get(o, "text");
    if (!json_is_string(pr)) {
      json_decref(o);
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s:%lld: not an object with a string \"prompt\"", path, (long long)lineno);
      break;
    }
    json_t *ol = json_object_get(o, "output_len");
    if (!json_is_integer(ol)) ol = json_object_get(o, "max_tokens");
    if (out->num == room) {
      int64_t nr = room ? room * 2 : 64;
      struct bench_prompt *p = realloc(out->prompts, (size_t)nr * sizeof *p);
      if (!p) {
        json_decref(o);
        st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompts");
        break;
      }
      out->prompts = p;
      room = nr;
    }
    struct bench_prompt *p = &out->prompts[out->num];
    memset(p, 0, sizeof *p);
    p->text = strdup(json_string_value(pr));
    p->output_len = json_is_integer(ol) && json_integer_value(ol) > 0 ? (int32_t)json_integer_value(ol)
                                                                       : default_output_len;
    json_decref(o);
    if (!p->text) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt text");
      break;
    }
    out->num++;
    if (tok) {
      int64_t n = 0;
      st = tokenizer_encode(tok, p->text, strlen(p->text), false, false, &p->ids, &n);
      if (st != LLB_STATUS_OK) break;
      p->num_ids = p->input_len = (int32_t)n;
    } else {
      p->input_len = word_count(p->text);
    }
  }
  free(line);
  fclose(f);
  if (st == LLB_STATUS_OK && out->num == 0) st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s: no prompt", path);
  if (st != LLB_STATUS_OK) bench_dataset_free(out);
  return st;
}

/* The vocabulary side of structured output: each token's bytes, sorted so that tokens with
 * a common prefix are walked through the matcher once for that prefix (a trie walked in
 * order, without building the trie), and the allowed-token bitmask. */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "model/structured/so_internal.h"
#include "model/tokenizer/tokenizer.h"

/* Masks of recent states: inside a string or between array elements the state repeats
 * (counts are clamped, so_matcher.c), and the mask is then a copy. */
#define SO_MASK_CACHE_ENTRIES 32

struct mask_entry {
  uint64_t hash;
  uint8_t *key; /* grammar id + the state's stacks, owned */
  size_t key_len;
  uint32_t *mask; /* [words], owned */
  int32_t allowed;
  uint64_t last_used; /* 0 = empty */
};

struct so_vocab {
  int32_t n_vocab;
  char *bytes;         /* all pieces back to back, owned */
  size_t *offsets;     /* [n_vocab + 1] into bytes, by token id */
  int32_t *sorted;     /* [n_sorted] non-empty, non-EOG token ids in byte order */
  int32_t n_sorted;
  uint8_t *is_eog;     /* [n_vocab] */
  int32_t max_len;     /* longest piece */
  struct so_state *walk; /* [max_len + 1] scratch of so_vocab_fill_mask (one caller at a time) */
  uint8_t *key;          /* scratch: the cache key of the state being masked */
  struct mask_entry cache[SO_MASK_CACHE_ENTRIES];
  uint64_t clock;
};

/* Serializes (grammar, state) into v->key; returns its length. */
static size_t state_key(struct so_vocab *v, const struct so_matcher *m) {
  uint8_t *p = v->key;
  memcpy(p, &m->g->id, sizeof(m->g->id));
  p += sizeof(m->g->id);
  for (int32_t i = 0; i < m->cur.n; i++) {
    const struct so_stack *s = &m->cur.s[i];
    memcpy(p, &s->depth, sizeof(s->depth));
    p += sizeof(s->depth);
    memcpy(p, s->f, sizeof(struct so_frame) * (size_t)s->depth);
    p += sizeof(struct so_frame) * (size_t)s->depth;
  }
  return (size_t)(p - v->key);
}

static size_t mask_words(const struct so_vocab *v) { return ((size_t)v->n_vocab + 31) / 32; }

static struct mask_entry *cache_find(struct so_vocab *v, uint64_t hash, size_t len) {
  for (int i = 0; i < SO_MASK_CACHE_ENTRIES; i++) {
    struct mask_entry *e = &v->cache[i];
    if (e->last_used && e->hash == hash && e->key_len == len && memcmp(e->key, v->key, len) == 0) return e;
  }
  return NULL;
}

/* Keeps bitmask as the mask of the key in v->key, over the least recently used entry.
 * Best effort: without memory nothing is cached. */
static void cache_store(struct so_vocab *v, uint64_t hash, size_t len, const uint32_t *bitmask, int32_t allowed) {
  struct mask_entry *e = &v->cache[0];
  for (int i = 1; i < SO_MASK_CACHE_ENTRIES; i++)
    if (v->cache[i].last_used < e->last_used) e = &v->cache[i];
  if (!e->mask) e->mask = malloc(sizeof(uint32_t) * mask_words(v));
  uint8_t *key = realloc(e->key, len);
  if (!e->mask || !key) {
    e->last_used = 0;
    return;
  }
  e->key = key;
  memcpy(e->key, v->key, len);
  e->key_len = len;
  e->hash = hash;
  memcpy(e->mask, bitmask, sizeof(uint32_t) * mask_words(v));
  e->allowed = allowed;
  e->last_used = ++v->clock;
}

struct sort_item {
  const uint8_t *p;
  size_t len;
  int32_t id;
};

static int cmp_piece(const void *a, const void *b) {
  const struct sort_item *x = a, *y = b;
  int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
  if (c != 0) return c;
  return x->len < y->len ? -1 : x->len > y->len ? 1 : (x->id < y->id ? -1 : x->id > y->id);
}

/* v->sorted = the non-empty, non-EOG ids in byte order. */
static bool sort_pieces(struct so_vocab *v) {
  struct sort_item *items = malloc(sizeof(*items) * (size_t)v->n_vocab);
  if (!items) return false;
  int32_t n = 0;
  for (int32_t i = 0; i < v->n_vocab; i++) {
    size_t len = v->offsets[i + 1] - v->offsets[i];
    if (v->is_eog[i] || len == 0) continue;
    items[n++] = (struct sort_item){(const uint8_t *)v->bytes + v->offsets[i], len, i};
  }
  qsort(items, (size_t)n, sizeof(*items), cmp_piece);
  for (int32_t i = 0; i < n; i++) v->sorted[i] = items[i].id;
  v->n_sorted = n;
  free(items);
  return true;
}

llb_status so_vocab_create(int32_t n_vocab, const char *const *pieces, const size_t *lens,
                           const int32_t *eog_ids, int32_t n_eog, struct so_vocab **out) {
  *out = NULL;
  if (n_vocab <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "vocabulary of %d tokens", n_vocab);
  struct so_vocab *v = calloc(1, sizeof(*v));
  if (!v) goto oom;
  v->n_vocab = n_vocab;
  v->offsets = malloc(sizeof(size_t) * ((size_t)n_vocab + 1));
  v->sorted = malloc(sizeof(int32_t) * (size_t)n_vocab);
  v->is_eog = calloc((size_t)n_vocab, 1);
  if (!v->offsets || !v->sorted || !v->is_eog) goto oom;
  size_t total = 0;
  for (int32_t i = 0; i < n_vocab; i++) {
    v->offsets[i] = total;
    total += lens[i];
    if (lens[i] > (size_t)v->max_len) v->max_len = (int32_t)lens[i];
  }
  v->offsets[n_vocab] = total;
  v->bytes = malloc(total ? total : 1);
  v->walk = malloc(sizeof(struct so_state) * ((size_t)v->max_len + 1));
  v->key = malloc(sizeof(uint64_t) + sizeof(struct so_state));
  if (!v->bytes || !v->walk || !v->key) goto oom;
  for (int32_t i = 0; i < n_vocab; i++) memcpy(v->bytes + v->offsets[i], pieces[i], lens[i]);
  for (int32_t i = 0; i < n_eog; i++) {
    if (eog_ids[i] < 0 || eog_ids[i] >= n_vocab) {
      so_vocab_destroy(v);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "end-of-generation id %d outside the vocabulary", eog_ids[i]);
    }
    v->is_eog[eog_ids[i]] = 1;
  }
  if (!sort_pieces(v)) goto oom;
  *out = v;
  return LLB_STATUS_OK;
oom:
  so_vocab_destroy(v);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output vocabulary of %d tokens", n_vocab);
}

llb_status so_vocab_from_tokenizer(const struct tokenizer *t, struct so_vocab **out) {
  *out = NULL;
  int32_t n = tokenizer_vocab_size(t);
  size_t cap = tokenizer_max_piece_bytes(t) + 1;
  char **pieces = calloc(n > 0 ? (size_t)n : 1, sizeof(char *));
  size_t *lens = calloc(n > 0 ? (size_t)n : 1, sizeof(size_t));
  char *buf = malloc(cap);
  llb_status st = LLB_STATUS_OK;
  if (!pieces || !lens || !buf) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output vocabulary");
    goto done;
  }
  for (int32_t i = 0; i < n; i++) {
    int64_t len = tokenizer_token_to_piece(t, i, false, buf, cap);
    if (len < 0 || (size_t)len > cap) len = 0; /* cannot happen: cap is the longest piece */
    pieces[i] = malloc((size_t)len + 1);
    if (!pieces[i]) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output vocabulary");
      goto done;
    }
    memcpy(pieces[i], buf, (size_t)len);
    lens[i] = (size_t)len;
  }
  const int32_t *eog = NULL;
  int32_t n_eog = tokenizer_eog_ids(t, &eog);
  st = so_vocab_create(n, (const char *const *)pieces, lens, eog, n_eog, out);
done:
  if (pieces)
    for (int32_t i = 0; i < n; i++) free(pieces[i]);
  free(pieces);
  free(lens);
  free(buf);
  return st;
}

void so_vocab_destroy(struct so_vocab *v) {
  if (!v) return;
  free(v->bytes);
  free(v->offsets);
  free(v->sorted);
  free(v->is_eog);
  free(v->walk);
  free(v->key);
  for (int i = 0; i < SO_MASK_CACHE_ENTRIES; i++) {
    free(v->cache[i].key);
    free(v->cache[i].mask);
  }
  free(v);
}

int32_t so_vocab_size(const struct so_vocab *v) { return v->n_vocab; }

int32_t so_vocab_fill_mask(struct so_vocab *v, const struct so_matcher *m, uint32_t *bitmask) {
  size_t key_len = state_key(v, m);
  uint64_t hash = llb_fnv1a64(LLB_FNV1A64_INIT, v->key, key_len);
  struct mask_entry *hit = cache_find(v, hash, key_len);
  if (hit) {
    memcpy(bitmask, hit->mask, sizeof(uint32_t) * mask_words(v));
    hit->last_used = ++v->clock;
    return hit->allowed;
  }
  memset(bitmask, 0, sizeof(uint32_t) * mask_words(v));
  int32_t allowed = 0;
  if (so_matcher_is_complete(m))
    for (int32_t i = 0; i < v->n_vocab; i++)
      if (v->is_eog[i]) {
        bitmask[i / 32] |= 1u << (i % 32);
        allowed++;
      }
  struct so_state *walk = v->walk;
  so_state_copy(&walk[0], &m->cur);
  const uint8_t *prev = NULL;
  size_t prev_len = 0;
  size_t valid = 0;   /* bytes of prev with a live state walk[1..valid] */
  bool prev_dead = false; /* prev died at byte `valid` */
  for (int32_t k = 0; k < v->n_sorted; k++) {
    int32_t id = v->sorted[k];
    const uint8_t *p = (const uint8_t *)v->bytes + v->offsets[id];
    size_t len = v->offsets[id + 1] - v->offsets[id];
    size_t lcp = 0;
    while (prev && lcp < len && lcp < prev_len && p[lcp] == prev[lcp]) lcp++;
    prev = p;
    prev_len = len;
    if (prev_dead && lcp > valid) continue; /* shares the dead prefix */
    if (lcp < valid) valid = lcp;
    prev_dead = false;
    while (valid < len) {
      if (!so_state_feed(m->g, &walk[valid], p[valid], &walk[valid + 1])) {
        prev_dead = true;
        break;
      }
      valid++;
    }
    if (!prev_dead) {
      bitmask[id / 32] |= 1u << (id % 32);
      allowed++;
    }
  }
  cache_store(v, hash, key_len, bitmask, allowed);
  return allowed;
}

bool so_matcher_accept_token(struct so_matcher *m, const struct so_vocab *v, int32_t id) {
  if (id < 0 || id >= v->n_vocab) return false;
  if (v->is_eog[id]) return so_matcher_is_complete(m);
  size_t len = v->offsets[id + 1] - v->offsets[id];
  if (len == 0) return false;
  return so_matcher_accept_bytes(m, (const uint8_t *)v->bytes + v->offsets[id], len);
}

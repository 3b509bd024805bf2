/* The tokenizer's vocabulary and BPE merge index: token texts in one arena with an
 * open-addressing index text -> id, merges with one (left, right) -> rank, and the growable id
 * buffer with its bound (tokenizer_encode_at_most). A leaf of model/tokenizer/tokenizer*.c:
 * tokenizer.c (loading, special tokens), tokenizer_bpe.c and tokenizer_spm.c all look tokens up
 * here, and this file calls none of them.
 * Source followed: llama.cpp src/llama-vocab.cpp (token_to_id, bpe_ranks: the first rank of a
 * repeated merge wins). */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "model/tokenizer/tokenizer_internal.h"

int32_t tok_lookup(const struct tokenizer *t, const char *text, size_t len) {
  uint64_t i = llb_fnv1a64(LLB_FNV1A64_INIT, text, len) & t->tok_mask;
  for (;;) {
    int32_t id = t->tok_slots[i];
    if (id < 0) return -1;
    if (t->text_len[id] == len && memcmp(tok_text(t, id), text, len) == 0) return id;
    i = (i + 1) & t->tok_mask;
  }
}

int32_t tok_merge_rank(const struct tokenizer *t, const char *a, size_t alen, const char *b, size_t blen) {
  if (t->n_merges == 0) return -1;
  uint64_t h = llb_fnv1a64(LLB_FNV1A64_INIT, a, alen);
  h = llb_fnv1a64(h, " ", 1);
  h = llb_fnv1a64(h, b, blen);
  for (uint64_t i = h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
    int32_t r = t->merge_slots[i];
    if (r < 0) return -1;
    const char *m = t->merge_arena + t->merge_off[r];
    if (t->merge_left[r] == alen && t->merge_right[r] == blen && memcmp(m, a, alen) == 0 &&
        memcmp(m + alen + 1, b, blen) == 0)
      return r;
  }
}

llb_status tok_ids_push(struct tok_ids *v, int32_t id) {
  if (v->len == v->cap) {
    int64_t cap = v->cap ? v->cap * 2 : 64;
    int32_t *d = realloc(v->data, (size_t)cap * sizeof(*d));
    if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token buffer of %lld ids", (long long)cap);
    v->data = d;
    v->cap = cap;
  }
  v->data[v->len++] = id;
  return LLB_STATUS_OK;
}

static uint64_t pow2_at_least(uint64_t n) {
  uint64_t p = 16;
  while (p < n) p <<= 1;
  return p;
}

llb_status tok_vocab_load(struct tokenizer *t, const struct gguf_array *toks) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < toks->len; i++) total += toks->strs[i].len;
  t->text_arena = malloc(total + 1);
  t->text_off = malloc((size_t)toks->len * sizeof(*t->text_off));
  t->text_len = malloc((size_t)toks->len * sizeof(*t->text_len));
  uint64_t slots = pow2_at_least(toks->len * 2);
  t->tok_slots = malloc((size_t)slots * sizeof(*t->tok_slots));
  if (!t->text_arena || !t->text_off || !t->text_len || !t->tok_slots)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "vocabulary of %llu tokens", (unsigned long long)toks->len);
  memset(t->tok_slots, 0xff, (size_t)slots * sizeof(*t->tok_slots));
  t->tok_mask = slots - 1;
  uint64_t off = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    struct gguf_str s = toks->strs[id];
    if (s.len > UINT32_MAX) return LLB_ERRF(LLB_STATUS_MALFORMED, "token %d is %llu bytes", id, (unsigned long long)s.len);
    memcpy(t->text_arena + off, s.data, s.len);
    t->text_off[id] = off;
    t->text_len[id] = (uint32_t)s.len;
    off += s.len;
    if (s.len == 0) continue; /* never matched by text */
    if (tok_lookup(t, s.data, s.len) >= 0)
      return LLB_ERRF(LLB_STATUS_MALFORMED, "duplicate token in vocabulary: '%.*s' has ids %d and %d", (int)s.len,
                      s.data, tok_lookup(t, s.data, s.len), id);
    uint64_t i = llb_fnv1a64(LLB_FNV1A64_INIT, s.data, s.len) & t->tok_mask;
    while (t->tok_slots[i] >= 0) i = (i + 1) & t->tok_mask;
    t->tok_slots[i] = id;
  }
  return LLB_STATUS_OK;
}

llb_status tok_merges_load(struct tokenizer *t, const struct gguf_file *f) {
  struct gguf_array m;
  llb_status st = gguf_get_array(f, "tokenizer.ggml.merges", &m);
  if (st != LLB_STATUS_OK) return st;
  if (m.type != GGUF_VALUE_TYPE_STRING)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer.ggml.merges is not a string array");
  if (m.len > INT32_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "%llu merges", (unsigned long long)m.len);
  uint64_t total = 0;
  for (uint64_t i = 0; i < m.len; i++) total += m.strs[i].len;
  t->n_merges = (int64_t)m.len;
  t->merge_arena = malloc(total + 1);
  t->merge_off = malloc((size_t)m.len * sizeof(*t->merge_off) + 1);
  t->merge_left = malloc((size_t)m.len * sizeof(*t->merge_left) + 1);
  t->merge_right = malloc((size_t)m.len * sizeof(*t->merge_right) + 1);
  uint64_t slots = pow2_at_least(m.len * 2);
  t->merge_slots = malloc((size_t)slots * sizeof(*t->merge_slots));
  if (!t->merge_arena || !t->merge_off || !t->merge_left || !t->merge_right || !t->merge_slots)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%llu merges", (unsigned long long)m.len);
  memset(t->merge_slots, 0xff, (size_t)slots * sizeof(*t->merge_slots));
  t->merge_mask = slots - 1;
  uint64_t off = 0;
  for (int32_t r = 0; r < (int32_t)m.len; r++) {
    struct gguf_str s = m.strs[r];
    memcpy(t->merge_arena + off, s.data, s.len);
    t->merge_off[r] = off;
    off += s.len;
    /* llama.cpp splits at the first space after position 0 */
    const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL;
    if (!sp) { /* unusable merge: keep its rank slot, never matched */
      t->merge_left[r] = UINT32_MAX;
      t->merge_right[r] = 0;
      continue;
    }
    size_t left = (size_t)(sp - s.data), right = s.len - left - 1;
    t->merge_left[r] = (uint32_t)left;
    t->merge_right[r] = (uint32_t)right;
    if (tok_merge_rank(t, s.data, left, sp + 1, right) >= 0) continue; /* first rank wins */
    uint64_t i = llb_fnv1a64(LLB_FNV1A64_INIT, s.data, s.len) & t->merge_mask;
    while (t->merge_slots[i] >= 0) i = (i + 1) & t->merge_mask;
    t->merge_slots[i] = r;
  }
  return LLB_STATUS_OK;
}

int64_t tok_min_tokens(const struct tokenizer *t, size_t bytes) {
  if (!t->max_cover_bytes) return 0;
  return (int64_t)(bytes / t->max_cover_bytes + (bytes % t->max_cover_bytes != 0));
}

llb_status tok_ids_check_bound(const struct tokenizer *t, struct tok_ids *v, size_t bytes_left) {
  if (v->max_len <= 0) return LLB_STATUS_OK;
  /* the droppable bytes of the whole text may all lie in what is left */
  const size_t counted = bytes_left + v->bytes_after > v->droppable ? bytes_left + v->bytes_after - v->droppable : 0;
  const int64_t at_least = v->len + tok_min_tokens(t, counted);
  if (at_least <= v->max_len) return LLB_STATUS_OK;
  v->at_least = at_least;
  return LLB_ERRF(LLB_STATUS_TOO_LARGE, "the text makes at least %lld tokens, more than %lld", (long long)at_least,
                  (long long)v->max_len);
}

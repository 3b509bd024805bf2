/* SentencePiece BPE (tokenizer.ggml.model = "llama"): spaces become U+2581, adjacent
 * symbols merge by the highest score of the token they form (ties: leftmost first), with
 * a binary heap (O(n log n)); leftover symbols fall back to <0xNN> byte tokens.
 * Source followed: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session, tokenize). */
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/tokenizer_internal.h"

struct spm_sym {
  uint32_t start, len;
  int32_t prev, next;
};

struct spm_pair {
  float score;
  int32_t left, right;
  uint32_t size;
};

static bool pair_before(const struct spm_pair *a, const struct spm_pair *b) {
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}

struct spm_heap {
  struct spm_pair *data;
  size_t len, cap;
};

static llb_status heap_push(struct spm_heap *h, struct spm_pair p) {
  if (h->len == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    struct spm_pair *d = realloc(h->data, cap * sizeof(*d));
    if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "SPM heap");
    h->data = d;
    h->cap = cap;
  }
  size_t i = h->len++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!pair_before(&p, &h->data[parent])) break;
    h->data[i] = h->data[parent];
    i = parent;
  }
  h->data[i] = p;
  return LLB_STATUS_OK;
}

static struct spm_pair heap_pop(struct spm_heap *h) {
  struct spm_pair top = h->data[0], last = h->data[--h->len];
  size_t i = 0, n = h->len;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const struct spm_pair *best = &last;
    if (l < n && pair_before(&h->data[l], best)) m = l, best = &h->data[l];
    if (r < n && pair_before(&h->data[r], best)) m = r;
    if (m == i) break;
    h->data[i] = h->data[m];
    i = m;
  }
  if (n) h->data[i] = last;
  return top;
}

static llb_status try_pair(const struct tokenizer *t, const char *s, struct spm_sym *syms, struct spm_heap *h,
                           int32_t left, int32_t right) {
  if (left < 0 || right < 0) return LLB_STATUS_OK;
  uint32_t size = syms[left].len + syms[right].len;
  int32_t id = tok_lookup(t, s + syms[left].start, size);
  if (id < 0) return LLB_STATUS_OK;
  return heap_push(h, (struct spm_pair){t->scores[id], left, right, size});
}

llb_status tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool add_prefix_space,
                          struct tok_ids *out) {
  /* escaped text: optional leading space, then ' ' → U+2581 (3 bytes) */
  size_t n_spaces = add_prefix_space;
  for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
  size_t n = len + add_prefix_space + 2 * n_spaces;
  if (n == 0) return LLB_STATUS_OK;
  char *s = malloc(n);
  struct spm_sym *syms = malloc(n * sizeof(*syms));
  struct spm_heap h = {0};
  llb_status st = LLB_STATUS_OK;
  if (!s || !syms) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "SPM buffers for %zu bytes", n);
    goto done;
  }
  size_t o = 0;
  if (add_prefix_space) memcpy(s + o, "\xE2\x96\x81", 3), o += 3;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == ' ') memcpy(s + o, "\xE2\x96\x81", 3), o += 3;
    else s[o++] = text[i];
  }
  int32_t n_syms = 0;
  for (size_t i = 0; i < n;) {
    size_t l = tok_utf8_len((unsigned char)s[i]);
    if (l > n - i) l = n - i;
    syms[n_syms] = (struct spm_sym){(uint32_t)i, (uint32_t)l, n_syms - 1, i + l < n ? n_syms + 1 : -1};
    n_syms++;
    i += l;
  }
  for (int32_t i = 1; i < n_syms; i++)
    if ((st = try_pair(t, s, syms, &h, i - 1, i)) != LLB_STATUS_OK) goto done;
  while (h.len) {
    struct spm_pair p = heap_pop(&h);
    struct spm_sym *a = &syms[p.left], *b = &syms[p.right];
    if (a->len == 0 || b->len == 0 || a->len + b->len != p.size) continue; /* stale */
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) syms[b->next].prev = p.left;
    if ((st = try_pair(t, s, syms, &h, a->prev, p.left)) != LLB_STATUS_OK ||
        (st = try_pair(t, s, syms, &h, p.left, a->next)) != LLB_STATUS_OK)
      goto done;
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    int32_t id = tok_lookup(t, s + syms[i].start, syms[i].len);
    if (id >= 0) {
      if ((st = tok_ids_push(out, id)) != LLB_STATUS_OK) goto done;
      continue;
    }
    for (uint32_t k = 0; k < syms[i].len; k++) { /* byte fallback */
      int32_t bid = t->byte_tokens[(unsigned char)s[syms[i].start + k]];
      if (bid < 0) bid = t->unk_id;
      if (bid >= 0 && (st = tok_ids_push(out, bid)) != LLB_STATUS_OK) goto done;
    }
  }
done:
  free(s);
  free(syms);
  free(h.data);
  return st;
}

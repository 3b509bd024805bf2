/* Incremental, UTF-8-safe detokenizer; see detokenizer.h. */
#include "actors/output_processor/detokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/tokenizer.h"

static const char replacement_char[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Number of bytes a sequence starting with lead byte `b` has; 0 if `b` cannot start one. */
static int utf8_seq_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

/* Whether `b` may follow `lead` as the second byte (Unicode Table 3-7); later continuation
 * bytes are always 0x80..0xBF. */
static bool utf8_second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
  case 0xE0: return b >= 0xA0 && b <= 0xBF;
  case 0xED: return b >= 0x80 && b <= 0x9F;
  case 0xF0: return b >= 0x90 && b <= 0xBF;
  case 0xF4: return b >= 0x80 && b <= 0x8F;
  default: return b >= 0x80 && b <= 0xBF;
  }
}

/* A streaming UTF-8 assembler shared by the detokenizer and the sanitizer: feeds one byte,
 * calling `emit` with complete sequences or U+FFFD. */
struct utf8_asm {
  uint8_t buf[4];
  int32_t n;
};

typedef bool (*utf8_emit_fn)(void *ctx, const char *bytes, size_t n);

static bool utf8_asm_push(struct utf8_asm *a, uint8_t b, utf8_emit_fn emit, void *ctx) {
  if (a->n > 0) {
    int need = utf8_seq_len(a->buf[0]);
    bool ok = a->n == 1 ? utf8_second_ok(a->buf[0], b) : (b >= 0x80 && b <= 0xBF);
    if (ok) {
      a->buf[a->n++] = b;
      if (a->n == need) {
        a->n = 0;
        return emit(ctx, (const char *)a->buf, (size_t)need);
      }
      return true;
    }
    /* The pending prefix is a maximal invalid subpart: one U+FFFD, then `b` starts anew. */
    a->n = 0;
    if (!emit(ctx, replacement_char, sizeof replacement_char)) return false;
  }
  int need = utf8_seq_len(b);
  if (need == 1 && b != 0) {
    char c = (char)b;
    return emit(ctx, &c, 1);
  }
  /* a NUL (byte-level BPE's token for byte 0, which a sampled model can emit) would end the
   * text as a C string on the wire, so it becomes U+FFFD like any byte that is not text */
  if (need <= 1) return emit(ctx, replacement_char, sizeof replacement_char);
  a->buf[0] = b;
  a->n = 1;
  return true;
}

static bool detok_reserve(struct detok *d, size_t extra) {
  if (d->len + extra + 1 <= d->cap) return true;
  size_t cap = d->cap ? d->cap : 64;
  while (cap < d->len + extra + 1) cap *= 2;
  char *p = realloc(d->text, cap);
  if (!p) return false;
  d->text = p;
  d->cap = cap;
  return true;
}

static bool detok_emit(void *ctx, const char *bytes, size_t n) {
  struct detok *d = ctx;
  if (!detok_reserve(d, n)) return false;
  memcpy(d->text + d->len, bytes, n);
  d->len += n;
  d->text[d->len] = '\0';
  return true;
}

llb_status detok_init(struct detok *d, const struct tokenizer *tok, bool skip_special_tokens) {
  memset(d, 0, sizeof *d);
  d->tok = tok;
  d->skip_special_tokens = skip_special_tokens;
  d->piece_cap = 64;
  d->piece = malloc(d->piece_cap);
  if (!d->piece || !detok_reserve(d, 0)) goto fail;
  d->text[0] = '\0';
  return LLB_STATUS_OK;
fail:
  detok_free(d);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "detokenizer buffers");
}

void detok_free(struct detok *d) {
  if (!d) return;
  free(d->text);
  free(d->piece);
  d->text = NULL;
  d->piece = NULL;
  d->len = d->cap = d->piece_cap = 0;
  d->num_pending = 0;
}

llb_status detok_append_bytes(struct detok *d, const char *bytes, size_t n) {
  struct utf8_asm a;
  memcpy(a.buf, d->pending, sizeof a.buf);
  a.n = d->num_pending;
  for (size_t i = 0; i < n; i++) {
    if (!utf8_asm_push(&a, (uint8_t)bytes[i], detok_emit, d)) {
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "detokenizer text of %zu bytes", d->len);
    }
  }
  memcpy(d->pending, a.buf, sizeof a.buf);
  d->num_pending = a.n;
  return LLB_STATUS_OK;
}

llb_status detok_append_token(struct detok *d, int32_t id) {
  bool render_special = !d->skip_special_tokens;
  int64_t n = tokenizer_token_to_piece(d->tok, id, render_special, d->piece, d->piece_cap);
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token id %d is not in the vocabulary", id);
  if ((size_t)n > d->piece_cap) {
    char *p = realloc(d->piece, (size_t)n);
    if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token piece of %lld bytes", (long long)n);
    d->piece = p;
    d->piece_cap = (size_t)n;
    n = tokenizer_token_to_piece(d->tok, id, render_special, d->piece, d->piece_cap);
    if (n < 0 || (size_t)n > d->piece_cap) {
      return LLB_ERRF(LLB_STATUS_INTERNAL, "token %d piece length changed between calls", id);
    }
  }
  return detok_append_bytes(d, d->piece, (size_t)n);
}

llb_status detok_flush(struct detok *d) {
  if (d->num_pending == 0) return LLB_STATUS_OK;
  d->num_pending = 0;
  if (!detok_emit(d, replacement_char, sizeof replacement_char)) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "detokenizer flush");
  }
  return LLB_STATUS_OK;
}

void detok_truncate(struct detok *d, size_t len) {
  if (len < d->len) {
    d->len = len;
    d->text[len] = '\0';
  }
  d->num_pending = 0;
}

size_t detok_utf8_floor(const char *text, size_t n) {
  while (n > 0 && ((uint8_t)text[n] & 0xC0) == 0x80) n--;
  return n;
}

struct sanitize_ctx {
  char *dst;
  size_t len;
};

static bool sanitize_emit(void *ctx, const char *bytes, size_t n) {
  struct sanitize_ctx *s = ctx;
  memcpy(s->dst + s->len, bytes, n);
  s->len += n;
  return true;
}

size_t detok_utf8_sanitize(const char *src, size_t n, char *dst) {
  struct sanitize_ctx s = {.dst = dst, .len = 0};
  struct utf8_asm a = {.n = 0};
  for (size_t i = 0; i < n; i++) utf8_asm_push(&a, (uint8_t)src[i], sanitize_emit, &s);
  if (a.n > 0) sanitize_emit(&s, replacement_char, sizeof replacement_char);
  dst[s.len] = '\0';
  return s.len;
}

bool detok_utf8_valid(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = (uint8_t)s[i];
    int need = utf8_seq_len(b);
    if (need == 0 || (size_t)need > n - i) return false;
    if (need > 1 && !utf8_second_ok(b, (uint8_t)s[i + 1])) return false;
    for (int k = 2; k < need; k++) {
      if (((uint8_t)s[i + (size_t)k] & 0xC0) != 0x80) return false;
    }
    i += (size_t)need;
  }
  return true;
}

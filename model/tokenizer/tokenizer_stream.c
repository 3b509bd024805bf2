/* Incremental detokenizer (struct detok_stream in model/tokenizer/tokenizer.h): emits complete UTF-8
 * only, holds back an incomplete trailing sequence, replaces impossible bytes by U+FFFD
 * (one per maximal invalid subpart, as Rust's String::from_utf8_lossy used by HF). */
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "model/tokenizer/tokenizer_internal.h"

static const char k_replacement[3] = {'\xEF', '\xBF', '\xBD'};

/* Appends the lossy UTF-8 of in[0..n) to s->out; unless final, a truncated valid start at
 * the end goes back to s->pending. Output grows at most 3x the input. */
static void emit(struct detok_stream *s, const unsigned char *in, size_t n, bool final) {
  size_t i = 0;
  while (i < n) {
    size_t prefix;
    int r = llb_utf8_scan(in + i, n - i, &prefix);
    if (r > 0) {
      memcpy(s->out + s->out_len, in + i, (size_t)r);
      s->out_len += (size_t)r;
      i += (size_t)r;
    } else if (r == 0 && !final) {
      memcpy(s->pending, in + i, n - i);
      s->num_pending = n - i;
      return;
    } else {
      memcpy(s->out + s->out_len, k_replacement, 3);
      s->out_len += 3;
      i += prefix;
    }
  }
}

llb_status detok_stream_init(struct detok_stream *s, const struct tokenizer *t, bool render_special,
                             bool strip_leading_space) {
  if (!s || !t) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "detok_stream_init: NULL argument");
  memset(s, 0, sizeof(*s));
  s->tok = t;
  s->render_special = render_special;
  s->strip_leading_space = strip_leading_space && t->kind == TOK_MODEL_KIND_SPM && t->add_space_prefix;
  s->out_cap = 3 * (t->max_piece_len + sizeof(s->pending)) + 4;
  /* output buffer, then a scratch area of max_piece_len + pending for the joined input */
  s->out = malloc(s->out_cap + t->max_piece_len + sizeof(s->pending));
  if (!s->out) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "detok stream buffer of %zu bytes", s->out_cap);
  return LLB_STATUS_OK;
}

void detok_stream_free(struct detok_stream *s) {
  if (!s) return;
  free(s->out);
  s->out = NULL;
  s->out_cap = s->out_len = 0;
}

llb_status detok_stream_push(struct detok_stream *s, int32_t id, const char **text_out, size_t *len_out) {
  const struct tokenizer *t = s->tok;
  if (id < 0 || id >= t->n_vocab)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%d)", id, t->n_vocab);
  s->out_len = 0;
  *text_out = s->out;
  *len_out = 0;
  if (!s->render_special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) return LLB_STATUS_OK;
  const char *p = t->piece_arena + t->piece_off[id];
  size_t n = t->piece_len[id];
  if (s->strip_leading_space && n && p[0] == ' ') p++, n--;
  s->strip_leading_space = false;
  /* pending bytes + this piece, in the scratch area behind the output buffer */
  unsigned char *in = (unsigned char *)s->out + s->out_cap;
  size_t held = s->num_pending;
  memcpy(in, s->pending, held);
  memcpy(in + held, p, n);
  s->num_pending = 0;
  emit(s, in, held + n, false);
  *len_out = s->out_len;
  return LLB_STATUS_OK;
}

void detok_stream_flush(struct detok_stream *s, const char **text_out, size_t *len_out) {
  s->out_len = 0;
  unsigned char buf[sizeof(s->pending)];
  size_t n = s->num_pending;
  memcpy(buf, s->pending, n);
  s->num_pending = 0;
  emit(s, buf, n, true);
  *text_out = s->out;
  *len_out = s->out_len;
}

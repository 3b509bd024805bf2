/* Tokenizer: vocabulary loading, special tokens, encode/decode dispatch, streaming decoder.
 * Byte-level BPE lives in tokenizer_bpe.c, SentencePiece BPE in tokenizer_spm.c, the
 * vocabulary and merge index all three use in tokenizer_vocab.c.
 * Source followed: llama.cpp src/llama-vocab.cpp (load, token attributes, tokenize,
 * token_to_piece); HF tokenizers for added-token matching and the Metaspace decoder. */
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer/tokenizer_internal.h"

/* Appends the UTF-8 encoding of cpt to buf; returns the byte count (1..4). */
static size_t utf8_put(char *buf, uint32_t cpt) {
  if (cpt < 0x80) { buf[0] = (char)cpt; return 1; }
  if (cpt < 0x800) { buf[0] = (char)(0xC0 | (cpt >> 6)); buf[1] = (char)(0x80 | (cpt & 0x3F)); return 2; }
  if (cpt < 0x10000) {
    buf[0] = (char)(0xE0 | (cpt >> 12)); buf[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    buf[2] = (char)(0x80 | (cpt & 0x3F));
    return 3;
  }
  buf[0] = (char)(0xF0 | (cpt >> 18)); buf[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
  buf[2] = (char)(0x80 | ((cpt >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cpt & 0x3F));
  return 4;
}

/* Decodes one code point of well-formed-enough UTF-8 at s (n bytes left); *adv gets its length. */
static uint32_t utf8_get(const unsigned char *s, size_t n, size_t *adv) {
  size_t l = tok_utf8_len(s[0]);
  if (l > n) l = 1;
  *adv = l;
  switch (l) {
  case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  case 4:
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
  default: return s[0];
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Writes the render_special piece of token id into buf (capacity >= 4 * text length + 4). */
static size_t make_piece(const struct tokenizer *t, int32_t id, char *buf) {
  const char *s = tok_text(t, id);
  size_t n = t->text_len[id], o = 0;
  uint8_t a = t->attr[id];
  if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
    memcpy(buf, s, n);
    return n;
  }
  if (a & TOK_ATTR_NORMAL) {
    for (size_t i = 0; i < n;) {
      if (t->kind == TOK_MODEL_KIND_SPM) {
        if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
          buf[o++] = ' ';
          i += 3;
        } else {
          buf[o++] = s[i++];
        }
        continue;
      }
      size_t adv;
      uint32_t cpt = utf8_get((const unsigned char *)s + i, n - i, &adv);
      int b = tok_bpe_cpt_to_byte(cpt);
      if (b >= 0) {
        buf[o++] = (char)b;
      } else { /* not a byte-level character: keep it as text */
        memcpy(buf + o, s + i, adv);
        o += adv;
      }
      i += adv;
    }
    return o;
  }
  if ((a & TOK_ATTR_BYTE) && n == 6 && memcmp(s, "<0x", 3) == 0 && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
    buf[0] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
    return 1;
  }
  return 0; /* unused / undefined tokens render as nothing, as in llama.cpp */
}

static llb_status build_pieces(struct tokenizer *t) {
  uint64_t total = 0;
  size_t max_text = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    total += t->text_len[id];
    if (t->text_len[id] > max_text) max_text = t->text_len[id];
  }
  /* a piece is never longer than its text (unmapping only shrinks) */
  t->piece_arena = malloc(total + 1);
  t->piece_off = malloc((size_t)t->n_vocab * sizeof(*t->piece_off));
  t->piece_len = malloc((size_t)t->n_vocab * sizeof(*t->piece_len));
  char *scratch = malloc(4 * max_text + 8);
  if (!t->piece_arena || !t->piece_off || !t->piece_len || !scratch) {
    free(scratch);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token pieces");
  }
  uint64_t off = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    size_t n = make_piece(t, id, scratch);
    if (n > t->text_len[id]) n = t->text_len[id];
    memcpy(t->piece_arena + off, scratch, n);
    t->piece_off[id] = off;
    t->piece_len[id] = (uint32_t)n;
    off += n;
    if (n > t->max_piece_len) t->max_piece_len = n;
  }
  free(scratch);
  return LLB_STATUS_OK;
}

static int cmp_special(const void *pa, const void *pb, void *ctx) {
  const struct tokenizer *t = ctx;
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  uint32_t ka = ((uint32_t)(unsigned char)tok_text(t, a)[0] << 8) | (unsigned char)tok_text(t, a)[1];
  uint32_t kb = ((uint32_t)(unsigned char)tok_text(t, b)[0] << 8) | (unsigned char)tok_text(t, b)[1];
  if (ka != kb) return ka < kb ? -1 : 1;
  if (t->text_len[a] != t->text_len[b]) return t->text_len[a] > t->text_len[b] ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* The most input bytes one token can stand for (tokenizer_min_tokens): a normal token its piece
 * (byte-level BPE: exactly the raw bytes it covers; SPM: '▁' is one input space, and the prefix
 * space it may add is no input byte), any other its text (a special token matches its text; a
 * symbol's text is the input escaped, never shorter); byte fallbacks and <unk> stand for one
 * byte. A byte without a token of its own (nor <unk> for SPM) may be dropped by the encoders
 * (llama.cpp does the same): such bytes are not counted (SmolLM2 has none for 0x04, 0x06, 0x13,
 * 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF). */
static void set_max_cover(struct tokenizer *t) {
  t->any_droppable = false;
  for (int b = 0; b < 256; b++) {
    t->droppable[b] = t->byte_tokens[b] < 0 && !(t->kind == TOK_MODEL_KIND_SPM && t->unk_id >= 0);
    t->any_droppable |= t->droppable[b];
  }
  size_t most = 1;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    const size_t n = t->attr[id] == TOK_ATTR_NORMAL ? t->piece_len[id] : t->text_len[id];
    if (n > most) most = n;
  }
  t->max_cover_bytes = most;
}

/* Bytes of text[len] that may become no token. */
static size_t count_droppable(const struct tokenizer *t, const char *text, size_t len) {
  size_t n = 0;
  for (size_t i = 0; t->any_droppable && i < len; i++) n += t->droppable[(unsigned char)text[i]];
  return n;
}

/* Indexes special tokens (control, user-defined, unknown) for leftmost-longest matching. */
static llb_status build_specials(struct tokenizer *t) {
  t->special_ids = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->special_ids));
  t->special_bucket = calloc(65536 + 1, sizeof(*t->special_bucket));
  t->special_short = malloc(256 * sizeof(*t->special_short));
  if (!t->special_ids || !t->special_bucket || !t->special_short)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "special token index");
  for (int i = 0; i < 256; i++) t->special_short[i] = -1;
  const uint8_t mask = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    if (!(t->attr[id] & mask) || t->text_len[id] == 0) continue;
    if (t->text_len[id] == 1) {
      unsigned char c = (unsigned char)tok_text(t, id)[0];
      if (t->special_short[c] < 0) t->special_short[c] = id;
      continue;
    }
    t->special_ids[t->n_special++] = id;
  }
  qsort_r(t->special_ids, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);
  for (int64_t i = 0; i < t->n_special; i++) {
    const char *s = tok_text(t, t->special_ids[i]);
    t->special_bucket[(((unsigned)(unsigned char)s[0] << 8) | (unsigned char)s[1]) + 1]++;
  }
  for (int k = 0; k < 65536; k++) t->special_bucket[k + 1] += t->special_bucket[k];
  return LLB_STATUS_OK;
}

static llb_status read_special_id(const struct gguf_file *f, const char *key, int32_t n_vocab, int32_t *id) {
  int64_t v;
  if (gguf_find_key(f, key) < 0) return LLB_STATUS_OK;
  llb_status st = gguf_get_int(f, key, &v);
  if (st != LLB_STATUS_OK) return st;
  if (v >= 0 && v < n_vocab) *id = (int32_t)v; /* out of range: keep default, as llama.cpp */
  return LLB_STATUS_OK;
}

static llb_status read_flag(const struct gguf_file *f, const char *key, bool *flag) {
  if (gguf_find_key(f, key) < 0) return LLB_STATUS_OK;
  return gguf_get_bool(f, key, flag);
}

/* ---------------------------------------------------------------- end of generation
 * llama.cpp's llama_vocab::impl::load (llama-vocab.cpp): the EOG set is eos, eot, eom, the
 * FIM pad/repo/file-separator tokens, and every token whose text is in k_eog_texts. eot, eom
 * and the FIM ids come from tokenizer.ggml.*_token_id when present, else from the first
 * token whose text is in their list (llama.cpp walks a hash map, so "first" is unspecified
 * there; here it is the lowest id). Tokens found by text are forced to CONTROL, as
 * llama.cpp does. Added here: tokenizer.ggml.eog_token_ids (an array some converters write)
 * joins the set where present. */

static const char *const k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|end_of_text|>", "<EOT>", "_<EOT>",
                                          "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", /* DeepSeek */
                                          "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                          "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                                          "<|end_of_text|>", "<end_of_utterance>", NULL};

/* Id of the lowest token whose text is in texts (NULL-terminated); -1 if none. */
static int32_t lowest_with_text(const struct tokenizer *t, const char *const *texts) {
  int32_t best = -1;
  for (size_t k = 0; texts[k]; k++) {
    const int32_t id = tok_lookup(t, texts[k], strlen(texts[k]));
    if (id >= 0 && (best < 0 || id < best)) best = id;
  }
  return best;
}

/* The special id of `key`, else the lowest token with one of texts (forced to CONTROL). */
static llb_status special_or_text(struct tokenizer *t, const struct gguf_file *f, const char *key,
                                  const char *const *texts, int32_t *id) {
  *id = -1;
  llb_status st = read_special_id(f, key, t->n_vocab, id);
  if (st != LLB_STATUS_OK || *id >= 0) return st;
  *id = lowest_with_text(t, texts);
  if (*id >= 0) t->attr[*id] |= TOK_ATTR_CONTROL;
  return LLB_STATUS_OK;
}

static void mark_eog(struct tokenizer *t, int32_t id) {
  if (id >= 0 && id < t->n_vocab) t->attr[id] |= TOK_ATTR_EOG;
}

static llb_status build_eog(struct tokenizer *t, const struct gguf_file *f) {
  int32_t eot, eom, pad, rep, sep;
  llb_status st;
  if ((st = special_or_text(t, f, "tokenizer.ggml.eot_token_id", k_eot_texts, &eot)) != LLB_STATUS_OK ||
      (st = special_or_text(t, f, "tokenizer.ggml.eom_token_id", k_eom_texts, &eom)) != LLB_STATUS_OK ||
      (st = special_or_text(t, f, "tokenizer.ggml.fim_pad_token_id", k_fim_pad_texts, &pad)) != LLB_STATUS_OK ||
      (st = special_or_text(t, f, "tokenizer.ggml.fim_rep_token_id", k_fim_rep_texts, &rep)) != LLB_STATUS_OK ||
      (st = special_or_text(t, f, "tokenizer.ggml.fim_sep_token_id", k_fim_sep_texts, &sep)) != LLB_STATUS_OK)
    return st;
  const int32_t by_id[] = {t->eos_id, eot, eom, pad, rep, sep};
  for (size_t i = 0; i < sizeof by_id / sizeof by_id[0]; i++) mark_eog(t, by_id[i]);
  for (size_t k = 0; k_eog_texts[k]; k++) {
    const int32_t id = tok_lookup(t, k_eog_texts[k], strlen(k_eog_texts[k]));
    if (id < 0) continue;
    t->attr[id] |= TOK_ATTR_CONTROL;
    mark_eog(t, id);
  }
  if (gguf_find_key(f, "tokenizer.ggml.eog_token_ids") >= 0) {
    struct gguf_array a;
    if ((st = gguf_get_array(f, "tokenizer.ggml.eog_token_ids", &a)) != LLB_STATUS_OK) return st;
    if (a.type != GGUF_VALUE_TYPE_INT32 && a.type != GGUF_VALUE_TYPE_UINT32 && a.type != GGUF_VALUE_TYPE_INT64 &&
        a.type != GGUF_VALUE_TYPE_UINT64)
      return LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer.ggml.eog_token_ids must be an integer array");
    for (uint64_t i = 0; i < a.len; i++) {
      const int64_t id = gguf_array_int(&a, i);
      if (id >= 0 && id < t->n_vocab) mark_eog(t, (int32_t)id); /* out of range: ignored, as bad ids are */
    }
  }
  /* llama.cpp's o200k_harmony workaround: with <|return|> and <|call|> in the set, <|end|>
   * only ends a message, not the generation, and is rendered as text. */
  const int32_t ret = tok_lookup(t, "<|return|>", 10), call = tok_lookup(t, "<|call|>", 8),
                end = tok_lookup(t, "<|end|>", 7);
  if (ret >= 0 && call >= 0 && end >= 0 && (t->attr[ret] & t->attr[call] & t->attr[end] & TOK_ATTR_EOG))
    t->attr[end] = TOK_ATTR_USER_DEFINED;
  t->n_eog = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) t->n_eog += (t->attr[id] & TOK_ATTR_EOG) != 0;
  t->eog_ids = malloc(((size_t)t->n_eog + 1) * sizeof(*t->eog_ids));
  if (!t->eog_ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "end-of-generation ids");
  for (int32_t id = 0, n = 0; id < t->n_vocab; id++)
    if (t->attr[id] & TOK_ATTR_EOG) t->eog_ids[n++] = id;
  return LLB_STATUS_OK;
}

static void str_copy(char *dst, size_t cap, struct gguf_str s) {
  size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
  memcpy(dst, s.data, n);
  dst[n] = '\0';
}

llb_status tokenizer_load(const struct gguf_file *f, struct tokenizer **out) {
  if (!f || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tokenizer_load: NULL argument");
  *out = NULL;
  struct tokenizer *t = calloc(1, sizeof(*t));
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tokenizer");
  llb_status st;
  struct gguf_str model, pre = {"default", 7};
  if ((st = gguf_get_str(f, "tokenizer.ggml.model", &model)) != LLB_STATUS_OK) goto fail;
  str_copy(t->model_name, sizeof(t->model_name), model);
  if (gguf_find_key(f, "tokenizer.ggml.pre") >= 0 && (st = gguf_get_str(f, "tokenizer.ggml.pre", &pre)) != LLB_STATUS_OK)
    goto fail;
  str_copy(t->pre_name, sizeof(t->pre_name), pre);
  if (gguf_str_eq(model, "gpt2")) {
    t->kind = TOK_MODEL_KIND_BPE;
    t->bos_id = t->eos_id = t->unk_id = -1;
  } else if (gguf_str_eq(model, "llama")) {
    t->kind = TOK_MODEL_KIND_SPM;
    t->bos_id = 1, t->eos_id = 2, t->unk_id = 0;
    t->add_bos = true;
    t->add_space_prefix = true;
  } else {
    st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (supported: gpt2, llama)",
                  (int)model.len, model.data);
    goto fail;
  }

  struct gguf_array toks;
  if ((st = gguf_get_array(f, "tokenizer.ggml.tokens", &toks)) != LLB_STATUS_OK) goto fail;
  if (toks.type != GGUF_VALUE_TYPE_STRING || toks.len == 0 || toks.len > INT32_MAX) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer.ggml.tokens must be a non-empty string array");
    goto fail;
  }
  t->n_vocab = (int32_t)toks.len;
  if ((st = tok_vocab_load(t, &toks)) != LLB_STATUS_OK) goto fail;

  t->scores = calloc((size_t)t->n_vocab, sizeof(*t->scores));
  t->attr = malloc((size_t)t->n_vocab);
  if (!t->scores || !t->attr) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token scores");
    goto fail;
  }
  memset(t->attr, TOK_ATTR_NORMAL, (size_t)t->n_vocab);
  if (gguf_find_key(f, "tokenizer.ggml.scores") >= 0) {
    struct gguf_array sc;
    if ((st = gguf_get_array(f, "tokenizer.ggml.scores", &sc)) != LLB_STATUS_OK) goto fail;
    if ((sc.type != GGUF_VALUE_TYPE_FLOAT32 && sc.type != GGUF_VALUE_TYPE_INT32) || sc.len < toks.len) {
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer.ggml.scores: need %d float32/int32 values", t->n_vocab);
      goto fail;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
      t->scores[i] = sc.type == GGUF_VALUE_TYPE_FLOAT32 ? gguf_array_f32(&sc, (uint64_t)i) : (float)gguf_array_int(&sc, (uint64_t)i);
  }
  if (gguf_find_key(f, "tokenizer.ggml.token_type") >= 0) {
    struct gguf_array ty;
    if ((st = gguf_get_array(f, "tokenizer.ggml.token_type", &ty)) != LLB_STATUS_OK) goto fail;
    if (ty.type != GGUF_VALUE_TYPE_INT32 || ty.len < toks.len) {
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer.ggml.token_type: need %d int32 values", t->n_vocab);
      goto fail;
    }
    static const uint8_t map[7] = {0, TOK_ATTR_NORMAL, TOK_ATTR_UNKNOWN, TOK_ATTR_CONTROL,
                                   TOK_ATTR_USER_DEFINED, TOK_ATTR_UNUSED, TOK_ATTR_BYTE};
    for (int32_t i = 0; i < t->n_vocab; i++) {
      int64_t v = gguf_array_int(&ty, (uint64_t)i);
      t->attr[i] = v >= 0 && v < 7 ? map[v] : 0;
    }
  }
  if (t->kind == TOK_MODEL_KIND_BPE) {
    if ((st = tok_merges_load(t, f)) != LLB_STATUS_OK) goto fail;
    if ((st = tok_bpe_init(t)) != LLB_STATUS_OK) goto fail;
  }
  if ((st = read_special_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos_id)) != LLB_STATUS_OK ||
      (st = read_special_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos_id)) != LLB_STATUS_OK ||
      (st = read_special_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk_id)) != LLB_STATUS_OK ||
      (st = read_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos)) != LLB_STATUS_OK ||
      (st = read_flag(f, "tokenizer.ggml.add_eos_token", &t->add_eos)) != LLB_STATUS_OK)
    goto fail;
  if (t->kind == TOK_MODEL_KIND_SPM &&
      (st = read_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)) != LLB_STATUS_OK)
    goto fail;
  if (t->bos_id >= t->n_vocab) t->bos_id = -1;
  if (t->eos_id >= t->n_vocab) t->eos_id = -1;
  if (t->unk_id >= t->n_vocab) t->unk_id = -1;
  if ((st = build_eog(t, f)) != LLB_STATUS_OK) goto fail;
  if ((t->add_bos && t->bos_id < 0) || (t->add_eos && t->eos_id < 0)) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "tokenizer asks to add %s but has no %s token id", t->add_bos ? "BOS" : "EOS",
                  t->add_bos ? "BOS" : "EOS");
    goto fail;
  }

  for (int b = 0; b < 256; b++) {
    char buf[8];
    size_t n;
    if (t->kind == TOK_MODEL_KIND_SPM) {
      static const char hex[] = "0123456789ABCDEF";
      memcpy(buf, "<0x", 3);
      buf[3] = hex[b >> 4], buf[4] = hex[b & 15], buf[5] = '>';
      t->byte_tokens[b] = tok_lookup(t, buf, 6);
      if (t->byte_tokens[b] < 0) {
        buf[0] = (char)b;
        t->byte_tokens[b] = tok_lookup(t, buf, 1);
      }
    } else {
      n = utf8_put(buf, tok_bpe_byte_to_cpt((uint8_t)b));
      t->byte_tokens[b] = tok_lookup(t, buf, n);
    }
  }
  if ((st = build_pieces(t)) != LLB_STATUS_OK || (st = build_specials(t)) != LLB_STATUS_OK) goto fail;
  set_max_cover(t);
  *out = t;
  return LLB_STATUS_OK;
fail:
  tokenizer_destroy(t);
  return st;
}

void tokenizer_destroy(struct tokenizer *t) {
  if (!t) return;
  free(t->text_arena);
  free(t->text_off);
  free(t->text_len);
  free(t->scores);
  free(t->attr);
  free(t->piece_arena);
  free(t->piece_off);
  free(t->piece_len);
  free(t->tok_slots);
  free(t->merge_arena);
  free(t->merge_off);
  free(t->merge_left);
  free(t->merge_right);
  free(t->merge_slots);
  free(t->special_ids);
  free(t->special_bucket);
  free(t->special_short);
  free(t->eog_ids);
  for (int i = 0; i < t->n_regex; i++) pcre2_code_free(t->regex[i]);
  free(t);
}

int32_t tokenizer_vocab_size(const struct tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos_id(const struct tokenizer *t) { return t->bos_id; }
int32_t tokenizer_eos_id(const struct tokenizer *t) { return t->eos_id; }
bool tokenizer_add_bos(const struct tokenizer *t) { return t->add_bos; }
size_t tokenizer_max_piece_bytes(const struct tokenizer *t) { return t->max_piece_len; }

bool tokenizer_is_control(const struct tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN));
}

bool tokenizer_is_eog(const struct tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && (t->attr[id] & TOK_ATTR_EOG);
}

int32_t tokenizer_eog_ids(const struct tokenizer *t, const int32_t **ids_out) {
  if (ids_out) *ids_out = t->eog_ids;
  return t->n_eog;
}

const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len_out) {
  if (id < 0 || id >= t->n_vocab) return NULL;
  if (len_out) *len_out = t->text_len[id];
  return tok_text(t, id);
}

int32_t tokenizer_find_token(const struct tokenizer *t, const char *text, size_t len) {
  return len ? tok_lookup(t, text, len) : -1;
}

/* The special token that starts at s (n bytes left), longest first; -1 if none. */
static int32_t match_special(const struct tokenizer *t, const char *s, size_t n, bool parse_special) {
  const uint8_t hidden = parse_special ? 0 : (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN);
  if (n >= 2) {
    unsigned k = ((unsigned)(unsigned char)s[0] << 8) | (unsigned char)s[1];
    for (uint32_t i = t->special_bucket[k]; i < t->special_bucket[k + 1]; i++) {
      int32_t id = t->special_ids[i];
      if (t->text_len[id] <= n && !(t->attr[id] & hidden) && memcmp(tok_text(t, id), s, t->text_len[id]) == 0)
        return id;
    }
  }
  int32_t id = t->special_short[(unsigned char)s[0]];
  return id >= 0 && !(t->attr[id] & hidden) ? id : -1;
}

int64_t tokenizer_min_tokens(const struct tokenizer *t, const char *text, size_t len) {
  if (!t || (!text && len)) return 0;
  return tok_min_tokens(t, len - count_droppable(t, text, len));
}

/* One fragment (text between special tokens); `after` bytes of text follow it. */
static llb_status encode_fragment(const struct tokenizer *t, const char *s, size_t n, size_t after, bool prev_special,
                                  struct tok_ids *out) {
  out->bytes_after = after;
  llb_status st = tok_ids_check_bound(t, out, n);
  if (st != LLB_STATUS_OK) return st;
  if (t->kind == TOK_MODEL_KIND_SPM) return tok_spm_encode(t, s, n, t->add_space_prefix && prev_special, out);
  return n ? tok_bpe_encode(t, s, n, out) : LLB_STATUS_OK;
}

llb_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids_out, int64_t *n_out) {
  return tokenizer_encode_at_most(t, text, len, add_special, parse_special, 0, ids_out, n_out);
}

llb_status tokenizer_encode_at_most(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                                    bool parse_special, int64_t max_tokens, int32_t **ids_out, int64_t *n_out) {
  if (!t || !ids_out || !n_out || (!text && len) || max_tokens < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tokenizer_encode: NULL argument or max_tokens < 0");
  *ids_out = NULL;
  *n_out = 0;
  struct tok_ids v = {.max_len = max_tokens, .droppable = max_tokens ? count_droppable(t, text, len) : 0};
  llb_status st = LLB_STATUS_OK;
  if (add_special && t->add_bos && (st = tok_ids_push(&v, t->bos_id)) != LLB_STATUS_OK) goto fail;
  if ((st = tok_ids_check_bound(t, &v, len)) != LLB_STATUS_OK) goto fail; /* before any work */
  /* Split at special tokens (llama.cpp tokenizer_st_partition); an SPM fragment gets the
   * prefix space when it opens the text or follows a special token. */
  size_t frag = 0, pos = 0;
  bool prev_special = true;
  while (pos < len) {
    int32_t id = match_special(t, text + pos, len - pos, parse_special);
    if (id < 0) {
      pos++;
      continue;
    }
    if (pos > frag) {
      if ((st = encode_fragment(t, text + frag, pos - frag, len - pos, prev_special, &v)) != LLB_STATUS_OK) goto fail;
    }
    if ((st = tok_ids_push(&v, id)) != LLB_STATUS_OK) goto fail;
    pos += t->text_len[id];
    frag = pos;
    prev_special = true;
  }
  if (len > frag && (st = encode_fragment(t, text + frag, len - frag, 0, prev_special, &v)) != LLB_STATUS_OK) goto fail;
  if (add_special && t->add_eos && (st = tok_ids_push(&v, t->eos_id)) != LLB_STATUS_OK) goto fail;
  if (max_tokens > 0 && v.len > max_tokens) {
    v.at_least = v.len;
    st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "the text makes %lld tokens, more than %lld", (long long)v.len,
                  (long long)max_tokens);
    goto fail;
  }
  *ids_out = v.data;
  *n_out = v.len;
  return LLB_STATUS_OK;
fail:
  free(v.data);
  if (st == LLB_STATUS_TOO_LARGE) *n_out = v.at_least; /* only the bound stops with TOO_LARGE */
  return st;
}

/* Piece of id for rendering; NULL length 0 when hidden. */
static const char *piece_of(const struct tokenizer *t, int32_t id, bool render_special, size_t *n) {
  if (!render_special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) {
    *n = 0;
    return NULL;
  }
  *n = t->piece_len[id];
  return t->piece_arena + t->piece_off[id];
}

int64_t tokenizer_token_to_piece(const struct tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
  if (!t || id < 0 || id >= t->n_vocab) return -1;
  size_t n;
  const char *p = piece_of(t, id, render_special, &n);
  if (n) memcpy(buf, p, n < cap ? n : cap);
  return (int64_t)n;
}

llb_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int64_t n, bool render_special,
                            char **text_out, size_t *len_out) {
  if (!t || !text_out || (!ids && n > 0) || n < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tokenizer_decode: bad argument");
  *text_out = NULL;
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n_vocab)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token id %d at position %lld is outside the vocabulary (%d)", ids[i],
                      (long long)i, t->n_vocab);
    total += t->piece_len[ids[i]];
  }
  char *s = malloc(total + 1);
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "decoded text of %zu bytes", total);
  size_t o = 0;
  bool strip = t->kind == TOK_MODEL_KIND_SPM && t->add_space_prefix;
  for (int64_t i = 0; i < n; i++) {
    size_t pn;
    const char *p = piece_of(t, ids[i], render_special, &pn);
    if (!p) continue; /* hidden special token: does not count as the first piece */
    if (strip && pn && p[0] == ' ') p++, pn--;
    strip = false;
    if (pn) memcpy(s + o, p, pn);
    o += pn;
  }
  s[o] = '\0';
  *text_out = s;
  if (len_out) *len_out = o;
  return LLB_STATUS_OK;
}

/* Private state of model/tokenizer/tokenizer*.c: the vocabulary, its hash index, BPE merges, special
 * tokens, and the pre-tokenizer. Not for use outside model/tokenizer/tokenizer*.c. */
#ifndef LLB_MODEL_TOKENIZER_INTERNAL_H
#define LLB_MODEL_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

enum tok_model_kind { TOK_MODEL_KIND_BPE, TOK_MODEL_KIND_SPM };

/* Token attributes, from tokenizer.ggml.token_type (llama.cpp's llama_token_attr subset). */
enum tok_attr {
  TOK_ATTR_NORMAL = 1u << 0,
  TOK_ATTR_UNKNOWN = 1u << 1,
  TOK_ATTR_CONTROL = 1u << 2,
  TOK_ATTR_USER_DEFINED = 1u << 3,
  TOK_ATTR_BYTE = 1u << 4,
  TOK_ATTR_UNUSED = 1u << 5,
  TOK_ATTR_EOG = 1u << 6, /* llmbus's own: in the end-of-generation set (tokenizer_is_eog) */
};

#define TOK_MAX_REGEXES 8

/* A growable array of int32 token ids, with the bound of tokenizer_encode_at_most. */
struct tok_ids {
  int32_t *data;
  int64_t len, cap;
  int64_t max_len;    /* 0 = none; else the encoders stop (TOO_LARGE) once the ids provably exceed it */
  size_t bytes_after; /* text after the fragment being encoded: it adds at least its lower bound */
  int64_t at_least;   /* set when the bound stopped the encoding: the count proven, > max_len */
  size_t droppable;   /* bytes of the whole text that may become no token: not counted by the bound */
};

struct tokenizer {
  enum tok_model_kind kind;
  char model_name[32];
  char pre_name[64];
  int32_t n_vocab;

  char *text_arena;       /* all token texts back to back */
  uint64_t *text_off;     /* [n_vocab] offset into text_arena */
  uint32_t *text_len;     /* [n_vocab] */
  float *scores;          /* [n_vocab] SPM merge scores (0 if absent) */
  uint8_t *attr;          /* [n_vocab] enum tok_attr bits */
  char *piece_arena;      /* decoded pieces (render_special form) back to back */
  uint64_t *piece_off;    /* [n_vocab] */
  uint32_t *piece_len;    /* [n_vocab] */
  size_t max_piece_len;
  size_t max_cover_bytes; /* most input bytes one token can stand for (tokenizer_min_tokens) */
  bool droppable[256];    /* byte b may become no token at all (no token of its own, nor <unk> for SPM) */
  bool any_droppable;

  /* Private, not base/strmap: keyed by (pointer, length) slices of the text being tokenized, no copy */
  int32_t *tok_slots;     /* open-addressing index text → id; -1 = empty */
  uint64_t tok_mask;      /* slots - 1 */

  int64_t n_merges;
  char *merge_arena;      /* "left right" strings back to back */
  uint64_t *merge_off;    /* [n_merges] */
  uint32_t *merge_left;   /* [n_merges] length of the left part */
  uint32_t *merge_right;  /* [n_merges] length of the right part */
  int32_t *merge_slots;   /* open-addressing index (left, right) → rank; -1 = empty (private: slice keys) */
  uint64_t merge_mask;

  /* Special tokens (control, user-defined, unknown) of two or more bytes, bucketed by their
   * first two bytes, each bucket sorted by text length, longest first; one-byte ones in
   * special_short. Matched leftmost-longest, as HF's added vocabulary. */
  int32_t *special_ids;   /* [n_special] */
  int64_t n_special;
  uint32_t *special_bucket; /* [65536 + 1] CSR starts into special_ids */
  int32_t *special_short; /* [256] longest one-byte special token per byte, -1 if none */

  int32_t bos_id, eos_id, unk_id;
  int32_t *eog_ids;       /* [n_eog] end-of-generation set, ascending */
  int32_t n_eog;
  bool add_bos, add_eos, add_space_prefix, ignore_merges;

  int32_t byte_tokens[256]; /* BPE: token of byte b's GPT-2 char; SPM: <0xNN>; -1 if none */

  int n_regex;
  pcre2_code *regex[TOK_MAX_REGEXES]; /* pre-tokenizer, applied in sequence */
};

/* Text of token id (t->text_len[id] bytes, not NUL-terminated). */
static inline const char *tok_text(const struct tokenizer *t, int32_t id) { return t->text_arena + t->text_off[id]; }

/* Copies the token texts of toks (t->n_vocab strings) into t->text_arena and indexes them
 * (t->tok_slots). MALFORMED on a token over 4 GiB or a repeated text, OUT_OF_MEMORY.
 * (tokenizer_vocab.c) */
llb_status tok_vocab_load(struct tokenizer *t, const struct gguf_array *toks);

/* Reads tokenizer.ggml.merges ("left right" strings; rank = index) into t->merge_* and indexes
 * them; a merge without a space is kept (its rank) and never matched. MALFORMED / TOO_LARGE /
 * OUT_OF_MEMORY. (tokenizer_vocab.c) */
llb_status tok_merges_load(struct tokenizer *t, const struct gguf_file *f);

/* Id of the token whose text is text[0..len); -1 if none. (tokenizer_vocab.c) */
int32_t tok_lookup(const struct tokenizer *t, const char *text, size_t len);

/* BPE rank of merging a[0..alen) with b[0..blen); -1 if no such merge. (tokenizer_vocab.c) */
int32_t tok_merge_rank(const struct tokenizer *t, const char *a, size_t alen, const char *b, size_t blen);

/* Appends one id. OUT_OF_MEMORY on failure. (tokenizer_vocab.c) */
llb_status tok_ids_push(struct tok_ids *v, int32_t id);

/* ceil(bytes / t->max_cover_bytes): the fewest tokens `bytes` counted bytes make
 * (tokenizer_min_tokens). (tokenizer_vocab.c) */
int64_t tok_min_tokens(const struct tokenizer *t, size_t bytes);

/* With v's bound set: TOO_LARGE (message naming the bound; v->at_least the count proven) when
 * v->len plus the lower bound of bytes_left + v->bytes_after more bytes exceeds v->max_len.
 * Call before encoding a piece of text, bytes_left = what is left of the fragment.
 * (tokenizer_vocab.c) */
llb_status tok_ids_check_bound(const struct tokenizer *t, struct tok_ids *v, size_t bytes_left);

/* Length of the UTF-8 sequence that starts with byte c (1 for invalid lead bytes). */
static inline size_t tok_utf8_len(unsigned char c) {
  static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lens[c >> 4];
}

/* Byte-level BPE pre-tokenizer setup: regexes for t->pre_name, flags (ignore_merges, add_bos
 * default). UNSUPPORTED naming the value if unknown. (tokenizer_bpe.c) */
llb_status tok_bpe_init(struct tokenizer *t);

/* Encodes one fragment of raw text (no special tokens in it) with byte-level BPE, appending
 * to out. (tokenizer_bpe.c) */
llb_status tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* GPT-2 byte → code point map and its inverse (code point → byte, -1 if unmapped).
 * (tokenizer_bpe.c) */
uint32_t tok_bpe_byte_to_cpt(uint8_t b);
int tok_bpe_cpt_to_byte(uint32_t cpt);

/* Encodes one fragment with SentencePiece BPE (scores), with the leading space added when
 * add_prefix_space, appending to out. (tokenizer_spm.c) */
llb_status tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool add_prefix_space,
                          struct tok_ids *out);

#endif

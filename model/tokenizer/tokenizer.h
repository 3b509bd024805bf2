/* Tokenizer of a GGUF model: byte-level BPE ("gpt2") and SentencePiece BPE ("llama").
 *
 * Follows llama.cpp's llama-vocab.cpp (tokenizer.ggml.* keys, the pre-tokenizer regexes of
 * each tokenizer.ggml.pre value, token types, BOS/EOS flags) and Hugging Face tokenizers for
 * what llama.cpp leaves to them (special tokens matched leftmost-longest, the SPM decoder's
 * leading-space rule). Pre-tokenizer regexes run on PCRE2 (UTF + UCP), so \p{L}, \p{N}, \p{P}
 * follow PCRE2's Unicode tables.
 *
 * A tokenizer is immutable after tokenizer_load: any number of threads may encode and decode
 * with one tokenizer at the same time.
 */
#ifndef LLB_MODEL_TOKENIZER_H
#define LLB_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/gguf/gguf.h"

struct tokenizer; /* opaque */

/* Builds the tokenizer described by f's tokenizer.ggml.* metadata (model, pre, tokens,
 * scores, token_type, merges, bos/eos/unknown ids, add_bos/add_eos/add_space_prefix).
 * Copies everything it needs: f may be closed afterwards. Caller frees *out with
 * tokenizer_destroy. Errors: UNSUPPORTED (tokenizer.ggml.model or tokenizer.ggml.pre value
 * not handled; the message names it), NOT_FOUND / MALFORMED (a required key is absent or
 * of the wrong type, or a duplicate token), OUT_OF_MEMORY, INTERNAL (a regex failed to
 * compile). On failure *out is NULL. */
llb_status tokenizer_load(const struct gguf_file *f, struct tokenizer **out);

/* Frees a tokenizer; NULL is accepted. */
void tokenizer_destroy(struct tokenizer *t);

/* Number of tokens in the vocabulary (tokenizer.ggml.tokens length). */
int32_t tokenizer_vocab_size(const struct tokenizer *t);

/* BOS / EOS token ids; -1 if the model has none. */
int32_t tokenizer_bos_id(const struct tokenizer *t);
int32_t tokenizer_eos_id(const struct tokenizer *t);

/* Whether encoding with add_special prepends BOS (tokenizer.ggml.add_bos_token, else
 * llama.cpp's default for the model/pre type). */
bool tokenizer_add_bos(const struct tokenizer *t);

/* True for control and unknown tokens (token_type CONTROL/UNKNOWN, or text that llama.cpp
 * treats as end-of-generation such as "<|endoftext|>"); false for a bad id. These are the
 * tokens that token_to_piece hides unless render_special. */
bool tokenizer_is_control(const struct tokenizer *t, int32_t id);

/* True when generating token id ends the generation: id is in the model's end-of-generation
 * set, llama.cpp's rule (llama-vocab.cpp special_eog_ids): tokenizer.ggml.eos_token_id,
 * eot_token_id and eom_token_id; the FIM pad / repo / file-separator tokens
 * (tokenizer.ggml.fim_{pad,rep,sep}_token_id, else found by text: <|fim_pad|>, <|repo_name|>,
 * <|file_sep|>, ...); every token whose text is one of <|eot_id|> <|im_end|> <|end|>
 * <|return|> <|call|> <end_of_turn> <|endoftext|> <|eom_id|> <EOT> _<EOT> <|end_of_text|>
 * <end_of_utterance>; and the ids of tokenizer.ggml.eog_token_ids where the file has it. A
 * control token outside the set (<file_sep>, <|im_start|>) does not end generation. False
 * for a bad id. */
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);

/* The end-of-generation set, ascending, into *ids_out (valid while t lives; may be NULL when
 * ids_out is); returns its size (0 when the model has none). */
int32_t tokenizer_eog_ids(const struct tokenizer *t, const int32_t **ids_out);

/* Text of token id as stored in the vocabulary (byte-level BPE form, '▁' for SPM spaces),
 * NOT NUL-terminated; *len_out gets its length. NULL for a bad id. Valid while t lives. */
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len_out);

/* Token id whose vocabulary text is exactly text[0..len); -1 if none. */
int32_t tokenizer_find_token(const struct tokenizer *t, const char *text, size_t len);

/* Encodes len bytes of UTF-8 text (NUL bytes allowed; invalid UTF-8 is encoded byte by byte).
 * add_special: BOS/EOS per the file's flags. parse_special: the text of control tokens
 * ("<|im_start|>") becomes that token; user-defined tokens are always matched (as llama.cpp
 * and HF do). *ids_out is malloc'd ([*n_out] ids; may be NULL when *n_out == 0), the caller
 * free()s it. Errors: INVALID_ARGUMENT (NULL text with len > 0), OUT_OF_MEMORY, INTERNAL
 * (regex engine failure). Cost: O(n log n) in the text length. */
llb_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids_out, int64_t *n_out);

/* tokenizer_encode that gives up once the text provably makes more than max_tokens tokens
 * (BOS/EOS included; 0 = no bound, as tokenizer_encode): before the work, before each fragment
 * between special tokens and before each pre-token of byte-level BPE, the ids so far plus
 * tokenizer_min_tokens of the bytes left are checked, so a text far over the bound costs no
 * tokenization at all and one near it about max_tokens tokens' work. Errors as tokenizer_encode,
 * and TOO_LARGE when over: *ids_out NULL, *n_out = the count proven (> max_tokens: the exact
 * count only when the whole text was encoded), the message names both. */
llb_status tokenizer_encode_at_most(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                                    bool parse_special, int64_t max_tokens, int32_t **ids_out, int64_t *n_out);

/* A lower bound on the tokens tokenizer_encode makes of text[len] (add_special false):
 * ceil(counted bytes / the most input bytes one token can stand for), which is the longest piece
 * of a normal token and the longest text of any other (a byte fallback or <unk> stands for one
 * byte); the counted bytes are all but those the vocabulary has no token for (the encoders drop
 * them, as llama.cpp does). SmolLM2's vocabulary: 81 bytes (a newline and 80 spaces). Linear in
 * len (a table lookup a byte) when the vocabulary lacks some byte, O(1) otherwise. */
int64_t tokenizer_min_tokens(const struct tokenizer *t, const char *text, size_t len);

/* Bytes of one token as they appear in text (byte-level BPE unmapped, SPM '▁' → ' ',
 * <0xNN> → byte). Control tokens give "" unless render_special; user-defined tokens always
 * give their text. Writes min(len, cap) bytes to buf (no NUL) and returns the byte length
 * (may exceed cap: then nothing is written beyond cap); -1 on a bad id. */
int64_t tokenizer_token_to_piece(const struct tokenizer *t, int32_t id, bool render_special,
                                 char *buf, size_t cap);

/* Longest piece of any token, in bytes (sizes buffers for token_to_piece). */
size_t tokenizer_max_piece_bytes(const struct tokenizer *t);

/* Whole-sequence decode: the concatenation of the pieces, except that for SPM models with
 * add_space_prefix the first rendered piece loses one leading space (HF's Metaspace/Strip
 * decoder; tokens hidden by !render_special do not count as first). Bytes are returned as
 * they are (no U+FFFD substitution), so decode(encode(s)) == s for every s the model can
 * represent. *text_out is malloc'd and NUL-terminated, the caller frees it; *len_out (may be
 * NULL) gets the length without the NUL. Errors: INVALID_ARGUMENT (an id out of range; the
 * message names it), OUT_OF_MEMORY. No clean_up_tokenization_spaces is applied. */
llb_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int64_t n,
                            bool render_special, char **text_out, size_t *len_out);

/* Incremental detokenizer for streamed output: push token ids one at a time, get back only
 * complete UTF-8. An incomplete multi-byte sequence at the end is held back until the token
 * that completes it (e.g. an emoji split over <0xF0><0x9F><0x98><0x80> byte-fallback
 * tokens); bytes that can never become valid UTF-8 come out as U+FFFD (one per maximal
 * invalid subpart, as WHATWG/HF's from_utf8_lossy), and detok_stream_flush ends the stream
 * by emitting the held-back rest the same way. The concatenation of everything emitted
 * equals tokenizer_decode of the same ids whenever that decode is valid UTF-8.
 *
 * Leading space (SPM models with add_space_prefix): when strip_leading_space is true the
 * first rendered piece loses one leading space, as tokenizer_decode does for a whole
 * sequence. Pass true only when the stream starts at the beginning of a text; for tokens
 * generated after a prompt pass false (HF/vLLM decode them after the prompt, so "▁The"
 * gives " The").
 *
 * Caller-allocated; init/free in pairs. Not thread-safe (one stream per request). */
struct detok_stream {
  const struct tokenizer *tok;
  bool render_special;
  bool strip_leading_space; /* still to apply to the next rendered piece */
  uint8_t pending[4];       /* incomplete UTF-8 sequence held back */
  size_t num_pending;
  char *out;                /* [out_cap] emitted text of the last call, owned by the stream */
  size_t out_cap;
  size_t out_len;
};

/* Prepares s for tokenizer t (which must outlive it). Allocates the output buffer once.
 * Errors: INVALID_ARGUMENT, OUT_OF_MEMORY (s is then safe to free). */
llb_status detok_stream_init(struct detok_stream *s, const struct tokenizer *t, bool render_special,
                             bool strip_leading_space);

/* Frees the buffer of s; a zeroed or already freed s is accepted. */
void detok_stream_free(struct detok_stream *s);

/* Feeds one token id. *text_out / *len_out get the newly complete UTF-8 (may be empty),
 * valid until the next call on s. Errors: INVALID_ARGUMENT (bad id; the stream is unchanged). */
llb_status detok_stream_push(struct detok_stream *s, int32_t id, const char **text_out, size_t *len_out);

/* Ends the stream: emits the held-back bytes as U+FFFD and resets the pending state. */
void detok_stream_flush(struct detok_stream *s, const char **text_out, size_t *len_out);

#endif

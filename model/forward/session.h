/* A few sequences through llama_forward in this process, no engine: the runner of the tools
 * that evaluate a model directly (`llmbus generate --inproc`, `llmbus perplexity`, the
 * in-process leg of `llmbus-bench engine`, `llmbus-kernel-bench`).
 *
 * A session owns a forward context (model/forward/forward.h) and a paged KV cache of max_seqs
 * sequences of up to max_context tokens each, every sequence in its own contiguous blocks
 * (sequence q's block b is cache block q * blocks_per_seq + b, so its token at position p sits
 * at slot q * blocks_per_seq * 16 + p). A feed appends one sequence's tokens in steps of at
 * most forward.max_num_tokens rows, cut from the feed's first token, so the steps (and, the
 * forward's rows being independent of the batch, the logits) are those of a caller who cut
 * them by hand; llama_session_decode_batch steps several sequences by one token each. The
 * session keeps no token ids: the caller holds each sequence (prompt and output) and the
 * sampler reads it there.
 */
#ifndef LLB_MODEL_SESSION_H
#define LLB_MODEL_SESSION_H

#include <stdint.h>

#include "base/status.h"
#include "kernels/backend.h" /* enum backend_kv_dtype */
#include "model/forward/forward.h"

struct llama_session;

struct llama_session_options {
  int32_t max_context; /* tokens one sequence may hold, >= 1 (the KV cache is sized for it) */
  int32_t max_seqs;    /* sequences, 0 = 1 */
  /* Logits rows one step may return (0 = 1): the session's logits buffer is
   * [max_logits, vocab_size] floats. A feed's rows per step and a batch decode's sequences are
   * bounded by it. */
  int32_t max_logits;
  enum backend_kv_dtype kv_dtype; /* the cache's element type (0 = fp16, llama.cpp's default) */
  /* Passed to llama_forward_ctx_create_opts as given: max_num_tokens is the rows of one step
   * (>= 1), and threads, numerics (matmul, attention_order), max_model_len, packed_cache_dir and
   * the backend come from here. */
  struct llama_forward_options forward;
};

/* Creates a session over m (borrowed: m must outlive it). Caller frees with
 * llama_session_destroy. Errors: INVALID_ARGUMENT (max_context < 1, max_seqs or max_logits
 * < 0, forward.max_num_tokens < 1), those of llama_forward_ctx_create_opts and
 * llama_kv_cache_create_dtype_for (UNSUPPORTED for a kv_dtype the backend or head_dim cannot
 * hold), TOO_LARGE, OUT_OF_MEMORY. */
llb_status llama_session_create(const struct llama_model *m, const struct llama_session_options *o,
                                struct llama_session **out);

/* NULL ok. */
void llama_session_destroy(struct llama_session *s);

/* The session's forward context (its backend, llama_forward_ctx_packed_shared). */
const struct llama_forward_ctx *llama_session_forward(const struct llama_session *s);

/* Runs sequence seq with LoRA adapter a from its next step on (NULL = the base model; a is
 * borrowed and must outlive its use; the forward's max_lora_rank must cover it). INVALID_ARGUMENT
 * for a seq out of range. */
llb_status llama_session_set_lora(struct llama_session *s, int32_t seq, const struct llama_lora *a);

/* Tokens sequence seq holds (its next token gets this position); 0 for a seq out of range. */
int32_t llama_session_length(const struct llama_session *s, int32_t seq);

/* The model's vocab_size: the length of a logits row. */
int32_t llama_session_vocab_size(const struct llama_session *s);

/* Keeps the first n tokens of sequence seq (0 <= n <= its length; 0 = reset): its next feed
 * continues at position n and overwrites the cache from there. INVALID_ARGUMENT otherwise. */
llb_status llama_session_truncate(struct llama_session *s, int32_t seq, int32_t n);

/* Called once per step that computed logits: rows [count, vocab_size] fp32 are the logits of
 * the feed's tokens first_index .. first_index + count - 1 (indices into the feed's `tokens`),
 * valid during the call. A non-OK status stops the feed and is returned by it. */
typedef llb_status (*llama_session_logits_fn)(void *user, int32_t first_index, int32_t count, const float *rows);

/* Appends tokens[n] (n >= 1) to sequence seq in steps of at most forward.max_num_tokens rows.
 * The tokens at indices [logits_first, logits_end) of this feed produce logits, handed to fn
 * step by step; logits_first == logits_end asks for none. fn NULL: the rows are computed but
 * not handed out (the last step's stay in the session's buffer, which llama_session_eval
 * returns). Errors: INVALID_ARGUMENT (seq out of range, n < 1, the sequence would pass
 * max_context, a range outside [0, n], more than max_logits rows in a step: all refused before
 * any step runs), those of llama_forward (a token id outside the vocabulary), fn's. On an
 * error the length is that of the steps completed. */
llb_status llama_session_feed(struct llama_session *s, int32_t seq, const int32_t *tokens, int32_t n,
                              int32_t logits_first, int32_t logits_end, llama_session_logits_fn fn, void *user);

/* llama_session_feed of tokens[n] to seq that returns the last token's logits [vocab_size] in
 * *logits (NULL on an error): the session's buffer, which the caller may modify (the sampler
 * masks it in place), valid until the next call on s. A prompt's prefill, or one decode step
 * with n = 1. Errors: those of llama_session_feed. */
llb_status llama_session_eval(struct llama_session *s, int32_t seq, const int32_t *tokens, int32_t n, float **logits);

/* One step of one token for each of the sequences [first_seq, first_seq + n_seqs): tokens
 * [n_seqs] (tokens[i] to sequence first_seq + i), logits [n_seqs, vocab_size] in *logits as
 * llama_session_eval's. INVALID_ARGUMENT (the range outside the session, n_seqs above
 * max_logits or forward.max_num_tokens, a sequence full), llama_forward's errors (lengths then
 * unchanged). */
llb_status llama_session_decode_batch(struct llama_session *s, int32_t first_seq, int32_t n_seqs,
                                      const int32_t *tokens, float **logits);

#endif

/* Structured output in the worker (pure logic): per request a matcher over the grammar of its
 * spec, the allowed-token bitmask of each step, and its application to a row of logits
 * (vLLM v1 vllm/v1/structured_output/: StructuredOutputManager's grammar cache and
 * grammar_bitmask, gpu_model_runner apply_grammar_bitmask).
 *
 * Grammars are compiled once per distinct spec and shared by every request with that spec
 * (cached by a hash of kind + spec, compared byte for byte; at most RUNNER_SO_MAX_GRAMMARS
 * live, unused ones evicted oldest first). The vocabulary (model/structured/structured_output.h
 * so_vocab) is built once from the model's tokenizer by the caller.
 *
 * A request's matcher follows its output tokens lazily: runner_so_req_sync accepts the
 * outputs it has not seen, or resets and replays them all when they changed under it (a
 * request resumed after preemption arrives with its outputs; the scheduler may trim outputs
 * it did not accept). So the matcher is advanced by each sampled token at the start of the
 * next step, which the model runner runs on a helper thread while the forward pass runs.
 *
 * Thread safety: one thread at a time per runner_so (the vocabulary's mask scratch is
 * shared); the model runner calls it from its helper thread only while the main thread runs
 * the forward pass.
 */
#ifndef LLB_GPU_WORKER_RUNNER_SO_H
#define LLB_GPU_WORKER_RUNNER_SO_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/reasoning/reasoning.h"
#include "schemas/codec.h"

#define RUNNER_SO_MAX_GRAMMARS 64

struct so_vocab;
struct runner_so;
struct runner_so_grammar;

/* One request's structured-output state (embedded in the runner's request). Zero value:
 * unconstrained. With a reasoning parser the grammar starts after the end of the model's
 * reasoning (vLLM's rule): at output 0 when the prompt's last reasoning marker closes it,
 * else just past the first end marker among the outputs; until then no mask applies. */
struct runner_so_req {
  struct runner_so_grammar *grammar; /* NULL = unconstrained */
  struct so_matcher *matcher;
  int64_t num_accepted;              /* outputs the matcher has taken (counted from output 0);
                                      * -1 = replay all */
  uint8_t reasoning;                 /* enum reasoning_parser; 0 = none */
  bool prompt_in_reasoning;          /* the prompt leaves the reasoning open */
  int64_t grammar_start;             /* first output under the grammar; -1 = reasoning goes on */
  int64_t num_scanned;               /* outputs searched for the end marker */
};

/* A runner_so over `vocab` (ownership taken, even on failure). Errors: OUT_OF_MEMORY.
 * Caller frees with runner_so_destroy (after every request state is freed). */
llb_status runner_so_create(struct so_vocab *vocab, struct runner_so **out);

/* Frees s and its vocabulary and grammars; NULL ok. */
void runner_so_destroy(struct runner_so *s);

/* Tokens of the vocabulary (may be fewer than the model's logits: the rest are never allowed). */
int32_t runner_so_vocab_size(const struct runner_so *s);

/* Words of one bitmask: (vocab_size + 31) / 32. */
int32_t runner_so_mask_words(const struct runner_so *s);

/* Gives q the grammar of `so` (compiled now unless cached) and a fresh matcher; kind NONE
 * makes q unconstrained. prompt[0..num_prompt) are the request's prompt tokens (searched for
 * reasoning markers when so->reasoning is set). q must be zero or freed. Errors: the grammar
 * compiler's (MALFORMED, UNSUPPORTED naming a keyword, TOO_LARGE), UNSUPPORTED for the grammar
 * kind or a reasoning parser whose end marker this vocabulary cannot spell (see
 * runner_so_set_reasoning_markers), OUT_OF_MEMORY; q is left unconstrained. */
llb_status runner_so_req_init(struct runner_so *s, struct runner_so_req *q, const struct llb_structured_outputs *so,
                              const int32_t *prompt, int64_t num_prompt);

/* The token ids of reasoning parser p's markers in this model's vocabulary (copied; the
 * caller tokenizes model/reasoning/reasoning.h's marker texts). Until set, requests with p are refused. */
void runner_so_set_reasoning_markers(struct runner_so *s, enum reasoning_parser p, const struct reasoning_marker_ids *m);

/* Releases q's matcher and grammar reference; q becomes unconstrained. NULL s is fine only
 * when q is unconstrained. */
void runner_so_req_free(struct runner_so *s, struct runner_so_req *q);

/* Brings q's matcher to outputs[0..n) (accepting the new ones, or replaying from the start
 * when num_accepted is -1 or more than n); with a reasoning parser, first looks for the end of
 * the reasoning and feeds the grammar only what follows it. Errors: INVALID_ARGUMENT when an
 * output is not allowed by the grammar (the matcher is then reset and num_accepted -1). */
llb_status runner_so_req_sync(struct runner_so *s, struct runner_so_req *q, const int32_t *outputs, int64_t n);

/* The allowed-next-token bitmask of q's matcher into mask[runner_so_mask_words] (xgrammar's
 * layout: bit i % 32 of word i / 32). Returns the number of allowed tokens, or -1 (mask left
 * alone) while q's reasoning goes on: nothing is masked then. */
int32_t runner_so_fill_mask(struct runner_so *s, const struct runner_so_req *q, uint32_t *mask);

/* Sets logits[i] = -inf for every token i in [0, vocab_size) that mask does not allow (tokens
 * at or past mask_vocab_size are never allowed): vLLM apply_grammar_bitmask. Pure. */
void runner_so_apply_mask(float *logits, int32_t vocab_size, const uint32_t *mask, int32_t mask_vocab_size);

/* Prepares the grammar of `so` (compiled and cached now, so that a bad spec fails the check
 * phase of a step, before anything changes). Errors as runner_so_req_init. */
llb_status runner_so_prepare(struct runner_so *s, const struct llb_structured_outputs *so);

/* One sampled row of a step whose request is constrained: its matcher is synced to
 * outputs[0..num_outputs) and its mask written to mask[runner_so_mask_words]. */
struct runner_so_step_row {
  struct runner_so_req *req;
  const int32_t *outputs;
  int64_t num_outputs;
  uint32_t *mask;
  bool masked;             /* the mask applies (false while the request is still reasoning) */
  llb_status status;       /* of the sync: INVALID_ARGUMENT when an output breaks the grammar */
  char message[240];
};

/* The masks of one step, computed on a helper thread while the forward pass runs (the masks
 * depend only on tokens already sampled); joined before sampling. */
struct runner_so_step {
  struct runner_so *s;
  struct runner_so_step_row *rows; /* [num_rows], borrowed until the join */
  int32_t num_rows;
  pthread_t thread;
  bool threaded;
  double mask_seconds;     /* helper time: syncs + masks of all rows */
};

/* Starts computing rows[0..num_rows) on a helper thread (inline when the thread cannot be
 * created). num_rows 0 starts nothing. */
void runner_so_step_start(struct runner_so_step *st, struct runner_so *s, struct runner_so_step_row *rows,
                          int32_t num_rows);

/* Waits for the helper; afterwards every row's status and mask are set. Idempotent. */
void runner_so_step_join(struct runner_so_step *st);

#endif

/* The simulated device (--device sim): the model runner without a forward pass.
 *
 * Everything of a step is real but the arithmetic (docs/design.md §9): the persistent batch, block
 * tables, slot mapping and the checks of model_runner.c run as on the CPU; instead of the
 * forward pass and the sampler, the step waits (clock_nanosleep to a deadline: no CPU) the
 * time a cost model gives for its batch, and each sampled row gets a token drawn by
 * Philox4x32-10 (the sampler's generator, model/sampling/sampler.h) from the request's key
 * and its output position, so outputs are checkable and a replay (preemption, a restarted worker or
 * scheduler, a resend) is token-identical. The draw never picks a control or an
 * end-of-generation token, so a request runs to max_tokens or a stop the client asked for.
 * As in vLLM's and Dynamo's mock engines (Dynamo `mocker`, Vidur's simulator, MLSys 2024), the
 * cost model is a small formula fitted from the real forward (`llmbus-kernel-bench --fit`) or
 * derived from a device's public roofline figures (ops/sim/README.md).
 *
 * The cost of a step with T scheduled tokens, R sampled rows (S of them sampled at a temperature,
 * the others greedy), A attended (query, key) pairs (a query at position p attends the p + 1
 * keys 0..p of its sequence) and K context tokens (the sum of the scheduled sequences'
 * lengths), and F = 1 when every sequence of the step starts in it (none ran a step on this worker
 * before: the engine had nothing running, the first step after idle), else 0:
 *     t = fixed_s + max(weights_s, token_s * T) + sampled_row_s * R + random_row_s * S
 *         + attention_s * A + context_s * K + first_step_s * F
 * fixed_s: what a step costs whatever its size (launches, norms, the step's bookkeeping);
 * token_s: each token's rows of every matmul; weights_s: the floor of that term when a step
 * is bound by reading the weights once (a memory-bound decode on a GPU; 0 on a CPU fit, where
 * the linear term fits the measured decode steps); sampled_row_s: a row's logits (vocab x
 * hidden) and its greedy sampling; random_row_s: what sampling at a temperature adds to a row
 * (softmax and the draw over the vocabulary); attention_s: one q.k and one weighted v of every
 * layer and head (attention's arithmetic); context_s: reading a sequence's K/V once a step
 * (attention's memory traffic, what bounds a decode on a GPU); first_step_s: what the first
 * step after idle pays beyond the same step in a running engine, as the served steps show it
 * (on a shared host it carries that step's contention too; the cause on this machine's CPU
 * forward is not established, docs/scaling.md); only a served fit (--fit-steps) sees it: a
 * synthetic fit runs its steps back to back and leaves it 0.
 * Pure logic but sim_wait_until; no bus, no FlatBuffers.
 */
#ifndef LLB_GPU_WORKER_RUNNER_SIM_H
#define LLB_GPU_WORKER_RUNNER_SIM_H

#include <stdint.h>

#include "base/status.h"
#include "model/forward/forward.h"
#include "schemas/sampling_params.h"

struct tokenizer;

/* A step-time model (see the head comment). Every coefficient is finite and >= 0, in seconds. */
struct sim_cost_model {
  char name[128];   /* what it models: model, device, threads ("smollm2-135m-q4_1 cpu x2") */
  char source[512]; /* where the numbers come from (the fit's command and date, a datasheet) */
  double fixed_s, token_s, weights_s, sampled_row_s, random_row_s, attention_s, context_s, first_step_s;
};

/* The quantities of one step that the model prices. */
struct sim_step_shape {
  int32_t num_tokens;     /* T: scheduled tokens (rows of the matmuls) */
  int32_t num_seqs;       /* sequences with scheduled tokens */
  int32_t num_sampled;    /* R: rows whose logits are computed and sampled */
  int32_t num_random;     /* S: of those, rows sampled at a temperature (not greedy) */
  double attention_pairs; /* A: sum over query tokens of the keys they attend */
  double context_tokens;  /* K: sum of the scheduled sequences' lengths after the step */
  int32_t first;          /* F: 1 when every scheduled sequence starts in this step (none ran one before) */
};

/* How well a fit reproduces its measurements. */
struct sim_fit_quality {
  int32_t num_points;
  double rms_rel_error, max_rel_error; /* |predicted - measured| / measured */
};

/* One measured step for sim_cost_fit. */
struct sim_fit_point {
  struct sim_step_shape shape;
  double seconds;
  double weight; /* of its squared error; 0 = 1 / seconds^2 (its relative error) */
};

/* The built-in model: this repository's fit of SmolLM2-135M-Instruct Q4_1 on the 2-core
 * development machine, one forward thread (the values of ops/sim/cpu-smollm2-135m-q4_1-1t.json),
 * used when the worker is given no --sim-cost file. */
void sim_cost_model_default(struct sim_cost_model *m);

/* Reads a cost model from a JSON file: {"name", "source", "fixed_s", "token_s",
 * "sampled_row_s", "attention_s", optional "weights_s", "random_row_s", "context_s" and
 * "first_step_s" (0 when absent: files written before a term existed keep their meaning);
 * other keys ignored ("fit", notes)}.
 * Errors: IO (unreadable, naming the file), MALFORMED (not JSON, a coefficient missing, not a
 * number, negative, not finite, or above 60 s), naming the key. */
llb_status sim_cost_model_load(const char *path, struct sim_cost_model *m);

/* Writes m (and q when not NULL, as "fit") as JSON to path. Errors: IO, OUT_OF_MEMORY. */
llb_status sim_cost_model_write(const char *path, const struct sim_cost_model *m, const struct sim_fit_quality *q);

/* The shape of a flattened batch: tokens, sequences, logits rows, attended pairs and context
 * tokens (from query_start_loc and seq_lens); num_random and first 0 (the batch does not say how
 * rows sample or whether its sequences ran before). */
struct sim_step_shape sim_step_shape_of(const struct llama_batch *b);

/* The modelled duration of a step of this shape, in seconds (>= 0). */
double sim_cost_seconds(const struct sim_cost_model *m, const struct sim_step_shape *s);

/* Least-squares fit of fixed_s, token_s, sampled_row_s, attention_s, context_s and first_step_s
 * to n measured steps, minimizing the weighted squared error (by default each point's relative
 * error) with every coefficient >= 0 (the best of the non-negative solutions over the subsets of
 * the six terms; a term whose quantity is 0 at every point, as F in steps timed back to back,
 * is fitted as 0). The points' random rows are priced at out->random_row_s, which the caller sets
 * (measured apart) and the fit keeps, as it keeps the name and source; weights_s becomes 0.
 * Errors: INVALID_ARGUMENT (fewer than 6 points, a measurement <= 0 or not finite, no
 * non-negative solution). */
llb_status sim_cost_fit(const struct sim_fit_point *pts, int32_t n, struct sim_cost_model *out,
                        struct sim_fit_quality *q);

/* The tokens a simulated step may emit: every id of the vocabulary that is neither a control
 * token nor end-of-generation (tokenizer_is_control / tokenizer_is_eog). */
struct sim_vocab {
  int32_t *ids; /* [num_ids], ascending */
  int32_t num_ids;
};

/* Fills v from tok. Errors: OUT_OF_MEMORY, INVALID_ARGUMENT (no ordinary token at all).
 * Free with sim_vocab_free. */
llb_status sim_vocab_from_tokenizer(const struct tokenizer *tok, struct sim_vocab *v);
void sim_vocab_free(struct sim_vocab *v);

/* A request's key for sim_token: the FNV-1a hash of its prompt ids, mixed with its seed unless
 * it is greedy (temperature < SAMPLER_GREEDY_EPS: like a real greedy request, its tokens then
 * depend on the prompt only). The prompt is the one of the request's first arrival: a
 * resumed request comes back with the same prompt and so the same key. */
uint64_t sim_request_key(const struct llb_sampling_params *p, const int32_t *prompt_ids, int64_t num_prompt);

/* The token at output position pos of the request with this key: an id of v chosen by
 * Philox4x32-10(key, counter = {pos lo, pos hi, 0, 'simt'}). Pure. */
int32_t sim_token(const struct sim_vocab *v, uint64_t key, int64_t output_pos);

/* Sleeps until CLOCK_MONOTONIC reaches deadline_ns (llb_now_ns's clock); returns at once when
 * it has passed. Restarts after a signal. */
void sim_wait_until(int64_t deadline_ns);

#endif

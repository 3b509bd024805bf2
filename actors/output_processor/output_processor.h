/* Output processor: EngineCoreOutputs → RequestOutput for the client (pure logic).
 *
 * One processor per engine keeps per-request state keyed by the engine request id (vLLM v1
 * vllm/v1/engine/output_processor.py OutputProcessor + RequestState + ParentRequest):
 * incremental detokenization (detokenizer.h), stop strings (stop_strings.h) with text held
 * back while it could still begin one, logprobs with decoded token text and the cumulative
 * logprob, output kinds CUMULATIVE / DELTA / FINAL_ONLY, n > 1 aggregation of children into
 * one parent RequestOutput, metrics, and de-duplication by output position (a scheduler
 * replaying a request after a restart re-sends tokens the client already has).
 *
 * Flow for the actor: output_processor_register() for every EngineCoreRequest (idempotent), then
 * output_processor_process() for every EngineCoreOutput of a batch into one output_processor_result, then
 * send result.outputs[i] to result.outputs[i].reply_to, publish an engine abort for every
 * result.abort_ids[i] (requests a stop string finished that the engine still runs), and for
 * every result.unknown_ids[i] rebuild the request (output_processor_register_resume with the engine's
 * token history) and process that output again; then output_processor_result_clear().
 *
 * Not thread-safe: one thread drives a processor. Times are wall-clock ns (llb_wall_ns):
 * they cross processes and hosts.
 */
#ifndef LLB_OUTPUT_PROCESSOR_H
#define LLB_OUTPUT_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "schemas/sampling_params.h"

struct tokenizer;

#define OUTPUT_PROCESSOR_MAX_ID_BYTES 256      /* request ids, NUL included */
#define OUTPUT_PROCESSOR_MAX_REPLY_TO_BYTES 256
#define OUTPUT_PROCESSOR_MAX_ERROR_BYTES 256

/* Why a completion ended (vLLM FinishReason + ERROR). */
enum output_processor_finish_reason {
  OUTPUT_PROCESSOR_FINISH_REASON_NONE = 0,   /* still running */
  OUTPUT_PROCESSOR_FINISH_REASON_STOP = 1,   /* EOS, a stop token id or a stop string */
  OUTPUT_PROCESSOR_FINISH_REASON_LENGTH = 2, /* max_tokens or the context length */
  OUTPUT_PROCESSOR_FINISH_REASON_ABORT = 3,  /* aborted by the client or the engine */
  OUTPUT_PROCESSOR_FINISH_REASON_ERROR = 4,  /* failed; the output's `error` says why */
};

/* "stop", "length", "abort", "error"; NULL for NONE (OpenAI's finish_reason strings). */
const char *output_processor_finish_reason_name(enum output_processor_finish_reason r);

/* What stopped a STOP-finished completion (vLLM stop_reason: str | int | None). */
enum output_processor_stop_reason_kind {
  OUTPUT_PROCESSOR_STOP_REASON_KIND_NONE = 0,   /* EOS, or not stopped */
  OUTPUT_PROCESSOR_STOP_REASON_KIND_STRING = 1, /* stop_str */
  OUTPUT_PROCESSOR_STOP_REASON_KIND_TOKEN = 2,  /* stop_token_id, one of stop_token_ids */
};

/* --- input: what the engine sends ------------------------------------------------------ */

/* One candidate of a position's logprobs, as the sampler reports it. */
struct output_processor_candidate {
  int32_t token_id;
  float logprob;
};

/* Logprobs of one sampled position (model/sampling/sampler.h sampler_result). */
struct output_processor_new_logprobs {
  int32_t token_id;   /* the sampled token */
  float logprob;      /* its logprob */
  int32_t num_top;    /* 0..LLB_MAX_LOGPROBS, best first */
  struct output_processor_candidate top[LLB_MAX_LOGPROBS];
};

/* One EngineCoreOutput. Pointers are borrowed for the duration of the call. */
struct output_processor_engine_output {
  const char *request_id;                   /* engine request id */
  const int32_t *new_token_ids;             /* [num_new_tokens] */
  int32_t num_new_tokens;
  int64_t first_output_pos;                 /* output position of new_token_ids[0] */
  const struct output_processor_new_logprobs *new_logprobs; /* [num_new_tokens] or NULL */
  enum output_processor_finish_reason finish_reason; /* NONE while the engine keeps running it */
  int32_t stop_token_id;                    /* STOP by a stop_token_ids entry; -1 for EOS / none */
  int32_t num_cached_tokens;                /* prefix-cache hits; -1 = not reported */
  int64_t scheduled_time_ns;                /* when the engine first scheduled it; 0 = not reported */
  int64_t queued_time_ns;                   /* when the engine queued it; 0 = not reported */
  int64_t timestamp_ns;                     /* when the engine produced it; 0 = use `now_ns` */
  bool handed_off;                          /* the engine hands the request to a decode engine
                                               after this output (P/D): nothing of it is held */
  const float *pooling_output;              /* [num_pooling_output]: a pooling request's vector,
                                               on its finishing output; NULL = none */
  int32_t num_pooling_output;
  /* vLLM prompt_logprobs: prompt tokens 1..P-1 (token_id = the prompt token, top = the k most
   * likely) with their ranks, once per request (the scheduler sends them with the first token);
   * kept and delivered with the request's next RequestOutput */
  const struct output_processor_new_logprobs *prompt_logprobs; /* [num_prompt_logprobs] or NULL */
  const int32_t *prompt_logprob_ranks;                /* [num_prompt_logprobs] */
  int32_t num_prompt_logprobs;
};

/* A request as registered from its EngineCoreRequest. Pointers are borrowed for the call. */
struct output_processor_request_info {
  const char *request_id;          /* engine request id (a child id when n > 1) */
  const char *parent_request_id;   /* groups the children of one client request; NULL = request_id */
  const char *external_request_id; /* the id the client sent; NULL = parent_request_id */
  const char *reply_to;            /* where the client's RequestOutputs go; NULL = "" */
  int32_t child_index;             /* 0..num_children-1: CompletionOutput.index */
  int32_t num_children;            /* the client's n (>= 1) */
  const int32_t *prompt_token_ids; /* [num_prompt_tokens] */
  int64_t num_prompt_tokens;
  const struct llb_sampling_params *sampling_params; /* output_kind, stop, logprobs, ... */
  int64_t arrival_time_ns;
  bool resync;                     /* registered from the engine's whole history after this
                                      processor lost the request: the client already has part
                                      of it, so its first completion output says `resync` */
};

/* --- output: what the client gets ------------------------------------------------------ */

/* One token with its logprob and text. `text` / `bytes` point into the completion's arena. */
struct output_processor_token_logprob {
  int32_t token_id;
  int32_t rank;          /* 1 = most likely; -1 = not known (sampled token outside the top) */
  float logprob;
  const char *text;      /* [text_len] the token's bytes as valid UTF-8 (partial → U+FFFD) */
  uint32_t text_len;
  const char *bytes;     /* [num_bytes] the token's raw bytes (OpenAI logprobs `bytes`) */
  uint32_t num_bytes;
};

/* Logprobs of one output position: the sampled token, then the top candidates. */
struct output_processor_position_logprobs {
  struct output_processor_token_logprob sampled;
  int32_t num_top;
  struct output_processor_token_logprob top[LLB_MAX_LOGPROBS];
};

/* vLLM CompletionOutput. All memory belongs to the enclosing output_processor_result. */
struct output_processor_completion {
  int32_t index;                 /* child index: 0..n-1 */
  char *text;                    /* [text_len + 1] valid UTF-8, NUL-terminated; DELTA: new text only */
  size_t text_len;
  int32_t *token_ids;            /* [num_token_ids]; DELTA: new tokens only */
  int64_t num_token_ids;
  bool has_logprobs;             /* sampling_params.logprobs >= 0 */
  double cumulative_logprob;     /* over every sampled token so far */
  struct output_processor_position_logprobs *logprobs; /* [num_logprobs] aligned with the tail of token_ids */
  int64_t num_logprobs;          /* == num_token_ids, fewer only for a resumed request */
  char *logprob_arena;           /* backing store of the logprob texts */
  enum output_processor_finish_reason finish_reason;
  enum output_processor_stop_reason_kind stop_reason_kind;
  char stop_str[LLB_MAX_STOP_STRING_BYTES + 1]; /* STRING */
  int32_t stop_token_id;         /* TOKEN */
  bool resync;                   /* starts from the beginning again (output_processor_request_info.resync) */
};

/* Timing and counts of a request (vLLM RequestStateStats / RequestMetrics). For n > 1: the
 * earliest first times, the latest last times, token counts summed over the children. */
struct output_processor_metrics {
  int64_t arrival_time_ns;
  int64_t first_scheduled_time_ns; /* 0 = not reported */
  int64_t first_token_time_ns;     /* 0 = no token yet */
  int64_t last_token_time_ns;
  int64_t finished_time_ns;        /* 0 = not finished */
  int32_t num_cached_tokens;       /* -1 = not reported */
  int64_t num_prompt_tokens;
  int64_t num_generation_tokens;
};

/* vLLM RequestOutput. */
struct output_processor_request_output {
  char request_id[OUTPUT_PROCESSOR_MAX_ID_BYTES]; /* the external id the client sent */
  char reply_to[OUTPUT_PROCESSOR_MAX_REPLY_TO_BYTES];
  const int32_t *prompt_token_ids;       /* [num_prompt_tokens]; NULL in DELTA outputs after the first */
  int64_t num_prompt_tokens;
  struct output_processor_completion *outputs;    /* [num_outputs], by index */
  int32_t num_outputs;
  bool finished;                         /* the last output of this request */
  struct output_processor_metrics metrics;
  char error[OUTPUT_PROCESSOR_MAX_ERROR_BYTES];   /* why, when a completion finished with ERROR */
  llb_status error_code;                 /* its status (QUEUE_FULL, ...); 0 = INTERNAL */
  float *pooling_output;                 /* [num_pooling_output] a pooling request's vector (a
                                            copy of the engine's), on its finished output; else NULL */
  int32_t num_pooling_output;
  /* vLLM RequestOutput.prompt_logprobs without its leading None (prompt tokens 1..P-1, `sampled`
   * = the prompt token): on the first output after the engine sent them, else NULL / 0 */
  struct output_processor_position_logprobs *prompt_logprobs;
  int64_t num_prompt_logprobs;
  char *prompt_logprob_arena; /* backing store of their texts */
};

/* Everything one or more output_processor_process calls produced; owns all memory it points to. */
struct output_processor_result {
  struct output_processor_request_output *outputs; /* [num_outputs] to send, in order */
  int64_t num_outputs, cap_outputs;
  char (*abort_ids)[OUTPUT_PROCESSOR_MAX_ID_BYTES]; /* [num_abort] engine request ids to abort */
  int64_t num_abort, cap_abort;
  char (*unknown_ids)[OUTPUT_PROCESSOR_MAX_ID_BYTES]; /* [num_unknown] outputs for unregistered requests */
  int64_t num_unknown, cap_unknown;
  char (*resync_ids)[OUTPUT_PROCESSOR_MAX_ID_BYTES];  /* [num_resync] unfinished requests whose outputs
                                                skipped positions (some were lost): to be
                                                rebuilt from the engine's history (resync) */
  int64_t num_resync, cap_resync;
};

/* Zeroes `r` (an empty result). */
void output_processor_result_init(struct output_processor_result *r);

/* Frees what the outputs point to and empties the lists, keeping their capacity. */
void output_processor_result_clear(struct output_processor_result *r);

/* Frees everything; `r` is empty afterwards. Accepts NULL. */
void output_processor_result_free(struct output_processor_result *r);

/* --- metrics: what the processor reports as it goes (vLLM v1 IterationStats and
 * FinishedRequestStats, vllm/v1/metrics/stats.py) ---------------------------------------- */

/* A request (one engine request: a child when n > 1) finished. Wall clock ns since the epoch;
 * 0 = not known. `finished_ns` is the processor's `now_ns` (the client's view), the others
 * the engine's timestamps. */
struct output_processor_finished_stats {
  enum output_processor_finish_reason finish_reason;
  int64_t arrival_ns, queued_ns, scheduled_ns, first_token_ns, last_token_ns, finished_ns;
  int64_t num_prompt_tokens, num_generation_tokens;
};

/* Called from the processing thread, inside output_processor_process / _abort / _fail. */
struct output_processor_stats_hooks {
  /* num_new_tokens (> 0) new tokens of a request were accepted at now_ns (duplicates are not
   * counted); prev_ns is when its previous tokens were accepted, 0 when these are its first
   * (then num_prompt_tokens and arrival_ns say what its prefill was). */
  void (*on_tokens)(void *user, int64_t num_new_tokens, int64_t prev_ns, int64_t now_ns, int64_t num_prompt_tokens,
                    int64_t arrival_ns);
  /* A request finished (once per request, whatever ended it). */
  void (*on_finished)(void *user, const struct output_processor_finished_stats *s);
};

/* --- the processor --------------------------------------------------------------------- */

struct output_processor;

/* Creates a processor over `tok` (borrowed; outlives the processor). Errors: OUT_OF_MEMORY. */
llb_status output_processor_create(const struct tokenizer *tok, struct output_processor **out);

/* Frees all request state. Accepts NULL. */
void output_processor_destroy(struct output_processor *p);

/* The longest a streamed output is held by --stream-interval after its request's last one (ns). */
#define OUTPUT_PROCESSOR_STREAM_HOLD_MAX_NS (250 * 1000 * 1000LL)

/* vLLM's --stream-interval: a request's streamed RequestOutputs (DELTA and CUMULATIVE) go out
 * once a child has `n` tokens not yet sent (its first output, the final one and errors at
 * once; nothing held OUTPUT_PROCESSOR_STREAM_HOLD_MAX_NS past its last output, nor the output
 * before a P/D hand-off), so a client gets about one message per n tokens; n <= 1: every
 * output (the default). */
void output_processor_set_stream_interval(struct output_processor *p, int64_t n);

/* Registers one engine request (copies everything). Registering a known id again is a
 * no-op (a replayed EngineCoreRequest). Errors: INVALID_ARGUMENT (missing id or params,
 * child_index outside [0, num_children), a parent already registered with another n or
 * external id), OUT_OF_MEMORY. */
llb_status output_processor_register(struct output_processor *p, const struct output_processor_request_info *info);

/* Registers a request whose earlier outputs a previous processor instance already handled
 * (docs/design.md §6): `history[0, num_history)` are the request's first output tokens; they are
 * detokenized and counted as delivered, so the next output continues the stream where the
 * old processor left off (exactly, when the old one sent an output after each step).
 * Logprobs of the history are not known: later outputs carry logprobs only for newer
 * positions. Errors: as output_processor_register; INVALID_ARGUMENT if the id is already known or
 * a history token is outside the vocabulary. */
llb_status output_processor_register_resume(struct output_processor *p, const struct output_processor_request_info *info,
                                   const int32_t *history, int64_t num_history);

/* Disaggregated prefill/decode (docs/scaling.md), prefill side: the engine handed the request
 * over to a decode engine after the output just processed (EngineCoreOutput.handed_off_to).
 * Forgets it without a final output (the decode engine's output processor continues the
 * client's stream) and drops its late outputs; an n > 1 parent whose children all left or
 * finished is freed without one too. No metrics: the decode side reports the request.
 * Errors: NOT_FOUND (unknown, or finished already: a stop string matched its first text, and
 * the decode engine's output processor stops it on the same text). */
llb_status output_processor_hand_off(struct output_processor *p, const char *request_id);

/* Decode side: registers a request handed over by a prefill engine whose output processor
 * delivered its first outputs `history[0, num_history)` (output_processor_register_resume), then
 * searches their text for stop strings: on a match (the prefill side already ended the client's
 * stream there) the request is finished at once without an output and its id appended to
 * res->abort_ids, so the engine stops it. A known id is a no-op (a replayed hand-off). Errors:
 * as output_processor_register_resume. */
llb_status output_processor_register_handed_off(struct output_processor *p,
                                                const struct output_processor_request_info *info,
                                                const int32_t *history, int64_t num_history,
                                                struct output_processor_result *res);

/* Processes one EngineCoreOutput at wall time `now_ns`, appending to `res`: at most one
 * RequestOutput, an abort id when a stop string finished a request the engine still runs,
 * or an unknown id for an unregistered request (outputs of requests that finished recently
 * are dropped silently). Tokens before the request's next expected output position are
 * duplicates and are dropped; a gap (first_output_pos beyond it) finishes the request with
 * ERROR (and an engine abort) because tokens were lost. Errors: OUT_OF_MEMORY, and
 * INVALID_ARGUMENT for a bad token id (the request then finishes with ERROR, reported in
 * `res`) — the processor stays usable after any error. */
llb_status output_processor_process(struct output_processor *p, const struct output_processor_engine_output *eo,
                           int64_t now_ns, struct output_processor_result *res);

/* Finishes a request with ABORT at `now_ns` and appends its final RequestOutput (the text
 * held back for stop strings is released). `request_id` may be an engine request id (one
 * child) or a parent id (every unfinished child). Errors: NOT_FOUND, OUT_OF_MEMORY. */
llb_status output_processor_abort(struct output_processor *p, const char *request_id, int64_t now_ns,
                         struct output_processor_result *res);

/* As output_processor_abort, but finishes with ERROR and `message` in RequestOutput.error, with `code`
 * as its status (the engine's, e.g. QUEUE_FULL, which the api server maps to 429; 0 =
 * INTERNAL). */
llb_status output_processor_fail(struct output_processor *p, const char *request_id, llb_status code, const char *message,
                        int64_t now_ns, struct output_processor_result *res);

/* Reports tokens and finished requests to `hooks` (copied; `user` passed back) from now on;
 * NULL hooks stop the reports. */
void output_processor_set_stats_hooks(struct output_processor *p, const struct output_processor_stats_hooks *hooks, void *user);

/* Requests (engine ids, children counted one by one) that are registered and unfinished. */
int64_t output_processor_num_unfinished(const struct output_processor *p);

/* The output tokens received so far of the unfinished engine request `request_id`, for a
 * scheduler that restarted and replays the request from the durable stream: it recomputes
 * them as context in one prefill instead of generating them again one step at a time
 * (docs/design.md §6). *ids points into the processor's state, valid until the next call that
 * changes it. Errors: NOT_FOUND (unknown or finished). */
llb_status output_processor_history(const struct output_processor *p, const char *request_id, const int32_t **ids, int64_t *n);

/* Output tokens dropped so far because their positions were already delivered (a replay
 * after a scheduler restart, a resync, a duplicate message). Same thread as output_processor_process. */
uint64_t output_processor_num_duplicates(const struct output_processor *p);

#endif

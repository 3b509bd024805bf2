/* The output processor actor: binds the pure logic of output_processor.h to the bus.
 *
 * Subscribes <prefix>.engine.<eid>.outputs (EngineCoreOutputs, one per engine step). For
 * each output: a request's first output (it carries prompt_token_ids + sampling_params)
 * registers the request (output_processor_register: parent id, child index, n = the wire
 * sampling_params.n, which the input processor sets to the client's n); an output with
 * finish_reason ERROR fails the request with the engine's message; every other output goes
 * through output_processor_process. Then each RequestOutput is published to its reply_to, and the
 * engine requests finished by a stop string (or failed here) are aborted with one
 * AbortRequests on <prefix>.engine.<eid>.abort.
 *
 * RequestOutput.request_id is the internal parent id ("<client id>-<16 hex>"): the id a
 * client sends in an AbortRequest on <prefix>.abort.<tenant>.
 *
 * Outputs of a request this instance never registered (it restarted) cannot be rebuilt yet
 * (output_processor_register_resume needs the engine's token history, which EngineCoreOutputs does
 * not carry): they are counted and logged, the client gets a final RequestOutput with an
 * error (never a hang), and the engine request is aborted.
 *
 * Threading: one subscription, so one delivery thread drives the (not thread-safe) logic;
 * counters are atomic.
 */
#ifndef LLB_ACTORS_OUTPUT_PROCESSOR_ACTOR_H
#define LLB_ACTORS_OUTPUT_PROCESSOR_ACTOR_H

#include <stdint.h>

#include "base/metrics.h"
#include "base/status.h"
#include "bus/bus.h"

struct output_processor_actor_options {
  const char *model_path; /* GGUF holding the tokenizer; required */
  const char *engine_id;  /* <eid>; NULL = "0" */
  struct llb_metrics *metrics; /* NULL = none; else the per-request metrics of
                                * request_metrics.h are recorded there (borrowed) */
  int64_t stream_interval;     /* tokens per streamed RequestOutput (vLLM's --stream-interval;
                                * output_processor_set_stream_interval); <= 1 = every token */
};

/* Counters since start (monotonic). */
struct output_processor_actor_stats {
  uint64_t batches;         /* EngineCoreOutputs decoded */
  uint64_t engine_outputs;  /* EngineCoreOutput entries handled */
  uint64_t request_outputs; /* RequestOutputs published */
  uint64_t malformed;       /* undecodable EngineCoreOutputs (dropped) */
  uint64_t unknown;         /* outputs of requests this instance does not know */
  uint64_t register_errors; /* first outputs whose registration failed */
  uint64_t aborts;          /* engine request ids sent in AbortRequests */
  uint64_t publish_errors;  /* failed publishes (each logged) */
  uint64_t resyncs_asked;   /* requests asked again whole from the scheduler (lost state) */
  uint64_t resyncs;         /* requests rebuilt from the engine's history */
  uint64_t duplicates;      /* output tokens dropped: positions already delivered */
  uint64_t histories;       /* history requests answered (a restarted scheduler's replays) */
  uint64_t handoffs_forgotten; /* prefill side: requests handed to a decode engine, forgotten here */
  uint64_t handoffs_continued; /* decode side: handed-over requests whose stream goes on from here */
};

struct output_processor_actor;

/* Loads the tokenizer of o->model_path and creates the processor. Errors: INVALID_ARGUMENT
 * (bad engine id), the GGUF reader's / tokenizer's error naming the file, OUT_OF_MEMORY.
 * *out: output_processor_actor_destroy(). */
llb_status output_processor_actor_create(const struct output_processor_actor_options *o,
                                         struct output_processor_actor **out);

/* Subscribes the outputs handler on `bus` (borrowed; destroy the bus before the actor).
 * Errors: those of bus_subscribe and the subject builders. */
llb_status output_processor_actor_start(struct output_processor_actor *a, struct bus *bus);

/* Stops taking outputs: unsubscribes the outputs and history handlers (a batch being handled
 * is still published). Call before bus_destroy; after the bus drained there is nothing left
 * to stop. Idempotent; NULL ok. */
void output_processor_actor_stop(struct output_processor_actor *a);

/* Counters, read atomically one by one. */
void output_processor_actor_stats(const struct output_processor_actor *a,
                                  struct output_processor_actor_stats *out);

/* Frees the actor. Call after bus_destroy() of the bus it was started on. NULL ok. */
void output_processor_actor_destroy(struct output_processor_actor *a);

#endif

/* What the scheduler actor keeps per request beside the scheduler's own state: routing
 * (reply subject), the first output's extra fields (prompt, sampling params, parent id,
 * timings), the trace context, gathered prompt logprobs, and its durable-stream message.
 *
 * Life: made from a decoded EngineCoreRequest on a handler thread (req_meta_from_request),
 * queued for the step thread (actors/scheduler/intake.h), admitted as the request's
 * sched_request.user (one registry: the scheduler's; found with req_meta_find); it leaves
 * with the request's final output and is freed after that output is published
 * (output_publisher.c), or by sched_config.free_user when no output takes it. A refused
 * request's meta is published as an error output and freed. Step thread only once queued. */
#ifndef LLB_ACTORS_SCHEDULER_REQ_META_H
#define LLB_ACTORS_SCHEDULER_REQ_META_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/prompt_logprobs.h"
#include "actors/scheduler/sched_request.h"
#include "actors/scheduler/step_trace.h"
#include "base/status.h"
#include "schemas/engine_core_request.h"

struct scheduler;

struct req_meta {
  char *id, *reply_to, *external_id, *parent_request_id, *cache_salt;
  int32_t client_index, eos_token_id, priority;
  double arrival_time;
  int64_t queued_time_ns, scheduled_time_ns, first_token_time_ns;
  bool first_sent;
  int32_t *prompt;        /* [num_prompt], freed once the first output is out */
  int32_t num_prompt;
  struct sched_mm_feature *mm; /* [num_mm], freed after admission */
  int32_t num_mm;
  void *mm_blob;          /* the features' strings and data, freed with mm */
  struct llb_sampling_params params; /* the one copy: the scheduler's request borrows it */
  struct llb_pooling_params pooling_params; /* type NONE: a generation */
  struct req_meta *next;  /* intake list */
  llb_status reject_status; /* admission refused: the error output carries it */
  char reject_message[256];
  struct sched_req_trace trace; /* step_trace.c */
  bool resync;            /* the output processor lost it: the next output carries everything */
  uint64_t stream_seq;    /* its message in the requests stream (acknowledged when the request
                             leaves the scheduler); 0 = it came without JetStream */
  int32_t *resume_ids;     /* [num_resume] a replay's outputs from the output processor's
                             history (history_fetch.c), freed after admission */
  int32_t num_resume;
  char *resume_of;        /* EngineCoreRequest.resume_request_id: the request it replaces, or NULL */
  struct llb_structured_outputs structured_outputs; /* spec points into so_spec */
  char *so_spec;          /* owned copy of the structured-output spec */
  char *lora_name;        /* EngineCoreRequest.lora_request's adapter, "" = the base model */
  int32_t lora_int_id;    /* 0 = the base model */
  struct sched_prompt_logprobs plp; /* prompt_logprobs >= 0: rows gathered chunk by chunk */
  /* Disaggregated prefill/decode (handoff.h), from EngineCoreRequest.kv_transfer_params */
  char *decode_engine_id; /* do_remote_decode: the decode engine it goes on on after its first
                             token; NULL = none (aggregated, or handed off already) */
  char *prefill_engine_id; /* do_remote_prefill: the prefill engine it came from; NULL = not a hand-off */
  char *remote_request_id; /* ... and its id there */
  int32_t remote_num_blocks, remote_num_tokens; /* P's blocks holding its first num_tokens tokens */
  int32_t *handed_ids;    /* [num_handed] a hand-off's outputs the prefill engine delivered: its
                             first output names them (EngineCoreOutput.handed_off_token_ids) */
  int32_t num_handed;
};

/* A meta holding copies of everything it needs from `r` (a decoded EngineCoreRequest, whose
 * arena may be reset afterwards). stream_seq: its message in the requests stream (0 = none);
 * replayed: delivered before, so its first output is marked resync; refuse (NULL = admit):
 * admission refuses it with this message (ABORTED). Errors: OUT_OF_MEMORY (*out NULL). */
llb_status req_meta_from_request(const struct llb_engine_core_request *r, uint64_t stream_seq, bool replayed,
                                 const char *refuse, struct req_meta **out);

/* Frees m and everything it owns. NULL ok. */
void req_meta_free(struct req_meta *m);

/* The meta of live request `id` in `sched` (its sched_request.user), or NULL: unknown,
 * finished, or its final output already went out (an abort waiting for its step).
 * req_meta_find.c, a leaf that prompt_logprobs.c and step_trace.c use as well. */
struct req_meta *req_meta_find(const struct scheduler *sched, const char *id);

#endif

/* Disaggregated prefill/decode in the scheduler actor (docs/scaling.md; vLLM v1's KV connector,
 * scheduler side: kv_transfer_params do_remote_decode / do_remote_prefill).
 *
 * Prefill side (role prefill, or any engine given a request with do_remote_decode): when a
 * step samples such a request's first token and it did not finish, that token is published to
 * the output processor first; then handoff_run publishes an
 * EngineCoreRequest to the decode engine's <prefix>.engine.<D>.requests (the same request id,
 * prompt, sampling params, tenant's cache salt, adapter, reply subject and trace context, the
 * outputs so far in output_token_ids, kv_transfer_params {do_remote_prefill, remote_engine_id =
 * this engine, remote_request_id, num_tokens, remote_num_blocks}); with durable ingestion it
 * waits for JetStream's confirmation that D's stream stored it. Only then the request leaves this
 * engine (sched_hand_off): its output goes out with handed_off_to, and its own stream message is
 * acknowledged after that publish (output_publisher.c), so a crash on either side loses nothing:
 * before the confirmation P replays it, after it D has it. A failed publish keeps the request
 * here: it decodes on P (aggregated), logged `handoff_failed`.
 *
 * Decode side: handoff_admit_check refuses a hand-off that is malformed (the message is as
 * attacker-written as any: counts, engine id, outputs against max_tokens and max_model_len) or
 * that was aborted before it arrived: input processors send a client's abort of a disaggregated
 * request to the prefill engine and to every decode engine, and a decode engine remembers the
 * ids it did not know (handoff_note_abort; HANDOFF_ABORTED_IDS, for HANDOFF_ABORTED_TTL_NS), so a
 * hand-off racing its abort is dropped (ABORTED output).
 *
 * Fault injection (tests/e2e/test_engine_pd_disagg.c): with the environment variable
 * HANDOFF_FAULT_ENV naming a file that does not exist, the first hand-off stored on its decode
 * engine creates that file and ends this process at once, before this engine's own output of it
 * (the window that handoff_replayed covers: the restarted scheduler finds the file and goes on).
 * Unset in production; nothing else reads it.
 *
 * Step thread only, except the counters (any thread).
 */
#ifndef LLB_ACTORS_SCHEDULER_HANDOFF_H
#define LLB_ACTORS_SCHEDULER_HANDOFF_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/scheduler.h"
#include "base/metrics.h"
#include "base/status.h"
#include "bus/bus.h"

#define HANDOFF_FAULT_ENV "LLMBUS_FAULT_EXIT_AFTER_HANDOFF_STORED"
#define HANDOFF_ABORTED_IDS 1024               /* aborted unknown ids remembered */
#define HANDOFF_ABORTED_TTL_NS (120LL * 1000000000LL) /* ... for this long */

struct handoff;

struct handoff_config {
  struct bus *bus;              /* borrowed */
  const char *prefix;           /* subject prefix; copied */
  const char *engine_id;        /* this engine; copied */
  bool durable;                 /* publish into the requests stream and wait for its confirmation */
  int64_t publish_timeout_ms;   /* that wait at most (default 5000 when 0) */
  int32_t block_size;           /* tokens per KV block (remote_num_blocks) */
  int32_t max_model_len;
  struct llb_metrics *metrics;  /* llmbus:pd_handoffs_total{event=sent|send_failed|received|refused}
                                   goes here (NULL = none; borrowed) */
};

struct handoff_stats {
  uint64_t num_sent;            /* requests handed to a decode engine */
  uint64_t num_send_failed;     /* hand-offs whose publish failed (decoded here instead) */
  uint64_t num_received;        /* hand-offs admitted from a prefill engine */
  uint64_t num_refused;         /* hand-offs refused (malformed, or aborted before they came) */
};

/* Errors: INVALID_ARGUMENT (no bus, prefix or engine id), OUT_OF_MEMORY. *out: handoff_destroy. */
llb_status handoff_create(const struct handoff_config *c, struct handoff **out);
void handoff_destroy(struct handoff *h); /* NULL ok */

/* Prefill side, after sched_update_from_output filled `eo`: notes every request whose meta
 * names a decode engine and whose output is its first from this engine (not final). Its hand-off
 * waits until these outputs are published (handoff_run), so that the prefill side's tokens
 * always leave before the decode side can send any. */
void handoff_collect(struct handoff *h, const struct scheduler *sched, const struct sched_engine_outputs *eo);

/* Prefill side, after the step's outputs were published: hands over the requests noted (still
 * running here): publishes each to its decode engine, then sched_hand_off, whose final output
 * (handed_off_to) goes into `side` for the next publish. Returns how many left this engine. */
int32_t handoff_run(struct handoff *h, struct scheduler *sched, struct sched_engine_outputs *side);

/* Prefill side, right after admitting `m`: a replay (this engine's scheduler died) of a request
 * to hand over that came back with outputs (the output processor's history: its first token was
 * delivered, so its hand-off may already be stored) is handed over at once, before any step
 * could sample and deliver another token here; the decode engine's stream drops the copy when the
 * first hand-off was stored (Nats-Msg-Id). Returns whether it left (its final output in side). */
bool handoff_replayed(struct handoff *h, struct scheduler *sched, const struct req_meta *m,
                      struct sched_engine_outputs *side);

/* Decode side, before admitting `m`: NULL when it may be admitted (not a hand-off, or a sound
 * one), else why it is refused (static text; the caller refuses it with ABORTED and counts it
 * refused); a hand-off admitted is counted received. */
const char *handoff_admit_check(struct handoff *h, const struct req_meta *m);

/* An abort for `id`, which this engine does not run: remembered so that a hand-off of that id
 * arriving later is refused. */
void handoff_note_abort(struct handoff *h, const char *id);

void handoff_get_stats(const struct handoff *h, struct handoff_stats *out);

#endif

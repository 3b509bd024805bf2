/* What the scheduler actor's handler threads hand its step thread: decoded EngineCoreRequests
 * (as req_metas, in arrival order), the ids of aborted requests (<prefix>.engine.<eid>.abort)
 * and the ids an output processor asked to resync (.resync, an AbortRequests message: it lost
 * them, so each one's next output carries everything from position 0; docs/design.md §6). One
 * lock; the step thread sleeps on its condition variable between steps (intake_wait) and
 * takes everything queued at once.
 *
 * Every message is hostile input: an undecodable one is logged and counted (an
 * EngineCoreRequest with a NATS reply subject and no stream message is answered with an
 * ErrorReply); nothing here crashes or blocks on it. */
#ifndef LLB_ACTORS_SCHEDULER_INTAKE_H
#define LLB_ACTORS_SCHEDULER_INTAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/req_meta.h"
#include "base/status.h"
#include "bus/bus.h"

struct intake;

/* A queued request id (aborts, resyncs); freed with free(). */
struct intake_id {
  struct intake_id *next;
  char id[];
};

/* Everything taken at once: the caller owns the lists (req_meta_free, free). */
struct intake_batch {
  struct req_meta *requests; /* linked by next, oldest first */
  struct intake_id *aborts;
  struct intake_id *resyncs;
};

struct intake_counters {
  uint64_t rejected; /* undecodable or dropped (out of memory) requests */
  uint64_t aborted;  /* abort ids received */
};

/* An empty intake; bus (borrowed) answers undecodable requests. Errors: OUT_OF_MEMORY. */
llb_status intake_create(struct bus *bus, struct intake **out);

/* Subscribes the abort and resync subjects and, unless subj_requests is NULL (durable intake:
 * requests come through intake_deliver), the requests subject. Errors: bus_subscribe's. */
llb_status intake_subscribe(struct intake *in, const char *subj_requests, const char *subj_abort,
                            const char *subj_resync);

/* Decodes an EngineCoreRequest and queues its meta (req_meta_from_request: stream_seq,
 * replayed, refuse). Returns false when it was not queued (undecodable: logged, counted,
 * answered on msg->reply when it has one and came without a stream message; or out of
 * memory). One thread at a time (the requests subscription or the durable fetch thread). */
bool intake_deliver(struct intake *in, const struct bus_msg *msg, uint64_t stream_seq, bool replayed,
                    const char *refuse);

/* Step thread: sleeps up to wait_ms (<= 0: not at all) unless requests or aborts are queued
 * or the intake stopped, then takes everything queued into *out. Returns false (nothing
 * taken) once intake_stop was called. */
bool intake_wait(struct intake *in, int64_t wait_ms, struct intake_batch *out);

/* Requests queued and not yet taken by intake_wait: received, not yet admitted (a step thread
 * in a long step takes them after it). Any thread. */
int32_t intake_num_requests(struct intake *in);

/* Wakes a step thread sleeping in intake_wait (a peer came back: go on now). Any thread. */
void intake_wake(struct intake *in);

/* intake_wait returns false from now on (and at once if sleeping). Any thread. */
void intake_stop(struct intake *in);

void intake_get_counters(struct intake *in, struct intake_counters *out);

/* Frees what is still queued and the intake; after the bus is destroyed or drained. NULL ok. */
void intake_destroy(struct intake *in);

/* Frees a batch's lists (the actor stops). */
void intake_batch_free(struct intake_batch *b);

#endif

/* Conversions between the scheduler's plain structs (sched_output.h, schemas/kv_ops.h) and
 * the wire views of schemas/ (kv_step.h, scheduler_output.h, model_runner_output.h), into
 * arrays reused across steps. Private to the scheduler actor (actor.c).
 *
 * Views produced here point into the inputs and into `struct sched_wire`: valid until the
 * next call on the same sched_wire or until the inputs change.
 */
#ifndef LLB_ACTORS_SCHEDULER_ACTOR_WIRE_H
#define LLB_ACTORS_SCHEDULER_ACTOR_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/sched_output.h"
#include "base/status.h"
#include "schemas/encoder_ops.h"
#include "schemas/encoder_step.h"
#include "schemas/kv_ops.h"
#include "schemas/kv_step.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

struct sched_wire {
  struct llb_kv_op *kv_ops;                 /* [cap_kv_ops] */
  int64_t cap_kv_ops;
  struct llb_new_request_data *new_reqs;    /* [cap_new_reqs] */
  int64_t cap_new_reqs;
  struct llb_str *cached_ids;               /* [cap_cached] each of the five below */
  bool *cached_resumed;
  int32_t *cached_new_block_counts, *cached_num_computed, *cached_num_output;
  int64_t cap_cached;
  int32_t *cached_new_block_ids;            /* [cap_cached_new_block_ids] flattened */
  int64_t cap_cached_new_block_ids;
  struct llb_scheduled_tokens *scheduled;   /* [cap_scheduled] */
  int64_t cap_scheduled;
  struct llb_str *finished, *preempted;     /* [cap_finished], [cap_preempted] */
  int64_t cap_finished, cap_preempted;
  const char **mo_req_ids;                  /* [cap_mo_req_ids] */
  int64_t cap_mo_req_ids;
  struct llb_mm_feature *mm;                /* [cap_mm]: new requests' metadata, then the
                                               encoder inputs' features with data */
  int64_t cap_mm;
  struct llb_scheduled_encoder_input *enc_inputs; /* [cap_enc_inputs] */
  int64_t cap_enc_inputs;
  struct llb_str *free_mm;                  /* [cap_free_mm] */
  int64_t cap_free_mm;
  struct llb_encoder_op *enc_ops;           /* [cap_enc_ops] */
  int64_t cap_enc_ops;
  struct llb_kv_recv_request *kv_recvs;     /* [cap_kv_recvs] */
  int64_t cap_kv_recvs;
  struct llb_kv_send_request *kv_sends;     /* [cap_kv_sends] */
  int64_t cap_kv_sends;
  const char **mo_kv_ids;                   /* [cap_mo_kv_ids]: the KVConnectorOutput's three lists */
  int64_t cap_mo_kv_ids;
};

/* Grows *arr (elements of `elem` bytes) to hold `need`; amortized doubling. OUT_OF_MEMORY. */
llb_status sched_wire_grow(void **arr, int64_t *cap, int64_t need, size_t elem);

void sched_wire_free(struct sched_wire *w); /* frees the arrays; the struct may be reused zeroed */

/* The wire KVStep of a kv_step. */
llb_status sched_wire_kv_step(struct sched_wire *w, const struct kv_step *kv, struct llb_kv_step *out);

/* Copies a decoded KVStepResult into the logic's kv_step_result (cleared first). */
llb_status sched_wire_kv_result(const struct llb_kv_step_result *in, struct kv_step_result *out);

/* The wire SchedulerOutput of `o`; finished / preempted ids and freed encoder hashes are
 * carry_* (of earlier steps that sent nothing to the worker) followed by o's own. New
 * requests' mm_features carry metadata only; an item's data goes with the encoder input
 * that schedules it. carry_free_mm may be NULL. */
llb_status sched_wire_scheduler_output(struct sched_wire *w, const struct sched_output *o,
                                       const struct sched_str_list *carry_finished,
                                       const struct sched_str_list *carry_preempted,
                                       const struct sched_str_list *carry_free_mm,
                                       struct llb_scheduler_output *out);

/* The wire EncoderStep of an encoder_step. */
llb_status sched_wire_encoder_step(struct sched_wire *w, const struct encoder_step *enc,
                                   struct llb_encoder_step *out);

/* The logic's view of a decoded ModelRunnerOutput (strings point into `in`'s arena). */
llb_status sched_wire_model_output(struct sched_wire *w, const struct llb_model_runner_output *in,
                                   struct sched_model_output *out);

#endif

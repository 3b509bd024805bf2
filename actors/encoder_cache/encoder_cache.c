/* EncoderStep -> manager ops -> EncoderStepResult. See encoder_cache.h. */
#include "actors/encoder_cache/encoder_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

void ecache_result_free(struct ecache_result *r) {
  if (!r) return;
  free(r->results);
  free(r->freed);
  memset(r, 0, sizeof(*r));
}

llb_status ecache_apply(struct encoder_cache *ec, const struct llb_encoder_step *in,
                        struct ecache_result *res, struct ecache_stats *stats,
                        struct llb_encoder_step_result *wire) {
  *wire = (struct llb_encoder_step_result){.version = LLB_SCHEMA_VERSION, .step = in->step};
  encoder_cache_clear_freed(ec);
  if (in->reset) {
    encoder_cache_reset(ec);
    stats->num_resets++;
  }
  if (llb_array_reserve32((void **)&res->results, &res->cap_results, in->num_ops, sizeof(bool)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder step of %d ops", in->num_ops);
  res->num_results = 0;
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < in->num_ops && !st; i++) {
    const struct llb_encoder_op *op = &in->ops[i];
    bool ok = false;
    switch (op->kind) {
    case LLB_ENCODER_OP_KIND_CHECK_AND_UPDATE:
      st = encoder_cache_check_and_update(ec, op->req_id.data, op->mm_hash.data, &ok);
      stats->num_queries++;
      stats->num_hits += ok;
      break;
    case LLB_ENCODER_OP_KIND_CAN_ALLOCATE:
      ok = encoder_cache_can_allocate(ec, op->num_embeds, op->encoder_compute_budget,
                                      op->num_embeds_to_schedule);
      break;
    case LLB_ENCODER_OP_KIND_ALLOCATE:
      st = encoder_cache_allocate(ec, op->req_id.data, op->mm_hash.data, op->num_embeds);
      ok = st == LLB_STATUS_OK;
      if (st == LLB_STATUS_INVALID_ARGUMENT) st = LLB_STATUS_OK; /* refused: answered false */
      stats->num_allocated += ok;
      break;
    case LLB_ENCODER_OP_KIND_FREE_REQUEST:
      encoder_cache_free_request(ec, op->req_id.data);
      ok = true;
      break;
    }
    res->results[res->num_results++] = ok;
  }
  int32_t nf = encoder_cache_num_freed(ec);
  if (llb_array_reserve32((void **)&res->freed, &res->cap_freed, nf, sizeof(*res->freed)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder step: %d freed hashes", nf);
  for (int32_t i = 0; i < nf; i++) res->freed[i] = llb_str_c(encoder_cache_freed(ec, i));
  res->num_freed = nf;
  stats->num_evicted += (uint64_t)nf;
  stats->num_steps++;
  wire->results = res->results;
  wire->num_results = res->num_results;
  wire->freed_mm_hashes = res->freed;
  wire->num_freed_mm_hashes = nf;
  wire->num_free_slots = encoder_cache_num_free_slots(ec);
  return st;
}

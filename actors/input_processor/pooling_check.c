/* Checks of a pooling (embedding) request at the input processor; see pooling_check.h. */
#include "actors/input_processor/pooling_check.h"

#include <stdio.h>

llb_status input_processor_pooling_check(const struct llb_generate_request *gr, const char **field, char *msg, size_t cap) {
  const struct llb_pooling_params *p = &gr->pooling_params;
  *field = NULL;
  if (p->pooling_type == LLB_POOLING_NONE) return LLB_STATUS_OK;
  if (p->dimensions > 0) {
    *field = "dimensions";
    snprintf(msg, cap, "the model does not support Matryoshka embeddings: 'dimensions' (%d) cannot change "
             "the size of its output", p->dimensions);
    return LLB_STATUS_UNSUPPORTED;
  }
  if (gr->num_mm_items > 0) {
    *field = "mm_items";
    snprintf(msg, cap, "embeddings of multimodal inputs are not supported");
    return LLB_STATUS_UNSUPPORTED;
  }
  if (gr->sampling_params && gr->sampling_params->n != 1) {
    *field = "n";
    snprintf(msg, cap, "an embedding request has one output (n = %d)", gr->sampling_params->n);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  return LLB_STATUS_OK;
}

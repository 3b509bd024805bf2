/* What the input processor accepts of a pooling (embedding) GenerateRequest: vLLM's embed
 * task on a decoder LM. Pure logic over the plain C view of the request; no bus.
 */
#ifndef LLB_INPUT_PROCESSOR_POOLING_CHECK_H
#define LLB_INPUT_PROCESSOR_POOLING_CHECK_H

#include <stddef.h>

#include "base/status.h"
#include "schemas/generate_request.h"

/* OK for a generation (pooling_params type NONE) or an acceptable pooling request; else the
 * status to answer (UNSUPPORTED: `dimensions` > 0, as no GGUF here says it was trained for
 * Matryoshka truncation (vLLM refuses dimensions for such models), or multimodal items;
 * INVALID_ARGUMENT: n != 1, or a chat/raw prompt option that means nothing without
 * generation) with the offending field in *field and a message in msg[cap]. */
llb_status input_processor_pooling_check(const struct llb_generate_request *gr, const char **field, char *msg, size_t cap);

#endif

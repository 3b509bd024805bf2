/* Checks on precomputed embedding rows (multimodal items of modality "embeds"), shared by
 * every actor that receives them: the input processor (from clients), the scheduler (from
 * the bus) and the worker (before the rows enter the forward pass). Plain C. */
#ifndef LLB_SCHEMAS_EMBEDS_H
#define LLB_SCHEMAS_EMBEDS_H

#include <stdint.h>

/* Index of the first element of data[bytes] that is NaN or ±Inf, read as little-endian
 * `dtype` ("f32" or "f16"; IEEE binary32 / binary16); -1 when every element is finite or
 * the dtype is neither (callers check dtypes themselves). One pass, no allocation. A NaN
 * row turns every logit of its request into NaN and fails the worker's step, so a receiver
 * refuses such an item before it is admitted. */
int64_t llb_embeds_first_nonfinite(const void *data, int64_t bytes, const char *dtype);

#endif

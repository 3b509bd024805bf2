/* The input processor's one wire-translation file: schemas' views (GenerateRequest,
 * SchedulerStats) into the plain structs of input_processor.h and engine_router.h, and a
 * processed child into its EngineCoreRequest view. Views produced here borrow from their
 * inputs (and the arena given): valid while those are. */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_ACTOR_WIRE_H
#define LLB_ACTORS_INPUT_PROCESSOR_ACTOR_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "actors/input_processor/engine_router.h"
#include "actors/input_processor/input_processor.h"
#include "base/status.h"
#include "schemas/codec.h"
#include "schemas/control.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"

#define INPUT_PROCESSOR_DEFAULT_EXTERNAL_ID "req" /* a GenerateRequest without request_id */

/* GenerateRequest view → the logic's request (its sampling params copied: the request owns
 * them). Strings of `gr` are NUL-terminated (decoded); arrays and the composed per-tenant
 * cache salt live in `arena`. Returns the offending field name on a request the logic cannot
 * express (out of memory), else NULL. */
const char *input_processor_wire_generate_request(const struct llb_generate_request *gr, const char *tenant,
                                         const char *reply_to, struct llb_arena *arena,
                                         struct input_processor_generate_request *req);

/* The wire features of pr's multimodal items (metadata and data of req's items) into
 * mm[INPUT_PROCESSOR_MAX_MM_ITEMS]; hidden_size is the columns of "embeds" rows. Returns how many. */
int32_t input_processor_wire_mm_features(const struct input_processor_processed *pr, const struct input_processor_generate_request *req,
                                int32_t hidden_size, struct llb_mm_feature *mm);

/* The EngineCoreRequest of child e of pr with sampling params sp (the child's), its mm
 * features mm[num_mm] and pooling params; trace fields and resume_request_id are left empty
 * for the caller. */
struct llb_engine_core_request input_processor_wire_engine_request(const struct input_processor_engine_request *e,
                                                          const struct input_processor_generate_request *req,
                                                          const struct llb_sampling_params *sp,
                                                          const struct llb_mm_feature *mm, int32_t num_mm,
                                                          const struct llb_pooling_params *pool);

/* SchedulerStats view on `subject` (<prefix>.engine.<eid>.stats) → the router's stats; the
 * engine id of the subject must be the one the message names (written to eid[eid_cap], which
 * out->engine_id points to). Errors: MALFORMED. */
llb_status input_processor_wire_engine_stats(const struct llb_scheduler_stats *s, const char *subject, char *eid,
                                    size_t eid_cap, struct engine_router_stats *out);

#endif

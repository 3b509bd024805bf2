/* NATS subject names of llmbus (docs/design.md §2), built from a configurable prefix.
 *
 *   <prefix>.generate.<tenant>          client → input_processor (queue group)
 *   <prefix>.abort.<tenant>             client → input_processor
 *   <prefix>.engine.<eid>.<kind>        kind: requests|abort|kv|encoder|execute|outputs|stats|
 *                                       dead_letter|resync|history
 *   <prefix>.health.<actor>.<instance>  heartbeats
 *
 * Every name is validated as one subject token: non-empty, at most BUS_TOKEN_MAX bytes,
 * printable ASCII without spaces, '.', '*' or '>'. The prefix may itself hold several tokens
 * ("acme.llm"), each valid by the same rule. Errors are LLB_STATUS_INVALID_ARGUMENT with a
 * message naming the bad value; LLB_STATUS_TOO_LARGE when the result does not fit `cap`.
 * All functions are pure and thread-safe; output goes to the caller's buffer.
 */
#ifndef LLB_BUS_SUBJECT_H
#define LLB_BUS_SUBJECT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define BUS_DEFAULT_PREFIX "llm"
#define BUS_DEFAULT_TENANT "default"
/* Longest single token accepted. */
#define BUS_TOKEN_MAX 64
/* A buffer of this size holds any subject these functions build. */
#define BUS_SUBJECT_MAX 256

/* True if `token` is one valid subject token (see above). */
bool bus_token_valid(const char *token);

/* Checks a prefix: one or more valid tokens joined by '.'. NULL is invalid. */
llb_status bus_prefix_check(const char *prefix);

/* "<prefix>.generate.<tenant>" into buf[cap]. prefix NULL means BUS_DEFAULT_PREFIX. */
llb_status bus_subject_generate(const char *prefix, const char *tenant, char *buf, size_t cap);

/* "<prefix>.abort.<tenant>" into buf[cap]. */
llb_status bus_subject_abort(const char *prefix, const char *tenant, char *buf, size_t cap);

/* "<prefix>.engine.<eid>.<kind>" into buf[cap]; kind must be one of requests, abort, kv,
 * encoder, execute, outputs, stats, dead_letter, resync, history (INVALID_ARGUMENT otherwise). */
llb_status bus_subject_engine(const char *prefix, const char *eid, const char *kind, char *buf,
                              size_t cap);

/* "<prefix>.health.<actor>.<instance>" into buf[cap]. */
llb_status bus_subject_health(const char *prefix, const char *actor, const char *instance,
                              char *buf, size_t cap);

#endif

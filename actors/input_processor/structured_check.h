/* Structured output at intake (pure logic): a request's spec is compiled once with the
 * engine's grammar compiler (model/structured/structured_output.h) so that a bad or unsupported spec is
 * refused at once, with the compiler's message, instead of failing on the worker later.
 * Kinds: json (JSON Schema), json_object, choice, regex and grammar (GBNF/EBNF; a syntax
 * error names its line and column) are compiled.
 *
 * A process compiles each distinct spec once: the verdict (accepted, or the status and message)
 * is kept in a bounded cache keyed by a keyed hash of (kind, spec) (base/hash.h), so a tenant
 * sending the same costly grammar again, or many tenants sending one, costs a hash each time.
 * The compile still counts against the tenant that sends it (the input processor charges spec
 * bytes / 4 to its token bucket before any work, cached or not).
 */
#ifndef LLB_INPUT_PROCESSOR_STRUCTURED_CHECK_H
#define LLB_INPUT_PROCESSOR_STRUCTURED_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"
#include "base/status.h"
#include "schemas/codec.h"

#define INPUT_PROCESSOR_SO_CACHE_ENTRIES 256
#define INPUT_PROCESSOR_SO_MESSAGE_BYTES 512

/* Compiles `so` (kind NONE: nothing to do) and frees the grammar. Returns OK, or the
 * compiler's status (MALFORMED, UNSUPPORTED naming the keyword or construct, TOO_LARGE,
 * OUT_OF_MEMORY), with a message for the client in msg[cap]. */
llb_status input_processor_structured_check(const struct llb_structured_outputs *so, char *msg, size_t cap);

struct input_processor_so_cache;

/* A verdict cache of INPUT_PROCESSOR_SO_CACHE_ENTRIES specs (the oldest forgotten first), keyed under
 * key (copied). Errors: OUT_OF_MEMORY. Thread-safe. */
llb_status input_processor_so_cache_create(const struct llb_hash_key *key, struct input_processor_so_cache **out);
void input_processor_so_cache_destroy(struct input_processor_so_cache *c); /* NULL ok */

/* input_processor_structured_check through the cache: a spec seen before answers its verdict without
 * compiling (*compiled false); OUT_OF_MEMORY verdicts are not kept. c NULL: no cache. */
llb_status input_processor_structured_check_cached(struct input_processor_so_cache *c, const struct llb_structured_outputs *so,
                                          char *msg, size_t cap, bool *compiled);

#endif

/* Structured output at intake (pure logic): a request's spec is compiled once with the
 * engine's grammar compiler (model/structured_output.h) so that a bad or unsupported spec is
 * refused at once, with the compiler's message, instead of failing on the worker later.
 * Kinds: json (JSON Schema), json_object, choice, regex and grammar (GBNF/EBNF; a syntax
 * error names its line and column) are compiled. */
#ifndef LLB_INPUT_PROCESSOR_STRUCTURED_CHECK_H
#define LLB_INPUT_PROCESSOR_STRUCTURED_CHECK_H

#include <stddef.h>

#include "base/status.h"
#include "schemas/codec.h"

/* Compiles `so` (kind NONE: nothing to do) and frees the grammar. Returns OK, or the
 * compiler's status (MALFORMED, UNSUPPORTED naming the keyword or construct, TOO_LARGE,
 * OUT_OF_MEMORY), with a message for the client in msg[cap]. */
llb_status inproc_structured_check(const struct llb_structured_outputs *so, char *msg, size_t cap);

#endif

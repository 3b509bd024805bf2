/* A Jinja interpreter for chat templates: what Hugging Face's apply_chat_template does with
 * jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
 * extensions=[loopcontrols, AssistantTracker]) plus its globals raise_exception and
 * strftime_now and its tojson filter (ensure_ascii=False, sort_keys=False), in C.
 *
 * Covered (Jinja 3.1 semantics): {{ }}, {% %}, {# #}, whitespace control (- and +),
 * trim_blocks, lstrip_blocks, one trailing newline dropped; if/elif/else; for (tuple
 * targets, `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/
 * previtem/nextitem, break/continue); set (also tuple targets, namespace attributes and
 * block set); macro (default arguments, keyword arguments, caller via call blocks); filter
 * blocks; generation blocks; Python-like values (None, bool, int, float, str, list, tuple,
 * dict in insertion order), operators, slicing, tests, filters, str/dict methods and the
 * immutable sandbox's refusal of list/dict mutation. Strings are UTF-8; length, slicing and
 * strip work on code points; upper/lower/title map ASCII letters only.
 *
 * Bounds (struct jinja_limits): output bytes, memory per render, loop iterations plus macro
 * calls, call depth, and parse nesting, so a hostile template or context cannot hang or
 * exhaust an actor. Errors name the template line and column.
 *
 * Thread safety: a template is immutable after creation; render it from any number of
 * threads at once (each render has its own state). */
#ifndef LLB_MODEL_JINJA_H
#define LLB_MODEL_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct jinja_template;

/* Bounds on one render. */
struct jinja_limits {
  size_t max_output_bytes; /* rendered text */
  size_t max_memory_bytes; /* values built while rendering (strings, lists, dicts) */
  uint64_t max_steps;      /* loop iterations + macro calls, all loops together */
  int max_call_depth;      /* nested macro calls */
};

/* Options of one render. */
struct jinja_render_opts {
  struct jinja_limits limits;
  int64_t now_unix_s; /* strftime_now's clock: 0 = the local time now; otherwise this
                         instant in UTC (tests fix the date) */
};

/* Defaults: 4 MiB of output, 256 MiB of memory, 1,000,000 steps, call depth 64, now. */
void jinja_render_opts_default(struct jinja_render_opts *o);

/* Largest template source accepted by jinja_template_create. */
#define JINJA_MAX_SOURCE_BYTES (1024 * 1024)

/* Parses a template (src[0..len), UTF-8) into *out. Errors: MALFORMED with "line L col C:
 * what" (syntax, unknown filter or test, as jinja2 refuses them when compiling),
 * TOO_LARGE (past JINJA_MAX_SOURCE_BYTES or nested past 128 levels), OUT_OF_MEMORY,
 * INVALID_ARGUMENT (NULL). Caller frees with jinja_template_destroy. */
llb_status jinja_template_create(const char *src, size_t len, struct jinja_template **out);

/* Renders t with the variables of `context` (a JSON object; its values become None, bool,
 * int, float, str, list and dict; may be NULL for none). *text_out (malloc'd,
 * NUL-terminated, *len_out bytes; len_out may be NULL) belongs to the caller. Errors:
 * INVALID_ARGUMENT "line L col C: what" for a runtime error (wrong types, undefined
 * attribute of an undefined value, a refused mutation) and "raise_exception: MESSAGE" when
 * the template raises; TOO_LARGE when a bound of opts->limits is passed (the message names
 * which); OUT_OF_MEMORY. Nothing is returned on error. opts NULL = defaults. */
llb_status jinja_template_render(const struct jinja_template *t, const json_t *context,
                                 const struct jinja_render_opts *opts, char **text_out,
                                 size_t *len_out);

/* Frees a template; NULL is fine. */
void jinja_template_destroy(struct jinja_template *t);

#endif

/* Structured output at intake (see structured_check.h). */
#include "actors/input_processor/structured_check.h"

#include <stdio.h>

#include "model/structured_output.h"

llb_status inproc_structured_check(const struct llb_structured_outputs *so, char *msg, size_t cap) {
  msg[0] = '\0';
  struct so_grammar *g = NULL;
  llb_status st = LLB_STATUS_OK;
  switch (so->kind) {
    case LLB_SO_NONE: return LLB_STATUS_OK;
    case LLB_SO_JSON: st = so_grammar_compile_json_schema(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_JSON_OBJECT: st = so_grammar_compile_json_object(&g); break;
    case LLB_SO_CHOICE: st = so_grammar_compile_choice(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_REGEX: st = so_grammar_compile_regex(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_GRAMMAR: st = so_grammar_compile_gbnf(so->spec.data, so->spec.len, &g); break;
    default:
      snprintf(msg, cap, "unknown structured output kind %d", (int)so->kind);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s", msg);
  }
  so_grammar_destroy(g);
  if (st != LLB_STATUS_OK) snprintf(msg, cap, "%s", llb_err_last());
  return st;
}

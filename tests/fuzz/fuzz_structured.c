/* libFuzzer targets for the structured-output spec compilers of model/structured/structured_output.h that
 * the input processor runs on a tenant's request: FUZZ_SO_KIND picks one (0 JSON Schema, 1 choice,
 * 2 regex; fuzzers.cmake builds fuzz_so_choice and fuzz_so_regex, fuzz_json_schema.c covers 0
 * with a stronger walk). Any bytes as the spec; what compiles is
 * walked with the spec's own bytes as output. Oracle beyond no crash, leak or hang (the 1 s
 * limit of run.sh: a spec built to compile slowly is a finding): a refusal is one of the
 * statuses the input processor answers 400 with, with a message; a matcher that reached a
 * complete state is not terminated by reading nothing more. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/structured/structured_output.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static llb_status compile(const char *text, size_t len, struct so_grammar **g) {
#if FUZZ_SO_KIND == 0
  return so_grammar_compile_json_schema(text, len, g);
#elif FUZZ_SO_KIND == 1
  return so_grammar_compile_choice(text, len, g);
#else
  return so_grammar_compile_regex(text, len, g);
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct so_grammar *g = NULL;
  llb_status st = compile((const char *)data, size, &g);
  if (st != LLB_STATUS_OK) {
    const char *m = llb_err_last();
    if ((st != LLB_STATUS_MALFORMED && st != LLB_STATUS_UNSUPPORTED && st != LLB_STATUS_TOO_LARGE &&
         st != LLB_STATUS_INVALID_ARGUMENT && st != LLB_STATUS_OUT_OF_MEMORY) || !m || !m[0]) {
      fprintf(stderr, "refusal %s without a client's status or message\n", llb_strerror(st));
      abort();
    }
    return 0;
  }
  struct so_matcher *m = NULL;
  if (so_matcher_create(g, &m) == LLB_STATUS_OK) {
    const size_t n = size < 512 ? size : 512;
    for (size_t i = 0; i < n && so_matcher_accept_bytes(m, data + i, 1); i++) {
    }
    if (so_matcher_is_complete(m)) (void)so_matcher_is_terminated(m);
    so_matcher_destroy(m);
  }
  so_grammar_destroy(g);
  return 0;
}

/* libFuzzer target for the JSON Schema compiler and its matcher (model/structured/so_schema.c,
 * so_schema_merge.c, so_number.c, so_format.c, so_dfa.c, so_regex.c in search mode, the JSON
 * frames of so_matcher.c): any bytes as a schema. A refusal is MALFORMED, UNSUPPORTED or
 * TOO_LARGE with a message; a compiled grammar is walked as so_fuzz_walk.h says (24 tokens,
 * every mask bit checked against the matcher, end of generation exactly when complete). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/structured/structured_output.h"
#include "tests/fuzz/so_fuzz_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct so_grammar *g = NULL;
  llb_status st = so_grammar_compile_json_schema((const char *)data, size, &g);
  if (st != LLB_STATUS_OK) {
    if (g || (st != LLB_STATUS_MALFORMED && st != LLB_STATUS_UNSUPPORTED && st != LLB_STATUS_TOO_LARGE) || !llb_err_last()[0])
      abort();
    return 0;
  }
  so_fuzz_walk(g, so_fuzz_seed(data, size));
  so_grammar_destroy(g);
  return 0;
}

/* libFuzzer target for the GBNF grammar compiler and its matcher (model/structured/so_gbnf.c,
 * so_gbnf_check.c, the GBNF frames of so_matcher.c): any bytes as a grammar. A refusal is
 * MALFORMED, UNSUPPORTED or TOO_LARGE with a message naming the grammar. A compiled grammar
 * is walked as so_fuzz_walk.h says (24 tokens, every mask bit checked against the matcher). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/structured/structured_output.h"
#include "tests/fuzz/so_fuzz_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct so_grammar *g = NULL;
  llb_status st = so_grammar_compile_gbnf((const char *)data, size, &g);
  if (st != LLB_STATUS_OK) {
    if (g || (st != LLB_STATUS_MALFORMED && st != LLB_STATUS_UNSUPPORTED && st != LLB_STATUS_TOO_LARGE) ||
        !strstr(llb_err_last(), "grammar"))
      abort();
    return 0;
  }
  so_fuzz_walk(g, so_fuzz_seed(data, size));
  so_grammar_destroy(g);
  return 0;
}

/* llmbus-kernel-bench (cmd/bench/kernel_bench.h): options out of range are refused with exit
 * code 2 and a message, and --context N decodes after N-token prompts (prompts longer than a
 * KV block and than one prompt step's share, cut into several steps), with a greedy --check
 * that still answers "Paris" on the default model (skipped without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/bench/kernel_bench.h"

static const char *model_path;

static struct kernel_bench_options small(void) {
  struct kernel_bench_options o = {.model = model_path, .threads = 2, .runs = 1, .n_prefill = 0, .n_decode = 2,
                                   .decode_context = 16, .batches = {2}, .n_batches = 1};
  return o;
}

static void test_out_of_range_options_exit_2(void **s) {
  (void)s;
  struct kernel_bench_options o = small();
  o.model = "/nonexistent.gguf"; /* refused before the file is opened */
  o.decode_context = 0;
  assert_int_equal(kernel_bench_run(&o), 2);
  o.decode_context = KERNEL_BENCH_MAX_CONTEXT + 1;
  assert_int_equal(kernel_bench_run(&o), 2);
  o = small();
  o.model = "/nonexistent.gguf";
  o.batches[0] = 0;
  assert_int_equal(kernel_bench_run(&o), 2);
  o.batches[0] = KERNEL_BENCH_MAX_BATCH + 1;
  assert_int_equal(kernel_bench_run(&o), 2);
  o.batches[0] = 1;
  o.n_decode = 0;
  assert_int_equal(kernel_bench_run(&o), 2);
}

/* Runs o with stdout in a file; returns the exit code and what was printed (caller frees). */
static int run_captured(const struct kernel_bench_options *o, char **text) {
  char path[] = "/tmp/llb-kernel-bench-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  int rc = kernel_bench_run(o);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  FILE *f = fdopen(fd, "r");
  fseek(f, 0, SEEK_SET);
  *text = calloc(1, 1 << 16);
  assert_non_null(*text);
  const size_t got = fread(*text, 1, (1 << 16) - 1, f);
  (*text)[got] = '\0';
  fclose(f);
  unlink(path);
  return rc;
}

static void test_decode_after_long_prompts(void **s) {
  (void)s;
  if (access(model_path, R_OK) != 0) skip();
  struct kernel_bench_options o = small();
  o.check = true;
  o.decode_context = 1100; /* two prompt steps for the sequence, 69 KV blocks */
  o.batches[0] = 1;
  char *out = NULL;
  assert_int_equal(run_captured(&o, &out), 0);
  if (!strstr(out, "decode b1 c1100")) fail_msg("no decode line for --context 1100:\n%s", out);
  free(out);
  o.check = false;
  o.decode_context = 40; /* several sequences in one prompt step, a partial block */
  o.batches[0] = 3;
  assert_int_equal(run_captured(&o, &out), 0);
  if (!strstr(out, "decode b3 c40")) fail_msg("no decode line for --context 40:\n%s", out);
  free(out);
}

int main(int argc, char **argv) {
  model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_range_options_exit_2),
      cmocka_unit_test(test_decode_after_long_prompts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

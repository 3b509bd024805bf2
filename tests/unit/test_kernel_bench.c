/* llmbus-kernel-bench (cmd/bench/kernel_bench.h): options out of range are refused with exit
 * code 2 and a message, and --context N decodes after N-token prompts (prompts longer than a
 * KV block and than one prompt step's share, cut into several steps), with a greedy --check
 * that still answers "Paris" on the default model (skipped without it); --fit-steps reads a
 * worker's --step-log, lines with "first" and lines written before it, and fits the model the
 * steps came from, the first-step-after-idle term with it; --kernel times one packed kernel
 * after checking it against the scalar one, and refuses an unknown type or a bad shape;
 * --op-times prints each decode step split at every op the forward reports; --roofline counts a
 * prefill token's int8 work with the output matrix's once a step; --sampler times each sampling
 * setting per logits row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cpuid.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/gpu_worker/runner_sim.h"
#include "cmd/bench/kernel_bench.h"
#include "kernels/cpu/bench/roofline.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/vec_dot.h"

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

/* Runs o with file descriptor `out_fd` (1: stdout, 2: stderr) in a file; returns the exit code
 * and what was written there (caller frees). */
static int run_captured_fd(const struct kernel_bench_options *o, int out_fd, char **text) {
  char path[] = "/tmp/llb-kernel-bench-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  fflush(stderr);
  int saved = dup(out_fd);
  dup2(fd, out_fd);
  int rc = kernel_bench_run(o);
  fflush(stdout);
  fflush(stderr);
  dup2(saved, out_fd);
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

static int run_captured(const struct kernel_bench_options *o, char **text) { return run_captured_fd(o, 1, text); }

/* --kernel on a tiny weight: the check against the scalar kernel passes and a rate line comes
 * out, for a NIBBLE type (Q4_0, whose AVX2 kernel takes up to 64 rows a call) and a K6 one
 * (Q6_K, 256-weight blocks), at a row count that leaves a partial call. */
static void test_kernel_only_prints_a_checked_rate(void **s) {
  (void)s;
  const struct kernel_only_options cases[] = {
      {.type = "q4_0", .shape = "32x64", .rows = 11, .passes = 3},
      {.type = "Q6_K", .shape = "16x512", .rows = 9, .calls_of = 4, .passes = 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct kernel_bench_options o = {.model = "/nonexistent.gguf", .kernel_only = cases[i]}; /* no model read */
    char *out = NULL;
    assert_int_equal(run_captured(&o, &out), 0);
    assert_non_null(strstr(out, "gives the scalar kernel's bits"));
    const char *line = strstr(out, "fastest ");
    assert_non_null(line);
    double rate = 0, fraction = 0;
    assert_int_equal(sscanf(line, "fastest %lf G multiply-adds/s (%lf of the peak)", &rate, &fraction), 2);
    /* the scalar level's int8 peak loop is not a bound (kernel_only.c): its fraction only >= 0 */
    const enum cpu_simd_level level = cpu_simd_level_detect();
    assert_true(rate > 0 && fraction >= 0 && (level == CPU_SIMD_LEVEL_SCALAR || fraction < 1.5));
    /* the kernel the matmul takes: Q4_0's many-row one where the level has it (AVX2), in calls
     * of up to 64 rows; Q6_K in calls of 4 always the 8-row one */
    const bool many = i == 0 && cpu_packed_select_many(GGML_TYPE_Q4_0, level) != NULL;
    assert_non_null(strstr(out, many ? "(cpu_packed_select_many)" : "(cpu_packed_select)"));
    assert_non_null(strstr(out, cases[i].rows == 11 ? "q4_0 32x64, 11 rows" : "q6_K 16x512, 9 rows in calls of up to 4"));
    free(out);
  }
}

/* --kernel --stream on a small weight, 2 rows on 2 threads: the three timed events each print
 * a positive rate, the copies hold at least 3x the L3 (each event reads DRAM), and the ratios
 * line follows. */
static void test_kernel_stream_prints_three_rates(void **s) {
  (void)s;
  struct kernel_bench_options o = {.model = "/nonexistent.gguf", .threads = 2,
                                   .kernel_only = {.type = "q4_0", .shape = "64x256", .rows = 2, .passes = 3,
                                                   .stream = true}};
  char *out = NULL;
  assert_int_equal(run_captured(&o, &out), 0);
  assert_non_null(strstr(out, "q4_0 64x256 packed "));
  assert_non_null(strstr(out, ", 2 rows, 2 threads, "));
  const char *c = strstr(out, "copies (");
  assert_non_null(c);
  double mib = 0;
  assert_int_equal(sscanf(c, "copies (%lf MiB", &mib), 1);
  assert_true(mib >= 3 * 8); /* 3x an L3 of at least 8 MiB (32 MiB here) */
  const char *names[] = {"matmul (cpu_matmul)", "read, 128 KiB chunks", "read, 1 slice a thread"};
  for (int i = 0; i < 3; i++) {
    const char *line = strstr(out, names[i]);
    assert_non_null(line);
    double best = 0, median = 0;
    assert_int_equal(sscanf(line + strlen(names[i]), " fastest %lf GB/s median %lf GB/s", &best, &median), 2);
    assert_true(best > 0 && median > 0 && best >= median);
  }
  assert_non_null(strstr(out, "matmul / read in chunks: fastest "));
  free(out);
}

/* --roofline's read bound with 2 threads: the fastest of its 21 runs, no run of those whose
 * threads ran together faster than it, a 1-thread read beside it, the host's steal share a
 * fraction (or -1 where /proc/stat cannot be read), and AMX's int8 peak only where the CPU has it. */
static void test_roofline_says_how_the_bound_was_taken(void **s) {
  (void)s;
  struct roofline rl;
  assert_int_equal(roofline_measure(2, &rl), LLB_STATUS_OK);
  assert_int_equal(rl.read_runs, 21);
  assert_true(rl.read_bytes_per_s > 0 && rl.read_median_bytes_per_s <= rl.read_bytes_per_s);
  assert_true(rl.read_together_runs >= 0 && rl.read_together_runs <= rl.read_runs);
  assert_true(rl.read_together_bytes_per_s <= rl.read_bytes_per_s);
  assert_true(rl.read_together_runs > 0 || rl.read_together_bytes_per_s == 0);
  assert_true(rl.read_one_thread_bytes_per_s > 0);
  assert_true(rl.read_steal_share == -1.0 || (rl.read_steal_share >= 0 && rl.read_steal_share <= 1.0));
  /* AMX's int8 peak: none on a CPU without AMX-INT8 (CPUID.(7,0):EDX bit 25); where measured,
   * above the vector peak (a tile multiply does 16 x 16 x 64 multiply-adds) */
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 25))) assert_true(rl.int8_amx_ops_per_s == 0);
  assert_true(rl.int8_amx_ops_per_s == 0 || rl.int8_amx_ops_per_s > rl.int8_ops_per_s);
  if (rl.int8_amx_ops_per_s > 0)
    fprintf(stderr, "amx int8 %.1f GOPS, vector int8 %.1f GOPS\n", rl.int8_amx_ops_per_s / 1e9, rl.int8_ops_per_s / 1e9);
}

/* --stream outside the decode path (4 rows) or with no threads: exit 2 and a message. */
static void test_kernel_stream_refuses_bad_rows_and_threads(void **s) {
  (void)s;
  const int rows[] = {4, 1}, threads[] = {2, 0};
  for (int i = 0; i < 2; i++) {
    struct kernel_bench_options o = {.model = "/nonexistent.gguf", .threads = threads[i],
                                     .kernel_only = {.type = "q4_0", .shape = "64x256", .rows = rows[i], .passes = 1,
                                                     .stream = true}};
    char *err = NULL;
    assert_int_equal(run_captured_fd(&o, 2, &err), 2);
    assert_non_null(strstr(err, "--stream needs --rows in [1, 3]"));
    free(err);
  }
}

/* A type without a packed int8 kernel, a shape that is not whole panels and blocks, and rows
 * per call past what the kernel takes: exit 2 and a message naming the option. */
static void test_kernel_only_refuses_bad_type_and_shape(void **s) {
  (void)s;
  const struct {
    struct kernel_only_options k;
    const char *says;
  } cases[] = {
      {{.type = "q9_9", .shape = "32x64", .rows = 1, .passes = 1}, "--kernel 'q9_9' is not a type"},
      {{.type = "f16", .shape = "32x64", .rows = 1, .passes = 1}, "--kernel 'f16' is not a type"},
      {{.type = "q4_0", .shape = "100x64", .rows = 1, .passes = 1}, "--shape '100x64' is not ROWSxCOLS"},
      {{.type = "q4_k", .shape = "32x64", .rows = 1, .passes = 1}, "--shape '32x64' is not ROWSxCOLS"},
      {{.type = "q4_0", .shape = "32", .rows = 1, .passes = 1}, "--shape '32' is not ROWSxCOLS"},
      {{.type = "q4_0", .shape = "32x64x2", .rows = 1, .passes = 1}, "--shape '32x64x2' is not ROWSxCOLS"},
      {{.type = "q4_0", .shape = "32x64", .rows = 0, .passes = 1}, "needs --rows in [1, "},
      {{.type = "q8_0", .shape = "32x64", .rows = 8, .calls_of = 65, .passes = 1}, "--calls-of in [0, "},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct kernel_bench_options o = {.model = "/nonexistent.gguf", .kernel_only = cases[i].k};
    char *err = NULL;
    assert_int_equal(run_captured_fd(&o, 2, &err), 2);
    if (!strstr(err, cases[i].says)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].says);
    free(err);
  }
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

/* --sampler times the sampler on the model's own logits rows (its vocabulary's width): one line
 * per setting with a positive time per row; --runs out of range is refused. */
static void test_sampler_times_each_setting_per_row(void **s) {
  (void)s;
  if (access(model_path, R_OK) != 0) skip();
  struct kernel_bench_options o = small();
  o.sampler = true;
  o.runs = 0;
  char *out = NULL;
  assert_int_equal(run_captured_fd(&o, 2, &out), 2);
  free(out);
  o.runs = 1;
  assert_int_equal(run_captured(&o, &out), 0);
  static const char *const names[] = {"greedy ", "temperature 1 ", "top_p 0.9 ", "top_p 0.95 ", "top_k 50 ",
                                      "top_k 40, top_p 0.95 ", "min_p 0.05 ", "logprobs 5 "};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *at = strstr(out, names[i]);
    double us = 0.0;
    if (!at || sscanf(at + strlen(names[i]), "%lf us/row", &us) != 1 || !(us > 0.0))
      fail_msg("no positive time for \"%s\":\n%s", names[i], out);
  }
  if (!strstr(out, "logits rows of 49152")) fail_msg("not the model's vocabulary:\n%s", out);
  free(out);
}

/* Calls per step of the op line named `name` in --op-times output, -1 if there is none. */
static double op_calls(const char *out, const char *name) {
  char key[64];
  snprintf(key, sizeof(key), " %s ", name);
  const char *at = strstr(out, key);
  double calls = -1.0;
  if (at && sscanf(at + strlen(key), "%lf", &calls) != 1) calls = -1.0;
  return calls;
}

/* --op-times splits each timed decode step of the default model at every op the forward
 * reports: the logits matmul once a step, each layer's ops once per layer, and the totals. */
static void test_op_times_split_a_step_op_by_op(void **s) {
  (void)s;
  if (access(model_path, R_OK) != 0) skip();
  struct kernel_bench_options o = small();
  o.op_times = true;
  o.batches[0] = 1;
  char *out = NULL;
  assert_int_equal(run_captured(&o, &out), 0);
  if (!strstr(out, "op times of a 1-row step (medians of 2 steps") || !strstr(out, "= matmuls") ||
      !strstr(out, "= other ops"))
    fail_msg("no op-times table for 2 decode steps:\n%s", out);
  const double layers = op_calls(out, "attn_norm");
  if (layers < 1.0 || op_calls(out, "kqv_out") != layers || op_calls(out, "ffn_out") != layers ||
      op_calls(out, "result_output") != 1.0)
    fail_msg("op calls a step: attn_norm %g, kqv_out %g, ffn_out %g, result_output %g:\n%s", layers,
             op_calls(out, "kqv_out"), op_calls(out, "ffn_out"), op_calls(out, "result_output"), out);
  free(out);
}

/* --roofline on the default model, a 32-token prefill and 3 batch-1 decode runs (one run of the
 * bench for both checks: each measures the machine first).
 * The prefill fraction counts a prefill token's int8 work as the layers' matmuls plus the output
 * matrix's once a step (a step computes its last row's logits only): with a tied output of
 * 49152 x 576 the printed ops a token are 2 x (the token's multiply-adds - the output's + the
 * output's / 32).
 * Each decode run is held against reads of the same threads beside it: the paired fraction is a
 * run's rate x the token's bytes over those reads, so it lies between the slowest run over the
 * fastest read and the fastest run over the slowest read, for every run counted. */
static void test_roofline_prefill_ops_and_decode_runs_paired_with_reads(void **s) {
  (void)s;
  if (access(model_path, R_OK) != 0) skip();
  struct kernel_bench_options o = small();
  o.n_prefill = 32;
  o.runs = 3;
  o.batches[0] = 1;
  o.roofline = true;
  char *out = NULL;
  assert_int_equal(run_captured(&o, &out), 0);
  const char *h = strstr(out, "of matrices and does "), *p = strstr(out, "of the int8 peak (");
  double macs = 0, ops = 0;
  if (!h || !p || sscanf(h, "of matrices and does %lf", &macs) != 1 || sscanf(p, "of the int8 peak (%lf", &ops) != 1)
    fail_msg("no roofline header or prefill fraction:\n%s", out);
  const double output = 49152.0 * 576.0 / 1e6, want = 2.0 * (macs - output + output / 32.0);
  if (fabs(ops - want) > 0.3) fail_msg("prefill int ops a token %.1f M, want %.1f M:\n%s", ops, want, out);

  const char *d = strstr(out, "decode b1 "), *b = strstr(out, "of the DRAM read bound (");
  const char *line = strstr(out, "of the DRAM read rate beside it (median of ");
  double med = 0, lo_rate = 0, hi_rate = 0, mb = 0, f = 0, lo = 0, hi = 0;
  int runs = 0, before = 0, after = 0;
  if (!d || !b || !line ||
      sscanf(d, "decode b1 %lf tok/s (median of %*d; min %lf, max %lf)", &med, &lo_rate, &hi_rate) != 3 ||
      sscanf(b, "of the DRAM read bound (%lf MB", &mb) != 1)
    fail_msg("no decode rate or bound:\n%s", out);
  while (line > out && line[-1] != '\n') line--;
  if (sscanf(line, " %lf of the DRAM read rate beside it (median of %d runs, each against the fastest of %d reads "
                   "before and %d after it: %lf-%lf GB/s)", &f, &runs, &before, &after, &lo, &hi) != 6)
    fail_msg("no paired fraction:\n%s", out);
  assert_int_equal(runs, 3);
  assert_true(before >= 1 && after == before);
  assert_true(lo > 0 && lo <= hi);
  const double least = lo_rate * mb / 1e3 / hi, most = hi_rate * mb / 1e3 / lo;
  if (f < least - 0.005 || f > most + 0.005)
    fail_msg("paired fraction %.2f outside [%.3f, %.3f]:\n%s", f, least, most, out);
  free(out);
}

/* A step log of steps priced by a known model, some the first after idle, the first lines in
 * the format from before "first" existed (they read as 0): --fit-steps gives the model back. */
static void test_fit_steps_recovers_the_first_step_after_idle(void **s) {
  (void)s;
  const struct sim_cost_model truth = {.fixed_s = 2.5e-3, .token_s = 9e-4, .sampled_row_s = 2e-4,
                                       .attention_s = 1.2e-6, .context_s = 3.7e-6, .first_step_s = 1.9e-3};
  /* mkstemp templates: the X's are replaced by the file name's unique part */
  char log_path[] = "/tmp/llb-step-log-XXXXXX", fit_path[] = "/tmp/llb-step-fit-XXXXXX";
  int fd = mkstemp(log_path), fd2 = mkstemp(fit_path);
  assert_true(fd >= 0 && fd2 >= 0);
  close(fd2);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  fputs("not a step line\n", f);
  /* malformed step lines with far-off times: read, any of them would pull the fit off */
  static const char *const bad_first[] = {"2}", "-1}", "true}", "1.5}", "1}x", "1,\"more\":0}"};
  for (size_t i = 0; i < sizeof bad_first / sizeof *bad_first; i++)
    fprintf(f, "{\"tokens\":16,\"seqs\":1,\"sampled\":1,\"random\":0,\"attention_pairs\":136,"
               "\"context_tokens\":16,\"seconds\":9.0,\"first\":%s\n", bad_first[i]);
  int line = 0;
  for (int32_t t = 1; t <= 256; t *= 2)
    for (int32_t seqs = 1; seqs <= t && seqs <= 32; seqs *= 4)
      for (int32_t ctx = 0; ctx <= 512; ctx += 256) {
        const struct sim_step_shape sh = {.num_tokens = t, .num_seqs = seqs, .num_sampled = seqs,
                                          .attention_pairs = (double)t * (t + 1) / 2.0 + (double)ctx * t,
                                          .context_tokens = (double)ctx * seqs + t, .first = line % 4 == 1};
        const double sec = sim_cost_seconds(&truth, &sh);
        if (line++ < 3) /* the format of logs written before "first" (all 0 here) */
          fprintf(f, "{\"tokens\":%d,\"seqs\":%d,\"sampled\":%d,\"random\":0,\"attention_pairs\":%.0f,"
                     "\"context_tokens\":%.0f,\"seconds\":%.9f}\n", t, seqs, seqs, sh.attention_pairs,
                  sh.context_tokens, sec - truth.first_step_s * sh.first);
        else
          fprintf(f, "{\"tokens\":%d,\"seqs\":%d,\"sampled\":%d,\"random\":0,\"attention_pairs\":%.0f,"
                     "\"context_tokens\":%.0f,\"seconds\":%.9f,\"first\":%d}\n", t, seqs, seqs,
                  sh.attention_pairs, sh.context_tokens, sec, sh.first);
      }
  fclose(f);
  struct kernel_bench_options o = small();
  o.fit_steps_path = log_path;
  o.fit_path = fit_path;
  char *text;
  assert_int_equal(run_captured(&o, &text), 0);
  assert_non_null(strstr(text, "a first step after idle"));
  free(text);
  struct sim_cost_model m;
  assert_int_equal(sim_cost_model_load(fit_path, &m), LLB_STATUS_OK);
  assert_true(fabs(m.first_step_s / truth.first_step_s - 1) < 1e-4);
  assert_true(fabs(m.fixed_s / truth.fixed_s - 1) < 1e-4 && fabs(m.token_s / truth.token_s - 1) < 1e-4);
  assert_true(fabs(m.context_s / truth.context_s - 1) < 1e-4);
  unlink(log_path);
  unlink(fit_path);
}

int main(int argc, char **argv) {
  model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_range_options_exit_2),
      cmocka_unit_test(test_kernel_only_prints_a_checked_rate),
      cmocka_unit_test(test_kernel_only_refuses_bad_type_and_shape),
      cmocka_unit_test(test_kernel_stream_prints_three_rates),
      cmocka_unit_test(test_kernel_stream_refuses_bad_rows_and_threads),
      cmocka_unit_test(test_roofline_says_how_the_bound_was_taken),
      cmocka_unit_test(test_decode_after_long_prompts),
      cmocka_unit_test(test_sampler_times_each_setting_per_row),
      cmocka_unit_test(test_op_times_split_a_step_op_by_op),
      cmocka_unit_test(test_roofline_prefill_ops_and_decode_runs_paired_with_reads),
      cmocka_unit_test(test_fit_steps_recovers_the_first_step_after_idle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* llmbus-kernel-bench: the flags of cmd/bench/kernel_bench.h (one table, cmd/flags/flags.h).
 *
 *   llmbus-kernel-bench [--model PATH] [--threads N] [--decode-threads N] [--runs N] [--prefill N] [--decode N] [--context N]
 *                       [--batch B[,B...]] [--check] [--roofline] [--op-times] [--packed-cache-dir DIR]
 *                       [--kv-cache-dtype auto|fp16|fp8|q8_0] [--fit FILE [--fit-steps LOG]]
 *                       [--lora-adapters N [--lora-rank R]] [--sampler]
 *   llmbus-kernel-bench --kernel TYPE [--shape ROWSxCOLS] [--rows R] [--calls-of N] [--passes P]
 *   llmbus-kernel-bench --kernel TYPE --stream [--shape ROWSxCOLS] [--rows 1-3] [--threads N] [--passes P]
 *
 * --kernel TYPE: one packed int8 matmul kernel alone on a random ROWSxCOLS weight (default
 * 1536x576) against R activation rows (default 64), fastest and median of P passes (default
 * 300) against the one-thread int8 peak, after a bit-for-bit check against the scalar kernel
 * (cmd/bench/kernel_only.h); no model is loaded. With --stream: the forward's decode matmul on
 * N threads reading DRAM-resident copies of the weight, against plain reads of the same bytes
 * by the same threads, interleaved, as GB/s (cmd/bench/kernel_stream.h).
 *
 * --lora-adapters N: the decode steps (--batch) and the --prefill step with N random LoRA
 * adapters of rank R (default 16) on all seven projections, sequences round-robin over them,
 * against the same steps on the base model: median step times and their ratio
 * (cmd/bench/kernel_lora.h); the other measurements are skipped.
 *
 * --fit FILE: the step-time model of the worker's --device sim fitted to this forward, written
 * as JSON (cmd/bench/kernel_fit.h); the other measurements are skipped. With --fit-steps LOG:
 * fitted to the steps a served worker recorded (llmbus-gpu-worker --step-log LOG) instead.
 *
 * --sampler: the sampler's time per logits row of the model, per setting (greedy, temperature,
 * top_p, top_k, min_p, logprobs), on a fixed text's positions (cmd/bench/kernel_sampler.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench/kernel_bench.h"
#include "cmd/flags/flags.h"

#ifndef LLB_DEFAULT_MODEL
#define LLB_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

/* "1,16,64" -> o->batches; kernel_bench_run checks each size. */
static llb_status set_batches(const struct flag *f, const char *v) {
  struct kernel_bench_options *o = f->target;
  o->n_batches = 0;
  for (const char *s = v; *s && o->n_batches < KERNEL_BENCH_MAX_BATCHES;) {
    char *end;
    const long b = strtol(s, &end, 10);
    if (end == s || (*end && *end != ',')) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s': B[,B...]", v);
    o->batches[o->n_batches++] = (int32_t)b;
    s = *end ? end + 1 : end;
  }
  return o->n_batches ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s': B[,B...]", v);
}

int main(int argc, char **argv) {
  struct kernel_bench_options o = {.model = LLB_DEFAULT_MODEL, .threads = 2, .runs = 5, .n_prefill = 512,
                                   .n_decode = 32, .decode_context = 16, .batches = {1, 16}, .n_batches = 2, .lora_rank = 16,
                                   .kernel_only = {.shape = "1536x576", .rows = 64, .passes = 300}};
  const struct flag t[] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &o.model, .metavar = "PATH",
       .help = "GGUF model"},
      {.name = "threads", .short_name = 't', .kind = FLAG_KIND_INT32, .target = &o.threads, .metavar = "N",
       .help = "forward threads"},
      {.name = "decode-threads", .kind = FLAG_KIND_INT32, .target = &o.decode_threads, .metavar = "N",
       .help = "threads of decode steps (0 = --threads)"},
      {.name = "runs", .kind = FLAG_KIND_INT32, .target = &o.runs, .metavar = "N", .help = "runs after one warm-up"},
      {.name = "prefill", .kind = FLAG_KIND_INT32, .target = &o.n_prefill, .metavar = "N",
       .help = "tokens of the prefill step (0 = none)"},
      {.name = "decode", .kind = FLAG_KIND_INT32, .target = &o.n_decode, .metavar = "N", .help = "decode steps"},
      {.name = "context", .kind = FLAG_KIND_INT32, .target = &o.decode_context, .metavar = "N",
       .help = "prompt tokens of each decoding sequence (llama-batched-bench's -npp)"},
      {.name = "batch", .kind = FLAG_KIND_STRING, .target = &o, .metavar = "B[,B...]", .set = set_batches,
       .help = "decode batch sizes (default 1,16)"},
      {.name = "check", .kind = FLAG_KIND_BOOL, .target = &o.check,
       .help = "the ChatML \"capital of France?\" prompt, greedily: fails without \"Paris\""},
      {.name = "roofline", .kind = FLAG_KIND_BOOL, .target = &o.roofline,
       .help = "measure the machine's bounds first and print each rate as a fraction"},
      {.name = "op-times", .kind = FLAG_KIND_BOOL, .target = &o.op_times,
       .help = "each decode batch's step split op by op (wall and caller-thread CPU us a step)"},
      {.name = "fit", .kind = FLAG_KIND_STRING, .target = &o.fit_path, .metavar = "FILE",
       .help = "fit the sim worker's step-time model (--device sim --sim-cost FILE) to this machine's forward "
               "and write it to FILE"},
      {.name = "fit-steps", .kind = FLAG_KIND_STRING, .target = &o.fit_steps_path, .metavar = "LOG",
       .help = "with --fit: fit to a worker's --step-log instead of timing the forward here"},
      {.name = "kv-cache-dtype", .kind = FLAG_KIND_STRING, .target = &o.kv_cache_dtype, .metavar = "auto|fp16|fp8|q8_0",
       .help = "the KV cache's element type (vLLM's --kv-cache-dtype; fp8 is e4m3; auto = fp16)"},
      {.name = "lora-adapters", .kind = FLAG_KIND_INT32, .target = &o.lora_adapters, .metavar = "N",
       .help = "time the steps with N random LoRA adapters (sequences round-robin) against the base model"},
      {.name = "lora-rank", .kind = FLAG_KIND_INT32, .target = &o.lora_rank, .metavar = "R",
       .help = "rank of those adapters (default 16)"},
      {.name = "sampler", .kind = FLAG_KIND_BOOL, .target = &o.sampler,
       .help = "time the sampler per logits row of the model (greedy, temperature, top_p, top_k, min_p, logprobs) "
               "instead of the forward"},
      {.name = "kernel", .kind = FLAG_KIND_STRING, .target = &o.kernel_only.type, .metavar = "TYPE",
       .help = "time one packed int8 kernel alone (q4_0, q5_0, q4_k, q6_k, ...) instead of the forward"},
      {.name = "shape", .kind = FLAG_KIND_STRING, .target = &o.kernel_only.shape, .metavar = "ROWSxCOLS",
       .help = "with --kernel: the weight's output rows x input columns"},
      {.name = "rows", .kind = FLAG_KIND_INT32, .target = &o.kernel_only.rows, .metavar = "R",
       .help = "with --kernel: activation rows (tokens)"},
      {.name = "calls-of", .kind = FLAG_KIND_INT32, .target = &o.kernel_only.calls_of, .metavar = "N",
       .help = "with --kernel: rows per kernel call (0 = as the matmul: 64 with a many-row kernel, else 8)"},
      {.name = "stream", .kind = FLAG_KIND_BOOL, .target = &o.kernel_only.stream,
       .help = "with --kernel: the decode matmul (--rows 1-3) on --threads threads streaming DRAM-resident copies of "
               "the weight, beside plain reads of them by the same threads, interleaved (cmd/bench/kernel_stream.h)"},
      {.name = "passes", .kind = FLAG_KIND_INT32, .target = &o.kernel_only.passes, .metavar = "P",
       .help = "with --kernel: timed passes over the whole matrix"},
      {.name = "packed-cache-dir", .kind = FLAG_KIND_STRING, .target = &o.packed_cache_dir, .metavar = "DIR",
       .help = "the forward's packed-weight cache (default: private packing)"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {
      .program = "llmbus-kernel-bench", .sections = &sec, .num_sections = 1, .max_positional = 0,
      .usage = "usage: llmbus-kernel-bench [flags]\nPrefill and decode tokens/s of the CPU forward on a real model.\n"};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE) rc = kernel_bench_run(&o);
  flag_args_free(&args);
  return rc;
}

/* llmbus-kernel-bench: prefill and decode tok/s of the CPU forward pass (model/forward/forward.h) on a
 * real GGUF model, the median (min, max) of N runs and the CPU ms per token; optionally a
 * greedy check of the answer and each rate as a fraction of the machine's roofline
 * (kernels/cpu/bench/roofline.h). Shapes follow llama-bench's pp512 / tg runs. */
#ifndef LLB_CMD_KERNEL_BENCH_H
#define LLB_CMD_KERNEL_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd/bench/kernel_only.h"

#define KERNEL_BENCH_MAX_BATCH 64  /* sequences of one decode step */
#define KERNEL_BENCH_MAX_BATCHES 8 /* batch sizes of one run */
#define KERNEL_BENCH_MAX_CONTEXT 32768 /* prompt tokens before the decode steps */

/* What to measure (strings borrowed). */
struct kernel_bench_options {
  const char *model;            /* GGUF path */
  const char *packed_cache_dir; /* the forward's packed-weight cache (NULL: private packing) */
  const char *kv_cache_dtype;   /* llama_kv_dtype_parse's names (NULL: fp16) */
  int threads;                  /* >= 1 */
  int decode_threads;           /* threads of steps of <= LLAMA_DECODE_MAX_TOKENS rows; 0 = threads */
  int runs;                     /* 1..64, after one warm-up run */
  int n_prefill;                /* tokens of the prefill step; 0 = no prefill */
  int n_decode;                 /* >= 1 decode steps after each sequence's prompt */
  int decode_context;           /* that prompt's tokens, 1..KERNEL_BENCH_MAX_CONTEXT (llama-batched-bench's
                                   -npp; a served workload's prompt length compares like with like) */
  int32_t batches[KERNEL_BENCH_MAX_BATCHES]; /* [n_batches] decode batch sizes, 1..64 */
  int n_batches;
  bool check;    /* the ChatML "capital of France?" prompt, greedily: fails without "Paris" */
  bool roofline; /* measure the machine's bounds first and print each rate as a fraction */
  bool op_times; /* each decode batch's op-by-op split of a step (cmd/bench/kernel_optimes.h) */
  const char *fit_path; /* non-NULL: fit --device sim's step-time model instead and write it
                           here as JSON (kernel_fit.h); the other measurements are skipped */
  const char *fit_steps_path; /* with fit_path: fit to this --step-log of a served worker instead
                           of timing the forward here (kernel_fit_steps_run) */
  int lora_adapters; /* > 0: the steps with that many random LoRA adapters against the base
                        model instead (cmd/bench/kernel_lora.h) */
  int lora_rank;     /* their rank, >= 1 */
  bool sampler;      /* the sampler's time per row on the model's logits instead (kernel_sampler.h) */
  struct kernel_only_options kernel_only; /* .type set: one packed kernel alone instead, no model
                                             (cmd/bench/kernel_only.h); the rest is skipped */
};

/* Runs the benchmark, printing to stdout (errors to stderr). Returns the process exit code:
 * 0, 1 (an error, or --check without "Paris"), 2 (options out of range). */
int kernel_bench_run(const struct kernel_bench_options *o);

#endif

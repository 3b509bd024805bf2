/* llmbus-kernel-bench --lora-adapters N --lora-rank R: the CPU forward's decode steps (each
 * --batch size, sequences round-robin over N random adapters of rank R on all seven projections)
 * and --prefill step with adapters against the same steps on the base model, median step times
 * side by side and their ratio (kernel_lora.c's head comment has the details). */
#ifndef LLB_CMD_KERNEL_LORA_H
#define LLB_CMD_KERNEL_LORA_H

#include "cmd/bench/kernel_bench.h"

/* Runs it for o (o->lora_adapters >= 1), printing to stdout. Returns 0, 1 (an error, on
 * stderr), 2 (options out of range). */
int kernel_lora_run(const struct kernel_bench_options *o);

#endif

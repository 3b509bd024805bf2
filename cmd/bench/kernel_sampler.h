/* llmbus-kernel-bench --sampler: the sampler's time per row (model/sampling/sampler.h) on the
 * model's own logits, for each setting users send (greedy, temperature, top_p, top_k, min_p,
 * logprobs). */
#ifndef LLB_CMD_KERNEL_SAMPLER_H
#define LLB_CMD_KERNEL_SAMPLER_H

#include "cmd/bench/kernel_bench.h"

/* Feeds a fixed English text (KERNEL_SAMPLER_TEXT's tokens, BOS first where the vocabulary adds
 * one) through the model in one sequence (o->threads, o->packed_cache_dir) and keeps every
 * position's logits row; then per setting, o->runs passes over all rows (each row copied into
 * the sampler's buffer untimed, the sampler_sample call timed on the monotonic clock) after one
 * warm-up, and prints the median (min, max) of the passes' mean microseconds per row. Returns
 * the process exit code: 0, 1 (an error), 2 (options out of range). */
int kernel_sampler_run(const struct kernel_bench_options *o);

#endif

/* llmbus-kernel-bench --fit FILE: the step-time model of the worker's --device sim
 * (actors/gpu_worker/runner_sim.h) fitted to this machine's CPU forward pass on a real GGUF
 * model: the steps of a served engine timed (prompts, chunks, decode batches, mixed steps),
 * the sampler's cost per row measured apart, a non-negative least-squares fit of the relative
 * error, the table of measured against modelled steps on stdout and the model as JSON. */
#ifndef LLB_CMD_KERNEL_FIT_H
#define LLB_CMD_KERNEL_FIT_H

#include "cmd/bench/kernel_bench.h"

/* Runs the fit with o's model, threads, decode threads, packed cache and runs (the least of
 * o->runs timings a step) and writes o->fit_path. Returns the process exit code: 0, or 1 on
 * an error (printed to stderr). */
int kernel_fit_run(const struct kernel_bench_options *o);

/* --fit-steps LOG --fit FILE: the same model fitted to a real worker's served steps (the
 * JSON lines of its --step-log: each step's shape and the seconds it took): every step a point
 * weighted by 1 / the mean time of its shape class (tokens, sequences, sampled and random rows,
 * context in 256-token buckets), so the many decodes and the long prefills weigh by what they
 * cost the served run; then every coefficient scaled so that the steps' total time is the
 * measured one (the run's throughput); random rows priced inside the other terms (random_row_s
 * 0). Prints the fit, the scale and the error, writes FILE. Returns 0, or 1 on
 * an error (printed). */
int kernel_fit_steps_run(const struct kernel_bench_options *o);

#endif

/* The CPU's own ceilings for the forward pass, measured by microbenchmarks with the same
 * thread count as the forward: DRAM read bandwidth (the bound of batch-1 decode, which reads
 * every weight once per token) and the int8 dot-product peak of the SIMD path the packed
 * matmuls use (the bound of prefill). llmbus-kernel-bench --roofline prints each measured
 * rate as a fraction of its bound, as the roofline model does (Williams, Waterman, Patterson,
 * "Roofline", CACM 2009).
 */
#ifndef LLB_KERNELS_CPU_BENCH_ROOFLINE_H
#define LLB_KERNELS_CPU_BENCH_ROOFLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct roofline {
  double read_bytes_per_s; /* DRAM read bandwidth, bytes/s: the fastest of read_runs runs */
  double read_median_bytes_per_s, read_worst_bytes_per_s; /* the median and slowest run, bytes/s */
  int read_runs;
  size_t read_buffer_bytes; /* bytes each run reads (the threads' slices together) */
  /* How the bound was taken: runs whose threads all ran for >= 95% of the run (their CPU time:
   * none waited for a vCPU) and the fastest of those (0 if none); the fastest of the 1-thread
   * runs interleaved with them (thread 0's slice); the host's steal time over the runs as a
   * share of all vCPUs' time (/proc/stat; < 0 where unreadable). 2 threads together reading no
   * faster than 1, with no steal, is a host that gives the 2 vCPUs one core's memory path. */
  int read_together_runs;
  double read_together_bytes_per_s, read_one_thread_bytes_per_s, read_steal_share;
  double int8_ops_per_s;   /* int8 multiply-adds x 2 per second, all threads */
  /* AVX2 only (else 0): the same with a vpmaddwd and vpaddd after every vpmaddubsw (ggml's AVX2
   * dot step, which widens every 32 products to int32); int8_ops_per_s adds them in int16 (the
   * packed kernels' step), the bound of any AVX2 int8 dot product: every product passes
   * through a vpmaddubsw. */
  double int8_widened_ops_per_s;
  /* Where the CPU has AMX-INT8, the OS grants it and the level is AVX-512's (else 0): the same from tdpbusd on 16 x 64
   * byte tiles, the int8 peak of such a CPU (Intel Xeon since Sapphire Rapids: ~7x vpdpbusd's
   * rate here). llmbus's kernels do not use AMX, so a prefill's fraction of it is printed beside
   * the fraction of int8_ops_per_s. */
  double int8_amx_ops_per_s;
  const char *int8_path;   /* "avx512-vnni (vpdpbusd)", "avx2 (vpmaddubsw + vpaddw)" or "scalar" */
  int threads;
};

/* Measures both ceilings with `threads` threads (1..256): the read bandwidth streams a buffer
 * of 512 MiB or 8x the L3 if larger, in 2 MiB pages (MADV_HUGEPAGE, as the packed weights), 21
 * times, all threads at once from a common start (their slices together over the span from the
 * first start to the last end), the fastest run the bound (the median and slowest kept), each run
 * followed by one of 1 thread reading thread 0's slice (read_one_thread_bytes_per_s); the int8 peak runs
 * independent dot-product chains in registers on the best SIMD level of this CPU (AVX2: also
 * widened at every step), the best of 3 runs, a run's rate the sum of its threads' fastest of
 * 400 timed slices (~30 us each: on a loaded machine some run undisturbed); ~1-2 s in all.
 * Errors: INVALID_ARGUMENT (threads), OUT_OF_MEMORY, IO (a thread could not start). */
llb_status roofline_measure(int threads, struct roofline *out);

/* A read buffer kept open between read runs, so that reads can be paired with the runs they
 * bound (llmbus-kernel-bench --roofline times a read run next to every decode run: this guest's
 * DRAM rate moves by 2x from one minute to the next, and a bound read seconds before in another
 * state says little). The same buffer as roofline_measure's (512 MiB or 8x the L3, huge pages,
 * touched once at open), split into one slice per thread. Owned by the caller: close it. */
struct roofline_reader;

/* Opens a reader for `threads` threads (1..256). Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status roofline_reader_open(int threads, struct roofline_reader **out);

/* One read run (as roofline_measure's): every thread sums its slice at once; bytes/s over the
 * span from the first start to the last end, < 0 when a thread did not start. *together
 * (optional): every thread was on a vCPU for >= 95% of the span. */
double roofline_reader_run(struct roofline_reader *r, bool *together);

void roofline_reader_close(struct roofline_reader *r);

/* Fraction of a bound reached: rate x cost per unit / ceiling (e.g. decode tok/s x bytes
 * read per token / read bytes per s). 0 when the ceiling is not positive. */
double roofline_fraction(double rate, double cost_per_unit, double ceiling);

#endif

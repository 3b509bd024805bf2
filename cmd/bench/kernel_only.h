/* llmbus-kernel-bench --kernel TYPE: the rate of one packed int8 matmul kernel alone
 * (kernels/cpu/packed.h), with no model, threads or forward around it, so that a kernel-only
 * figure in the docs is one command away.
 *
 * A random ROWSxCOLS weight of GGML type TYPE (random quants, finite fp16 scales of 1e-3 to
 * 1.1e-2) packed by cpu_pack_weight, `rows` activation rows of random floats in [-1, 1]
 * quantized by cpu_quantize_act_row_x, as the forward does; then the kernel the matmul picks at
 * this process's SIMD level (cpu_simd_level_detect: LLMBUS_SIMD caps it) called the way
 * kernels/cpu/ops.c calls it: rows in calls of up to CPU_PACKED_MANY_ROWS for a
 * cpu_packed_select_many kernel, else CPU_PACKED_MAX_ROWS (cpu_packed_select), each call over
 * every panel in column order. One thread. Before the timing, the result is checked against
 * the scalar kernel bit for bit. Each pass computes the whole matrix for all rows; prints the
 * fastest and the median pass as G multiply-adds/s and each as a fraction of the level's
 * one-thread int8 peak (kernels/cpu/bench/roofline.h, which also reads LLMBUS_SIMD).
 */
#ifndef LLB_CMD_KERNEL_ONLY_H
#define LLB_CMD_KERNEL_ONLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

/* What to time (strings borrowed). */
struct kernel_only_options {
  const char *type;  /* ggml_type_name of a type with a packed int8 kernel ("q4_0", "q6_k", ...);
                        NULL: not this mode */
  const char *shape; /* "ROWSxCOLS": output rows (a multiple of CPU_PACK_COLS) x inputs (whole blocks) */
  int rows;          /* activation rows (tokens), >= 1 */
  int calls_of;      /* rows per kernel call; 0 = as the matmul does (64 with a many-row kernel, else 8);
                        above CPU_PACKED_MAX_ROWS only where a many-row kernel exists */
  int passes;        /* timed passes over the whole matrix, >= 1 */
  bool stream;       /* the DRAM streaming mode instead (cmd/bench/kernel_stream.h) */
};

/* The type named `name` (ggml_type_name, any case) if it has a packed int8 kernel, else
 * GGML_TYPE_COUNT. */
enum ggml_type kernel_only_type(const char *name);

/* Fills w [n_bytes, whole blocks of t] with random quants and sub-block scales from the
 * xorshift32 state *seed; each block's fp16 d (and min) in [1e-3, 1.1e-2]: finite. */
void kernel_only_fill(uint8_t *w, size_t n_bytes, enum ggml_type t, uint32_t *seed);

/* Runs the mode, printing to stdout (errors to stderr). Returns the process exit code: 0, 1
 * (the kernel's bits differ from the scalar kernel's, or no memory) or 2 (an unknown type, a
 * bad shape or an option out of range, with a message naming it). */
int kernel_only_run(const struct kernel_only_options *o);

#endif

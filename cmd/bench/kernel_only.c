/* llmbus-kernel-bench --kernel TYPE (kernel_only.h): one packed int8 matmul kernel alone, on a
 * random weight, checked bit for bit against the scalar kernel, then timed pass by pass. */
#include "cmd/bench/kernel_only.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/cpu/bench/roofline.h"
#include "kernels/cpu/packed.h"
#include "kernels/quant.h"

enum {
  KERNEL_ONLY_MAX_ROWS = 65536,     /* activation rows */
  KERNEL_ONLY_MAX_PASSES = 1000000,
  KERNEL_ONLY_SEED = 12345,
};
#define KERNEL_ONLY_MAX_ELEMS ((int64_t)1 << 30) /* weights of one matrix */

/* The weight, its packing, the activations and both results of one run. */
struct kernel_only_run {
  enum ggml_type type;
  enum cpu_simd_level level;
  int64_t n_out, k; /* weight rows (outputs) x cols (inputs) */
  int rows, calls_of;
  bool many;        /* fn is a cpu_packed_select_many kernel */
  cpu_packed_fn fn; /* the kernel timed */
  size_t panel_bytes;
  uint8_t *weight;  /* [n_out, row bytes] the GGUF blocks */
  uint8_t *packed;  /* [n_out / 16, panel_bytes] */
  block_q8_x *act;  /* [rows, k / 32] */
  float *out, *ref; /* [rows, n_out]: fn's and the scalar kernel's */
};

static uint32_t kernel_only_rand(uint32_t *s) { /* xorshift32 */
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

enum ggml_type kernel_only_type(const char *name) {
  for (int t = 0; t < GGML_TYPE_COUNT; t++)
    if (cpu_packed_select((enum ggml_type)t, CPU_SIMD_LEVEL_SCALAR) && strcasecmp(ggml_type_name(t), name) == 0)
      return (enum ggml_type)t;
  return GGML_TYPE_COUNT;
}

static void kernel_only_list_types(FILE *f) {
  for (int t = 0; t < GGML_TYPE_COUNT; t++)
    if (cpu_packed_select((enum ggml_type)t, CPU_SIMD_LEVEL_SCALAR)) fprintf(f, " %s", ggml_type_name(t));
  fputc('\n', f);
}

/* "ROWSxCOLS" -> r->n_out, r->k; 0, or 2 with a message. */
static int kernel_only_shape(const char *shape, struct kernel_only_run *r) {
  char *end = NULL;
  const long long n_out = shape ? strtoll(shape, &end, 10) : 0;
  const long long k = end && *end == 'x' ? strtoll(end + 1, &end, 10) : 0;
  const int64_t be = ggml_type_block_elems(r->type);
  if (!shape || *end || n_out <= 0 || k <= 0 || n_out % CPU_PACK_COLS || k % be ||
      n_out > KERNEL_ONLY_MAX_ELEMS / k) {
    fprintf(stderr,
            "llmbus-kernel-bench: --shape '%s' is not ROWSxCOLS with ROWS a multiple of %d, COLS a multiple of "
            "%lld (%s blocks) and at most 2^30 weights\n",
            shape ? shape : "", CPU_PACK_COLS, (long long)be, ggml_type_name(r->type));
    return 2;
  }
  r->n_out = n_out;
  r->k = k;
  return 0;
}

/* The type, shape, rows, rows per call and passes of o checked into r; 0, or 2 with a message. */
static int kernel_only_parse(const struct kernel_only_options *o, struct kernel_only_run *r) {
  r->type = kernel_only_type(o->type);
  if (r->type == GGML_TYPE_COUNT) {
    fprintf(stderr, "llmbus-kernel-bench: --kernel '%s' is not a type with a packed int8 kernel; one of:", o->type);
    kernel_only_list_types(stderr);
    return 2;
  }
  if (kernel_only_shape(o->shape, r)) return 2;
  r->level = cpu_simd_level_detect();
  const cpu_packed_fn many = cpu_packed_select_many(r->type, r->level);
  const int most = many ? CPU_PACKED_MANY_ROWS : CPU_PACKED_MAX_ROWS;
  if (o->rows < 1 || o->rows > KERNEL_ONLY_MAX_ROWS || o->passes < 1 || o->passes > KERNEL_ONLY_MAX_PASSES ||
      o->calls_of < 0 || o->calls_of > most) {
    fprintf(stderr,
            "llmbus-kernel-bench: needs --rows in [1, %d], --passes in [1, %d] and --calls-of in [0, %d] (%s at "
            "this SIMD level has %s)\n",
            KERNEL_ONLY_MAX_ROWS, KERNEL_ONLY_MAX_PASSES, most, ggml_type_name(r->type),
            many ? "a many-row kernel" : "only the 8-row kernel");
    return 2;
  }
  r->rows = o->rows;
  r->calls_of = o->calls_of ? o->calls_of : most;
  r->many = many && r->calls_of > CPU_PACKED_MAX_ROWS;
  r->fn = r->many ? many : cpu_packed_select(r->type, r->level);
  return 0;
}

/* Byte offsets of a block's fp16 scale and, where it has one, its fp16 min (else -1). */
static void kernel_only_scale_offsets(enum ggml_type t, int *d_at, int *m_at) {
  *m_at = -1;
  switch (t) {
  case GGML_TYPE_Q6_K: *d_at = (int)offsetof(block_q6_K, d); break;
  case GGML_TYPE_Q4_1: *d_at = (int)offsetof(block_q4_1, d), *m_at = (int)offsetof(block_q4_1, m); break;
  case GGML_TYPE_Q5_1: *d_at = (int)offsetof(block_q5_1, d), *m_at = (int)offsetof(block_q5_1, m); break;
  case GGML_TYPE_Q4_K: *d_at = (int)offsetof(block_q4_K, d), *m_at = (int)offsetof(block_q4_K, dmin); break;
  case GGML_TYPE_Q5_K: *d_at = (int)offsetof(block_q5_K, d), *m_at = (int)offsetof(block_q5_K, dmin); break;
  default: *d_at = 0; break; /* Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first */
  }
}

void kernel_only_fill(uint8_t *w, size_t n_bytes, enum ggml_type t, uint32_t *seed) {
  for (size_t i = 0; i < n_bytes; i++) w[i] = (uint8_t)kernel_only_rand(seed);
  int d_at, m_at;
  kernel_only_scale_offsets(t, &d_at, &m_at);
  const size_t bb = ggml_type_block_bytes(t);
  for (size_t b = 0; b + bb <= n_bytes; b += bb)
    for (int i = 0; i < 2; i++) {
      const int at = i ? m_at : d_at;
      if (at < 0) continue;
      const uint16_t h = llb_fp32_to_fp16(1e-3f + (float)(kernel_only_rand(seed) % 1000) * 1e-5f);
      memcpy(w + b + at, &h, sizeof h);
    }
}

/* Allocates r's buffers, fills and packs the weight, quantizes the activations; 0, or 1 with a
 * message. */
static int kernel_only_prepare(struct kernel_only_run *r) {
  uint32_t seed = KERNEL_ONLY_SEED;
  const size_t row_bytes = ggml_type_block_bytes(r->type) * (size_t)(r->k / ggml_type_block_elems(r->type));
  const int64_t nb = r->k / 32;
  r->weight = malloc(row_bytes * (size_t)r->n_out);
  r->act = malloc(sizeof(block_q8_x) * (size_t)nb * (size_t)r->rows);
  r->out = malloc(sizeof(float) * (size_t)r->n_out * (size_t)r->rows);
  r->ref = malloc(sizeof(float) * (size_t)r->n_out * (size_t)r->rows);
  float *x = malloc(sizeof(float) * (size_t)r->k);
  if (!r->weight || !r->act || !r->out || !r->ref || !x) {
    free(x);
    fprintf(stderr, "llmbus-kernel-bench: out of memory for a %lldx%lld weight and %d rows\n", (long long)r->n_out,
            (long long)r->k, r->rows);
    return 1;
  }
  kernel_only_fill(r->weight, row_bytes * (size_t)r->n_out, r->type, &seed);
  for (int i = 0; i < r->rows; i++) {
    for (int64_t j = 0; j < r->k; j++) x[j] = (float)(kernel_only_rand(&seed) % 20001) / 10000.0f - 1.0f;
    cpu_quantize_act_row_x(r->level, x, r->act + (size_t)i * (size_t)nb, r->k);
  }
  free(x);
  const struct backend_weight w = {.type = r->type, .rows = r->n_out, .cols = r->k, .row_bytes = row_bytes,
                                   .data = r->weight};
  const size_t pb = cpu_pack_bytes(&w);
  r->packed = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
  if (!r->packed || cpu_pack_weight(&w, r->packed) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-kernel-bench: could not pack the %s weight: %s\n", ggml_type_name(r->type),
            pb ? llb_err_last() : "no packed layout");
    return 1;
  }
  r->panel_bytes = pb / (size_t)(r->n_out / CPU_PACK_COLS);
  return 0;
}

/* One pass as ops.c's packed matmul walks a chunk: the rows in calls of `calls_of`, each call
 * over every panel in column order; out [rows, n_out]. */
static void kernel_only_pass(const struct kernel_only_run *r, cpu_packed_fn fn, int calls_of, float *out) {
  const int64_t nb = r->k / 32;
  for (int r0 = 0; r0 < r->rows; r0 += calls_of) {
    const int nr = r->rows - r0 < calls_of ? r->rows - r0 : calls_of;
    const block_q8_x *rows[CPU_PACKED_MANY_ROWS];
    for (int i = 0; i < nr; i++) rows[i] = r->act + (size_t)(r0 + i) * (size_t)nb;
    for (int64_t col = 0; col < r->n_out; col += CPU_PACK_COLS)
      fn(nb, r->packed + (size_t)(col / CPU_PACK_COLS) * r->panel_bytes, rows, nr, out + (int64_t)r0 * r->n_out + col,
         r->n_out);
  }
}

/* fn's result against the scalar kernel's in 8-row calls, bit for bit; 0, or 1 with the first
 * output that differs. */
static int kernel_only_check(struct kernel_only_run *r) {
  kernel_only_pass(r, r->fn, r->calls_of, r->out);
  kernel_only_pass(r, cpu_packed_select(r->type, CPU_SIMD_LEVEL_SCALAR), CPU_PACKED_MAX_ROWS, r->ref);
  const int64_t n = r->n_out * r->rows;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&r->out[i], &r->ref[i], sizeof(float)) != 0) {
      fprintf(stderr, "llmbus-kernel-bench: %s kernel's output (row %lld, column %lld) %.9g differs from the scalar "
              "kernel's %.9g\n", ggml_type_name(r->type), (long long)(i / r->n_out), (long long)(i % r->n_out),
              r->out[i], r->ref[i]);
      return 1;
    }
  return 0;
}

static int kernel_only_cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static const char *kernel_only_level_name(enum cpu_simd_level l) {
  return l >= CPU_SIMD_LEVEL_AVX512_VNNI ? "avx512-vnni" : l == CPU_SIMD_LEVEL_AVX2 ? "avx2" : "scalar";
}

/* Times `passes` passes; prints the fastest and the median against the one-thread peak. */
static int kernel_only_time(struct kernel_only_run *r, int passes, const struct roofline *rl) {
  double *s = malloc(sizeof(double) * (size_t)passes);
  if (!s) {
    fprintf(stderr, "llmbus-kernel-bench: --kernel: out of memory for %d passes\n", passes);
    return 1;
  }
  for (int p = 0; p < passes; p++) {
    const int64_t t0 = llb_now_ns();
    kernel_only_pass(r, r->fn, r->calls_of, r->out);
    s[p] = (double)(llb_now_ns() - t0) * 1e-9;
  }
  qsort(s, (size_t)passes, sizeof(double), kernel_only_cmp);
  const double macs = (double)r->n_out * (double)r->k * r->rows, peak = rl->int8_ops_per_s / 2;
  const double best = macs / s[0] * 1e-9, median = macs / s[passes / 2] * 1e-9;
  double load[1] = {-1};
  (void)getloadavg(load, 1);
  printf("%s %lldx%lld, %d rows in calls of up to %d, %s: fastest %.1f G multiply-adds/s (%.2f of the peak), median %.1f "
         "(%.2f) of %d passes; int8 peak %.1f G multiply-adds/s (%s, 1 thread); load average %.2f\n",
         ggml_type_name(r->type), (long long)r->n_out, (long long)r->k, r->rows, r->calls_of,
         kernel_only_level_name(r->level), best, best * 1e9 / peak, median, median * 1e9 / peak, passes, peak * 1e-9,
         rl->int8_path, load[0]);
  if (rl->int8_widened_ops_per_s > 0)
    printf("  against the widened avx2 int8 step (%.1f G multiply-adds/s): fastest %.2f, median %.2f\n",
           rl->int8_widened_ops_per_s / 2 * 1e-9, best * 2e9 / rl->int8_widened_ops_per_s,
           median * 2e9 / rl->int8_widened_ops_per_s);
  free(s);
  return 0;
}

int kernel_only_run(const struct kernel_only_options *o) {
  struct kernel_only_run r = {0};
  int rc = kernel_only_parse(o, &r);
  if (rc == 0) rc = kernel_only_prepare(&r);
  if (rc == 0) rc = kernel_only_check(&r);
  if (rc == 0) {
    printf("%s %lldx%lld, %d rows: the %s kernel (%s) gives the scalar kernel's bits\n", ggml_type_name(r.type),
           (long long)r.n_out, (long long)r.k, r.rows, kernel_only_level_name(r.level),
           r.many ? "cpu_packed_select_many" : "cpu_packed_select");
    struct roofline rl;
    const llb_status st = roofline_measure(1, &rl);
    if (st != LLB_STATUS_OK) fprintf(stderr, "llmbus-kernel-bench: roofline: %s\n", llb_err_last());
    rc = st != LLB_STATUS_OK ? 1 : kernel_only_time(&r, o->passes, &rl);
  }
  free(r.weight);
  free(r.packed);
  free(r.act);
  free(r.out);
  free(r.ref);
  return rc;
}

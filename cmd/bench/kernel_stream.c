/* llmbus-kernel-bench --kernel TYPE --stream (kernel_stream.h): the decode matmul's DRAM
 * streaming rate beside plain reads of the same bytes by the same pool, interleaved. */
#include "cmd/bench/kernel_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/threadpool.h"

#define KS_HUGE_PAGE ((size_t)2 << 20)
#define KS_READ_CHUNK ((size_t)128 << 10) /* ops.c's CPU_MATMUL_DECODE_CHUNK_BYTES */
#define KS_L3_TIMES 3
#define KS_MAX_ROWS 3 /* ops.c's CPU_MATMUL_DECODE_ROWS: the decode path */
#define KS_MAX_COPIES 65536
/* Copies follow each other as the forward packs its weights (model/forward/forward_pack.c's PACK_ALIGN) */
#define KS_COPY_ALIGN ((size_t)64)
#define KS_SEED 12345u

enum { KS_MATMUL, KS_READ_CHUNKS, KS_READ_SLICES, KS_EVENTS };

/* The copies of the packed weight and what one event needs. */
struct kernel_stream {
  enum ggml_type type;
  int64_t n_out, k;
  int rows, threads;
  size_t packed_bytes, stride; /* one copy's bytes, and the distance between copies (KS_COPY_ALIGN) */
  int n_copies;
  uint8_t *copies; /* [n_copies, stride], 2 MiB aligned, MADV_HUGEPAGE */
  float *x, *out;  /* [rows, k], [rows, n_out] */
  struct backend_ctx *ctx;
};

/* A read event: sums 8-byte words of [p, p + bytes), chunk by chunk; one sink per thread. */
struct ks_read {
  const uint8_t *p;
  size_t bytes, per; /* bytes in all, and per chunk */
  uint64_t sink[256 * 8];
};

static void ks_read_chunk(void *arg, int64_t chunk, int ith) {
  struct ks_read *r = arg;
  const size_t lo = (size_t)chunk * r->per, hi = lo + r->per < r->bytes ? lo + r->per : r->bytes;
  const uint64_t *w = (const uint64_t *)(const void *)(r->p + lo);
  const size_t n = (hi - lo) / 8;
  uint64_t s[8] = {0};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += w[i + k];
  r->sink[ith * 8] += s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

/* Bytes of the last-level cache (sysfs, as roofline.c reads it); 32 MiB where unknown. */
static size_t ks_l3_bytes(void) {
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  unsigned long long v = 0;
  char unit = 0;
  const int n = f ? fscanf(f, "%llu%c", &v, &unit) : 0;
  if (f) fclose(f);
  if (n < 1 || v == 0) return (size_t)32 << 20;
  return (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1024u * 1024u : 1u);
}

/* kB of AnonHugePages and of Size over the mappings of /proc/self/smaps that overlap
 * [p, p + bytes); both 0 where unreadable. */
static void ks_huge_share(const void *p, size_t bytes, unsigned long long *huge_kb, unsigned long long *size_kb) {
  *huge_kb = *size_kb = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return;
  char line[512];
  int in = 0;
  const uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  while (fgets(line, sizeof line, f)) {
    unsigned long long a, b, v;
    if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a < hi && b > lo;
    else if (in && sscanf(line, "Size: %llu kB", &v) == 1) *size_kb += v;
    else if (in && sscanf(line, "AnonHugePages: %llu kB", &v) == 1) *huge_kb += v;
  }
  fclose(f);
}

/* Type, shape, rows, passes and threads checked into s; 0, or 2 with a message. */
static int ks_parse(const struct kernel_only_options *o, int threads, struct kernel_stream *s) {
  s->type = kernel_only_type(o->type);
  if (s->type == GGML_TYPE_COUNT) {
    fprintf(stderr, "llmbus-kernel-bench: --kernel '%s' is not a type with a packed int8 kernel\n", o->type);
    return 2;
  }
  char *end = NULL;
  const long long n_out = o->shape ? strtoll(o->shape, &end, 10) : 0;
  const long long k = end && *end == 'x' ? strtoll(end + 1, &end, 10) : 0;
  const int64_t be = ggml_type_block_elems(s->type);
  if (!o->shape || *end || n_out <= 0 || k <= 0 || n_out % CPU_PACK_COLS || k % be || k % 32 ||
      n_out > ((int64_t)1 << 30) / k) {
    fprintf(stderr, "llmbus-kernel-bench: --shape '%s' is not ROWSxCOLS with ROWS a multiple of %d, COLS of %lld "
            "and 32, at most 2^30 weights\n", o->shape ? o->shape : "", CPU_PACK_COLS, (long long)(be > 32 ? be : 32));
    return 2;
  }
  if (o->rows < 1 || o->rows > KS_MAX_ROWS || o->passes < 1 || o->passes > 100000 || threads < 1 || threads > 256) {
    fprintf(stderr, "llmbus-kernel-bench: --stream needs --rows in [1, %d] (the decode path), --passes in "
            "[1, 100000] and --threads in [1, 256]\n", KS_MAX_ROWS);
    return 2;
  }
  s->n_out = n_out, s->k = k, s->rows = o->rows, s->threads = threads;
  return 0;
}

/* Packs one random weight into copy 0 and copies it to the others; 0, or 1 with a message. */
static int ks_prepare(struct kernel_stream *s) {
  const size_t row_bytes = ggml_type_block_bytes(s->type) * (size_t)(s->k / ggml_type_block_elems(s->type));
  uint8_t *raw = malloc(row_bytes * (size_t)s->n_out);
  if (!raw) {
    fprintf(stderr, "llmbus-kernel-bench: out of memory for a %lldx%lld weight\n", (long long)s->n_out, (long long)s->k);
    return 1;
  }
  uint32_t seed = KS_SEED;
  kernel_only_fill(raw, row_bytes * (size_t)s->n_out, s->type, &seed);
  const struct backend_weight w = {.type = s->type, .rows = s->n_out, .cols = s->k, .row_bytes = row_bytes, .data = raw};
  s->packed_bytes = cpu_pack_bytes(&w);
  if (s->packed_bytes == 0) {
    free(raw);
    fprintf(stderr, "llmbus-kernel-bench: %s %lldx%lld has no packed layout\n", ggml_type_name(s->type),
            (long long)s->n_out, (long long)s->k);
    return 1;
  }
  s->stride = (s->packed_bytes + KS_COPY_ALIGN - 1) / KS_COPY_ALIGN * KS_COPY_ALIGN;
  const size_t want = ks_l3_bytes() * KS_L3_TIMES;
  size_t n = (want + s->packed_bytes - 1) / s->packed_bytes; /* the bytes read, not the padding */
  s->n_copies = (int)(n < 2 ? 2 : n > KS_MAX_COPIES ? KS_MAX_COPIES : n);
  const size_t alloc = (s->stride * (size_t)s->n_copies + KS_HUGE_PAGE - 1) / KS_HUGE_PAGE * KS_HUGE_PAGE;
  s->copies = aligned_alloc(KS_HUGE_PAGE, alloc);
  s->x = malloc(sizeof(float) * (size_t)(s->rows * s->k));
  s->out = malloc(sizeof(float) * (size_t)(s->rows * s->n_out));
  if (!s->copies || !s->x || !s->out) {
    free(raw);
    fprintf(stderr, "llmbus-kernel-bench: out of memory for %d copies of %zu bytes\n", s->n_copies, s->stride);
    return 1;
  }
#ifdef MADV_HUGEPAGE
  (void)madvise(s->copies, alloc, MADV_HUGEPAGE);
#endif
  const llb_status st = cpu_pack_weight(&w, s->copies);
  free(raw);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-kernel-bench: could not pack the %s weight: %s\n", ggml_type_name(s->type), llb_err_last());
    return 1;
  }
  memset(s->copies + s->packed_bytes, 0, s->stride - s->packed_bytes);
  for (int c = 1; c < s->n_copies; c++) memcpy(s->copies + (size_t)c * s->stride, s->copies, s->stride);
  for (int64_t i = 0; i < s->rows * s->k; i++) s->x[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
  const struct backend_ctx_params p = {.n_threads = s->threads, .max_num_tokens = s->rows, .max_row_elems = s->k,
                                       .max_context_len = 1};
  if (cpu_ctx_create(&p, &s->ctx) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-kernel-bench: cpu backend: %s\n", llb_err_last());
    return 1;
  }
  return 0;
}

/* One timed event of kind `kind` on copy `copy`; seconds, or < 0 on a failed matmul. */
static double ks_event(struct kernel_stream *s, int kind, int copy, struct ks_read *rd) {
  const uint8_t *p = s->copies + (size_t)copy * s->stride;
  const int64_t t0 = llb_now_ns();
  if (kind == KS_MATMUL) {
    const struct backend_weight w = {.type = s->type, .rows = s->n_out, .cols = s->k,
                                     .row_bytes = ggml_type_block_bytes(s->type) *
                                                  (size_t)(s->k / ggml_type_block_elems(s->type)),
                                     .data = p, .packed = p};
    const struct backend_weight *ws[1] = {&w};
    float *outs[1] = {s->out};
    if (cpu_matmul(s->ctx, s->x, s->rows, ws, outs, 1) != LLB_STATUS_OK) return -1.0;
  } else {
    rd->p = p;
    rd->bytes = s->packed_bytes;
    rd->per = kind == KS_READ_CHUNKS ? KS_READ_CHUNK : (s->packed_bytes / (size_t)s->threads + 63) / 64 * 64;
    cpu_threadpool_parallel(s->ctx->pool, ks_read_chunk, rd, (int64_t)((rd->bytes + rd->per - 1) / rd->per));
  }
  return (double)(llb_now_ns() - t0) * 1e-9;
}

static int ks_cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Times the rounds; prints each event kind's fastest and median GB/s. 0, or 1. */
static int ks_time(struct kernel_stream *s, int passes) {
  double *t = malloc(sizeof(double) * (size_t)passes * KS_EVENTS);
  struct ks_read *rd = calloc(1, sizeof *rd);
  if (!t || !rd) {
    free(t);
    free(rd);
    fprintf(stderr, "llmbus-kernel-bench: --stream: out of memory for %d passes\n", passes);
    return 1;
  }
  int copy = 0;
  for (int p = -1; p < passes; p++) /* round -1: warm-up (pool, page tables), not kept */
    for (int e = 0; e < KS_EVENTS; e++, copy = (copy + 1) % s->n_copies) {
      const double sec = ks_event(s, e, copy, rd);
      if (sec < 0) {
        fprintf(stderr, "llmbus-kernel-bench: matmul: %s\n", llb_err_last());
        free(t);
        free(rd);
        return 1;
      }
      if (p >= 0) t[(size_t)e * (size_t)passes + (size_t)p] = sec;
    }
  /* each round's matmul time over its reads' (paired: a burst of load touches all three) */
  double pr[2] = {0, 0};
  for (int e = 1; e < KS_EVENTS; e++) {
    double *ratio = malloc(sizeof(double) * (size_t)passes);
    if (!ratio) break;
    for (int p = 0; p < passes; p++) ratio[p] = t[(size_t)e * (size_t)passes + (size_t)p] / t[p];
    qsort(ratio, (size_t)passes, sizeof(double), ks_cmp);
    pr[e - 1] = ratio[passes / 2];
    free(ratio);
  }
  double best[KS_EVENTS], med[KS_EVENTS];
  for (int e = 0; e < KS_EVENTS; e++) {
    double *te = t + (size_t)e * (size_t)passes;
    qsort(te, (size_t)passes, sizeof(double), ks_cmp);
    best[e] = (double)s->packed_bytes / te[0] * 1e-9;
    med[e] = (double)s->packed_bytes / te[passes / 2] * 1e-9;
  }
  static const char *names[KS_EVENTS] = {"matmul (cpu_matmul)", "read, 128 KiB chunks", "read, 1 slice a thread"};
  for (int e = 0; e < KS_EVENTS; e++)
    printf("  %-24s fastest %6.1f GB/s  median %6.1f GB/s\n", names[e], best[e], med[e]);
  printf("  matmul / read in chunks: fastest %.2f, median %.2f, median of the rounds %.2f; matmul / read in slices: "
         "fastest %.2f, median %.2f, median of the rounds %.2f\n", best[0] / best[1], med[0] / med[1], pr[0],
         best[0] / best[2], med[0] / med[2], pr[1]);
  free(t);
  free(rd);
  return 0;
}

int kernel_stream_run(const struct kernel_only_options *o, int threads) {
  struct kernel_stream s = {0};
  int rc = ks_parse(o, threads, &s);
  if (rc == 0) rc = ks_prepare(&s);
  if (rc == 0) {
    unsigned long long huge_kb, size_kb;
    ks_huge_share(s.copies, s.stride * (size_t)s.n_copies, &huge_kb, &size_kb);
    double load[1] = {-1};
    (void)getloadavg(load, 1);
    const enum cpu_simd_level lv = s.ctx->level;
    printf("%s %lldx%lld packed %.2f MB, %d rows, %d threads, %s; %d copies (%.0f MiB, %llu of %llu MiB in huge "
           "pages), each event on the next copy; %d rounds; load average %.2f\n",
           ggml_type_name(s.type), (long long)s.n_out, (long long)s.k, (double)s.packed_bytes * 1e-6, s.rows,
           s.threads, lv >= CPU_SIMD_LEVEL_AVX512_VNNI ? "avx512-vnni" : lv == CPU_SIMD_LEVEL_AVX2 ? "avx2" : "scalar",
           s.n_copies, (double)(s.stride * (size_t)s.n_copies) / (1 << 20), huge_kb >> 10, size_kb >> 10, o->passes,
           load[0]);
    rc = ks_time(&s, o->passes);
  }
  cpu_ctx_destroy(s.ctx);
  free(s.copies);
  free(s.x);
  free(s.out);
  return rc;
}

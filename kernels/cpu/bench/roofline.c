/* Microbenchmarks of the CPU's ceilings (see roofline.h). */
#include "kernels/cpu/bench/roofline.h"

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/cpu/vec_dot.h"

/* The read buffer: at least this, and at least RL_READ_L3_TIMES times the last-level cache. */
#define RL_READ_BYTES ((size_t)512 << 20)
#define RL_READ_L3_TIMES 8
/* Read runs; the bound is the fastest (what the threads read when the OS leaves them their
 * cores), the median and the slowest printed beside it. */
#define RL_READ_REPEATS 21
#define RL_HUGE_PAGE ((size_t)2 << 20)
/* A run's threads ran together when each one's CPU time is at least this share of the run. */
#define RL_TOGETHER 0.95
#define RL_INT8_ITERS 20000000L /* per thread: ~0.1-0.3 s on a 2-4 GHz core */
/* Timed int8 runs; the peak is the best of them (a run whose threads the OS put on one core
 * for part of it measured half the peak: 1010 / 1079 / 2132 GOPS in three runs here). */
#define RL_INT8_REPEATS 3
#define RL_INT8_SLICES 400 /* timed slices of a thread's run (int8_loop) */
#define RL_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define RL_AVX2 __attribute__((target("avx2")))
#define RL_AMX __attribute__((target("amx-tile,amx-int8")))
#define RL_ARCH_REQ_XCOMP_PERM 0x1023 /* arch_prctl: ask for an extended state component */
#define RL_XFEATURE_XTILEDATA 18      /* AMX's tile data */
#define RL_AMX_MACS_PER_ITER (4.0 * 16 * 16 * 64) /* int8_amx: 4 tdpbusd of 16 x 16 x 64 */

/* The int8 loops: the level's (the packed kernels' step), AVX2 widened at every step
 * (int8_avx2's `widen`), AMX tiles (int8_amx). */
enum rl_loop { RL_LOOP_LEVEL, RL_LOOP_WIDENED, RL_LOOP_AMX };

struct rl_job {
  const uint64_t *p; /* read: the thread's slice [n] */
  size_t n;
  enum cpu_simd_level level;
  enum rl_loop loop; /* which int8 loop int8_loop runs */
  uint64_t sink; /* keeps the work observable */
  _Atomic int *ready; /* read: threads of the run started so far */
  int n_threads;      /* read: threads of the run */
  int64_t t0, t1;     /* read: the thread's own start and end, ns */
  int64_t cpu_ns;     /* read: the thread's CPU time between them (CLOCK_THREAD_CPUTIME_ID) */
  double best_rate; /* int8_loop: the thread's fastest slice, ops/s */
};

/* CPU time of the calling thread, ns. */
static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A read run's thread: waits until every thread of the run has started (the run's time is not
 * thread creation), at most a second (a thread that failed to start never counts itself: the
 * run is then dropped, run_threads joins the others), then sums its slice, timing itself (wall
 * and its own CPU time: a thread the guest's scheduler took off its vCPU for part of the run
 * has less CPU time than wall). */
static void *read_slice(void *arg) {
  struct rl_job *j = arg;
  atomic_fetch_add(j->ready, 1);
  const int64_t give_up = llb_now_ns() + 1000000000;
  while (atomic_load(j->ready) < j->n_threads && llb_now_ns() < give_up) {
  }
  const int64_t c0 = thread_cpu_ns();
  j->t0 = llb_now_ns();
  uint64_t s[8] = {0};
  for (size_t i = 0; i + 8 <= j->n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += j->p[i + k];
  j->t1 = llb_now_ns();
  j->cpu_ns = thread_cpu_ns() - c0;
  j->sink = s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
  return NULL;
}

/* 12 independent vpdpbusd chains (latency 4-5 cycles, 1-2 issued a cycle): 64 u8 x s8
 * multiply-adds each. */
RL_VNNI static uint64_t int8_vnni(long iters) {
  __m512i acc[12], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_epi32(k);
  for (long i = 0; i < iters; i++)
    for (int k = 0; k < 12; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  __m512i t = acc[0];
  for (int k = 1; k < 12; k++) t = _mm512_add_epi32(t, acc[k]);
  return (uint64_t)_mm512_reduce_add_epi32(t);
}

/* AVX2 int8 multiply-adds, 8 independent chains: vpmaddubsw (32 u8 x s8 products, pairs summed
 * to s16) added in int16 by vpaddw (`widen` 0: the packed kernels' step, which widen once per
 * 8 vpmaddubsw, packed.c), or widened at every step by vpmaddwd against ones and added by vpaddd
 * (`widen` 1: ggml's AVX2 dot step). 32 multiply-adds per step either way. The empty asm makes
 * `a` new at every step: without it the compiler computes the loop-invariant products once,
 * before the loop, and times the adds alone (what this loop measured before 2026-11-30:
 * 1.7x the vpmaddubsw rate, 1.4x even the vpdpbusd one; docs/performance.md). */
RL_AVX2 static uint64_t int8_avx2(long iters, int widen) {
  __m256i acc[8], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int k = 0; k < 8; k++) acc[k] = _mm256_set1_epi32(k);
  if (widen) {
    for (long i = 0; i < iters; i++)
      for (int k = 0; k < 8; k++) {
        __asm__ volatile("" : "+x"(a));
        acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      }
  } else {
    for (long i = 0; i < iters; i++)
      for (int k = 0; k < 8; k++) {
        __asm__ volatile("" : "+x"(a));
        acc[k] = _mm256_add_epi16(acc[k], _mm256_maddubs_epi16(a, b));
      }
  }
  __m256i t = acc[0];
  for (int k = 1; k < 8; k++) t = _mm256_add_epi32(t, acc[k]);
  int32_t v[8];
  _mm256_storeu_si256((__m256i *)v, t);
  return (uint64_t)(v[0] + v[7]);
}

/* Scalar multiply-adds, 8 independent chains. b and every sum pass through an empty asm each
 * iteration: with b constant the compiler summed the loop in closed form (a "peak" of ~10,000
 * G/s), and with the sums visible it added b up once and multiplied at the end; the loop is
 * kept scalar (no vectorization), as the scalar level's kernels are. */
__attribute__((optimize("no-tree-vectorize"))) static uint64_t int8_scalar(long iters) {
  int32_t acc[8] = {0};
  volatile int8_t bv = -2;
  int32_t b = bv;
  for (long i = 0; i < iters; i++) {
    __asm__ volatile("" : "+r"(b));
    for (int k = 0; k < 8; k++) {
      acc[k] += (int32_t)(uint8_t)(3 + k) * b;
      __asm__ volatile("" : "+r"(acc[k]));
    }
  }
  return (uint64_t)(acc[0] + acc[7]);
}

/* Whether this CPU has AMX-TILE and AMX-INT8 (CPUID.(EAX=7,ECX=0):EDX bits 24, 25) and Linux grants
 * this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16; without the grant
 * the first tile instruction raises SIGILL). The grant is the process's, asked once. */
static bool amx_usable(void) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
  return syscall(SYS_arch_prctl, RL_ARCH_REQ_XCOMP_PERM, RL_XFEATURE_XTILEDATA) == 0;
}

/* AMX's tile configuration (ldtilecfg's 64-byte operand): palette 1, per tile its bytes a row
 * and rows (Intel SDM vol. 1, 18.2). */
struct rl_tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

/* 4 independent tdpbusd chains on 8 tiles of 16 rows x 64 bytes: tiles 4-7 += tiles 0-1 (u8) x
 * tiles 2-3 (s8, in the 4-byte groups tdpbusd reads), 16 x 16 x 64 multiply-adds each. The tile
 * state is the thread's: configured here, released at the end. */
RL_AMX static uint64_t int8_amx(long iters) {
  struct rl_tilecfg cfg = {.palette = 1};
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  uint8_t src[16 * 64];
  for (int i = 0; i < 16 * 64; i++) src[i] = (uint8_t)(i * 37 + 11);
  _tile_loadconfig(&cfg);
  _tile_loadd(0, src, 64);
  _tile_loadd(1, src, 64);
  _tile_loadd(2, src, 64);
  _tile_loadd(3, src, 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (long i = 0; i < iters; i++) {
    _tile_dpbusd(4, 0, 2);
    _tile_dpbusd(5, 0, 3);
    _tile_dpbusd(6, 1, 2);
    _tile_dpbusd(7, 1, 3);
  }
  int32_t out[16 * 16];
  _tile_stored(4, out, 64);
  _tile_release();
  return (uint64_t)(uint32_t)out[0];
}

/* Multiply-adds one call of the loop does per iteration. */
static double macs_per_iter(enum cpu_simd_level l, enum rl_loop loop) {
  if (loop == RL_LOOP_AMX) return RL_AMX_MACS_PER_ITER;
  return l == CPU_SIMD_LEVEL_AVX512_VNNI ? 12.0 * 64 : l == CPU_SIMD_LEVEL_AVX2 ? 8.0 * 32 : 8.0;
}

/* A thread's loop, in RL_INT8_SLICES timed slices: its rate is its fastest slice's (multiply-adds
 * x 2 per second). A slice is ~30 us, shorter than a time slice of the OS scheduler, so on a
 * loaded machine some slices still run undisturbed (the long runs before measured a fifth of
 * the quiet peak while other builds ran). */
static void *int8_loop(void *arg) {
  struct rl_job *j = arg;
  const long iters = (j->loop == RL_LOOP_AMX             ? RL_INT8_ITERS / 32
                      : j->level == CPU_SIMD_LEVEL_SCALAR ? RL_INT8_ITERS / 4
                                                          : RL_INT8_ITERS / 8) / RL_INT8_SLICES;
  j->best_rate = 0;
  for (int sl = 0; sl < RL_INT8_SLICES; sl++) {
    const int64_t t0 = llb_now_ns();
    j->sink += j->loop == RL_LOOP_AMX                 ? int8_amx(iters)
               : j->level == CPU_SIMD_LEVEL_AVX512_VNNI ? int8_vnni(iters)
               : j->level == CPU_SIMD_LEVEL_AVX2        ? int8_avx2(iters, j->loop == RL_LOOP_WIDENED)
                                                        : int8_scalar(iters);
    const int64_t ns = llb_now_ns() - t0;
    const double rate = ns > 0 ? 2.0 * macs_per_iter(j->level, j->loop) * (double)iters * 1e9 / (double)ns : 0.0;
    if (rate > j->best_rate) j->best_rate = rate;
  }
  return NULL;
}

/* Runs fn on every job in its own thread; seconds of wall time, or < 0 on a failed start. */
static double run_threads(void *(*fn)(void *), struct rl_job *jobs, int n) {
  pthread_t tid[256];
  const int64_t t0 = llb_now_ns();
  int started = 0;
  for (; started < n; started++)
    if (pthread_create(&tid[started], NULL, fn, &jobs[started]) != 0) break;
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  return started == n ? (double)(llb_now_ns() - t0) * 1e-9 : -1.0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The last-level cache this CPU's cores fill, bytes (sysfs cache index3 of cpu0, as lscpu reads
 * it; glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) gave 320 MiB on the 32 MiB-L3 EPYC VM here, the
 * host's total); 0 where unknown. */
static size_t l3_bytes(void) {
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (!f) return 0;
  unsigned long long v = 0;
  char unit = 0;
  const int n = fscanf(f, "%llu%c", &v, &unit);
  fclose(f);
  if (n < 1) return 0;
  return (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1024u * 1024u : 1u);
}

/* Bytes of the read buffer: RL_READ_BYTES, or RL_READ_L3_TIMES x the L3 if larger, whole huge
 * pages. */
static size_t read_buffer_bytes(void) {
  size_t bytes = RL_READ_BYTES;
  const size_t l3 = l3_bytes();
  if (l3 > 0 && l3 < ((size_t)1 << 36) && l3 * RL_READ_L3_TIMES > bytes) bytes = l3 * RL_READ_L3_TIMES;
  return (bytes + RL_HUGE_PAGE - 1) / RL_HUGE_PAGE * RL_HUGE_PAGE;
}

/* One read run: `threads` threads each sum their slice of buf at once; bytes/s over the span
 * from the first thread's start to the last one's end, or < 0 when a thread did not start.
 * *together: every thread was on a vCPU (its CPU time) for at least RL_TOGETHER of the span. */
static double read_run(const uint64_t *buf, size_t per, int threads, bool *together) {
  struct rl_job jobs[256];
  _Atomic int ready = 0;
  for (int t = 0; t < threads; t++)
    jobs[t] = (struct rl_job){.p = buf + (size_t)t * per, .n = per, .ready = &ready, .n_threads = threads};
  if (run_threads(read_slice, jobs, threads) <= 0) return -1.0;
  int64_t t0 = jobs[0].t0, t1 = jobs[0].t1;
  for (int t = 1; t < threads; t++) {
    t0 = jobs[t].t0 < t0 ? jobs[t].t0 : t0;
    t1 = jobs[t].t1 > t1 ? jobs[t].t1 : t1;
  }
  *together = true;
  for (int t = 0; t < threads; t++)
    if ((double)jobs[t].cpu_ns < RL_TOGETHER * (double)(t1 - t0)) *together = false;
  return t1 > t0 ? (double)per * 8.0 * threads * 1e9 / (double)(t1 - t0) : 0.0;
}

/* Seconds of steal time of all vCPUs so far (/proc/stat's "cpu" line, 8th value, in USER_HZ
 * ticks): time the host ran something else while a vCPU had work; < 0 where unreadable. */
static double guest_steal_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1.0;
  unsigned long long v[8] = {0};
  const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7]);
  fclose(f);
  const long hz = sysconf(_SC_CLK_TCK);
  return n == 8 && hz > 0 ? (double)v[7] / (double)hz : -1.0;
}

static int cpu_count(void) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

struct roofline_reader {
  uint64_t *buf; /* [words], 2 MiB aligned, MADV_HUGEPAGE, every page touched */
  size_t bytes, per; /* the buffer's bytes, and each thread's slice in words */
  int threads;
};

llb_status roofline_reader_open(int threads, struct roofline_reader **out) {
  if (!out || threads < 1 || threads > 256)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "roofline reader: %d threads (1..256)", threads);
  *out = NULL;
  struct roofline_reader *r = calloc(1, sizeof *r);
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "roofline reader");
  const size_t bytes = r->bytes = read_buffer_bytes();
  /* in huge pages, as the forward's packed weights (model/forward/forward_pack.c): the hardware
   * prefetchers stop at a 4 KiB page's end, so a 4 KiB-page buffer reads slower than the
   * weights do and the bound would be low */
  r->buf = aligned_alloc(RL_HUGE_PAGE, r->bytes);
  if (!r->buf) {
    free(r);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "roofline: %zu bytes", bytes);
  }
#ifdef MADV_HUGEPAGE
  (void)madvise(r->buf, r->bytes, MADV_HUGEPAGE);
#endif
  const size_t words = r->bytes / 8;
  for (size_t i = 0; i < words; i++) r->buf[i] = i * 0x9E3779B97F4A7C15ull; /* touched: real pages */
  r->threads = threads;
  r->per = words / (size_t)threads;
  *out = r;
  return LLB_STATUS_OK;
}

double roofline_reader_run(struct roofline_reader *r, bool *together) {
  bool unused;
  return r ? read_run(r->buf, r->per, r->threads, together ? together : &unused) : -1.0;
}

void roofline_reader_close(struct roofline_reader *r) {
  if (!r) return;
  free(r->buf);
  free(r);
}

static llb_status measure_read(int threads, struct roofline *out) {
  struct roofline_reader *rd = NULL;
  llb_status st = roofline_reader_open(threads, &rd);
  if (st != LLB_STATUS_OK) return st;
  double rates[RL_READ_REPEATS], one[RL_READ_REPEATS];
  const double steal0 = guest_steal_s();
  const int64_t w0 = llb_now_ns();
  out->read_together_runs = 0;
  for (int r = 0; r < RL_READ_REPEATS; r++) { /* a run of `threads` threads, then one of 1 thread on its whole slice */
    bool together = false, unused;
    if ((rates[r] = roofline_reader_run(rd, &together)) < 0 || (one[r] = read_run(rd->buf, rd->per, 1, &unused)) < 0) {
      roofline_reader_close(rd);
      return LLB_ERRF(LLB_STATUS_IO, "roofline: could not start %d threads", threads);
    }
    out->read_together_runs += together;
    if (together && rates[r] > out->read_together_bytes_per_s) out->read_together_bytes_per_s = rates[r];
    if (one[r] > out->read_one_thread_bytes_per_s) out->read_one_thread_bytes_per_s = one[r];
  }
  const double wall = (double)(llb_now_ns() - w0) * 1e-9, steal = guest_steal_s() - steal0;
  out->read_steal_share = steal0 >= 0 && steal >= 0 && wall > 0 ? steal / (wall * (double)cpu_count()) : -1.0;
  out->read_buffer_bytes = rd->bytes;
  roofline_reader_close(rd);
  qsort(rates, RL_READ_REPEATS, sizeof(double), cmp_double);
  out->read_bytes_per_s = rates[RL_READ_REPEATS - 1];
  out->read_median_bytes_per_s = rates[RL_READ_REPEATS / 2];
  out->read_worst_bytes_per_s = rates[0];
  out->read_runs = RL_READ_REPEATS;
  return LLB_STATUS_OK;
}

static llb_status measure_int8(int threads, enum cpu_simd_level level, enum rl_loop loop, double *ops_per_s) {
  struct rl_job jobs[256];
  for (int t = 0; t < threads; t++) jobs[t] = (struct rl_job){.level = level, .loop = loop};
  (void)run_threads(int8_loop, jobs, threads); /* warm-up: clocks, AVX-512 license */
  *ops_per_s = 0;
  for (int r = 0; r < RL_INT8_REPEATS; r++) {
    for (int t = 0; t < threads; t++) jobs[t] = (struct rl_job){.level = level, .loop = loop};
    if (run_threads(int8_loop, jobs, threads) <= 0)
      return LLB_ERRF(LLB_STATUS_IO, "roofline: could not start %d threads", threads);
    double rate = 0; /* the threads run at once: each one's fastest slice, summed */
    for (int t = 0; t < threads; t++) rate += jobs[t].best_rate;
    if (rate > *ops_per_s) *ops_per_s = rate;
  }
  return LLB_STATUS_OK;
}

llb_status roofline_measure(int threads, struct roofline *out) {
  if (!out || threads < 1 || threads > 256)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "roofline: %d threads (1..256)", threads);
  memset(out, 0, sizeof *out);
  enum cpu_simd_level level = cpu_simd_level_detect();
  if (level > CPU_SIMD_LEVEL_AVX512_VNNI) level = CPU_SIMD_LEVEL_AVX512_VNNI; /* BF16 adds no int8 path */
  out->threads = threads;
  out->int8_path = level == CPU_SIMD_LEVEL_AVX512_VNNI ? "avx512-vnni (vpdpbusd)"
                   : level == CPU_SIMD_LEVEL_AVX2      ? "avx2 (vpmaddubsw + vpaddw)"
                                                       : "scalar";
  llb_status st = measure_read(threads, out);
  if (st == LLB_STATUS_OK) st = measure_int8(threads, level, RL_LOOP_LEVEL, &out->int8_ops_per_s);
  if (st == LLB_STATUS_OK && level == CPU_SIMD_LEVEL_AVX2)
    st = measure_int8(threads, level, RL_LOOP_WIDENED, &out->int8_widened_ops_per_s);
  /* AMX beside AVX-512 only: a run at LLMBUS_SIMD=avx2 stands for a CPU without AVX-512, and
   * none of those has AMX */
  if (st == LLB_STATUS_OK && level == CPU_SIMD_LEVEL_AVX512_VNNI && amx_usable())
    st = measure_int8(threads, level, RL_LOOP_AMX, &out->int8_amx_ops_per_s);
  return st;
}

double roofline_fraction(double rate, double cost_per_unit, double ceiling) {
  return ceiling > 0 ? rate * cost_per_unit / ceiling : 0.0;
}

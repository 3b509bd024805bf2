/* The CPU's SIMD level (vec_dot.h's cpu_simd_level_detect), probed once per process and capped
 * by the environment variable LLMBUS_SIMD; the decode kernels' prefetch distance
 * (cpu_decode_prefetch_bytes), from the CPU's vendor or LLMBUS_PREFETCH_BYTES. */
#include "kernels/cpu/vec_dot.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#define CPU_HAVE_X86 1
#else
#define CPU_HAVE_X86 0
#endif

#if CPU_HAVE_X86
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c". */
static bool cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}

/* AVX512_BF16 from CPUID leaf 7 sub-leaf 1 (EAX bit 5). */
static bool cpu_has_avx512_bf16(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5));
}
#endif

static enum cpu_simd_level simd_level_probe(void) {
#if CPU_HAVE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
      return cpu_has_avx512_bf16() ? CPU_SIMD_LEVEL_AVX512_BF16 : CPU_SIMD_LEVEL_AVX512_VNNI;
    return CPU_SIMD_LEVEL_AVX2;
  }
#endif
  return CPU_SIMD_LEVEL_SCALAR;
}

/* Probed once per process: the kernels ask on every call (packed matmuls per row block,
 * activation quantization per row), and CPUID is a VM exit under a hypervisor (tens of
 * microseconds on this machine's KVM guest): asked each time, it made batch-1 decode ~3x
 * slower (llmbus-kernel-bench decode b1: 6.4 -> 17 ms of CPU per token). */
static pthread_once_t simd_level_once = PTHREAD_ONCE_INIT;
static enum cpu_simd_level simd_level;

/* LLMBUS_SIMD caps the level (never raises it): scalar, avx2, avx512vnni (AVX-512 without the
 * BF16 dot product) or avx512 (all of AVX-512 this CPU has). Benches and tests run the AVX2
 * and portable paths on an AVX-512 machine this way; an unknown value is reported once on
 * stderr and ignored. */
static enum cpu_simd_level simd_level_cap(enum cpu_simd_level best) {
  const char *v = getenv("LLMBUS_SIMD");
  if (!v || !*v) return best;
  enum cpu_simd_level want;
  if (strcmp(v, "scalar") == 0) want = CPU_SIMD_LEVEL_SCALAR;
  else if (strcmp(v, "avx2") == 0) want = CPU_SIMD_LEVEL_AVX2;
  else if (strcmp(v, "avx512vnni") == 0) want = CPU_SIMD_LEVEL_AVX512_VNNI;
  else if (strcmp(v, "avx512") == 0) want = CPU_SIMD_LEVEL_AVX512_BF16;
  else {
    fprintf(stderr, "llmbus: LLMBUS_SIMD=%s is not one of scalar, avx2, avx512vnni, avx512: ignored\n", v);
    return best;
  }
  return want < best ? want : best;
}

static void simd_level_init(void) { simd_level = simd_level_cap(simd_level_probe()); }

enum cpu_simd_level cpu_simd_level_detect(void) {
  pthread_once(&simd_level_once, simd_level_init);
  return simd_level;
}


int cpu_decode_prefetch_parse(const char *env, bool intel) {
  const int fallback = intel ? CPU_DECODE_PREFETCH_INTEL : 0;
  if (!env || !*env) return fallback;
  if (*env < '0' || *env > '9') return fallback; /* strtol would take a sign or leading spaces */
  char *end = NULL;
  errno = 0;
  const long v = strtol(env, &end, 10);
  if (errno || *end || v < 0 || v > CPU_DECODE_PREFETCH_MAX) return fallback;
  return (int)(v / 64 * 64);
}

static bool cpu_is_intel(void) {
#if CPU_HAVE_X86
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13];
  memcpy(vendor, &ebx, 4), memcpy(vendor + 4, &edx, 4), memcpy(vendor + 8, &ecx, 4);
  vendor[12] = 0;
  return strcmp(vendor, "GenuineIntel") == 0;
#else
  return false;
#endif
}

/* Probed once, as the level: CPUID is a VM exit under a hypervisor. */
static pthread_once_t prefetch_once = PTHREAD_ONCE_INIT;
static int prefetch_bytes;

static void prefetch_init(void) {
  const char *v = getenv("LLMBUS_PREFETCH_BYTES");
  prefetch_bytes = cpu_decode_prefetch_parse(v, cpu_is_intel());
  if (v && *v && cpu_decode_prefetch_parse(v, false) != cpu_decode_prefetch_parse(v, true)) /* refused */
    fprintf(stderr, "llmbus: LLMBUS_PREFETCH_BYTES=%s is not a byte count in [0, %d]: ignored\n", v,
            CPU_DECODE_PREFETCH_MAX);
}

int cpu_decode_prefetch_bytes(void) {
  pthread_once(&prefetch_once, prefetch_init);
  return prefetch_bytes;
}

/* The CPU's SIMD level (vec_dot.h's cpu_simd_level_detect), probed once per process and capped
 * by the environment variable LLMBUS_SIMD. */
#include "kernels/cpu/vec_dot.h"

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


#include "bus/trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const char hex_digits[] = "0123456789abcdef";

/* Bytes from the kernel; falls back to a clock-seeded xorshift only if getrandom fails (it
 * does not on Linux >= 3.17). */
static void kernel_random_bytes(uint8_t *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(buf + got, n - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got < n) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uintptr_t)buf;
    for (; got < n; got++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[got] = (uint8_t)x;
    }
  }
}

/* Ids need to be unique and unpredictable enough to not collide, not secret: one
 * xoshiro256** generator per thread (Blackman & Vigna), seeded from the kernel on first use,
 * instead of a getrandom(2) system call for each of the several spans a decode step makes. */
static _Thread_local uint64_t rng_state[4];
static _Thread_local bool rng_seeded;

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(void) {
  if (!rng_seeded) {
    do kernel_random_bytes((uint8_t *)rng_state, sizeof rng_state);
    while (!(rng_state[0] | rng_state[1] | rng_state[2] | rng_state[3]));
    rng_seeded = true;
  }
  uint64_t *s = rng_state;
  const uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

static void random_bytes(uint8_t *buf, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng_next();
    memcpy(buf + i, &v, n - i < 8 ? n - i : 8);
  }
}

static void random_hex_id(char *out, size_t num_bytes) {
  uint8_t raw[16];
  bool all_zero = true;
  do {
    random_bytes(raw, num_bytes);
    for (size_t i = 0; i < num_bytes; i++)
      if (raw[i]) all_zero = false;
  } while (all_zero);
  for (size_t i = 0; i < num_bytes; i++) {
    out[2 * i] = hex_digits[raw[i] >> 4];
    out[2 * i + 1] = hex_digits[raw[i] & 15];
  }
  out[2 * num_bytes] = '\0';
}

/* The ratio's bits (a double in a 64-bit atomic): read on every new trace. */
static _Atomic uint64_t sample_ratio_bits = 0x3FF0000000000000ull; /* 1.0 */

void bus_trace_set_sample_ratio(double ratio) {
  if (!(ratio >= 0.0)) ratio = 0.0; /* NaN too */
  if (ratio > 1.0) ratio = 1.0;
  uint64_t bits;
  memcpy(&bits, &ratio, sizeof bits);
  atomic_store(&sample_ratio_bits, bits);
}

bool bus_trace_id_sampled(const char *trace_id, double ratio) {
  if (ratio >= 1.0) return true;
  if (!(ratio > 0.0)) return false;
  uint64_t low = 0;
  for (int i = 16; i < 32; i++) {
    int v = trace_id[i] >= 'a' ? trace_id[i] - 'a' + 10 : trace_id[i] - '0';
    low = low << 4 | (uint64_t)(v & 15);
  }
  /* bound = ratio * 2^64, computed in long double to keep the low bits of small ratios */
  long double bound = (long double)ratio * 18446744073709551616.0L;
  return (long double)low < bound;
}

void bus_trace_new(struct bus_trace_ctx *out) {
  random_hex_id(out->trace_id, 16);
  random_hex_id(out->span_id, 8);
  uint64_t bits = atomic_load(&sample_ratio_bits);
  double ratio;
  memcpy(&ratio, &bits, sizeof ratio);
  out->flags = bus_trace_id_sampled(out->trace_id, ratio) ? 0x01 : 0x00;
}

void bus_trace_child(const struct bus_trace_ctx *parent, struct bus_trace_ctx *child) {
  if (child != parent) {
    memcpy(child->trace_id, parent->trace_id, sizeof child->trace_id);
    child->flags = parent->flags;
  }
  char old[17];
  memcpy(old, parent->span_id, sizeof old);
  do {
    random_hex_id(child->span_id, 8);
  } while (memcmp(child->span_id, old, 16) == 0);
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* upper case is invalid per the spec */
}

static bool hex_field(const char *s, size_t n, bool *all_zero) {
  *all_zero = true;
  for (size_t i = 0; i < n; i++) {
    int v = hex_value(s[i]);
    if (v < 0) return false;
    if (v) *all_zero = false;
  }
  return true;
}

llb_status bus_traceparent_parse(const char *s, struct bus_trace_ctx *out) {
  if (!s) return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: missing");
  size_t len = strlen(s);
  if (len < BUS_TRACEPARENT_LEN)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: %zu characters, need %d", len,
                    BUS_TRACEPARENT_LEN);
  bool zero;
  if (!hex_field(s, 2, &zero) || s[2] != '-')
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: bad version field");
  int version = hex_value(s[0]) * 16 + hex_value(s[1]);
  if (version == 0xff) return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: version ff is invalid");
  /* Version 00 is exactly 55 characters; future versions may append "-..." fields. */
  if (version == 0 && len != BUS_TRACEPARENT_LEN)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: version 00 must be %d characters, got %zu",
                    BUS_TRACEPARENT_LEN, len);
  if (version != 0 && len > BUS_TRACEPARENT_LEN && s[BUS_TRACEPARENT_LEN] != '-')
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: bad field after trace-flags");
  if (!hex_field(s + 3, 32, &zero) || s[35] != '-')
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: trace-id is not 32 lowercase hex digits");
  if (zero) return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: all-zero trace-id");
  if (!hex_field(s + 36, 16, &zero) || s[52] != '-')
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: parent-id is not 16 lowercase hex digits");
  if (zero) return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: all-zero parent-id");
  if (!hex_field(s + 53, 2, &zero))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "traceparent: trace-flags are not 2 hex digits");
  memcpy(out->trace_id, s + 3, 32);
  out->trace_id[32] = '\0';
  memcpy(out->span_id, s + 36, 16);
  out->span_id[16] = '\0';
  out->flags = (uint8_t)(hex_value(s[53]) * 16 + hex_value(s[54]));
  return LLB_STATUS_OK;
}

char *bus_traceparent_format(const struct bus_trace_ctx *t, char *buf, size_t cap) {
  snprintf(buf, cap, "00-%.32s-%.16s-%02x", t->trace_id, t->span_id, (unsigned)t->flags);
  return buf;
}

/* llmbus-kernel-bench --op-times (kernel_optimes.h). */
#include "cmd/bench/kernel_optimes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

llb_status kernel_optimes_init(struct kernel_optimes *t, int max_steps) {
  memset(t, 0, sizeof(*t));
  if (max_steps < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "op times of %d steps", max_steps);
  t->ns = malloc((size_t)max_steps * KERNEL_OPTIMES_MAX_OPS * sizeof(int64_t));
  t->step_ns = malloc((size_t)max_steps * sizeof(int64_t));
  if (!t->ns || !t->step_ns) {
    kernel_optimes_free(t);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "op times of %d steps", max_steps);
  }
  t->max_steps = max_steps;
  return LLB_STATUS_OK;
}

void kernel_optimes_free(struct kernel_optimes *t) {
  free(t->ns);
  free(t->step_ns);
  memset(t, 0, sizeof(*t));
}

void kernel_optimes_reset(struct kernel_optimes *t) {
  t->on = false;
  t->n = t->steps = 0;
  memset(t->calls, 0, sizeof(t->calls));
}

/* The entry of name: the forward passes string literals, so the pointer finds it; strcmp for
 * another literal of the same text. */
static int kernel_optimes_slot(struct kernel_optimes *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (t->name[i] == name) return i;
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->name[i], name) == 0) return i;
  if (t->n == KERNEL_OPTIMES_MAX_OPS) return KERNEL_OPTIMES_MAX_OPS - 1;
  /* an op first seen in a later step ran 0 ns in the steps recorded before it */
  for (int s = 0; s < t->steps; s++) t->ns[(size_t)s * KERNEL_OPTIMES_MAX_OPS + (size_t)t->n] = 0;
  t->name[t->n] = name;
  t->cur[t->n] = 0;
  return t->n++;
}

void kernel_optimes_cb(void *user, const char *name, int32_t il, const float *data, int64_t n) {
  (void)il, (void)data, (void)n;
  struct kernel_optimes *t = user;
  if (!t->on) return;
  const int64_t now = llb_now_ns();
  const int i = kernel_optimes_slot(t, name);
  t->calls[i]++;
  t->cur[i] += now - t->last;
  t->last = now;
}

void kernel_optimes_step_begin(struct kernel_optimes *t) {
  t->on = t->steps < t->max_steps;
  memset(t->cur, 0, sizeof(t->cur));
  t->begin = t->last = llb_now_ns();
}

void kernel_optimes_step_end(struct kernel_optimes *t) {
  if (!t->on) return;
  t->on = false;
  t->step_ns[t->steps] = llb_now_ns() - t->begin;
  memcpy(t->ns + (size_t)t->steps * KERNEL_OPTIMES_MAX_OPS, t->cur, sizeof(t->cur));
  t->steps++;
}

static int kernel_optimes_cmp(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Median of v[0], v[stride], ... (n values) in microseconds; scratch [n]. */
static double kernel_optimes_median_us(const int64_t *v, size_t stride, int n, int64_t *scratch) {
  for (int s = 0; s < n; s++) scratch[s] = v[(size_t)s * stride];
  qsort(scratch, (size_t)n, sizeof(int64_t), kernel_optimes_cmp);
  return (double)scratch[n / 2] * 1e-3;
}

/* The callbacks that end a matmul op: QKV (Qcur; Kcur and Vcur follow with nothing between),
 * the attention output projection, gate and up (ffn_gate; ffn_up follows), down, the logits. */
static bool kernel_optimes_is_matmul(const char *name) {
  static const char *const mm[] = {"Qcur", "Kcur", "Vcur", "attn_out", "ffn_gate", "ffn_up", "ffn_out", "result_output"};
  for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
    if (strcmp(name, mm[i]) == 0) return true;
  return false;
}

void kernel_optimes_print(const struct kernel_optimes *t, int rows) {
  if (t->steps == 0) return;
  int64_t *scratch = malloc((size_t)t->steps * sizeof(int64_t));
  if (!scratch) return;
  const double step = kernel_optimes_median_us(t->step_ns, 1, t->steps, scratch);
  printf("%-14s op times of a %d-row step (medians of %d steps, us; each the op(s) since the previous callback):\n",
         "", rows, t->steps);
  printf("%-14s %-16s %7s %9s %6s\n", "", "op output", "calls", "us", "%");
  double mm = 0, other = 0;
  for (int i = 0; i < t->n; i++) {
    const double us = kernel_optimes_median_us(t->ns + i, KERNEL_OPTIMES_MAX_OPS, t->steps, scratch);
    if (kernel_optimes_is_matmul(t->name[i])) mm += us;
    else other += us;
    printf("%-14s %-16s %7.1f %9.1f %6.1f\n", "", t->name[i], (double)t->calls[i] / t->steps, us, 100.0 * us / step);
  }
  printf("%-14s %-16s %7s %9.1f %6.1f\n", "", "= matmuls", "", mm, 100.0 * mm / step);
  printf("%-14s %-16s %7s %9.1f %6.1f\n", "", "= other ops", "", other, 100.0 * other / step);
  printf("%-14s %-16s %7s %9.1f\n", "", "step", "", step);
  free(scratch);
}

/* llmbus-kernel-bench --op-times (kernel_optimes.h). */
#include "cmd/bench/kernel_optimes.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t kernel_optimes_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kernel_optimes_reset(struct kernel_optimes *t) { memset(t, 0, sizeof(*t)); }

/* The entry of name: the forward passes string literals, so the pointer finds it; strcmp for
 * another literal of the same text. */
static int kernel_optimes_slot(struct kernel_optimes *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (t->name[i] == name) return i;
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->name[i], name) == 0) return i;
  if (t->n == KERNEL_OPTIMES_MAX_OPS) return KERNEL_OPTIMES_MAX_OPS - 1;
  t->name[t->n] = name;
  return t->n++;
}

void kernel_optimes_cb(void *user, const char *name, int32_t il, const float *data, int64_t n) {
  (void)il, (void)data, (void)n;
  struct kernel_optimes *t = user;
  if (!t->on) return;
  const int64_t wall = kernel_optimes_clock(CLOCK_MONOTONIC), cpu = kernel_optimes_clock(CLOCK_THREAD_CPUTIME_ID);
  const int i = kernel_optimes_slot(t, name);
  t->calls[i]++;
  t->wall_ns[i] += wall - t->last_wall;
  t->cpu_ns[i] += cpu - t->last_cpu;
  t->last_wall = wall, t->last_cpu = cpu;
}

void kernel_optimes_step_begin(struct kernel_optimes *t) {
  t->on = true;
  t->begin_wall = t->last_wall = kernel_optimes_clock(CLOCK_MONOTONIC);
  t->begin_cpu = t->last_cpu = kernel_optimes_clock(CLOCK_THREAD_CPUTIME_ID);
}

void kernel_optimes_step_end(struct kernel_optimes *t) {
  t->on = false;
  t->steps++;
  t->step_wall_ns += kernel_optimes_clock(CLOCK_MONOTONIC) - t->begin_wall;
  t->step_cpu_ns += kernel_optimes_clock(CLOCK_THREAD_CPUTIME_ID) - t->begin_cpu;
}

/* The callbacks that end a matmul op: QKV (Qcur; Kcur and Vcur follow with nothing between),
 * the attention output projection, gate and up (ffn_gate), down, the logits. */
static bool kernel_optimes_is_matmul(const char *name) {
  static const char *const mm[] = {"Qcur", "Kcur", "Vcur", "attn_out", "ffn_gate", "ffn_up", "ffn_out", "result_output"};
  for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
    if (strcmp(name, mm[i]) == 0) return true;
  return false;
}

void kernel_optimes_print(const struct kernel_optimes *t, int rows) {
  if (t->steps == 0 || t->step_wall_ns <= 0) return;
  const double per = 1e-3 / (double)t->steps, step = (double)t->step_wall_ns * per;
  printf("%-14s op times (us a step of %d rows; the op(s) since the previous callback; caller thread):\n", "", rows);
  printf("%-14s %-16s %7s %9s %9s %6s\n", "", "op output", "calls", "wall", "cpu", "wall%");
  double mm_wall = 0, mm_cpu = 0, all_wall = 0, all_cpu = 0;
  for (int i = 0; i < t->n; i++) {
    const double w = (double)t->wall_ns[i] * per, c = (double)t->cpu_ns[i] * per;
    all_wall += w, all_cpu += c;
    if (kernel_optimes_is_matmul(t->name[i])) mm_wall += w, mm_cpu += c;
    printf("%-14s %-16s %7.1f %9.1f %9.1f %6.1f\n", "", t->name[i], (double)t->calls[i] / (double)t->steps, w, c,
           100.0 * w / step);
  }
  const double step_cpu = (double)t->step_cpu_ns * per;
  printf("%-14s %-16s %7s %9.1f %9.1f %6.1f\n", "", "= matmuls", "", mm_wall, mm_cpu, 100.0 * mm_wall / step);
  printf("%-14s %-16s %7s %9.1f %9.1f %6.1f\n", "", "= other ops", "", all_wall - mm_wall, all_cpu - mm_cpu,
         100.0 * (all_wall - mm_wall) / step);
  printf("%-14s %-16s %7s %9.1f %9.1f %6.1f\n", "", "= after the last", "", step - all_wall, step_cpu - all_cpu,
         100.0 * (step - all_wall) / step);
  printf("%-14s %-16s %7s %9.1f %9.1f\n", "", "step", "", step, step_cpu);
}

#include "base/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_strings[] = {
#define LLB_STATUS_STR(name, str) str,
    LLB_STATUS_LIST(LLB_STATUS_STR)
#undef LLB_STATUS_STR
};

/* Per thread, as nats.c keeps its error state: a failure and the frames it passed through
 * belong to the thread that saw them. Names are copied, not pointed to: a frame's __func__
 * may live in a module (the CUDA runner) that is unloaded before the log line is written. */
static _Thread_local char err_msg[512];
static _Thread_local char err_where[768];
static _Thread_local char err_stack[256];
static _Thread_local char err_where_stack[768 + 256 + 16];

const char *llb_strerror(llb_status status) {
  if ((unsigned)status >= LLB_STATUS_COUNT) return "unknown status";
  return status_strings[status];
}

llb_status llb_err_set(llb_status status, const char *file, const char *func, int line,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  snprintf(err_where, sizeof err_where, "%s:%d %s(): %s", base ? base + 1 : file, line, func,
           err_msg);
  err_stack[0] = '\0';
  return status;
}

llb_status llb_err_stack_push(llb_status status, const char *func) {
  if (status == LLB_STATUS_OK) return status;
  static const char more[] = "...";
  size_t len = strlen(err_stack);
  if (len >= sizeof more - 1 && strcmp(err_stack + len - (sizeof more - 1), more) == 0)
    return status; /* already full */
  const char *sep = len ? " <- " : "";
  const char *name = func ? func : "?";
  size_t need = strlen(sep) + strlen(name);
  /* Keep room for " <- ..." so a full stack still says that frames are missing. */
  if (len + need + 4 + sizeof more > sizeof err_stack) {
    snprintf(err_stack + len, sizeof err_stack - len, "%s%s", sep, more);
    return status;
  }
  snprintf(err_stack + len, sizeof err_stack - len, "%s%s", sep, name);
  return status;
}

const char *llb_err_last(void) { return err_msg; }

const char *llb_err_last_where(void) {
  if (err_stack[0] == '\0') return err_where;
  snprintf(err_where_stack, sizeof err_where_stack, "%s%s[via %s]", err_where,
           err_where[0] ? " " : "", err_stack);
  return err_where_stack;
}

const char *llb_err_last_stack(void) { return err_stack; }

void llb_err_clear(void) {
  err_msg[0] = '\0';
  err_where[0] = '\0';
  err_stack[0] = '\0';
}

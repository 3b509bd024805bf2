#include "base/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_strings[] = {
#define LLB_STATUS_STR(name, str) str,
    LLB_STATUS_LIST(LLB_STATUS_STR)
#undef LLB_STATUS_STR
};

static _Thread_local char err_msg[512];
static _Thread_local char err_where[768];

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
  return status;
}

const char *llb_err_last(void) { return err_msg; }
const char *llb_err_last_where(void) { return err_where; }

void llb_err_clear(void) {
  err_msg[0] = '\0';
  err_where[0] = '\0';
}

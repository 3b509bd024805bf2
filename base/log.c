#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char log_actor[64] = "llmbus";
static char log_context[192] = "";
static int log_level = -1;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void llb_log_set_actor(const char *actor) {
  snprintf(log_actor, sizeof log_actor, "%s", actor ? actor : "llmbus");
}

void llb_log_set_context(const char *context) {
  snprintf(log_context, sizeof log_context, "%s%s", context && *context ? " " : "", context ? context : "");
}

void llb_log_set_level(llb_log_level level) { log_level = (int)level; }

static int current_level(void);

llb_log_level llb_log_get_level(void) { return (llb_log_level)current_level(); }

const char *llb_log_get_actor(void) { return log_actor; }

static int current_level(void) {
  if (log_level >= 0) return log_level;
  const char *env = getenv("LLMBUS_LOG_LEVEL");
  int lvl = LLB_LOG_LEVEL_INFO;
  for (int i = 0; env && i < 4; i++)
    if (strcasecmp(env, level_names[i]) == 0) lvl = i;
  log_level = lvl;
  return lvl;
}

void llb_log(llb_log_level level, const char *event, const char *fmt, ...) {
  if ((int)level < current_level()) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line,
                   "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s actor=%s%s event=%s",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], log_actor, log_context, event);
  if (fmt && n > 0 && (size_t)n < sizeof line - 2) {
    line[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m > 0) n += m;
  }
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}

char *llb_log_quote(char *buf, unsigned size, const char *s) {
  unsigned o = 0;
  if (size < 3) {
    if (size) buf[0] = '\0';
    return buf;
  }
  buf[o++] = '"';
  for (; s && *s && o + 3 < size; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)c;
    } else if (c < 0x20) {
      buf[o++] = '\\';
      buf[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : '?';
    } else {
      buf[o++] = (char)c;
    }
  }
  buf[o++] = '"';
  buf[o] = '\0';
  return buf;
}

char *llb_log_redact_url(char *buf, unsigned size, const char *urls) {
  unsigned o = 0;
  if (!size) return buf;
  for (const char *p = urls ? urls : ""; *p && o + 1 < size;) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *auth = strstr(p, "://");
    auth = auth && auth < end ? auth + 3 : p;
    const char *at = NULL; /* the last '@' before the path: the userinfo ends there */
    for (const char *q = auth; q < end && *q != '/'; q++)
      if (*q == '@') at = q;
    const char *rest = at ? at + 1 : auth;
    int n = snprintf(buf + o, size - o, "%.*s%s%.*s%s", (int)(auth - p), p, at ? "***@" : "", (int)(end - rest),
                     rest, *end ? "," : "");
    if (n < 0) break;
    o += (unsigned)n < size - o ? (unsigned)n : size - o - 1;
    p = *end ? end + 1 : end;
  }
  buf[o < size ? o : size - 1] = '\0';
  return buf;
}

int64_t llb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t llb_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

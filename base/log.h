/* Structured logging: one line per event, logfmt (key=value), to stderr.
 *
 *   ts=2026-11-22T09:10:54.123Z level=info actor=scheduler event=connect url=nats://...
 *
 * llb_log() takes the event name and a printf-style tail of further key=value pairs; values
 * with spaces should be quoted by the caller (llb_log_quote helps). Thread-safe: each line is
 * written with a single write(2). The level threshold comes from LLMBUS_LOG_LEVEL
 * (debug|info|warn|error, default info) or llb_log_set_level().
 */
#ifndef LLB_LOG_H
#define LLB_LOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum llb_log_level {
  LLB_LOG_LEVEL_DEBUG,
  LLB_LOG_LEVEL_INFO,
  LLB_LOG_LEVEL_WARN,
  LLB_LOG_LEVEL_ERROR,
} llb_log_level;

/* Names the process in every line (actor=NAME); the string is copied (63 bytes max). */
void llb_log_set_actor(const char *actor);

/* A context written after actor= on every line, set once at start ("engine=0 instance=h-1");
 * copied (191 bytes max), not quoted: the caller gives key=value pairs. NULL or "" = none. */
void llb_log_set_context(const char *context);

/* Sets the lowest level written. */
void llb_log_set_level(llb_log_level level);

/* The level and actor name in effect (for handing them to a loaded module). */
llb_log_level llb_log_get_level(void);
const char *llb_log_get_actor(void);

/* Writes one line: ts, level, actor, event=`event`, then the formatted tail (may be NULL). */
void llb_log(llb_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LLB_LOG_DEBUG(event, ...) llb_log(LLB_LOG_LEVEL_DEBUG, (event), __VA_ARGS__)
#define LLB_LOG_INFO(event, ...) llb_log(LLB_LOG_LEVEL_INFO, (event), __VA_ARGS__)
#define LLB_LOG_WARN(event, ...) llb_log(LLB_LOG_LEVEL_WARN, (event), __VA_ARGS__)
#define LLB_LOG_ERROR(event, ...) llb_log(LLB_LOG_LEVEL_ERROR, (event), __VA_ARGS__)

/* Copies `s` into `buf` as a logfmt value: quoted, with '"', '\\' and control characters
 * escaped, truncated to fit `size` bytes. Returns `buf`. */
char *llb_log_quote(char *buf, unsigned size, const char *s);

/* Copies a URL or a comma-separated URL list into buf[size] with any credentials removed:
 * the userinfo of each URL ("user:pass@" after the scheme) becomes "***@", so
 * a secret in a NATS URL never reaches a log line or an error message. Returns buf. */
char *llb_log_redact_url(char *buf, unsigned size, const char *urls);

/* Monotonic clock, nanoseconds. */
int64_t llb_now_ns(void);

/* Wall clock (CLOCK_REALTIME), nanoseconds since the Unix epoch. */
int64_t llb_wall_ns(void);

#ifdef __cplusplus
}
#endif

#endif

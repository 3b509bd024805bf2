/* llmbus status codes and error context.
 *
 * One status type for every fallible call in llmbus. The values and their strings come
 * from one X-macro list (LLB_STATUS_LIST), so llb_strerror() can never fall out of step.
 * A failing call records where and why through LLB_ERRF (file, function, line and a
 * formatted message, kept per thread, as nats.c's nats_setError does); callers read it
 * with llb_err_last(). As the error travels up, each caller that wants to be named adds its
 * frame with `return LLB_UPDATE_ERR_STACK(st);` (nats.c's NATS_UPDATE_ERR_STACK), so the
 * log line says both where the error began and the way it came. This module has no
 * dependency beyond libc: every folder uses it (docs/design.md §1, base/).
 */
#ifndef LLB_STATUS_H
#define LLB_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLB_STATUS_LIST(X)                                         \
  X(OK, "ok")                                                      \
  X(INVALID_ARGUMENT, "invalid argument")                          \
  X(OUT_OF_MEMORY, "out of memory")                                \
  X(IO, "i/o error")                                               \
  X(MALFORMED, "malformed input")                                  \
  X(UNSUPPORTED, "unsupported")                                    \
  X(NOT_FOUND, "not found")                                        \
  X(TOO_LARGE, "too large")                                        \
  X(TIMEOUT, "timed out")                                          \
  X(NO_SERVER, "no server answered")                               \
  X(CONNECTION, "connection error")                                \
  X(CLOSED, "closed")                                              \
  X(QUEUE_FULL, "queue full")                                      \
  X(ABORTED, "aborted")                                            \
  X(DEVICE, "device error")                                        \
  X(INTERNAL, "internal error")                                    \
  X(STATE_LOST, "state lost")

/* Status of a fallible llmbus call; LLB_STATUS_OK (0) is success. */
typedef enum llb_status {
#define LLB_STATUS_ENUM(name, str) LLB_STATUS_##name,
  LLB_STATUS_LIST(LLB_STATUS_ENUM)
#undef LLB_STATUS_ENUM
  LLB_STATUS_COUNT
} llb_status;

/* Static, human-readable name of a status ("timed out"); never NULL. */
const char *llb_strerror(llb_status status);

/* Records the error context of a failure on this thread and returns `status`, so that
 * `return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s out of bounds", name);` reads as one
 * statement. The message is truncated at 512 bytes. */
llb_status llb_err_set(llb_status status, const char *file, const char *func, int line,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define LLB_ERRF(status, ...) llb_err_set((status), __FILE__, __func__, __LINE__, __VA_ARGS__)

/* Message of the last error recorded on this thread ("" if none): the formatted text only.
 * Valid until the next llb_err_set on this thread. */
const char *llb_err_last(void);

/* "file:line func(): message" of the last error on this thread, for logs; followed by
 * " [via f1 <- f2]" once callers have added frames (below). Valid until the next llb_err_*
 * call on this thread. */
const char *llb_err_last_where(void);

/* When `status` is a failure, adds `func` to this thread's error stack (the frames an error
 * passed through since the llb_err_set that began it) and returns `status`; an OK status
 * passes unchanged and adds nothing. The stack keeps 256 bytes of names; what does not fit
 * is shown as "...". Use through LLB_UPDATE_ERR_STACK, as nats.c uses NATS_UPDATE_ERR_STACK:
 *   llb_status st = gguf_open(path, &g);
 *   if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st); */
llb_status llb_err_stack_push(llb_status status, const char *func);
#define LLB_UPDATE_ERR_STACK(status) llb_err_stack_push((status), __func__)

/* The frames added since the last llb_err_set on this thread, innermost first, each the
 * caller of the one before: "model_load <- worker_init" ("" if none). Valid until the next
 * llb_err_* call on this thread. */
const char *llb_err_last_stack(void);

/* Forgets this thread's last error and its stack. */
void llb_err_clear(void);

#ifdef __cplusplus
}
#endif

#endif

/* NATS credentials: password files.
 *
 * A password given on a command line is visible to every local user (`ps`, /proc/PID/cmdline),
 * so actors and clients read it from a file instead (`--nats-password-file`), which must be
 * private to its owner, as `llmbus serve` writes them. URLs that may carry `user:password@`
 * are shown only through llb_log_redact_url (base/log.h).
 */
#ifndef LLB_BUS_CREDENTIALS_H
#define LLB_BUS_CREDENTIALS_H

#include <stddef.h>

#include "base/status.h"

/* Longest password bus_password_file_read accepts, in bytes. */
#define BUS_PASSWORD_MAX 256

/* Reads a NATS password from the file at `path` (its first line, without the line end)
 * into buf[cap] (cap > 0). The file must be a regular file that neither group nor others may
 * read or write (mode 0600 or stricter), as `llmbus serve` writes them. Errors (the message
 * names the file, never its content): INVALID_ARGUMENT when the file cannot be opened, is
 * group/world accessible, is empty, or its first line does not fit cap - 1 bytes or
 * BUS_PASSWORD_MAX. */
llb_status bus_password_file_read(const char *path, char *buf, size_t cap);

#endif

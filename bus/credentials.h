/* NATS credentials: URLs as they may be shown (credentials removed), password files.
 *
 * A NATS URL may carry a user and password (`nats://user:secret@host:4222`, the NATS URL
 * form the client libraries accept). Logs and error messages must never show them, so every
 * place that prints a URL passes it through bus_url_redact first.
 */
#ifndef LLB_BUS_CREDENTIALS_H
#define LLB_BUS_CREDENTIALS_H

#include <stddef.h>

#include "base/status.h"

/* Longest password bus_password_file_read accepts, in bytes. */
#define BUS_PASSWORD_MAX 256

/* Copies the comma-separated URL list `urls` into buf[cap] with the userinfo of each URL
 * (everything between "://" and the last '@' before the host) replaced by three asterisks:
 * "nats://u:p@h:1,nats://h:2" gives "nats://XXX@h:1,nats://h:2" with XXX those asterisks.
 * Truncates to cap - 1 bytes; NULL `urls` gives "". cap == 0 writes nothing. */
void bus_url_redact(const char *urls, char *buf, size_t cap);

/* Reads a NATS password from the file at `path` (its first line, without the line end)
 * into buf[cap] (cap > 0). The file must be a regular file that neither group nor others may
 * read or write (mode 0600 or stricter), as `llmbus serve` writes them. Errors (the message
 * names the file, never its content): INVALID_ARGUMENT when the file cannot be opened, is
 * group/world accessible, is empty, or its first line does not fit cap - 1 bytes or
 * BUS_PASSWORD_MAX. */
llb_status bus_password_file_read(const char *path, char *buf, size_t cap);

#endif

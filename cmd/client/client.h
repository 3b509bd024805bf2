/* The NATS client side of `llmbus generate`, `llmbus chat` and `llmbus run`.
 *
 * One request: a fresh inbox is subscribed, a GenerateRequest is published to
 * <prefix>.generate.<tenant> with the inbox as reply subject, and RequestOutputs (DELTA by
 * default) are read from the inbox until one says finished. Text is printed as it arrives
 * (n = 1) or per completion at the end (n > 1); --json prints every RequestOutput as one
 * JSON line instead. An interrupt (SIGINT, see client_install_sigint) sends an AbortRequest
 * with the request id of the first RequestOutput to <prefix>.abort.<tenant>.
 *
 * Threading: everything runs on the calling thread (the bus has its own loop thread).
 */
#ifndef LLB_CMD_CLIENT_H
#define LLB_CMD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "bus/bus.h"
#include "cmd/flags/flags.h"
#include "cmd/supervisor/connection.h"
#include "model/template/chat_template.h"
#include "schemas/sampling_params.h"

#define CLIENT_DEFAULT_MAX_TOKENS 256
#define CLIENT_DEFAULT_TIMEOUT_S 60

/* Everything a client command can be told (strings borrowed from argv or from `conn`). */
struct client_options {
  const char *connect;   /* --connect NAME|FILE: the llmbus serve to use (cmd/supervisor/connection.h) */
  const char *nats_url;  /* NULL = the connection file's, else nats://127.0.0.1:4222 */
  const char *nats_user; /* NULL = none (or the URL's user); with nats_password_file */
  const char *nats_password_file; /* file holding nats_user's password (mode 0600) */
  const char *prefix;    /* NULL = "llm" */
  const char *tenant;    /* NULL = "default" */
  struct llb_sampling_params sp; /* output_kind DELTA, max_tokens CLIENT_DEFAULT_MAX_TOKENS */
  bool raw;              /* no chat template */
  const char *system;    /* system message (chat template only) */
  const char *chat_template; /* template name ("chatml", "llama3", ...); NULL = the model's */
  const char *lora;      /* --lora: the LoRA adapter to run (GenerateRequest.lora_request); NULL = the base */
  bool json;             /* one JSON line per RequestOutput on `out` */
  int64_t timeout_s;     /* longest wait for the next RequestOutput */
  struct serve_connection *conn; /* the connection file used (client_options_connect); owned */
};

/* Fills `o` with the defaults above. Free with client_options_free. */
void client_options_init(struct client_options *o);

/* Frees what o owns (the connection file read). NULL ok. */
void client_options_free(struct client_options *o);

/* The groups of shared flags (client_flags_table). */
enum {
  CLIENT_FLAGS_CONNECT = 1 << 0,  /* --connect --nats --nats-user --nats-password-file --prefix --tenant */
  CLIENT_FLAGS_SAMPLING = 1 << 1, /* --temperature --top-p --top-k --min-p --max-tokens --seed --stop --n */
  CLIENT_FLAGS_PROMPT = 1 << 2,   /* --raw --system --chat-template --json --timeout-s */
};

/* The shared flags of `groups` as cmd/flags entries over o into out[cap] (each value checked:
 * ranges, subject tokens). Returns the count, -1 when cap is too small. */
int client_flags_table(struct client_options *o, unsigned groups, struct flag *out, int cap);

/* The sampling flags alone over sp (for `llmbus generate --inproc`); as client_flags_table. */
int client_sampling_flags(struct llb_sampling_params *sp, struct flag *out, int cap);

/* After parsing: without --nats, takes the NATS URL, prefix, tenant and login from the
 * connection file of a running `llmbus serve` (--connect, else the newest; the operator's login
 * when `as_operator`, the tenant's otherwise), unless given. No file and no --connect: the
 * defaults stay. Errors: NOT_FOUND / IO / MALFORMED of an explicit --connect. */
llb_status client_options_connect(struct client_options *o, bool as_operator);

/* Connects to o->nats_url for a command line client (no signal handlers of the bus: Ctrl-C
 * stays with the command). Errors: those of bus_connect. *out: bus_destroy(). */
llb_status client_connect(const struct client_options *o, struct bus **out);

/* Room for the flags of one client command (its own and client_flags_table's). */
#define CLIENT_MAX_FLAGS 48

/* A command line client logs warnings and errors only, unless LLMBUS_LOG_LEVEL says more. */
void client_quiet_logs(void);

/* One line `<cmd>: <the error>` on stderr; returns the exit code of a failed command (130
 * after an interrupt, 1 otherwise). */
int client_report(const char *cmd, llb_status st);

/* Installs a SIGINT/SIGTERM handler that makes the running client_generate abort its request
 * and return LLB_STATUS_ABORTED. */
void client_install_sigint(void);

/* True once SIGINT/SIGTERM arrived after client_install_sigint(). */
bool client_interrupted(void);

/* Forgets an interrupt that was handled (`llmbus chat`: Ctrl-C ended one answer, the
 * conversation goes on). */
void client_clear_interrupt(void);

/* Called between waits for the next output (about every 100 ms); returning true stops the
 * request as an interrupt would. */
typedef bool (*client_idle_fn)(void *user);

/* The prompt: exactly one of `prompt` (templated as one user message, with o->system, unless
 * o->raw) or `messages[0, num_messages)`. */
struct client_prompt {
  const char *prompt;
  const struct chat_message *messages;
  size_t num_messages;
};

/* Sends one request on `bus` and streams its answer to `out` as described at the top.
 * *answer_out (optional) receives the full text of completion 0 (malloc'd, caller frees;
 * NULL on error). A request no input processor takes (NATS no responders: every replica
 * restarting, a nats-server just back) is sent again, 50 ms doubling to 1 s, 8 times (about
 * 5 s). Errors: TIMEOUT ("no answer from the engine within N s"), NOT_FOUND (no input
 * processor listened through the resends), ABORTED (interrupted / idle said stop), the engine's error
 * (code and "field: message" of RequestOutput.error), MALFORMED (a reply that does not
 * decode), those of the bus. */
llb_status client_generate(struct bus *bus, const struct client_options *o, const struct client_prompt *p,
                           FILE *out, client_idle_fn idle, void *idle_user, char **answer_out);

#endif

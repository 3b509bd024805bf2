/* The stack `llmbus run` starts for one prompt: nats-server and every actor of
 * serve_actor_specs() but the HTTP front door, under a supervisor, on the locked-down bus of
 * serve (serve_nats_config.h).
 *
 * Caller-allocated: run_stack_init(), run_stack_start(), then run_stack_wait_ready() on a bus
 * connected to run_stack_nats_url() (as the operator when s->operator_password_file is set),
 * run_stack_idle() between waits, and run_stack_stop() in every case, a failed start included.
 *
 * Threading: one thread drives a stack (supervisor.h).
 */
#ifndef LLB_CMD_RUN_STACK_H
#define LLB_CMD_RUN_STACK_H

#include <limits.h>
#include <stdbool.h>

#include "base/status.h"
#include "bus/bus.h"
#include "cmd/supervisor/serve_hash_key.h"
#include "cmd/supervisor/serve_nats_config.h"
#include "cmd/supervisor/supervisor.h"

#define RUN_STACK_READY_TIMEOUT_S 60
#define RUN_STACK_MAX_RESTARTS 2 /* an actor that exits more often than this is not coming up */

struct run_stack {
  struct supervisor *sup;
  struct child_spec *specs; /* [num_specs] the actors started */
  int num_specs;
  struct serve_nats_auth *auth; /* NULL with --nats or before start */
  struct serve_hash_key hash_key; /* the run's hash key file (serve_hash_key.h) */
  char operator_password_file[PATH_MAX + 80]; /* the operator's password file, or "" */
  char failed[64];          /* an actor that keeps exiting, or "" */
};

/* Zeroes s (nothing started). */
void run_stack_init(struct run_stack *s);

/* Starts the stack for `so` (so->model_path, engine flags; so->nats_url NULL), every actor
 * told `--log-level warn` unless verbose. Errors (in llb_err_last): those of
 * serve_actor_specs, NOT_FOUND for an actor program not built, those of the nats set-up and
 * of supervisor_start. Call run_stack_stop() after a failure too. */
llb_status run_stack_start(struct run_stack *s, const struct serve_options *so, bool verbose);

/* The URL of the stack's nats-server (owned by s); valid after a successful start. */
const char *run_stack_nats_url(const struct run_stack *s);

/* Supervises between waits (a client_idle_fn for client_generate; user is the stack): true
 * = give up, because a stop was requested or an actor keeps exiting (then s->failed names
 * it: it crash-looped, or restarted more than RUN_STACK_MAX_RESTARTS times). */
bool run_stack_idle(void *user);

/* Waits until every started actor published a ready Heartbeat on `bus`, for at most
 * RUN_STACK_READY_TIMEOUT_S. interrupted() (may be NULL) is asked between waits. Errors:
 * ABORTED ("actor X keeps exiting (its log is above)", s->failed set; or "interrupted"),
 * TIMEOUT naming the actors not ready, those of the bus. */
llb_status run_stack_wait_ready(struct run_stack *s, struct bus *bus, bool (*interrupted)(void));

/* Stops every process of the stack and frees what start made; safe after a failed start or
 * none. Returns TIMEOUT when some actor needed SIGKILL, OK otherwise. */
llb_status run_stack_stop(struct run_stack *s);

#endif

/* Process supervisor behind `llmbus serve` (and `llmbus run`).
 *
 * Starts a set of child programs, restarts any that dies, and stops them all on request,
 * leaving no process behind. When no NATS URL is configured it first starts its own
 * nats-server on 127.0.0.1 with a free port (`-p -1 --ports_file_dir DIR`) and JetStream in
 * a private temporary store (`-js -sd DIR/js`), waits until it accepts connections, and passes
 * `--nats nats://127.0.0.1:PORT` to every child whose spec asks for it. The nats-server is
 * supervised like the children (restarted on the same port) and stopped after them.
 *
 * Process hygiene: each child runs in its own process group (so a signal reaches its own
 * children too) with PR_SET_PDEATHSIG(SIGTERM), so a SIGKILLed supervisor orphans nothing.
 * Restarts back off exponentially from restart_min_ms to restart_max_ms while a child keeps
 * dying within restart_reset_ms of its start; one that stayed up longer (it was serving:
 * killed by an operator, the OOM killer, a chaos test) restarts after restart_min_ms, since
 * every second it is away its engine's work waits (issue: resume within 2 s of a kill). Every start, exit and restart is one
 * structured log line (base/log.h). A child that cannot start at all (it fails
 * crash_loop_max_fails times in a row, each within crash_loop_window_ms: a bad model file, a
 * port in use, a bad flag) is not restarted forever: the supervisor stops everything and
 * supervisor_run returns ABORTED with the child's last error line. Children's stderr goes
 * through a pipe that the supervisor forwards to its own stderr, keeping that line.
 *
 * Threading: a supervisor is driven by one thread (supervisor_start / _poll / _run / _stop /
 * _destroy). supervisor_request_stop() is safe from any thread and from a signal handler.
 * It installs a SIGCHLD handler while started and, in supervisor_run(), SIGTERM/SIGINT
 * handlers; previous handlers are restored by supervisor_stop().
 */
#ifndef LLB_CMD_SUPERVISOR_H
#define LLB_CMD_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"
#include "cmd/flags/flags.h"

#define CHILD_SPEC_MAX_ARGS 128 /* a worker with --lora-modules: two per adapter */
#define CHILD_SPEC_ARG_MAX 512
#define SUPERVISOR_MAX_CHILDREN 192 /* 32 engines of 5 actors, 8 input processors, the api server */

/* One program to keep running. Fill with child_spec_init() + child_spec_add_arg(). */
struct child_spec {
  char name[64];                                  /* for logs and lookups; unique */
  int argc;                                       /* args[0] is the program (path, or name looked up in PATH) */
  char args[CHILD_SPEC_MAX_ARGS][CHILD_SPEC_ARG_MAX];
  bool pass_nats_url;                             /* append "--nats <url>" when starting it */
  int stop_stage;                                 /* supervisor_stop stops stage 0 first and waits
                                                     for it, then 1, ... (0..SUPERVISOR_STOP_STAGES-1):
                                                     who sends work stops before who serves it */
};

/* Stop stages of child_spec.stop_stage. */
#define SUPERVISOR_STOP_STAGES 3

/* Sets the name and the program (args[0]); pass_nats_url = true. INVALID_ARGUMENT if too long. */
llb_status child_spec_init(struct child_spec *spec, const char *name, const char *program);

/* Appends one argument. INVALID_ARGUMENT when it does not fit (message names it). */
llb_status child_spec_add_arg(struct child_spec *spec, const char *arg);

/* What `llmbus serve` was asked for (strings borrowed). */
#define SERVE_MAX_ENGINE_FLAGS 96 /* with a --lora-modules entry per adapter */
#define SERVE_MAX_ENGINES 32 /* 5 actors each + the shared ones within SUPERVISOR_MAX_CHILDREN */
#define SERVE_DEFAULT_METRICS_PORT 9460 /* first actor's; the others follow */
#define SERVE_DEFAULT_INPUT_PROCESSORS 2

/* An engine flag given to `llmbus serve`, passed on to every actor that takes it. */
struct serve_engine_flag {
  const char *name;  /* without "--": "num-blocks" */
  const char *value; /* NULL for a flag without a value ("no-prefix-caching") */
};

struct serve_options {
  const char *nats_url;   /* NULL: start an embedded nats-server */
  const char *model_path; /* GGUF model; NULL = the actors' default */
  const char *http_addr;  /* "HOST:PORT" of the api_server; NULL = its default */
  const char *const *served_model_names; /* [num_served_model_names] the api server's
                                          * --served-model-name, in order; none = its default */
  int num_served_model_names;
  const char *bin_dir;    /* where the actor binaries live; NULL = next to /proc/self/exe */
  int num_engines;        /* engines on this host (--engines); 0 or 1 = one */
  int metrics_port;       /* actor i (serve_actors order) gets --metrics-port metrics_port + i;
                           * 0 = no metrics listeners */
  const char *metrics_host; /* their --metrics-host; NULL = the actors' default (127.0.0.1) */
  const char *tenants_file; /* `--tenants FILE` (cmd/supervisor/serve_nats_config.h); NULL = tenant "default" */
  bool no_nats_auth;      /* embedded nats-server without accounts or users (development and
                             tests only: any local client may publish anywhere) */
  bool no_durable;        /* plain requests subject instead of JetStream (scheduler and input
                             processors get --durable unless this is set) */
  int num_input_processors; /* in the queue group; 0 = SERVE_DEFAULT_INPUT_PROCESSORS, at most 8 */
  const char *roles;      /* `--roles R0,R1,..`: engine e's scheduler gets --role Re (prefill | decode |
                             both), one per engine; NULL = every engine both */
  bool no_kv_transfer;    /* with roles: the decode engines recompute hand-offs instead of fetching
                             their KV (schedulers and workers get --kv-transfer unless this is set) */
  const char *state_dir;  /* `--state-dir DIR`: the embedded server's JetStream store (and the
                             hash key, cmd/supervisor/serve_hash_key.h); NULL = per run */
  const char *hash_key_file; /* `--hash-key-file FILE`: the deployment's hash key; NULL = serve's */
  struct serve_engine_flag engine_flags[SERVE_MAX_ENGINE_FLAGS];
  int num_engine_flags;
};

/* Adds an engine flag (`--num-blocks 64`, `--no-prefix-caching`, ...) to o if `name` is one
 * that serve passes on (its canonical name, not an alias); a flag given again replaces its value,
 * but --api-keys, which repeats. Returns 1 if it takes a value, 0 if not, -1 if unknown or full. */
int serve_engine_flag_add(struct serve_options *o, const char *name, const char *value);

/* Removes engine flag `name` from o (`--enable-prefix-caching` undoes `--no-prefix-caching`). */
void serve_engine_flag_remove(struct serve_options *o, const char *name);

/* The engine flags serve passes on, as cmd/flags entries into out[cap] whose setter adds them
 * to o (serve_engine_flag_add): with their vLLM and llama-server aliases (--num-gpu-blocks-override,
 * --scheduling-policy, -np, -c, -t, ...). Returns the count, -1 when cap is too small. For
 * `llmbus serve` and `llmbus run`. */
int serve_engine_flag_table(struct serve_options *o, struct flag *out, int cap);

/* Fills specs[0..max) with the actor programs of a full stack (input processors, scheduler,
 * kv manager, gpu worker, output processor, api server, encoder cache), each with --model /
 * --http as appropriate, --durable for the scheduler and input processors unless
 * o->no_durable, and o->num_input_processors input processors ("input-processor",
 * "input-processor-2", ...); the supervisor adds --nats. Returns the number filled, or -1
 * (error recorded: max too small, bad count, paths too long, /proc/self/exe unreadable).
 * Defined in cmd/supervisor/serve.c. */
int serve_actor_specs(const struct serve_options *o, struct child_spec *specs, int max);

/* One log line (event=metrics_ports) naming each actor's metrics port of specs[0..n) (those
 * serve_actor_specs gave), for a Prometheus scrape config; nothing when o->metrics_port is 0. */
void serve_log_metrics_ports(const struct serve_options *o, const struct child_spec *specs, int n);

/* `llmbus serve [MODEL] [flags]`: runs the stack until SIGINT/SIGTERM (flags: `llmbus serve
 * --help`, docs/cli.md). Returns the process exit code (0 after a clean stop, 2 on usage
 * errors, 1 otherwise). Defined in cmd/supervisor/serve_cmd.c. */
int cmd_serve(int argc, char **argv);

struct supervisor_config {
  const char *nats_url;        /* NULL: start an embedded nats-server */
  const char *nats_server_bin; /* NULL: /usr/sbin/nats-server, else "nats-server" in PATH */
  bool jetstream;              /* embedded server with -js (default true) */
  const char *nats_config_file; /* embedded server with -c FILE (accounts, users: see
                                 * cmd/supervisor/serve_nats_config.h); NULL = none (no auth);
                                 * borrowed: must outlive the supervisor */
  const char *state_dir;       /* the embedded server's JetStream store (-sd); NULL = under the
                                * supervisor's temporary directory (gone when serve ends) */
  int64_t nats_ready_timeout_ms; /* default 10000 */
  int nats_monitor_port;       /* embedded server's HTTP monitoring port on 127.0.0.1 (-m):
                                * 0 (default) none, -1 a free one, else that port */
  int64_t stop_timeout_ms;     /* SIGTERM → SIGKILL grace per stop, default 35000: longer than
                                * the actors' bus drain (30 s), so a drain is never cut */
  int64_t restart_min_ms;      /* default 100 */
  int64_t restart_max_ms;      /* default 5000 */
  int64_t restart_reset_ms;    /* default 1000: a child that ran this long was serving, not
                                * failing to start, so it restarts after restart_min_ms */
  int crash_loop_max_fails;    /* a child that failed this many times in a row, each within
                                * crash_loop_window_ms of its start, stops the supervisor
                                * (default 3; 0 = restart forever) */
  int64_t crash_loop_window_ms; /* default 5000 */
};

struct supervisor; /* opaque */

/* Fills `c` with the defaults above. */
void supervisor_config_init(struct supervisor_config *c);

/* The delay before restarting a child that exited after up_ms of running, given the delay
 * used for its previous restart (0: none yet), in ms: restart_min_ms when it ran at least
 * restart_reset_ms (or for the first restart), else the previous delay doubled, at most
 * restart_max_ms. Pure; exposed for tests. */
int64_t supervisor_restart_delay_ms(const struct supervisor_config *cfg, int64_t prev_ms, int64_t up_ms);

/* Creates a supervisor (nothing started). *out is freed with supervisor_destroy(). */
llb_status supervisor_create(const struct supervisor_config *c, struct supervisor **out);

/* Adds a child (copied). Before or after start: added after start, it starts right away.
 * INVALID_ARGUMENT for a duplicate name or an empty spec, QUEUE_FULL past
 * SUPERVISOR_MAX_CHILDREN. */
llb_status supervisor_add_child(struct supervisor *s, const struct child_spec *spec);

/* Starts the embedded nats-server if needed (waits until it accepts connections), then every
 * child. Errors: NO_SERVER when nats-server cannot be started or does not become ready (the
 * message names the binary and its log, moved out of the temporary directory to
 * $TMPDIR/llmbus-nats-server-<pid>.log so that it outlives the supervisor), IO for
 * fork/temp-dir failures. On error everything already started is stopped again. */
llb_status supervisor_start(struct supervisor *s);

/* Sets fn(s, user) to run once in supervisor_run, right after supervisor_start succeeded (the
 * NATS URL known, every child started), on supervisor_run's thread (`llmbus serve` writes its
 * connection file there). `user` must outlive supervisor_run. NULL clears it. */
void supervisor_on_started(struct supervisor *s, void (*fn)(struct supervisor *s, void *user), void *user);

/* The NATS URL the children get ("nats://127.0.0.1:PORT" for the embedded server); valid
 * after supervisor_start. Owned by the supervisor. */
const char *supervisor_nats_url(const struct supervisor *s);

/* One supervision step: reaps exited children, restarts those whose backoff has passed, and
 * waits up to timeout_ms for something to happen. Returns true when a stop was requested. */
bool supervisor_poll(struct supervisor *s, int64_t timeout_ms);

/* Installs SIGTERM/SIGINT handlers that request a stop, supervises until then, then stops
 * everything (supervisor_stop). Returns its status, or ABORTED naming the child and quoting
 * its last error line when a child's crash loop stopped the supervisor. */
llb_status supervisor_run(struct supervisor *s);

/* The child whose crash loop stopped the supervisor (see supervisor_config), or NULL. */
const char *supervisor_crash_looped(const struct supervisor *s);

/* Requests supervisor_run / supervisor_poll to stop; async-signal-safe. */
void supervisor_request_stop(struct supervisor *s);

/* Stops all children (SIGTERM to each process group, SIGKILL after stop_timeout_ms), then the
 * embedded nats-server, and removes its temporary directory. Idempotent. Returns TIMEOUT if
 * something needed SIGKILL, OK otherwise. */
llb_status supervisor_stop(struct supervisor *s);

/* Stops (if needed) and frees. NULL ok. */
void supervisor_destroy(struct supervisor *s);

/* Pid of the running child named `name` ("nats-server" for the embedded server); 0 if not
 * running or unknown. */
pid_t supervisor_child_pid(const struct supervisor *s, const char *name);

/* How many times child `name` has been restarted; -1 if unknown. */
int supervisor_child_restarts(const struct supervisor *s, const char *name);

/* The embedded server's monitoring port (0 when none); valid after supervisor_start. */
int supervisor_nats_monitor_port(const struct supervisor *s);

/* The embedded server's temporary directory ("" when none). */
const char *supervisor_temp_dir(const struct supervisor *s);

#endif

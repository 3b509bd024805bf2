/* The engine under test: a throw-away nats-server plus every engine actor with the real
 * model, a client connection to them, and the requests the e2e tests send.
 *
 * e2e_stack_start() starts nats-server (tests/integration/nats_test_server.h), subscribes
 * `llm.health.>` and `llm.engine.0.stats`, then starts the actors either as
 * `$LLMBUS_BUILD_DIR/cmd/llmbus serve --nats URL --model M --http 127.0.0.1:0` (when no actor
 * gets extra flags) or, since `llmbus serve` cannot pass actor flags (--num-blocks,
 * --no-prefix-caching, --max-num-batched-tokens), each actor binary itself as a child with
 * its flags. It returns once every engine actor's Heartbeat said ready. e2e_stack_stop()
 * sends SIGTERM, waits for a clean exit (status 0) and checks that no actor process is left.
 *
 * Model and prerequisites: e2e_require_model() picks the model (env LLMBUS_MODEL, else
 * argv[1], which ctest sets to LLB_DEFAULT_MODEL); a missing model, nats-server or binary
 * skips the test (exit 77, reason printed) locally and fails it under CI=true.
 *
 * Requests go to llm.generate.default as GenerateRequests with a private inbox as reply
 * subject (output_kind DELTA); the RequestOutputs are accumulated into a struct e2e_result.
 *
 * Threading: every function runs on the test's thread; heartbeats and stats are recorded by
 * bus delivery threads under the stack's mutex.
 */
#ifndef LLB_TESTS_E2E_STACK_H
#define LLB_TESTS_E2E_STACK_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bus/bus.h"
#include "schemas/control.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"
#include "tests/integration/nats_test_server.h"

/* The engine actors, in start order. */
enum e2e_actor {
  E2E_ACTOR_KV_MANAGER = 0,
  E2E_ACTOR_GPU_WORKER,
  E2E_ACTOR_SCHEDULER,
  E2E_ACTOR_OUTPUT_PROCESSOR,
  E2E_ACTOR_INPUT_PROCESSOR,
  E2E_ACTOR_ENCODER_CACHE, /* optional: expected only when its binary is built */
  E2E_ACTOR_COUNT
};

#define E2E_MAX_TOKENS 512       /* output tokens a result holds */
#define E2E_MAX_ACTOR_ARGS 16    /* extra flags per actor */
#define E2E_WAIT_OUTPUT_MS 240000 /* longest wait for the next RequestOutput (ASan, loaded CPU) */

/* Scheduler flags for tests whose steps are long under ASan on a loaded 2-core machine (a
 * 500-token prefill step can take over a minute there): beyond the default 60 s execute
 * limit the scheduler would preempt everything and retry (docs/design.md §6), which is not what
 * these tests are about. */
#define E2E_SLOW_STEP_FLAGS "--execute-timeout-ms", "600000", "--kv-timeout-ms", "600000"

/* How to run the stack. Zero-initialise, then set what differs. */
struct e2e_stack_options {
  /* Extra flags per actor, each a NULL-terminated list (or NULL). All NULL: the stack runs
   * under `llmbus serve`; otherwise every actor is started by the helper. */
  const char *const *actor_args[E2E_ACTOR_COUNT];
  /* Extra `llmbus serve` engine flags (NULL-terminated, at most E2E_MAX_ACTOR_ARGS, or NULL),
   * when the stack runs under `llmbus serve`. */
  const char *const *serve_args;
  int64_t ready_timeout_ms; /* 0 = 180000 */
};

/* What the heartbeats told about one actor. */
struct e2e_actor_state {
  int32_t first_pid; /* pid of the first heartbeat; 0 = none yet */
  int32_t last_pid;
  bool expected;     /* part of this stack (false: an optional actor that is not built) */
  bool ready;        /* of the last heartbeat */
  bool pid_changed;  /* a heartbeat came with a different pid (the actor was restarted) */
  uint64_t num_beats;
};

struct e2e_stack {
  struct nats_test_server srv;
  char model[PATH_MAX];
  char build_dir[PATH_MAX];
  bool via_serve;
  pid_t serve_pid;                   /* `llmbus serve`, when via_serve */
  pid_t actor_pids[E2E_ACTOR_COUNT]; /* the actors, when started by the helper */
  struct bus *bus;                   /* the tests' client connection */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct e2e_actor_state actors[E2E_ACTOR_COUNT]; /* under mu */
  struct llb_scheduler_stats stats;  /* latest SchedulerStats (strings cleared), under mu */
  uint64_t num_stats;                /* SchedulerStats received, under mu */
  int32_t max_running;               /* largest num_running_reqs seen since reset, under mu */
  uint64_t max_preemptions;          /* largest num_preemptions seen, under mu */
  struct llb_arena hb_arena, stats_arena; /* one per delivery thread */
};

/* One request: exactly one of prompt (one user message through the chat template, or raw
 * text when `raw`), messages, or prompt_token_ids. sp.output_kind is forced to DELTA. */
struct e2e_request {
  const char *request_id;  /* NULL = "e2e" */
  const char *prompt;
  bool raw;
  const struct llb_chat_message *messages;
  int32_t num_messages;
  const int32_t *prompt_token_ids;
  int32_t num_prompt_token_ids;
  const struct llb_mm_item *mm_items; /* [num_mm_items] multimodal items of the prompt, or NULL */
  int32_t num_mm_items;
  struct llb_sampling_params sp;
};

/* A request's outputs so far (completion 0). */
struct e2e_result {
  char request_id[160];        /* RequestOutput.request_id (what an abort names) */
  int32_t token_ids[E2E_MAX_TOKENS];
  int32_t num_tokens;
  int32_t num_outputs;         /* RequestOutputs received */
  bool finished;
  enum llb_finish_reason finish_reason;
  int32_t error_code;          /* RequestOutput.error.code, 0 = none */
  char error_message[1024];
  char error_field[128];
  int32_t num_cached_tokens;   /* metrics of the last output */
  int32_t num_prompt_tokens;
};

/* A submitted request whose outputs are read with e2e_next / e2e_collect. */
struct e2e_pending {
  struct bus_sub *sub;
  char inbox[128];
  struct e2e_result result;
  struct llb_arena arena;
};

/* The model path (env LLMBUS_MODEL, else argv[1]); when it is missing or unreadable,
 * e2e_unavailable() ends the process. Returns a static string. */
const char *e2e_require_model(int argc, char **argv);

/* Ends the process for a missing prerequisite: exit 77 (skip) with "SKIP: <reason>", or
 * exit 1 with "FAIL: <reason>" when the environment has CI=true. */
void e2e_unavailable(const char *reason);

/* Starts nats-server and the stack as described at the top; waits until every actor is
 * ready. Returns 0, or -1 with the reason on stderr (everything started is stopped). */
int e2e_stack_start(struct e2e_stack *s, const char *model, const struct e2e_stack_options *o);

/* SIGTERM to the stack, waits up to 90 s for it to exit, then checks that no actor process
 * remains, stops nats-server and closes the client. Returns 0 when everything exited on its
 * own with status 0 and nothing remains; -1 otherwise (reason on stderr; stragglers are
 * SIGKILLed). Safe on a stack that failed to start or was stopped already. */
int e2e_stack_stop(struct e2e_stack *s);

/* cmocka teardown for tests whose prestate is their stack: stops it if an assertion left it
 * running. */
int e2e_stack_teardown(void **state);

/* Waits until every actor sent at least one more heartbeat than now (up to wait_ms), then
 * checks that no actor's pid changed since the stack became ready. Returns 0, or -1 with
 * the reason on stderr (an actor went silent or was restarted). */
int e2e_stack_check_alive(struct e2e_stack *s, int64_t wait_ms);

/* Forgets the largest num_running_reqs seen (s->max_running) before a phase. */
void e2e_stack_reset_max_running(struct e2e_stack *s);

/* Largest num_running_reqs in the SchedulerStats since the last reset. */
int32_t e2e_stack_max_running(struct e2e_stack *s);

/* SchedulerStats received so far. */
uint64_t e2e_stack_num_stats(struct e2e_stack *s);

/* Waits up to timeout_ms for a SchedulerStats numbered above `after` (e2e_stack_num_stats)
 * and copies it into *out (strings cleared). Returns 0, or -1 on timeout. */
int e2e_stack_wait_stats(struct e2e_stack *s, uint64_t after, int64_t timeout_ms,
                         struct llb_scheduler_stats *out);

/* Sends `r` (reply to a fresh inbox). Returns 0, or -1 with the reason on stderr. */
int e2e_submit(struct e2e_stack *s, const struct e2e_request *r, struct e2e_pending *p);

/* Reads the next RequestOutput of `p` into p->result (tokens appended). Returns 1 when it
 * was the last (finished), 0 when more follow, -1 on timeout or an undecodable reply
 * (reason on stderr). */
int e2e_next(struct e2e_pending *p, int64_t timeout_ms);

/* e2e_next for tests that poll several requests: 2 when nothing came within timeout_ms
 * (nothing printed). */
int e2e_poll(struct e2e_pending *p, int64_t timeout_ms);

/* Reads until finished (each wait up to timeout_ms), then unsubscribes. Returns 0 or -1. */
int e2e_collect(struct e2e_pending *p, int64_t timeout_ms);

/* Releases what e2e_submit set up (after e2e_collect or on an early stop). */
void e2e_pending_release(struct e2e_pending *p);

/* Publishes AbortRequest{request_id} on llm.abort.default (what a client sends to stop its
 * request; the id is the one its RequestOutputs carry). Returns 0, or -1 with the reason. */
int e2e_send_abort(struct e2e_stack *s, const char *request_id);

/* Submit + collect; *out receives the result. Returns 0 or -1. */
int e2e_generate(struct e2e_stack *s, const struct e2e_request *r, struct e2e_result *out);

/* True when a and b hold the same token ids; otherwise prints both under `what`. */
bool e2e_same_tokens(const char *what, const struct e2e_result *a, const struct e2e_result *b);

/* Prints a result on stderr (one line) under `what`. */
void e2e_print_result(const char *what, const struct e2e_result *r);

/* Seconds since an arbitrary start (monotonic). */
double e2e_now_s(void);

#endif

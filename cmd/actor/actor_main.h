/* The shared skeleton of every actor main (llmbus-scheduler, llmbus-kv-manager, ...).
 *
 * A main fills one struct actor_main_spec (its name, its own flags, start/stop hooks) and
 * calls actor_main_exec(), which does the rest in this order:
 *   1. parse the common flags and the actor's own, one getopt table (cmd/flags/flags.h:
 *      --name VALUE or --name=VALUE, `--` ends them); --help prints both lists and exits 0; a
 *      bad flag prints the error and a hint, exit 2;
 *   2. llb_log_set_actor(spec->actor), llb_log_set_context("engine=<eid> instance=<instance>"),
 *      --log-level;
 *   3. spec->configure (optional): check the actor's flag values; error = exit 2;
 *   4. the metrics registry (am->metrics: process metrics, the bus histograms, label
 *      engine=<eid>) and, with --metrics-port, GET /metrics on --metrics-host:PORT
 *      (bus/metrics_http.h; a port that cannot be bound is logged, metrics_listen_failed,
 *      and the actor runs on without it); then bus_connect to --nats (NO_SERVER: one line
 *      naming the URL without its credentials, exit 1);
 *   5. spec->start: create the actor, subscribe its handlers, start its threads;
 *   6. a Heartbeat (schemas/control.h) on <prefix>.health.<actor>.<instance> every
 *      --heartbeat-ms, carrying ready / inflight (actor_main_set_ready/_inflight); the metrics
 *      (Prometheus text) on <prefix>.health.<actor>.<instance>.metrics every
 *      --metrics-publish-ms (default: --heartbeat-ms), merged into the api server's /metrics;
 *   7. bus_actor_run: serve until SIGTERM / SIGINT / bus_stop, then drain;
 *   8. spec->stop (optional; the bus is still there, the connection drained): join threads;
 *   9. bus_destroy, then spec->destroy (optional): free the actor;
 *  10. bus_shutdown: wait for the NATS client's own threads to end before the process exits.
 * Exit code: 0 after a clean drain, 1 on a start-up or drain failure, 2 on usage errors.
 *
 * Common flags: --nats URL (nats://127.0.0.1:4222), --prefix (llm), --engine-id (0),
 * --instance (<hostname>-<pid>), --model PATH (the build's default model), --creds FILE,
 * --nats-user NAME with --nats-password-file FILE (a user/password login; the password is
 * read from a 0600 file so it never shows in argv, `ps` or a log; a URL may also carry
 * `user:password@`, which logs never show), --hash-key-file FILE (the deployment's hash key,
 * am->hash_key; 64 hex digits in a 0600 file),
 * --log-level debug|info|warn|error (info), --heartbeat-ms (2000), --metrics-port (0 = none),
 * --metrics-host (127.0.0.1), --metrics-publish-ms (0: --heartbeat-ms; -1: off),
 * --otlp-endpoint URL (alias --otlp-traces-endpoint, vLLM's: spans as OTLP/HTTP JSON to
 * URL/v1/traces),
 * --trace-sample-ratio R (1.0), --trace-publish, --help.
 *
 * Threading: actor_main_exec runs on the main thread; start/stop/destroy run there too.
 * actor_main_set_ready / _set_inflight are atomic and callable from any thread.
 */
#ifndef LLB_CMD_ACTOR_MAIN_H
#define LLB_CMD_ACTOR_MAIN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"
#include "base/metrics.h"
#include "base/status.h"
#include "bus/bus.h"
#include "bus/metrics_http.h"
#include "bus/peer_watch.h"
#include "cmd/flags/flags.h"

/* Values of the common flags after parsing. Strings point into argv or static storage. */
struct actor_common_flags {
  const char *nats_url;   /* comma-separated URLs */
  const char *prefix;     /* subject prefix */
  const char *engine_id;  /* <eid> of llm.engine.<eid>.* */
  const char *instance;   /* health subject token; '.' in the hostname became '-' */
  const char *model_path; /* GGUF path */
  const char *creds_file; /* NULL = none */
  const char *nats_user;  /* NULL = none (or the URL's user) */
  const char *nats_password_file; /* the user's password, read at connect (bus/credentials.h) */
  const char *hash_key_file; /* the deployment's hash key (base/hash.h), NULL = a random one */
  const char *log_level;
  int64_t heartbeat_ms;
  int32_t metrics_port;     /* 0 = no metrics listener */
  const char *metrics_host;
  int64_t metrics_publish_ms; /* the registry on <prefix>.health.<actor>.<instance>.metrics this
                               * often (bus_metrics_publish_start); 0 = heartbeat_ms, -1 = never */
  const char *otlp_endpoint; /* NULL = no OTLP export (bus/span.h) */
  double trace_sample_ratio; /* head sampling of the traces this actor starts, [0, 1] */
  bool trace_publish;        /* also publish span batches on <prefix>.trace.<actor> */
};

/* The running main, handed to the hooks. */
struct actor_main {
  const struct actor_main_spec *spec;
  struct actor_common_flags common;
  struct bus *bus;            /* valid from start until after stop */
  struct llb_metrics *metrics; /* the process's registry: valid from configure to destroy */
  struct llb_hash_key hash_key; /* --hash-key-file's key, or a random one (has_hash_key false) */
  bool has_hash_key;
  struct bus_metrics_http *metrics_http; /* NULL without --metrics-port */
  atomic_bool ready;          /* Heartbeat.ready; starts true after start() succeeds */
  atomic_int inflight;        /* Heartbeat.inflight */
  int64_t start_ns;           /* llb_now_ns() at exec start, for uptime */
  atomic_uint_fast64_t heartbeat_seq;
  atomic_int kv_num_blocks;   /* Heartbeat.num_gpu_blocks (gpu_worker); 0 = not announced */
  atomic_int kv_block_size;   /* Heartbeat.block_size (gpu_worker) */
  /* Heartbeat.lora_adapters (gpu_worker; actor_main_set_lora_source): lock gives the list, unlock
     ends its use; set in start, before the first beat; NULL = none */
  const struct llb_lora_adapter *(*lora_lock)(void *user, int32_t *num);
  void (*lora_unlock)(void *user);
  void *lora_user;
  atomic_bool fail_exit;      /* the actor stopped itself for a reason that needs a restart: exit 1 */
  struct geometry_watch *geometry_watch; /* actor_main_wait_kv_geometry's watch, freed at exit */
  /* the worker whose beat gave the geometry (actor_main_kv_geometry_worker); "" none */
  char kv_worker_instance[BUS_TOKEN_MAX + 1];
  int32_t kv_worker_pid;
  uint64_t kv_worker_seq;
  atomic_int_fast64_t hello_answered_ns; /* actor_main_answer_hellos: the last answer */
  atomic_uint_fast64_t answered_reconnects; /* actor_main_answer_after_reconnect */
  atomic_int_fast64_t answer_until_ns;
  struct flag_args args;      /* what the flags' values point into */
  char instance_buf[96];      /* default instance storage */
  char host_buf[64];
};

struct actor_main_spec {
  const char *actor;          /* "kv_manager": log actor= and the health subject token */
  const char *program;        /* "llmbus-kv-manager", for --help */
  const char *summary;        /* one line for --help */
  const struct flag *flags;   /* [num_flags] the actor's own flags (cmd/flags/flags.h), may be NULL */
  int num_flags;
  /* Optional: validate / derive the actor's configuration after parsing, before connecting.
   * An error (with LLB_ERRF message) is a usage error, exit 2. */
  llb_status (*configure)(struct actor_main *am, void *user);
  /* Required: bring the actor up on am->bus (subscribe, start threads). An error ends the
   * process with exit 1 after spec->stop and spec->destroy ran (they must tolerate a
   * partial start). */
  llb_status (*start)(struct actor_main *am, void *user);
  /* Optional: after the drain, before bus_destroy: stop and join the actor's threads. */
  void (*stop)(struct actor_main *am, void *user);
  /* Optional: after bus_destroy: free the actor. */
  void (*destroy)(struct actor_main *am, void *user);
  void *user;
  /* One of an engine's own actors (scheduler, kv_manager, gpu_worker, output_processor,
   * encoder_cache): its heartbeats (and a starting actor's hellos) also go to
   * <prefix>.engine.<eid>.health.<actor>, where that engine's peers listen, so a beat reaches
   * its own engine and not every actor of every engine (O(N) deliveries for N engines, not
   * O(N^2)). */
  bool engine_scoped;
};

/* Runs an actor main as described at the top; returns the process exit code (0, 1, 2).
 * argv must outlive the call (string flags point into it). */
int actor_main_exec(const struct actor_main_spec *spec, int argc, char **argv);

/* "<prefix>.engine.<eid>.<kind>" of this actor into buf[cap] (kind: requests, abort, kv,
 * encoder, execute, outputs, stats). Errors as bus_subject_engine. */
llb_status actor_main_engine_subject(const struct actor_main *am, const char *kind, char *buf,
                                     size_t cap);

/* Heartbeat fields; thread-safe. */
void actor_main_set_ready(struct actor_main *am, bool ready);
void actor_main_set_inflight(struct actor_main *am, int32_t inflight);

/* The worker announces its KV cache geometry (the blocks it allocated, e.g. sized from device
 * memory) in every heartbeat from now on; thread-safe. As vLLM's EngineCore takes
 * num_gpu_blocks from the workers' memory profile, the scheduler and the kv_manager of the
 * engine take it from here (actor_main_wait_kv_geometry). */
void actor_main_set_kv_geometry(struct actor_main *am, int32_t num_blocks, int32_t block_size);

/* The LoRA adapters every heartbeat announces (gpu_worker: its --lora-modules and those loaded at
 * run time), read at each beat: lock(user, &num) returns the list ([num], valid until
 * unlock(user)), which the beat encodes, then unlock(user). The set may change between beats.
 * Call from the start hook: heartbeats start after it. */
struct llb_lora_adapter;
void actor_main_set_lora_source(struct actor_main *am,
                                 const struct llb_lora_adapter *(*lock)(void *user, int32_t *num),
                                 void (*unlock)(void *user), void *user);

/* Blocks until a ready gpu_worker of this engine (same prefix and --engine-id) announces its
 * KV geometry in a heartbeat on <prefix>.engine.<eid>.health.gpu_worker, at most timeout_ms; sets
 * *num_blocks and *block_size. For --num-blocks 0 ("the worker's"). Heartbeats are untrusted:
 * another actor's, another engine's, or one with a block count over ACTOR_MAIN_MAX_KV_BLOCKS
 * or a block size over ACTOR_MAIN_MAX_BLOCK_SIZE is ignored. Then keeps watching: should the
 * engine's worker later announce another geometry (a restarted CUDA worker sized its cache
 * from the memory free then), the actor logs kv_geometry_changed and stops with exit code 1,
 * so that its supervisor restarts it and it adopts the new one. Errors: TIMEOUT naming the
 * subject and the wait; ABORTED when a stop (SIGTERM) arrives while waiting; those of
 * bus_subscribe_sync / bus_sub_next_msg / bus_subscribe. */
llb_status actor_main_wait_kv_geometry(struct actor_main *am, int64_t timeout_ms, int32_t *num_blocks,
                                       int32_t *block_size);

/* The worker whose heartbeat gave the geometry above, as a peer_watch beat (bus/peer_watch.h;
 * instance points into am, valid as long as am): the scheduler's failure detection starts its
 * worker watch from it. False (*out untouched) before a successful wait. */
bool actor_main_kv_geometry_worker(const struct actor_main *am, struct peer_beat *out);

/* The gpu_worker's side of the geometry wait: while a scheduler or kv_manager of this engine
 * waits (actor_main_wait_kv_geometry) it says hello with a not-ready heartbeat every 250 ms;
 * the worker answers each (at most one per 100 ms) with its own heartbeat at once, so a
 * restarted scheduler or kv_manager starts within milliseconds of the worker's answer instead
 * of up to --heartbeat-ms later. Subscribes <prefix>.engine.<eid>.health.{scheduler,kv_manager};
 * call from the start hook. Errors: those of bus_subscribe. */
llb_status actor_main_answer_hellos(struct actor_main *am);

/* After a nats-server restart, whoever waits for this actor to be back (the api server resends
 * its requests once an input processor beat after its own reconnect) may have reconnected
 * after this actor's reconnect beat went out: for RECONNECT_ANSWER_MS (2 s) after this actor's
 * reconnect every beat of `peer` (actor name) is answered with a heartbeat at once (at most one
 * per 100 ms). Subscribes <prefix>.health.<peer>.*; call from the start hook. Errors: those of
 * bus_subscribe, INVALID_ARGUMENT (prefix too long). */
llb_status actor_main_answer_after_reconnect(struct actor_main *am, const char *peer);

/* Every beat of `peer` (actor name) whose uptime is under 5 s (one just started) is answered with
 * a heartbeat at once: a worker's LoRA adapters reach a starting input processor or api server
 * within milliseconds (they resolve a request's model against them). Subscribes
 * <prefix>.health.<peer>.*; call from the start hook. Errors: those of bus_subscribe. */
llb_status actor_main_answer_new_peers(struct actor_main *am, const char *peer);

#define ACTOR_MAIN_MAX_KV_BLOCKS (1 << 24) /* 64 MiB of per-block state in a scheduler */
#define ACTOR_MAIN_MAX_BLOCK_SIZE 4096

#endif

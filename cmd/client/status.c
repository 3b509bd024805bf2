/* `llmbus status`: what is running on a bus, read from the bus itself (docs/design.md §9).
 *
 * Listens for --wait-ms (default 2500: longer than the default 2 s heartbeat) to
 * <prefix>.health.*.* (every actor's Heartbeat) and <prefix>.engine.*.stats (each engine's
 * SchedulerStats), then prints one table of engines (id, model, load, KV cache) and one of
 * actors (actor, instance, engine, host, pid, uptime, ready, in flight), or with --json one
 * JSON object {"engines": [...], "actors": [...]}. Messages that do not verify are counted,
 * never trusted. Exit 0 when at least one actor answered, 1 when none did (nothing there),
 * 2 on usage errors. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bus/bus.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"
#include "schemas/control.h"

#define STATUS_MAX_ROWS 1024

struct status_engine {
  char id[BUS_TOKEN_MAX + 1], model[128], instance[96];
  int32_t running, waiting, free_blocks, total_blocks, block_size, max_num_seqs, max_model_len;
  float kv_usage;
  uint64_t step, prefix_queries, prefix_hits, prompt_tokens, generation_tokens, preemptions;
};

struct status_actor {
  char actor[64], instance[96], engine[BUS_TOKEN_MAX + 1], host[96];
  int32_t pid, inflight;
  double uptime_s;
  bool ready;
};

struct status_view {
  pthread_mutex_t mu;
  struct status_engine engines[STATUS_MAX_ROWS];
  struct status_actor actors[STATUS_MAX_ROWS];
  int num_engines, num_actors;
  uint64_t rejected;
};

static void copy_str(char *dst, size_t cap, struct llb_str s) {
  size_t n = s.len < cap ? s.len : cap - 1;
  if (s.data && n) memcpy(dst, s.data, n);
  dst[s.data ? n : 0] = '\0';
}

static void on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct status_view *v = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_scheduler_stats s;
  bool ok = llb_scheduler_stats_decode(msg->data, msg->len, &arena, &s) == LLB_STATUS_OK && s.engine_id.len;
  pthread_mutex_lock(&v->mu);
  int i = 0;
  while (ok && i < v->num_engines && strncmp(v->engines[i].id, s.engine_id.data, sizeof v->engines[i].id) != 0) i++;
  if (!ok || i == STATUS_MAX_ROWS) {
    v->rejected++;
  } else {
    if (i == v->num_engines) v->num_engines++;
    struct status_engine *e = &v->engines[i];
    *e = (struct status_engine){.running = s.num_running_reqs, .waiting = s.num_waiting_reqs,
                                .free_blocks = s.num_free_blocks, .total_blocks = s.num_total_blocks,
                                .block_size = s.block_size, .max_num_seqs = s.max_num_seqs,
                                .max_model_len = s.max_model_len, .kv_usage = s.kv_cache_usage, .step = s.step,
                                .prefix_queries = s.prefix_cache_queries, .prefix_hits = s.prefix_cache_hits,
                                .prompt_tokens = s.prompt_tokens_total,
                                .generation_tokens = s.generation_tokens_total, .preemptions = s.num_preemptions};
    copy_str(e->id, sizeof e->id, s.engine_id);
    copy_str(e->model, sizeof e->model, s.model);
    copy_str(e->instance, sizeof e->instance, s.instance);
  }
  pthread_mutex_unlock(&v->mu);
  llb_arena_destroy(&arena);
}

static void on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct status_view *v = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_heartbeat h;
  bool ok = llb_heartbeat_decode(msg->data, msg->len, &arena, &h) == LLB_STATUS_OK;
  char actor[64] = "", instance[96] = "";
  if (ok) {
    copy_str(actor, sizeof actor, h.actor);
    copy_str(instance, sizeof instance, h.instance);
  }
  pthread_mutex_lock(&v->mu);
  int i = 0;
  while (ok && i < v->num_actors &&
         (strcmp(v->actors[i].actor, actor) != 0 || strcmp(v->actors[i].instance, instance) != 0))
    i++;
  if (!ok || i == STATUS_MAX_ROWS) {
    v->rejected++;
  } else {
    if (i == v->num_actors) v->num_actors++;
    struct status_actor *a = &v->actors[i];
    memcpy(a->actor, actor, sizeof actor);
    memcpy(a->instance, instance, sizeof instance);
    copy_str(a->engine, sizeof a->engine, h.engine_id);
    copy_str(a->host, sizeof a->host, h.host);
    a->pid = h.pid;
    a->inflight = h.inflight;
    a->uptime_s = h.uptime_s;
    a->ready = h.ready;
  }
  pthread_mutex_unlock(&v->mu);
  llb_arena_destroy(&arena);
}

static int cmp_engine(const void *a, const void *b) {
  return strcmp(((const struct status_engine *)a)->id, ((const struct status_engine *)b)->id);
}

static int cmp_actor(const void *a, const void *b) {
  const struct status_actor *x = a, *y = b;
  int c = strcmp(x->engine, y->engine);
  if (!c) c = strcmp(x->actor, y->actor);
  return c ? c : strcmp(x->instance, y->instance);
}

static void print_table(const struct status_view *v) {
  printf("engines: %d\n", v->num_engines);
  printf("  %-10s %-34s %7s %7s %7s %11s %10s %12s\n", "ENGINE", "MODEL", "RUNNING", "WAITING", "KV%",
         "BLOCKS", "PREFIX_HIT", "GEN_TOKENS");
  for (int i = 0; i < v->num_engines; i++) {
    const struct status_engine *e = &v->engines[i];
    double hit = e->prefix_queries ? 100.0 * (double)e->prefix_hits / (double)e->prefix_queries : 0.0;
    char blocks[32];
    snprintf(blocks, sizeof blocks, "%d/%d", e->total_blocks - e->free_blocks, e->total_blocks);
    printf("  %-10s %-34s %7d %7d %6.1f%% %11s %9.1f%% %12llu\n", e->id, e->model, e->running, e->waiting,
           100.0 * e->kv_usage, blocks, hit, (unsigned long long)e->generation_tokens);
  }
  printf("actors: %d\n", v->num_actors);
  printf("  %-10s %-18s %-28s %-16s %8s %9s %5s %8s\n", "ENGINE", "ACTOR", "INSTANCE", "HOST", "PID", "UPTIME_S",
         "READY", "INFLIGHT");
  for (int i = 0; i < v->num_actors; i++) {
    const struct status_actor *a = &v->actors[i];
    printf("  %-10s %-18s %-28s %-16s %8d %9.0f %5s %8d\n", a->engine[0] ? a->engine : "-", a->actor, a->instance,
           a->host, a->pid, a->uptime_s, a->ready ? "yes" : "no", a->inflight);
  }
}

static void print_json(const struct status_view *v) {
  json_t *root = json_object(), *engines = json_array(), *actors = json_array();
  for (int i = 0; i < v->num_engines; i++) {
    const struct status_engine *e = &v->engines[i];
    json_array_append_new(
        engines, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I}",
                           "engine_id", e->id, "model", e->model, "instance", e->instance, "num_running_reqs",
                           e->running, "num_waiting_reqs", e->waiting, "kv_cache_usage", (double)e->kv_usage,
                           "num_free_blocks", e->free_blocks, "num_total_blocks", e->total_blocks, "block_size",
                           e->block_size, "max_num_seqs", e->max_num_seqs, "max_model_len", e->max_model_len,
                           "step", (json_int_t)e->step, "prefix_cache_queries", (json_int_t)e->prefix_queries,
                           "prefix_cache_hits", (json_int_t)e->prefix_hits, "generation_tokens_total",
                           (json_int_t)e->generation_tokens, "num_preemptions", (json_int_t)e->preemptions));
  }
  for (int i = 0; i < v->num_actors; i++) {
    const struct status_actor *a = &v->actors[i];
    json_array_append_new(actors, json_pack("{s:s, s:s, s:s, s:s, s:i, s:f, s:b, s:i}", "actor", a->actor,
                                            "instance", a->instance, "engine_id", a->engine, "host", a->host,
                                            "pid", a->pid, "uptime_s", a->uptime_s, "ready", a->ready,
                                            "inflight", a->inflight));
  }
  json_object_set_new(root, "engines", engines);
  json_object_set_new(root, "actors", actors);
  json_object_set_new(root, "rejected_messages", json_integer((json_int_t)v->rejected));
  char *text = json_dumps(root, JSON_COMPACT);
  if (text) printf("%s\n", text);
  free(text);
  json_decref(root);
}

/* Listens wait_ms on the bus of o and prints what answered; returns the exit code. */
static int status_listen(const struct client_options *o, long wait_ms) {
  struct status_view *v = calloc(1, sizeof *v);
  if (!v) return 1;
  pthread_mutex_init(&v->mu, NULL);
  struct bus *bus = NULL;
  int rc = 1;
  const char *prefix = o->prefix ? o->prefix : "llm";
  char health[BUS_SUBJECT_MAX], stats[BUS_SUBJECT_MAX];
  llb_status st = bus_pattern_health(prefix, NULL, health, sizeof health); /* heartbeats, not their .metrics */
  if (st == LLB_STATUS_OK) st = bus_pattern_engines(prefix, "stats", stats, sizeof stats);
  if (st == LLB_STATUS_OK) st = client_connect(o, &bus);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, health, NULL, on_heartbeat, v, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, stats, NULL, on_stats, v, NULL);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus status: %s\n", llb_err_last());
    goto done;
  }
  struct timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&v->mu);
  qsort(v->engines, (size_t)v->num_engines, sizeof v->engines[0], cmp_engine);
  qsort(v->actors, (size_t)v->num_actors, sizeof v->actors[0], cmp_actor);
  if (o->json) print_json(v);
  else print_table(v);
  rc = v->num_actors > 0 || v->num_engines > 0 ? 0 : 1;
  if (rc) fprintf(stderr, "llmbus status: no actor answered on %s within %ld ms\n", health, wait_ms);
  pthread_mutex_unlock(&v->mu);
done:
  bus_destroy(bus); /* stops the delivery threads before the view goes */
  pthread_mutex_destroy(&v->mu);
  free(v);
  return rc;
}

static const char status_usage[] =
    "usage: llmbus status [flags]\n"
    "\n"
    "Lists the engines (from <prefix>.engine.*.stats) and the actors (from their heartbeats on\n"
    "<prefix>.health.>) on the bus, with their load: the newest `llmbus serve` on this host (as its\n"
    "operator), unless --connect or --nats says.\n";

int cmd_status(int argc, char **argv) {
  struct client_options o;
  client_options_init(&o);
  int32_t wait_ms = 2500;
  struct flag t[CLIENT_MAX_FLAGS];
  int n = client_flags_table(&o, CLIENT_FLAGS_CONNECT, t, CLIENT_MAX_FLAGS - 2);
  t[n++] = (struct flag){.name = "wait-ms", .kind = FLAG_KIND_INT32, .target = &wait_ms, .metavar = "MS",
                         .help = "how long to listen (1..600000; one heartbeat interval and more)"};
  t[n++] = (struct flag){.name = "json", .kind = FLAG_KIND_BOOL, .target = &o.json,
                         .help = "one JSON object instead of tables"};
  const struct flag_section sec = {"flags", t, n};
  const struct flag_command cmd = {.program = "llmbus status", .usage = status_usage, .sections = &sec,
                                   .num_sections = 1, .max_positional = 0};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE && (wait_ms < 1 || wait_ms > 600000)) rc = flags_usage_error(&cmd, "--wait-ms: 1..600000");
  if (rc == FLAGS_CONTINUE) client_quiet_logs();
  if (rc == FLAGS_CONTINUE && client_options_connect(&o, true) != LLB_STATUS_OK)
    rc = client_report(cmd.program, LLB_STATUS_NOT_FOUND);
  if (rc == FLAGS_CONTINUE) rc = status_listen(&o, wait_ms);
  flag_args_free(&args);
  client_options_free(&o);
  return rc;
}


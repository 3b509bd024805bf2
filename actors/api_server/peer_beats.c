/* What the api server hears about its peers; see peer_beats.h. */
#include "actors/api_server/peer_beats.h"
#include "schemas/lora_registry.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_options.h"
#include "actors/api_server/api_server_response.h"
#include "actors/api_server/http_reply.h"
#include "base/hash.h"
#include "base/log.h"
#include "schemas/control.h"

#define MAX_HEALTH_ACTORS 8
#define API_SERVER_MAX_OP_SEEN 16

struct health_entry {
  char actor[64];
  _Atomic int64_t last_ready_ns; /* llb_now_ns of the last ready heartbeat, 0 = never */
  _Atomic int64_t last_not_ready_ns; /* of the last heartbeat saying not ready (a scheduler
                                        recovering from a worker failure), 0 = never */
};

struct api_server_peer_beats {
  struct api_server_metrics *metrics;
  int64_t health_window_ms;
  struct health_entry health[MAX_HEALTH_ACTORS];
  int num_health;
  /* Output processors seen in heartbeats (heartbeat delivery thread only): a key of
   * instance and pid each, with when it last beat. A key that appears after the first is an
   * output processor that restarted (or joined): op_restart_ns is set to when it was seen. */
  uint64_t op_keys[API_SERVER_MAX_OP_SEEN];
  int64_t op_seen_ns[API_SERVER_MAX_OP_SEEN];
  int num_op_keys;
  _Atomic int64_t op_restart_ns; /* llb_now_ns, 0 = none seen */
  _Atomic int64_t ip_beat_ns;    /* llb_now_ns of the last input processor heartbeat, 0 = none */
  struct lora_registry *loras;   /* fed with the workers' adapters; NULL = none */
};

llb_status api_server_peer_beats_create(const char *health_actors, int64_t health_window_ms, struct api_server_metrics *metrics,
                                 struct api_server_peer_beats **out) {
  *out = NULL;
  struct api_server_peer_beats *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: peer beats");
  p->metrics = metrics;
  p->health_window_ms = health_window_ms;
  /* health[] entries hold the actor name first: parse into a plain array, then copy */
  char names[MAX_HEALTH_ACTORS][sizeof p->health[0].actor];
  p->num_health = api_server_parse_name_list(health_actors, &names[0][0], sizeof names[0], MAX_HEALTH_ACTORS);
  for (int i = 0; i < p->num_health; i++) memcpy(p->health[i].actor, names[i], sizeof names[i]);
  *out = p;
  return LLB_STATUS_OK;
}

void api_server_peer_beats_destroy(struct api_server_peer_beats *p) { free(p); }

int64_t api_server_peer_beats_op_restart_ns(struct api_server_peer_beats *p) { return atomic_load(&p->op_restart_ns); }

int64_t api_server_peer_beats_ip_beat_ns(struct api_server_peer_beats *p) { return atomic_load(&p->ip_beat_ns); }

void api_server_peer_beats_on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_server_peer_beats *a = user;
  uint8_t mem[4096];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_scheduler_stats s;
  if (llb_scheduler_stats_decode(msg->data, msg->len, &arena, &s) == LLB_STATUS_OK)
    api_server_metrics_engine_stats(a->metrics, &s);
  else
    LLB_LOG_WARN("stats_malformed", "subject=%s error=\"%s\"", msg->subject, llb_err_last());
  llb_arena_destroy(&arena);
}

/* An output processor's beat: a new instance-and-pid key after the first one means one
 * restarted (or joined); its predecessor's outputs may be lost (api_server_resend_after_op_restart). */
static void note_output_processor(struct api_server_peer_beats *a, const struct llb_heartbeat *hb, int64_t now) {
  const uint32_t pid = (uint32_t)hb->pid; /* FNV-1a of the instance, then the pid */
  const uint64_t key = llb_fnv1a64(llb_fnv1a64(LLB_FNV1A64_INIT, hb->instance.data, hb->instance.len), &pid, sizeof pid);
  int oldest = 0;
  for (int i = 0; i < a->num_op_keys; i++) {
    if (a->op_keys[i] == key) {
      a->op_seen_ns[i] = now;
      return;
    }
    if (a->op_seen_ns[i] < a->op_seen_ns[oldest]) oldest = i;
  }
  if (a->num_op_keys > 0) {
    atomic_store(&a->op_restart_ns, now);
    LLB_LOG_INFO("output_processor_restart_seen", "instance=%.*s pid=%d engine_id=%.*s", (int)hb->instance.len,
                 hb->instance.data, hb->pid, (int)hb->engine_id.len, hb->engine_id.data);
  }
  const int at = a->num_op_keys < API_SERVER_MAX_OP_SEEN ? a->num_op_keys++ : oldest;
  a->op_keys[at] = key;
  a->op_seen_ns[at] = now;
}

void api_server_peer_beats_set_loras(struct api_server_peer_beats *p, struct lora_registry *loras) { p->loras = loras; }

void api_server_peer_beats_on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_server_peer_beats *a = user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) == LLB_STATUS_OK) {
    const int64_t now = llb_now_ns();
    for (int i = 0; i < a->num_health; i++)
      if (strcmp(a->health[i].actor, hb.actor.data) == 0)
        atomic_store(hb.ready ? &a->health[i].last_ready_ns : &a->health[i].last_not_ready_ns, now);
    if (strcmp(hb.actor.data, "output_processor") == 0) note_output_processor(a, &hb, now);
    else if (strcmp(hb.actor.data, "input_processor") == 0) atomic_store(&a->ip_beat_ns, now);
    else if (a->loras) lora_registry_on_heartbeat(a->loras, &hb, now); /* a worker's adapters */
  }
  llb_arena_destroy(&arena);
}

void api_server_peer_beats_route_health(struct api_server_peer_beats *a, struct evhttp_request *req) {
  int64_t now = llb_now_ns();
  struct api_server_buf missing = {0}, recovering = {0};
  for (int i = 0; i < a->num_health; i++) {
    int64_t t = atomic_load(&a->health[i].last_ready_ns);
    int64_t t_not = atomic_load(&a->health[i].last_not_ready_ns);
    if (t_not > t && now - t_not <= a->health_window_ms * 1000000) /* says it is not ready */
      api_server_buf_printf(&recovering, "%s%s", recovering.len ? ", " : "", a->health[i].actor);
    else if (!t || now - t > a->health_window_ms * 1000000) /* silent: dead or restarting */
      api_server_buf_printf(&missing, "%s%s", missing.len ? ", " : "", a->health[i].actor);
  }
  if (missing.len == 0 && recovering.len == 0) {
    api_server_http_send_body(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
  } else {
    struct api_server_error e;
    if (missing.len && recovering.len)
      api_server_error_set(&e, 503, NULL, "not ready: no ready heartbeat within %lld ms from %s; not ready "
                    "(recovering from a worker or kv_manager failure): %s",
                    (long long)a->health_window_ms, missing.data, recovering.data);
    else if (missing.len)
      api_server_error_set(&e, 503, NULL, "not ready: no ready heartbeat within %lld ms from %s",
                    (long long)a->health_window_ms, missing.data);
    else
      api_server_error_set(&e, 503, NULL, "not ready (recovering from a worker or kv_manager failure): %s",
                    recovering.data);
    struct api_server_buf b = {0};
    if (api_server_error_render(&e, &b)) api_server_http_send_body(req, 503, "application/json", b.data, b.len);
    api_server_buf_free(&b);
  }
  api_server_buf_free(&missing);
  api_server_buf_free(&recovering);
}

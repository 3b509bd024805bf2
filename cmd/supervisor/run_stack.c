/* The stack of `llmbus run` (run_stack.h): serve's actors but the HTTP front door, started,
 * watched until each says ready, stopped; no process is left behind. */
#include "cmd/supervisor/run_stack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/supervisor/run_dir.h"
#include "schemas/control.h"

#define RUN_SKIPPED_ACTOR "api-server" /* HTTP is not needed to answer one prompt */

void run_stack_init(struct run_stack *s) { memset(s, 0, sizeof *s); }

bool run_stack_idle(void *user) {
  struct run_stack *r = user;
  if (supervisor_poll(r->sup, 0)) {
    const char *looped = supervisor_crash_looped(r->sup); /* cannot start: not a user's stop */
    if (looped) snprintf(r->failed, sizeof r->failed, "%s", looped);
    return true;
  }
  for (int i = 0; i < r->num_specs; i++) {
    if (supervisor_child_restarts(r->sup, r->specs[i].name) > RUN_STACK_MAX_RESTARTS) {
      snprintf(r->failed, sizeof r->failed, "%s", r->specs[i].name);
      return true;
    }
  }
  return false;
}

/* The heartbeat actor name of a spec: "kv-manager" → "kv_manager". */
static void actor_name(const char *spec_name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", spec_name);
  for (char *c = buf; *c; c++) if (*c == '-') *c = '_';
}

llb_status run_stack_wait_ready(struct run_stack *r, struct bus *bus, bool (*interrupted)(void)) {
  char subject[BUS_SUBJECT_MAX];
  struct bus_sub *sub = NULL;
  llb_status st = bus_pattern_health(bus_prefix(bus), NULL, subject, sizeof subject); /* heartbeats, not .metrics */
  if (st == LLB_STATUS_OK) st = bus_subscribe_sync(bus, subject, &sub);
  if (st != LLB_STATUS_OK) return st;
  bool ready[SUPERVISOR_MAX_CHILDREN] = {false};
  int num_ready = 0;
  int64_t deadline = llb_now_ns() + (int64_t)RUN_STACK_READY_TIMEOUT_S * 1000000000LL;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  while (num_ready < r->num_specs) {
    if ((interrupted && interrupted()) || run_stack_idle(r)) {
      st = r->failed[0] ? LLB_ERRF(LLB_STATUS_ABORTED, "actor %s keeps exiting (its log is above)", r->failed)
                        : LLB_ERRF(LLB_STATUS_ABORTED, "interrupted");
      break;
    }
    if (llb_now_ns() > deadline) {
      char missing[512] = "";
      for (int i = 0; i < r->num_specs; i++)
        if (!ready[i]) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s", r->specs[i].name);
      st = LLB_ERRF(LLB_STATUS_TIMEOUT, "actors not ready within %d s:%s", RUN_STACK_READY_TIMEOUT_S, missing);
      break;
    }
    struct bus_msg *m = NULL;
    st = bus_sub_next_msg(sub, 100, &m);
    if (st == LLB_STATUS_TIMEOUT) {
      st = LLB_STATUS_OK;
      continue;
    }
    if (st != LLB_STATUS_OK) break;
    struct llb_heartbeat hb;
    llb_arena_reset(&arena);
    if (llb_heartbeat_decode(m->data, m->len, &arena, &hb) == LLB_STATUS_OK && hb.ready) {
      for (int i = 0; i < r->num_specs; i++) {
        char name[64];
        actor_name(r->specs[i].name, name, sizeof name);
        if (!ready[i] && strcmp(name, hb.actor.data) == 0) {
          ready[i] = true;
          num_ready++;
        }
      }
    }
    bus_msg_destroy(m);
  }
  llb_arena_destroy(&arena);
  (void)bus_unsubscribe(sub);
  return st;
}

/* Fills r->specs with the actors of a full stack but the HTTP front door, each told to log
 * warnings only unless verbose. */
static llb_status build_specs(struct run_stack *r, const struct serve_options *so, bool verbose) {
  int n = serve_actor_specs(so, r->specs, SUPERVISOR_MAX_CHILDREN);
  if (n < 0) return LLB_UPDATE_ERR_STACK(LLB_STATUS_INVALID_ARGUMENT); /* the message is serve's */
  r->num_specs = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(r->specs[i].name, RUN_SKIPPED_ACTOR) == 0) continue;
    if (access(r->specs[i].args[0], X_OK) != 0)
      return LLB_ERRF(LLB_STATUS_NOT_FOUND, "actor program %s not found (build it first)", r->specs[i].args[0]);
    llb_status st = LLB_STATUS_OK;
    if (!verbose && ((st = child_spec_add_arg(&r->specs[i], "--log-level")) != LLB_STATUS_OK ||
                     (st = child_spec_add_arg(&r->specs[i], "warn")) != LLB_STATUS_OK))
      return st;
    if (r->num_specs != i) r->specs[r->num_specs] = r->specs[i];
    r->num_specs++;
  }
  return LLB_STATUS_OK;
}

llb_status run_stack_start(struct run_stack *r, const struct serve_options *so, bool verbose) {
  r->specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *r->specs);
  if (!r->specs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "actor specs");
  llb_status st = build_specs(r, so, verbose);
  if (st != LLB_STATUS_OK) return st;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  run_dir_sweep_all_stale(); /* what a SIGKILLed serve or run left behind */
  st = serve_hash_key_apply(so, r->specs, r->num_specs, &r->hash_key);
  if (st == LLB_STATUS_OK) st = serve_nats_auth_apply(so, r->specs, r->num_specs, &cfg, &r->auth);
  if (st == LLB_STATUS_OK && r->auth) /* the command line's own client logs in as the operator */
    st = serve_nats_auth_password_file(r->auth, "operator", r->operator_password_file,
                                       sizeof r->operator_password_file);
  if (st == LLB_STATUS_OK) st = supervisor_create(&cfg, &r->sup);
  for (int i = 0; st == LLB_STATUS_OK && i < r->num_specs; i++) st = supervisor_add_child(r->sup, &r->specs[i]);
  if (st == LLB_STATUS_OK) st = supervisor_start(r->sup);
  return st;
}

const char *run_stack_nats_url(const struct run_stack *s) { return supervisor_nats_url(s->sup); }

llb_status run_stack_stop(struct run_stack *r) {
  llb_status st = LLB_STATUS_OK;
  if (r->sup) st = supervisor_stop(r->sup);
  supervisor_destroy(r->sup);
  serve_nats_auth_destroy(r->auth);
  serve_hash_key_release(&r->hash_key);
  free(r->specs);
  run_stack_init(r);
  return st;
}

/* `llmbus run [--model M] [generation flags] "prompt"`: starts the embedded stack (nats-server
 * + every actor, cmd/supervisor.h), waits until each actor's heartbeat says ready, sends the
 * prompt as `llmbus generate` does (cmd/client.h), streams the answer, and stops everything:
 * no process is left behind, also after Ctrl-C or an error. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/client.h"
#include "cmd/commands.h"
#include "cmd/serve_nats_config.h"
#include "cmd/supervisor.h"
#include "schemas/control.h"

#define RUN_READY_TIMEOUT_S 60
#define RUN_MAX_RESTARTS 2 /* an actor that exits more often than this is not coming up */
#define RUN_SKIPPED_ACTOR "api-server" /* HTTP is not needed to answer one prompt */

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus run [--model M.gguf] [options] \"prompt\"\n"
          "Starts nats-server and every actor, answers one prompt, stops them all.\n"
          "  --model PATH     GGUF model (default: the actors' default model)\n"
          "  --verbose        show the actors' info logs (default: warnings and errors)\n"
          "  engine flags of llmbus serve (--device cuda, --num-blocks N, --threads N, ...) are\n"
          "  passed on to the actors that take them (llmbus serve --help lists them)\n");
  client_print_flags_help(f);
}

struct run_ctx {
  struct supervisor *sup;
  struct child_spec *specs; /* [num_specs] the actors started */
  int num_specs;
  char failed[64];          /* an actor that keeps exiting, or "" */
};

/* Supervises between waits; true = give up (stop requested or an actor keeps exiting). */
static bool run_idle(void *user) {
  struct run_ctx *r = user;
  if (supervisor_poll(r->sup, 0)) {
    const char *looped = supervisor_crash_looped(r->sup); /* cannot start: not a user's stop */
    if (looped) snprintf(r->failed, sizeof r->failed, "%s", looped);
    return true;
  }
  for (int i = 0; i < r->num_specs; i++) {
    if (supervisor_child_restarts(r->sup, r->specs[i].name) > RUN_MAX_RESTARTS) {
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

/* Waits until every started actor published a ready Heartbeat. */
static llb_status wait_ready(struct run_ctx *r, struct bus *bus) {
  char subject[BUS_SUBJECT_MAX];
  snprintf(subject, sizeof subject, "%s.health.>", bus_prefix(bus));
  struct bus_sub *sub = NULL;
  llb_status st = bus_subscribe_sync(bus, subject, &sub);
  if (st != LLB_STATUS_OK) return st;
  bool ready[SUPERVISOR_MAX_CHILDREN] = {false};
  int num_ready = 0;
  int64_t deadline = llb_now_ns() + (int64_t)RUN_READY_TIMEOUT_S * 1000000000LL;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  while (num_ready < r->num_specs) {
    if (client_interrupted() || run_idle(r)) {
      st = r->failed[0] ? LLB_ERRF(LLB_STATUS_ABORTED, "actor %s keeps exiting (its log is above)", r->failed)
                        : LLB_ERRF(LLB_STATUS_ABORTED, "interrupted");
      break;
    }
    if (llb_now_ns() > deadline) {
      char missing[512] = "";
      for (int i = 0; i < r->num_specs; i++)
        if (!ready[i]) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s", r->specs[i].name);
      st = LLB_ERRF(LLB_STATUS_TIMEOUT, "actors not ready within %d s:%s", RUN_READY_TIMEOUT_S, missing);
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
 * warnings only unless verbose. Returns 0 or prints why and returns 1. */
static int build_specs(struct run_ctx *r, const struct serve_options *so, bool verbose) {
  int n = serve_actor_specs(so, r->specs, SUPERVISOR_MAX_CHILDREN);
  if (n < 0) {
    fprintf(stderr, "llmbus run: %s\n", llb_err_last());
    return 1;
  }
  r->num_specs = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(r->specs[i].name, RUN_SKIPPED_ACTOR) == 0) continue;
    if (access(r->specs[i].args[0], X_OK) != 0) {
      fprintf(stderr, "llmbus run: actor program %s not found (build it first)\n", r->specs[i].args[0]);
      return 1;
    }
    if (!verbose && (child_spec_add_arg(&r->specs[i], "--log-level") != LLB_STATUS_OK ||
                     child_spec_add_arg(&r->specs[i], "warn") != LLB_STATUS_OK)) {
      fprintf(stderr, "llmbus run: %s\n", llb_err_last());
      return 1;
    }
    if (r->num_specs != i) r->specs[r->num_specs] = r->specs[i];
    r->num_specs++;
  }
  return 0;
}

int cmd_run(int argc, char **argv) {
  const char *cmd = "llmbus run";
  struct client_options o;
  client_options_init(&o);
  const char *prompt = NULL, *model = NULL;
  bool verbose = false;
  /* One prompt, one input processor (serve's second is for restart gaps of a long run). */
  struct serve_options so = {.num_input_processors = 1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      run_usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--verbose") == 0) {
      verbose = true;
      continue;
    }
    if (strcmp(argv[i], "--model") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s: --model needs a value\n", cmd);
        return 2;
      }
      model = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--nats") == 0 || strcmp(argv[i], "--prefix") == 0) {
      fprintf(stderr, "%s: %s is for llmbus generate (run starts its own nats-server)\n", cmd, argv[i]);
      return 2;
    }
    int rc = client_parse_flag(&o, argc, argv, &i, cmd);
    if (rc < 0) return 2;
    if (rc > 0) continue;
    bool takes_value = false;
    if (argv[i][0] == '-' && argv[i][1] == '-' && serve_engine_flag_known(argv[i] + 2, &takes_value)) {
      if (takes_value && i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, argv[i]);
        return 2;
      }
      if (serve_engine_flag_add(&so, argv[i] + 2, takes_value ? argv[i + 1] : NULL) < 0) {
        fprintf(stderr, "%s: too many engine flags\n", cmd);
        return 2;
      }
      i += takes_value;
      continue;
    }
    if (argv[i][0] == '-' && argv[i][1] == '-') {
      fprintf(stderr, "%s: unknown option %s\n", cmd, argv[i]);
      run_usage(stderr);
      return 2;
    }
    if (prompt) {
      fprintf(stderr, "%s: one prompt only (quote it)\n", cmd);
      return 2;
    }
    prompt = argv[i];
  }
  if (!prompt) {
    fprintf(stderr, "%s: a prompt is required\n", cmd);
    run_usage(stderr);
    return 2;
  }
  if (model && access(model, R_OK) != 0) {
    fprintf(stderr, "%s: cannot read model %s (run ops/fetch-model.sh?)\n", cmd, model);
    return 1;
  }
  llb_log_set_actor("run");
  if (!verbose) llb_log_set_level(LLB_LOG_LEVEL_WARN);

  struct run_ctx r = {0};
  struct bus *bus = NULL;
  struct serve_nats_auth *auth = NULL;
  char operator_password_file[PATH_MAX + 80] = "";
  int rc = 1;
  r.specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *r.specs);
  so.model_path = model;
  if (!r.specs || build_specs(&r, &so, verbose) != 0) goto done;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  llb_status st = serve_nats_auth_apply(&so, r.specs, r.num_specs, &cfg, &auth);
  if (st == LLB_STATUS_OK && auth) {
    /* the command line's own client logs in as the operator (cmd/serve_nats_config.h) */
    st = serve_nats_auth_password_file(auth, "operator", operator_password_file, sizeof operator_password_file);
    o.nats_user = "operator";
    o.nats_password_file = operator_password_file;
  }
  if (st == LLB_STATUS_OK) st = supervisor_create(&cfg, &r.sup);
  for (int i = 0; st == LLB_STATUS_OK && i < r.num_specs; i++) st = supervisor_add_child(r.sup, &r.specs[i]);
  if (st == LLB_STATUS_OK) st = supervisor_start(r.sup);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
    goto done;
  }
  client_install_sigint();
  o.nats_url = supervisor_nats_url(r.sup);
  st = client_connect(&o, &bus);
  if (st == LLB_STATUS_OK) st = wait_ready(&r, bus);
  if (st == LLB_STATUS_OK) {
    struct client_prompt p = {.prompt = prompt};
    st = client_generate(bus, &o, &p, stdout, run_idle, &r, NULL);
  }
  if (st == LLB_STATUS_OK) {
    rc = 0;
  } else {
    if (r.failed[0] && st == LLB_STATUS_ABORTED)
      fprintf(stderr, "%s: actor %s keeps exiting (its log is above)\n", cmd, r.failed);
    else
      fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
    rc = st == LLB_STATUS_ABORTED && !r.failed[0] ? 130 : 1;
  }
done:
  bus_destroy(bus);
  if (r.sup && supervisor_stop(r.sup) != LLB_STATUS_OK) fprintf(stderr, "%s: some actors needed SIGKILL\n", cmd);
  supervisor_destroy(r.sup);
  serve_nats_auth_destroy(auth);
  free(r.specs);
  return rc;
}

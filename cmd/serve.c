/* `llmbus serve`: the whole stack under one supervisor (see supervisor.h). */
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus/log.h"
#include "cmd/supervisor.h"

/* The actor programs of one engine, in start order, and which options each takes. */
static const struct {
  const char *name;
  const char *program;
  bool takes_model;
  bool takes_http;
} serve_actors[] = {
    {"kv-manager", "llmbus-kv-manager", false, false},
    {"gpu-worker", "llmbus-gpu-worker", true, false},
    {"scheduler", "llmbus-scheduler", true, false},
    {"output-processor", "llmbus-output-processor", true, false},
    {"input-processor", "llmbus-input-processor", true, false},
    {"api-server", "llmbus-api-server", true, true},
};

int serve_actor_specs(const struct serve_options *o, struct child_spec *specs, int max) {
  int n = (int)(sizeof serve_actors / sizeof serve_actors[0]);
  if (!o || !specs || max < n) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "serve_actor_specs: room for %d specs needed", n);
    return -1;
  }
  char dir[PATH_MAX];
  if (o->bin_dir) {
    snprintf(dir, sizeof dir, "%s", o->bin_dir);
  } else {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
      LLB_ERRF(LLB_STATUS_IO, "cannot read /proc/self/exe to find the actor binaries");
      return -1;
    }
    exe[len] = '\0';
    snprintf(dir, sizeof dir, "%s", dirname(exe));
  }
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, serve_actors[i].program);
    if (child_spec_init(&specs[i], serve_actors[i].name, path) != LLB_STATUS_OK) return -1;
    if (serve_actors[i].takes_model && o->model_path &&
        (child_spec_add_arg(&specs[i], "--model") != LLB_STATUS_OK ||
         child_spec_add_arg(&specs[i], o->model_path) != LLB_STATUS_OK))
      return -1;
    if (serve_actors[i].takes_http && o->http_addr &&
        (child_spec_add_arg(&specs[i], "--http") != LLB_STATUS_OK ||
         child_spec_add_arg(&specs[i], o->http_addr) != LLB_STATUS_OK))
      return -1;
  }
  return n;
}

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus serve [--nats URL] [--model PATH] [--http HOST:PORT] [--help]\n"
          "\n"
          "Runs the whole llmbus stack under one supervisor until Ctrl-C / SIGTERM:\n"
          "every actor process, restarted if it dies, and (without --nats) an embedded\n"
          "nats-server on 127.0.0.1 with a free port and JetStream in a temporary store.\n"
          "\n"
          "  --nats URL        use this NATS server (comma-separated list) instead\n"
          "  --model PATH      GGUF model file for the actors that need one\n"
          "  --http HOST:PORT  address of the OpenAI-compatible HTTP front door\n"
          "  --help            this text\n");
}

int cmd_serve(int argc, char **argv) {
  struct serve_options so = {0};
  static const struct option longopts[] = {
      {"nats", required_argument, NULL, 'n'},
      {"model", required_argument, NULL, 'm'},
      {"http", required_argument, NULL, 'H'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
      case 'n': so.nats_url = optarg; break;
      case 'm': so.model_path = optarg; break;
      case 'H': so.http_addr = optarg; break;
      case 'h': serve_usage(stdout); return 0;
      default: serve_usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "llmbus serve: unexpected argument \"%s\"\n", argv[optind]);
    serve_usage(stderr);
    return 2;
  }
  if (so.model_path && access(so.model_path, R_OK) != 0) {
    fprintf(stderr, "llmbus serve: cannot read model %s (run ops/fetch-model.sh?)\n", so.model_path);
    return 1;
  }
  llb_log_set_actor("supervisor");
  struct child_spec *specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *specs);
  if (!specs) return 1;
  int rc = 1;
  struct supervisor *sup = NULL;
  int n = serve_actor_specs(&so, specs, SUPERVISOR_MAX_CHILDREN);
  if (n < 0) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
    goto done;
  }
  int missing = 0;
  for (int i = 0; i < n; i++)
    if (access(specs[i].args[0], X_OK) != 0) {
      fprintf(stderr, "llmbus serve: actor program %s not found (build it first)\n", specs[i].args[0]);
      missing++;
    }
  if (missing) goto done;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = so.nats_url;
  if (supervisor_create(&cfg, &sup) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (supervisor_add_child(sup, &specs[i]) != LLB_STATUS_OK) {
      fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
      goto done;
    }
  llb_status st = supervisor_run(sup);
  if (st == LLB_STATUS_OK)
    rc = 0;
  else
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
done:
  supervisor_destroy(sup);
  free(specs);
  return rc;
}

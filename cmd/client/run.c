/* `llmbus run [--model M] [generation flags] "prompt"`: starts the embedded stack (nats-server
 * + every actor, cmd/supervisor/run_stack.h), waits until each actor's heartbeat says ready,
 * sends the prompt as `llmbus generate` does (cmd/client/client.h), streams the answer, and
 * stops everything: no process is left behind, also after Ctrl-C or an error. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"
#include "cmd/supervisor/run_stack.h"

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

  struct run_stack stack;
  run_stack_init(&stack);
  struct bus *bus = NULL;
  int rc = 1;
  so.model_path = model;
  llb_status st = run_stack_start(&stack, &so, verbose);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
    goto done;
  }
  if (stack.operator_password_file[0]) { /* the operator (cmd/supervisor/serve_nats_config.h) */
    o.nats_user = "operator";
    o.nats_password_file = stack.operator_password_file;
  }
  client_install_sigint();
  o.nats_url = run_stack_nats_url(&stack);
  st = client_connect(&o, &bus);
  if (st == LLB_STATUS_OK) st = run_stack_wait_ready(&stack, bus, client_interrupted);
  if (st == LLB_STATUS_OK) {
    struct client_prompt p = {.prompt = prompt};
    st = client_generate(bus, &o, &p, stdout, run_stack_idle, &stack, NULL);
  }
  if (st == LLB_STATUS_OK) {
    rc = 0;
  } else {
    if (stack.failed[0] && st == LLB_STATUS_ABORTED)
      fprintf(stderr, "%s: actor %s keeps exiting (its log is above)\n", cmd, stack.failed);
    else
      fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
    rc = st == LLB_STATUS_ABORTED && !stack.failed[0] ? 130 : 1;
  }
done:
  bus_destroy(bus);
  if (run_stack_stop(&stack) != LLB_STATUS_OK) fprintf(stderr, "%s: some actors needed SIGKILL\n", cmd);
  return rc;
}

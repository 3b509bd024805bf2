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

static const char run_usage[] =
    "usage: llmbus run [flags] [--] PROMPT\n"
    "Starts nats-server and every actor, answers one prompt on stdout, stops them all. Only the answer\n"
    "goes to stdout; warnings and errors go to stderr (--verbose: the actors' info logs too).\n";

/* Drops from engine[0, *n) the flags a client flag of the same name shadows (--seed and
 * --chat-template mean the request's here). */
static void drop_shadowed(const struct flag *client, int num_client, struct flag *engine, int *n) {
  int k = 0;
  for (int i = 0; i < *n; i++) {
    bool shadowed = false;
    for (int c = 0; c < num_client; c++) shadowed |= strcmp(client[c].name, engine[i].name) == 0;
    if (!shadowed) engine[k++] = engine[i];
  }
  *n = k;
}

/* The stack up, the prompt answered, the stack down; returns the exit code. */
static int run_prompt(struct client_options *o, struct serve_options *so, const char *model, bool verbose,
                      const char *prompt) {
  const char *cmd = "llmbus run";
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
  so->model_path = model;
  for (int f = 0; f < so->num_engine_flags; f++) /* the actors' subject prefix is the client's too */
    if (strcmp(so->engine_flags[f].name, "prefix") == 0) o->prefix = so->engine_flags[f].value;
  llb_status st = run_stack_start(&stack, so, verbose);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
    goto done;
  }
  if (stack.operator_password_file[0]) { /* the operator (cmd/supervisor/serve_nats_config.h) */
    o->nats_user = "operator";
    o->nats_password_file = stack.operator_password_file;
  }
  client_install_sigint();
  o->nats_url = run_stack_nats_url(&stack);
  st = client_connect(o, &bus);
  if (st == LLB_STATUS_OK) st = run_stack_wait_ready(&stack, bus, client_interrupted);
  if (st == LLB_STATUS_OK) {
    struct client_prompt p = {.prompt = prompt};
    st = client_generate(bus, o, &p, stdout, run_stack_idle, &stack, NULL);
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

int cmd_run(int argc, char **argv) {
  const char *cmd = "llmbus run";
  struct client_options o;
  client_options_init(&o);
  const char *model = NULL;
  bool verbose = false;
  /* One prompt, one input processor (serve's second is for restart gaps of a long run). */
  struct serve_options so = {.num_input_processors = 1};
  struct flag own[2 + CLIENT_MAX_FLAGS], engine[SERVE_MAX_ENGINE_FLAGS];
  own[0] = (struct flag){.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &model,
                         .metavar = "PATH", .help = "GGUF model (default: the actors' default model)"};
  own[1] = (struct flag){.name = "verbose", .kind = FLAG_KIND_BOOL, .target = &verbose,
                         .help = "show the actors' info logs (default: warnings and errors)"};
  int num_own = 2 + client_flags_table(&o, CLIENT_FLAGS_SAMPLING | CLIENT_FLAGS_PROMPT, own + 2, CLIENT_MAX_FLAGS);
  int num_engine = serve_engine_flag_table(&so, engine, SERVE_MAX_ENGINE_FLAGS);
  drop_shadowed(own, num_own, engine, &num_engine);
  const struct flag_section sections[] = {
      {"flags", own, num_own},
      {"engine flags of llmbus serve, passed on to the actors that take them", engine, num_engine}};
  const struct flag_command c = {.program = cmd, .usage = run_usage, .sections = sections, .num_sections = 2,
                                 .config = true, .max_positional = 1};
  struct flag_args args;
  int rc = flags_parse(&c, argc, argv, &args);
  if (rc == FLAGS_CONTINUE && args.num_positional != 1) rc = flags_usage_error(&c, "a prompt is required");
  if (rc == FLAGS_CONTINUE) rc = run_prompt(&o, &so, model, verbose, args.positional[0]);
  flag_args_free(&args);
  client_options_free(&o);
  return rc;
}


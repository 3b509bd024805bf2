/* `llmbus generate "prompt"`: the NATS client of a running stack (`llmbus serve`), over
 * cmd/client/client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"

int cmd_generate(int argc, char **argv) {
  struct client_options o;
  client_options_init(&o);
  bool inproc = false;
  struct flag t[CLIENT_MAX_FLAGS];
  int n = client_flags_table(&o, CLIENT_FLAGS_CONNECT | CLIENT_FLAGS_SAMPLING | CLIENT_FLAGS_PROMPT, t, CLIENT_MAX_FLAGS - 1);
  t[n++] = (struct flag){.name = "inproc", .kind = FLAG_KIND_BOOL, .target = &inproc,
                         .help = "run the model in this process instead (llmbus generate --inproc --help)"};
  const struct flag_section sec = {"flags", t, n};
  const struct flag_command cmd = {
      .program = "llmbus generate", .sections = &sec, .num_sections = 1, .config = true, .max_positional = 1,
      .usage = "usage: llmbus generate [flags] [--] PROMPT\n"
               "Sends the prompt to a running engine (llmbus serve; the newest one on this host unless --connect\n"
               "or --nats says) and streams the answer to stdout. `--` ends the flags: a prompt may start with '-'.\n"};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE && args.num_positional != 1) rc = flags_usage_error(&cmd, "a prompt is required");
  if (rc == FLAGS_CONTINUE) {
    client_quiet_logs();
    llb_status st = client_options_connect(&o, false);
    struct bus *bus = NULL;
    if (st == LLB_STATUS_OK) st = client_connect(&o, &bus);
    if (st == LLB_STATUS_OK) {
      client_install_sigint();
      struct client_prompt p = {.prompt = args.positional[0]};
      st = client_generate(bus, &o, &p, stdout, NULL, NULL, NULL);
      bus_destroy(bus);
    }
    rc = st == LLB_STATUS_OK ? 0 : client_report(cmd.program, st);
  }
  flag_args_free(&args);
  client_options_free(&o);
  return rc;
}

/* llmbus: the supervisor and client CLI. A thin dispatcher: serve is cmd/supervisor's, every
 * other command cmd/client's (cmd/client/commands.h). */
#include <stdio.h>
#include <string.h>

#include "cmd/client/commands.h"
#include "cmd/supervisor/supervisor.h"

struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
};

static const struct command commands[] = {
    {"serve", cmd_serve, "start nats-server (unless --nats) and every actor; restart on failure"},
    {"run", cmd_run, "start the embedded stack, answer one prompt, stop"},
    {"generate", cmd_generate, "send a prompt over NATS and stream the answer (--inproc: no bus)"},
    {"chat", cmd_chat, "interactive chat over NATS"},
    {"tokenize", cmd_tokenize, "print a text's token ids (--decode: ids to text)"},
    {"status", cmd_status, "list the engines and actors on a bus, with their load"},
    {"perplexity", cmd_perplexity, "perplexity of a text file, as llama.cpp's llama-perplexity computes it"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: llmbus <command> [options]   (llmbus <command> --help)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    if (commands[i].fn == cmd_generate) /* --inproc (before `--`): the model in this process */
      for (int a = 2; a < argc && strcmp(argv[a], "--") != 0; a++)
        if (strcmp(argv[a], "--inproc") == 0) return cmd_generate_inproc(argc - 1, argv + 1);
    return commands[i].fn(argc - 1, argv + 1);
  }
  fprintf(stderr, "llmbus: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}

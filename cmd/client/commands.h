/* Subcommands of the `llmbus` binary but serve (cmd/supervisor/supervisor.h: cmd_serve). Each
 * takes the arguments after its name (argv[0] is the subcommand name) and returns the process
 * exit code. */
#ifndef LLB_CMD_COMMANDS_H
#define LLB_CMD_COMMANDS_H

int cmd_run(int argc, char **argv);             /* run.c: serve, answer one prompt, stop */
int cmd_generate(int argc, char **argv);        /* generate.c: NATS client, streamed */
int cmd_chat(int argc, char **argv);            /* generate.c: interactive NATS chat */
int cmd_generate_inproc(int argc, char **argv); /* generate_inproc.c: no bus */
int cmd_tokenize(int argc, char **argv);        /* tokenize.c */
int cmd_perplexity(int argc, char **argv);      /* perplexity.c: llama-perplexity's method */
int cmd_status(int argc, char **argv);          /* status.c: engines and actors seen on the bus */

#endif

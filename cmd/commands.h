/* Subcommands of the `llmbus` binary. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit code. */
#ifndef LLB_CMD_COMMANDS_H
#define LLB_CMD_COMMANDS_H

int cmd_serve(int argc, char **argv);           /* cmd/serve.c: supervisor + embedded stack */
int cmd_run(int argc, char **argv);             /* cmd/run.c: serve, answer one prompt, stop */
int cmd_generate(int argc, char **argv);        /* cmd/generate.c: NATS client, streamed */
int cmd_chat(int argc, char **argv);            /* cmd/generate.c: interactive NATS chat */
int cmd_generate_inproc(int argc, char **argv); /* cmd/generate_inproc.c: no bus */
int cmd_tokenize(int argc, char **argv);        /* cmd/tokenize.c */
int cmd_perplexity(int argc, char **argv);      /* cmd/perplexity.c: llama-perplexity's method */
int cmd_status(int argc, char **argv);          /* cmd/status.c: engines and actors seen on the bus */

#endif

/* `llmbus generate "prompt"` and `llmbus chat`: NATS clients of a running stack
 * (`llmbus serve`), over cmd/client/client.h. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"
#include "cmd/client/line_edit.h"

static void generate_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus generate [--nats URL] [options] \"prompt\"\n"
          "Sends the prompt to a running engine (llmbus serve) and streams the answer.\n"
          "  --nats URL       default nats://127.0.0.1:4222\n");
  client_print_flags_help(f);
  fprintf(f, "  --inproc         run the model in this process instead (see llmbus generate --inproc --help)\n");
}

static void chat_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus chat [--nats URL] [options]\n"
          "Interactive chat with a running engine: one line per user turn, the conversation is\n"
          "kept and resent each turn. On a terminal: line editing and history (libedit; Up/Down),\n"
          "Ctrl-C while an answer streams stops that answer, Ctrl-C on an empty line or Ctrl-D\n"
          "ends the chat. Piped input is read line by line until its end.\n"
          "  --nats URL       default nats://127.0.0.1:4222\n");
  client_print_flags_help(f);
}

/* A command line client logs warnings and errors only, unless LLMBUS_LOG_LEVEL says more. */
static void quiet_logs(void) {
  llb_log_set_actor("llmbus");
  if (!getenv("LLMBUS_LOG_LEVEL")) llb_log_set_level(LLB_LOG_LEVEL_WARN);
}

/* Exit code of a failed request, after one line on stderr. */
static int report(const char *cmd, llb_status st) {
  fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
  return st == LLB_STATUS_ABORTED ? 130 : 1;
}

int cmd_generate(int argc, char **argv) {
  const char *cmd = "llmbus generate";
  struct client_options o;
  client_options_init(&o);
  const char *prompt = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      generate_usage(stdout);
      return 0;
    }
    int r = client_parse_flag(&o, argc, argv, &i, cmd);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (argv[i][0] == '-' && argv[i][1] == '-') {
      fprintf(stderr, "%s: unknown option %s\n", cmd, argv[i]);
      generate_usage(stderr);
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
    generate_usage(stderr);
    return 2;
  }
  quiet_logs();
  struct bus *bus = NULL;
  llb_status st = client_connect(&o, &bus);
  if (st != LLB_STATUS_OK) return report(cmd, st);
  client_install_sigint();
  struct client_prompt p = {.prompt = prompt};
  st = client_generate(bus, &o, &p, stdout, NULL, NULL, NULL);
  bus_destroy(bus);
  return st == LLB_STATUS_OK ? 0 : report(cmd, st);
}

/* Appends (role, content) to the conversation; the content is taken over. */
static bool conversation_add(struct chat_message **msgs, size_t *num, size_t *cap, const char *role, char *content) {
  if (*num == *cap) {
    size_t c = *cap ? *cap * 2 : 8;
    struct chat_message *p = realloc(*msgs, c * sizeof *p);
    if (!p) return false;
    *msgs = p;
    *cap = c;
  }
  (*msgs)[(*num)++] = (struct chat_message){.role = role, .content = content};
  return true;
}

int cmd_chat(int argc, char **argv) {
  const char *cmd = "llmbus chat";
  struct client_options o;
  client_options_init(&o);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      chat_usage(stdout);
      return 0;
    }
    int r = client_parse_flag(&o, argc, argv, &i, cmd);
    if (r < 0) return 2;
    if (r == 0) {
      fprintf(stderr, "%s: unknown argument %s\n", cmd, argv[i]);
      chat_usage(stderr);
      return 2;
    }
  }
  if (o.raw || o.sp.n != 1) {
    fprintf(stderr, "%s: --raw and --n are not available in chat (a conversation needs the template and one answer)\n", cmd);
    return 2;
  }
  quiet_logs();
  setlocale(LC_CTYPE, ""); /* the terminal's multibyte encoding, for line editing */
  struct bus *bus = NULL;
  llb_status st = client_connect(&o, &bus);
  if (st != LLB_STATUS_OK) return report(cmd, st);
  client_install_sigint();
  struct chat_message *msgs = NULL;
  size_t num = 0, cap = 0;
  int rc = 0;
  struct line_edit *le = NULL;
  /* Contents are malloc'd copies owned here; roles are static strings. */
  char *system = o.system ? strdup(o.system) : NULL;
  if (o.system && (!system || !conversation_add(&msgs, &num, &cap, "system", system))) {
    free(system);
    rc = 1;
    goto done;
  }
  if (line_edit_create("llmbus", "> ", stdin, stderr, client_interrupted, &le) != LLB_STATUS_OK) {
    rc = report(cmd, LLB_STATUS_INTERNAL);
    goto done;
  }
  for (;;) {
    const char *line = NULL;
    bool was_empty = false;
    client_clear_interrupt(); /* a Ctrl-C as an answer ended was for that answer, not this line */
    enum line_edit_result lr = line_edit_read(le, &line, &was_empty);
    if (lr == LINE_EDIT_EOF) break;
    if (lr == LINE_EDIT_INTERRUPTED) { /* Ctrl-C at an empty prompt ends the chat, else clears the line */
      bool quit = was_empty || !line_edit_is_tty(le);
      client_clear_interrupt();
      fputs(quit ? "\n" : "^C\n", stderr);
      if (quit) break;
      continue;
    }
    if (line[0] == '\0') continue;
    line_edit_history_add(le, line);
    char *user = strdup(line);
    if (!user || !conversation_add(&msgs, &num, &cap, "user", user)) {
      free(user);
      rc = 1;
      break;
    }
    struct client_prompt p = {.messages = msgs, .num_messages = num};
    char *answer = NULL;
    st = client_generate(bus, &o, &p, stdout, NULL, NULL, &answer);
    if (st == LLB_STATUS_ABORTED) { /* Ctrl-C mid-answer: that answer stops (AbortRequest sent), */
      client_clear_interrupt();     /* the unanswered turn leaves the conversation */
      fputs("\n[answer aborted]\n", stderr);
      free((char *)msgs[--num].content);
      continue;
    }
    if (st != LLB_STATUS_OK) {
      rc = report(cmd, st);
      break;
    }
    if (!conversation_add(&msgs, &num, &cap, "assistant", answer)) {
      free(answer);
      rc = 1;
      break;
    }
  }
done:
  line_edit_destroy(le);
  for (size_t i = 0; i < num; i++) free((char *)msgs[i].content);
  free(msgs);
  bus_destroy(bus);
  return rc;
}

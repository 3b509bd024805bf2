/* `llmbus chat`: an interactive conversation with a running stack over NATS (the newest
 * `llmbus serve` on this host unless --connect / --nats says), or with any OpenAI-compatible
 * server over HTTP (`--url http://HOST:PORT/v1`, as `vllm chat`; cmd/client/http_chat.h).
 * One line per user turn; the conversation is kept and sent again each turn. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"
#include "cmd/client/http_chat.h"
#include "cmd/client/line_edit.h"

/* Where the turns go: the bus or an HTTP server. */
struct chat_transport {
  struct bus *bus;            /* NATS; NULL with --url */
  struct http_chat *http;     /* --url; NULL over NATS */
  const struct client_options *o;
};

static llb_status chat_turn(const struct chat_transport *t, const struct chat_message *msgs, size_t num,
                            char **answer) {
  if (t->http) return http_chat_complete(t->http, msgs, num, stdout, answer);
  const struct client_prompt p = {.messages = msgs, .num_messages = num};
  return client_generate(t->bus, t->o, &p, stdout, NULL, NULL, answer);
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

/* The conversation: reads lines until Ctrl-D / the end of the input (with `quick`, answers that
 * one message instead, as `vllm chat -q`); returns the exit code. */
static int chat_loop(const struct chat_transport *t, const char *system, const char *quick) {
  struct chat_message *msgs = NULL;
  size_t num = 0, cap = 0;
  int rc = 0;
  struct line_edit *le = NULL;
  /* Contents are malloc'd copies owned here; roles are static strings. */
  char *sys = system ? strdup(system) : NULL;
  if (system && (!sys || !conversation_add(&msgs, &num, &cap, "system", sys))) {
    free(sys);
    rc = 1;
    goto done;
  }
  if (quick) {
    char *user = strdup(quick), *answer = NULL;
    llb_status st;
    if (!user || !conversation_add(&msgs, &num, &cap, "user", user)) {
      free(user);
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "message");
    } else {
      st = chat_turn(t, msgs, num, &answer); /* the conversation owns user now */
    }
    free(answer);
    rc = st == LLB_STATUS_OK ? 0 : client_report("llmbus chat", st);
    goto done;
  }
  if (line_edit_create("llmbus", "> ", stdin, stderr, client_interrupted, &le) != LLB_STATUS_OK) {
    rc = client_report("llmbus chat", LLB_STATUS_INTERNAL);
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
    char *answer = NULL;
    llb_status st = chat_turn(t, msgs, num, &answer);
    if (st == LLB_STATUS_ABORTED) { /* Ctrl-C mid-answer: that answer stops (aborted over NATS, */
      client_clear_interrupt();     /* the HTTP request cancelled); the turn leaves the conversation */
      fputs("\n[answer aborted]\n", stderr);
      free((char *)msgs[--num].content);
      continue;
    }
    if (st != LLB_STATUS_OK) {
      rc = client_report("llmbus chat", st);
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
  return rc;
}

static const char chat_usage[] =
    "usage: llmbus chat [flags]\n"
    "Interactive chat: one line per user turn, the conversation kept and resent each turn. Over NATS\n"
    "with the newest `llmbus serve` on this host (--connect NAME picks another, --nats URL any bus), or\n"
    "with --url http://HOST:PORT/v1 over HTTP with any OpenAI-compatible server (llmbus, vLLM,\n"
    "llama-server), as `vllm chat --url`. On a terminal: line editing and history (libedit; Up/Down),\n"
    "Ctrl-C while an answer streams stops that answer, Ctrl-C on an empty line or Ctrl-D ends the chat.\n"
    "Piped input is read line by line until its end.\n";

/* HTTP: the server's model (or --model-name), the key from --api-key, $LLMBUS_API_KEY or
 * $OPENAI_API_KEY. */
static llb_status http_open(const char *url, const char *model, const char *api_key, const struct client_options *o,
                            struct http_chat **out) {
  if (!api_key) api_key = getenv("LLMBUS_API_KEY");
  if (!api_key) api_key = getenv("OPENAI_API_KEY");
  const struct http_chat_options ho = {.url = url, .api_key = api_key, .model = model, .timeout_s = o->timeout_s,
                                       .sp = &o->sp};
  return http_chat_create(&ho, out);
}

int cmd_chat(int argc, char **argv) {
  struct client_options o;
  client_options_init(&o);
  const char *url = NULL, *model = NULL, *api_key = NULL, *quick = NULL;
  struct flag t[CLIENT_MAX_FLAGS];
  int n = client_flags_table(&o, CLIENT_FLAGS_CONNECT | CLIENT_FLAGS_SAMPLING | CLIENT_FLAGS_PROMPT, t,
                             CLIENT_MAX_FLAGS - 4);
  t[n++] = (struct flag){.name = "url", .kind = FLAG_KIND_STRING, .target = &url, .metavar = "URL",
                         .help = "talk to an OpenAI-compatible server at URL (http://HOST:PORT/v1) instead of a bus"};
  t[n++] = (struct flag){.name = "model-name", .kind = FLAG_KIND_STRING, .target = &model, .metavar = "NAME",
                         .help = "--url: the model to ask (default: the first the server lists)"};
  t[n++] = (struct flag){.name = "api-key", .kind = FLAG_KIND_STRING, .target = &api_key, .metavar = "KEY",
                         .help = "--url: the server's API key (default $LLMBUS_API_KEY, else $OPENAI_API_KEY)"};
  t[n++] = (struct flag){.name = "quick", .short_name = 'q', .kind = FLAG_KIND_STRING, .target = &quick,
                         .metavar = "MESSAGE", .help = "answer this one message and exit (vllm chat -q)"};
  const struct flag_section sec = {"flags", t, n};
  const struct flag_command cmd = {.program = "llmbus chat", .usage = chat_usage, .sections = &sec, .num_sections = 1,
                                   .config = true, .max_positional = 0};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE && (o.raw || o.sp.n != 1))
    rc = flags_usage_error(&cmd, "--raw and --n are not available in chat (a conversation needs the template and one "
                                 "answer)");
  if (rc == FLAGS_CONTINUE) {
    client_quiet_logs();
    setlocale(LC_CTYPE, ""); /* the terminal's multibyte encoding, for line editing */
    struct chat_transport tr = {.o = &o};
    llb_status st = url ? http_open(url, model ? model : o.lora, api_key, &o, &tr.http) : client_options_connect(&o, false);
    if (st == LLB_STATUS_OK && !url) st = client_connect(&o, &tr.bus);
    if (st == LLB_STATUS_OK) {
      client_install_sigint();
      rc = chat_loop(&tr, o.system, quick);
    } else {
      rc = client_report(cmd.program, st);
    }
    http_chat_destroy(tr.http);
    bus_destroy(tr.bus);
  }
  flag_args_free(&args);
  client_options_free(&o);
  return rc;
}

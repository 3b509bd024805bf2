/* `llmbus tokenize`: text → token ids, or ids → text, with a model's GGUF tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/client/commands.h"
#include "cmd/flags/flags.h"
#include "cmd/supervisor/connection.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

/* Encodes (or decodes) the n arguments args[] with the model's tokenizer; returns the exit code. */
static int tokenize_run(const char *model, bool decode, bool special, bool add_special, int n_args, char **args) {
  struct gguf_file *f = NULL;
  struct tokenizer *t = NULL;
  int rc = 1;
  if (gguf_open(model, &f) != LLB_STATUS_OK || tokenizer_load(f, &t) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus tokenize: %s: %s\n", model, llb_err_last());
    goto done;
  }
  if (decode) {
    int n = n_args;
    int32_t *ids = malloc((size_t)n * sizeof(*ids));
    if (!ids) goto done;
    for (int i = 0; i < n; i++) {
      char *end;
      errno = 0;
      long v = strtol(args[i], &end, 10);
      if (errno || *end || end == args[i] || v < 0 || v >= tokenizer_vocab_size(t)) {
        fprintf(stderr, "llmbus tokenize: '%s' is not a token id of this model (0..%d)\n", args[i],
                tokenizer_vocab_size(t) - 1);
        free(ids);
        goto done;
      }
      ids[i] = (int32_t)v;
    }
    char *text;
    size_t len;
    if (tokenizer_decode(t, ids, n, special, &text, &len) != LLB_STATUS_OK) {
      fprintf(stderr, "llmbus tokenize: %s\n", llb_err_last());
      free(ids);
      goto done;
    }
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    free(text);
    free(ids);
  } else {
    /* several text arguments are joined with single spaces, as a shell would have passed them */
    size_t total = 0;
    for (int i = 0; i < n_args; i++) total += strlen(args[i]) + 1;
    char *text = malloc(total + 1);
    if (!text) goto done;
    size_t o = 0;
    for (int i = 0; i < n_args; i++) {
      if (i > 0) text[o++] = ' ';
      memcpy(text + o, args[i], strlen(args[i]));
      o += strlen(args[i]);
    }
    int32_t *ids;
    int64_t n;
    if (tokenizer_encode(t, text, o, add_special, special, &ids, &n) != LLB_STATUS_OK) {
      fprintf(stderr, "llmbus tokenize: %s\n", llb_err_last());
      free(text);
      goto done;
    }
    for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    free(text);
  }
  rc = 0;
done:
  tokenizer_destroy(t);
  gguf_close(f);
  return rc;
}

static const char tokenize_usage[] =
    "usage: llmbus tokenize [flags] [--] TEXT...   |   llmbus tokenize --decode [flags] IDS...\n"
    "\n"
    "Encodes TEXT with the model's tokenizer and prints the token ids, space-separated; several\n"
    "TEXT arguments are joined with single spaces. The model is --model, else the running\n"
    "`llmbus serve`'s (its connection file; --connect NAME picks one).\n";

int cmd_tokenize(int argc, char **argv) {
  const char *model = NULL, *connect = NULL;
  bool decode = false, no_special = false, add_special = false;
  const struct flag t[] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &model, .metavar = "M.gguf",
       .help = "GGUF file whose tokenizer.ggml.* metadata to use"},
      {.name = "connect", .kind = FLAG_KIND_STRING, .target = &connect, .metavar = "NAME",
       .help = "without --model: the model of this running llmbus serve (default: the newest)"},
      {.name = "decode", .kind = FLAG_KIND_BOOL, .target = &decode,
       .help = "read token ids (arguments) and print the decoded text instead"},
      {.name = "no-special", .kind = FLAG_KIND_BOOL, .target = &no_special,
       .help = "encode: do not turn special-token text (\"<|im_start|>\") into tokens; decode: hide control tokens"},
      {.name = "add-special", .kind = FLAG_KIND_BOOL, .target = &add_special,
       .help = "encode: add BOS/EOS as the model's add_bos/add_eos flags say"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {.program = "llmbus tokenize", .usage = tokenize_usage, .sections = &sec,
                                   .num_sections = 1, .max_positional = -1};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  struct serve_connection *conn = NULL;
  if (rc == FLAGS_CONTINUE && args.num_positional == 0) rc = flags_usage_error(&cmd, "give TEXT (or IDS with --decode)");
  if (rc == FLAGS_CONTINUE && !model) { /* the model of the running serve */
    conn = calloc(1, sizeof *conn);
    if (!conn || serve_connection_find(connect, conn) != LLB_STATUS_OK || !conn->model_path[0])
      rc = flags_usage_error(&cmd, "give --model (%s)", conn ? llb_err_last() : "out of memory");
    else
      model = conn->model_path;
  }
  if (rc == FLAGS_CONTINUE)
    rc = tokenize_run(model, decode, !no_special, add_special, args.num_positional, args.positional);
  free(conn);
  flag_args_free(&args);
  return rc;
}

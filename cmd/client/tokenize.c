/* `llmbus tokenize`: text → token ids, or ids → text, with a model's GGUF tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/client/commands.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

static void tokenize_usage(FILE *out) {
  fprintf(out,
          "usage: llmbus tokenize --model M.gguf [--decode] [--no-special] [--add-special] TEXT | IDS...\n"
          "\n"
          "Encodes TEXT with the model's tokenizer and prints the token ids, space-separated.\n"
          "  --model M.gguf  GGUF file whose tokenizer.ggml.* metadata to use (required)\n"
          "  --decode        read token ids (arguments) and print the decoded text instead\n"
          "  --no-special    encode: do not turn special-token text (\"<|im_start|>\") into tokens;\n"
          "                  decode: hide control tokens\n"
          "  --add-special   encode: add BOS/EOS as the model's add_bos/add_eos flags say\n"
          "  -h, --help      this help\n");
}

int cmd_tokenize(int argc, char **argv) {
  const char *model = NULL;
  bool decode = false, special = true, add_special = false;
  int first = argc;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      model = argv[++i];
    } else if (strcmp(argv[i], "--decode") == 0) {
      decode = true;
    } else if (strcmp(argv[i], "--no-special") == 0) {
      special = false;
    } else if (strcmp(argv[i], "--add-special") == 0) {
      add_special = true;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      tokenize_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--") == 0) {
      first = i + 1;
      break;
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      fprintf(stderr, "llmbus tokenize: unknown option %s\n", argv[i]);
      tokenize_usage(stderr);
      return 2;
    } else {
      first = i;
      break;
    }
  }
  if (!model || first >= argc) {
    tokenize_usage(stderr);
    return 2;
  }
  struct gguf_file *f = NULL;
  struct tokenizer *t = NULL;
  int rc = 1;
  if (gguf_open(model, &f) != LLB_STATUS_OK || tokenizer_load(f, &t) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus tokenize: %s: %s\n", model, llb_err_last());
    goto done;
  }
  if (decode) {
    int n = argc - first;
    int32_t *ids = malloc((size_t)n * sizeof(*ids));
    if (!ids) goto done;
    for (int i = 0; i < n; i++) {
      char *end;
      errno = 0;
      long v = strtol(argv[first + i], &end, 10);
      if (errno || *end || end == argv[first + i] || v < 0 || v >= tokenizer_vocab_size(t)) {
        fprintf(stderr, "llmbus tokenize: '%s' is not a token id of this model (0..%d)\n", argv[first + i],
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
    for (int i = first; i < argc; i++) total += strlen(argv[i]) + 1;
    char *text = malloc(total + 1);
    if (!text) goto done;
    size_t o = 0;
    for (int i = first; i < argc; i++) {
      if (i > first) text[o++] = ' ';
      memcpy(text + o, argv[i], strlen(argv[i]));
      o += strlen(argv[i]);
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

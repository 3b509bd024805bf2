/* An example of libllmbus-client: streams the answer to a prompt, or prints its token ids.
 *
 *   llmbus-client-example [--url URL --user USER --password-file FILE] [--max-tokens N]
 *                         [--temperature T] [--tokenize] PROMPT
 *
 * Without --url it finds the running `llmbus serve` by its connection file. Build it against
 * an installed llmbus: cc example.c $(pkg-config --cflags --libs llmbus-client). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llmbus_client.h>

static int print_piece(const llmbus_piece *p, void *user) {
  (void)user;
  fwrite(p->text, 1, p->text_len, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  llmbus_client_options o = {0};
  llmbus_sampling sp;
  llmbus_sampling_init(&sp);
  int tokenize = 0, i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else if (strcmp(argv[i], "--tokenize") == 0) {
      tokenize = 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--url") == 0) {
      o.nats_url = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--user") == 0) {
      o.user = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--password-file") == 0) {
      o.password_file = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--max-tokens") == 0) {
      sp.max_tokens = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--temperature") == 0) {
      sp.temperature = (float)atof(argv[++i]);
    } else {
      fprintf(stderr, "llmbus-client-example: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i != argc - 1) {
    fprintf(stderr, "usage: llmbus-client-example [--url URL --user U --password-file F] [--max-tokens N] "
                    "[--temperature T] [--tokenize] PROMPT\n");
    return 2;
  }
  llmbus_client *c = NULL;
  llmbus_error err;
  int rc = llmbus_client_connect(&o, &c, &err);
  if (rc == 0 && tokenize) {
    int32_t *ids = NULL;
    int n = 0;
    rc = llmbus_tokenize(c, argv[i], &ids, &n, &err);
    for (int k = 0; rc == 0 && k < n; k++) printf("%s%d", k ? " " : "", ids[k]);
    if (rc == 0) printf("\n");
    free(ids);
  } else if (rc == 0) {
    rc = llmbus_generate(c, argv[i], &sp, print_piece, NULL, &err);
    if (rc == 0) printf("\n");
  }
  if (rc != 0) fprintf(stderr, "llmbus-client-example: %s%s%s: %s\n", err.status, err.field[0] ? " " : "", err.field,
                       err.message);
  llmbus_client_close(c);
  return rc == 0 ? 0 : 1;
}

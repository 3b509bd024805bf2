/* jinja_render TEMPLATE_FILE CONTEXT_JSON_FILE [NOW_UNIX_S]: renders the template with the
 * context through model/template/jinja.h and writes the text to stdout (exit 0), or the error to
 * stderr as "ERROR: <status>: <message>" (exit 1). The C side of the differential test
 * against Python jinja2 (test_jinja_templates.py). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *b = realloc(buf, cap);
      if (!b) { free(buf); fclose(f); return NULL; }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s TEMPLATE CONTEXT_JSON [NOW_UNIX_S]\n", argv[0]);
    return 2;
  }
  size_t len;
  char *src = slurp(argv[1], &len);
  json_error_t jerr;
  json_t *ctx = json_load_file(argv[2], JSON_DECODE_ANY, &jerr);
  if (!src || !ctx) {
    fprintf(stderr, "ERROR: cannot read %s or %s (%s)\n", argv[1], argv[2], jerr.text);
    return 2;
  }
  struct jinja_template *t = NULL;
  llb_status st = jinja_template_create(src, len, &t);
  char *out = NULL;
  size_t out_len = 0;
  if (st == LLB_STATUS_OK) {
    struct jinja_render_opts o;
    jinja_render_opts_default(&o);
    if (argc > 3) o.now_unix_s = strtoll(argv[3], NULL, 10);
    st = jinja_template_render(t, ctx, &o, &out, &out_len);
  }
  int rc = 0;
  if (st == LLB_STATUS_OK) {
    fwrite(out, 1, out_len, stdout);
  } else {
    fprintf(stderr, "ERROR: %s: %s\n", llb_strerror(st), llb_err_last());
    rc = 1;
  }
  free(out);
  jinja_template_destroy(t);
  json_decref(ctx);
  free(src);
  return rc;
}

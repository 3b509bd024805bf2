/* Random walks under the structured-output mask, for test_structured_output.py.
 *
 *   so_walk (--schema FILE | --json-object | --choice FILE | --regex FILE | --grammar FILE) [--model GGUF]
 *           [--samples N] [--seed S] [--max-steps N] [--bench] [--accept HEXFILE]
 *
 * Each walk starts at the grammar's start, draws an allowed token at random (uniform, with a
 * growing pull toward closing bytes so that walks end), advances, and stops at an
 * end-of-generation token. Every completed output is printed on a line of its own (compact
 * JSON has no raw newline). At every step it checks what the mask promises, and exits 1
 * naming the step when it breaks: the mask is never empty; each token's bit equals whether
 * the matcher accepts it (all tokens for the test vocabulary, 200 drawn ones for a real
 * one); end of generation is allowed only when the matcher says complete. Past half of
 * --max-steps a walk over the test vocabulary stops drawing at random and follows a completion
 * found by a best-first search over the printable bytes (distinct matcher states, fewest open
 * frames first); finding none, or a walk still unfinished after --max-steps, fails (a dead end
 * the mask let in).
 *
 * Vocabulary: without --model, a test one: every byte 0x01..0xff alone, JSON punctuation
 * pairs, keywords and a few multi-byte runs that cross value boundaries ("\":", "},{",
 * "1,", "e+", "\\u00"), plus EOS; with --model, the GGUF's tokenizer. Exit 77 (skip) when
 * the model file is missing.
 *
 * --regex, --grammar (GBNF): outputs are printed hex-encoded (they may hold any byte, newlines too).
 *
 * --accept HEXFILE: no walks; for each line (hex-encoded bytes) prints 1 when the grammar's
 * matcher accepts the bytes as a complete output, else 0.
 *
 * --bench: also prints to stderr the median, p90 and max wall time of so_vocab_fill_mask per
 * step over all walks (a measurement for the README, never asserted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf/gguf.h"
#include "model/structured/so_internal.h"
#include "model/structured/structured_output.h"
#include "model/tokenizer/tokenizer.h"

#define BENCH_MAX_STEPS 100000
static double *bench_us; /* [bench_n] when --bench */
static int bench_n;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t rng_next(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (buf) buf[*len] = 0;
  return buf;
}

static const char *const extra_pieces[] = {
    "{\"", "\":", "\":\"", "\",\"", "\"}", "},{", "}]", "]}", "[{", "[]", "{}", "1,", "12", "0.5",
    "-1", "e+", "E-3", "true", "false", "null", "tr", "ue", "nu", "ll", "\\u00", "e9", "\\n", "\\\"",
    "name", "age", "id", "\"name", "type", "\u00e9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "abc", " ", "\":1",
};

/* The test vocabulary (see the top); *eos_out gets its EOS id. */
static llb_status test_vocab(struct so_vocab **out, int32_t *eos_out) {
  enum { N_BYTES = 255 };
  int32_t n_extra = (int32_t)(sizeof(extra_pieces) / sizeof(extra_pieces[0]));
  int32_t n = N_BYTES + n_extra + 2;
  const char *pieces[N_BYTES + 64];
  size_t lens[N_BYTES + 64];
  static char bytes[N_BYTES];
  for (int32_t i = 0; i < N_BYTES; i++) {
    bytes[i] = (char)(i + 1);
    pieces[i] = &bytes[i];
    lens[i] = 1;
  }
  for (int32_t i = 0; i < n_extra; i++) {
    pieces[N_BYTES + i] = extra_pieces[i];
    lens[N_BYTES + i] = strlen(extra_pieces[i]);
  }
  pieces[n - 2] = ""; /* a control token: never allowed */
  lens[n - 2] = 0;
  pieces[n - 1] = "";
  lens[n - 1] = 0;
  int32_t eos = n - 1;
  *eos_out = eos;
  return so_vocab_create(n, pieces, lens, &eos, 1, out);
}

static bool grammar_mode; /* --grammar: closing tokens drawn at random (see closing_token) */
static uint64_t rng_next(uint64_t *x);

/* Index of a single-byte closing token allowed by mask, preferred in this order; -1 if none.
 * GBNF walks draw one of the allowed ones at random instead: in a free-form grammar the first
 * closer may also be what keeps the output open (csv's "" inside a quoted field). */
static int32_t closing_token(struct so_vocab *v, const uint32_t *mask, const int32_t *byte_ids, uint64_t *rng) {
  static const char order[] = "\"}],:0", more[] = "\"}],:0)=;\n\r({";
  (void)v;
  int32_t found[sizeof more];
  int n = 0;
  for (const char *c = grammar_mode ? more : order; *c; c++) {
    int32_t id = byte_ids[(uint8_t)*c];
    if (id >= 0 && (mask[id / 32] >> (id % 32) & 1u)) {
      if (!grammar_mode) return id;
      found[n++] = id;
    }
  }
  return n ? found[rng_next(rng) % (uint64_t)n] : -1;
}

static bool bit(const uint32_t *mask, int32_t id) { return mask[id / 32] >> (id % 32) & 1u; }

/* ---- shortest completion: BFS over distinct states ---- */

#define BFS_MAX_NODES 8000
#define BFS_MAX_LEN 200

struct bfs_node {
  uint8_t *key; /* the state's used stacks, back to back */
  size_t len;
  int32_t parent;
  uint8_t byte;
};

static size_t state_bytes(const struct so_state *st, uint8_t *out) {
  size_t n = 0;
  memcpy(out + n, &st->n, sizeof(st->n));
  n += sizeof(st->n);
  for (int32_t i = 0; i < st->n; i++) {
    memcpy(out + n, &st->s[i].depth, sizeof(int32_t));
    n += sizeof(int32_t);
    memcpy(out + n, st->s[i].f, sizeof(struct so_frame) * (size_t)st->s[i].depth);
    n += sizeof(struct so_frame) * (size_t)st->s[i].depth;
  }
  return n;
}

static void state_from_bytes(struct so_state *st, const uint8_t *in) {
  size_t n = 0;
  memcpy(&st->n, in, sizeof(st->n));
  n += sizeof(st->n);
  for (int32_t i = 0; i < st->n; i++) {
    memcpy(&st->s[i].depth, in + n, sizeof(int32_t));
    n += sizeof(int32_t);
    memcpy(st->s[i].f, in + n, sizeof(struct so_frame) * (size_t)st->s[i].depth);
    n += sizeof(struct so_frame) * (size_t)st->s[i].depth;
  }
}

/* Search order: fewer open frames first (closing what is open is what ends a value), then
 * shorter paths. */
static int64_t bfs_priority(const struct so_state *st, int len) {
  int32_t depth = SO_MAX_DEPTH;
  for (int32_t i = 0; i < st->n; i++)
    if (st->s[i].depth < depth) depth = st->s[i].depth;
  return (int64_t)depth * 64 + len;
}

struct heap_item {
  int64_t prio;
  int32_t node;
};

static void heap_push(struct heap_item *h, int32_t *n, struct heap_item x) {
  int32_t i = (*n)++;
  for (; i > 0 && h[(i - 1) / 2].prio > x.prio; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
  h[i] = x;
}

static struct heap_item heap_pop(struct heap_item *h, int32_t *n) {
  struct heap_item top = h[0], last = h[--*n];
  int32_t i = 0;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1].prio < h[c].prio) c++;
    if (h[c].prio >= last.prio) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = last;
  return top;
}

/* The bytes of a completion of m (best-first over the printable bytes, distinct states only)
 * into path[BFS_MAX_LEN]; their number, or -1 when none is found within BFS_MAX_NODES states. */
static int completion_search(const struct so_matcher *m, uint8_t *path, bool escapes) {
  static struct bfs_node nodes[BFS_MAX_NODES];
  static struct heap_item heap[BFS_MAX_NODES];
  static int16_t plen[BFS_MAX_NODES];
  static struct so_state a, b;
  static uint8_t scratch[sizeof(struct so_state)];
  int32_t n = 0, found = -1, n_heap = 0;
  size_t len = state_bytes(&m->cur, scratch);
  nodes[n] = (struct bfs_node){.key = memcpy(malloc(len), scratch, len), .len = len, .parent = -1};
  plen[n] = 0;
  heap_push(heap, &n_heap, (struct heap_item){bfs_priority(&m->cur, 0), n++});
  if (so_state_is_complete(m->g, &m->cur)) found = 0;
  while (n_heap > 0 && found < 0) {
    const int32_t i = heap_pop(heap, &n_heap).node;
    if (plen[i] >= BFS_MAX_LEN) continue;
    state_from_bytes(&a, nodes[i].key);
    for (int c = 0x20; c < 0x7f && found < 0 && n < BFS_MAX_NODES; c++) {
      if ((c == '\\' && !escapes) || !so_state_feed(m->g, &a, (uint8_t)c, &b)) continue;
      len = state_bytes(&b, scratch);
      bool seen = false;
      for (int32_t k = 0; k < n && !seen; k++) seen = nodes[k].len == len && memcmp(nodes[k].key, scratch, len) == 0;
      if (seen) continue;
      nodes[n] = (struct bfs_node){.key = memcpy(malloc(len), scratch, len), .len = len, .parent = i, .byte = (uint8_t)c};
      plen[n] = (int16_t)(plen[i] + 1);
      if (so_state_is_complete(m->g, &b)) found = n;
      heap_push(heap, &n_heap, (struct heap_item){bfs_priority(&b, plen[n]), n});
      n++;
    }
  }
  const int depth = found >= 0 ? plen[found] : -1;
  for (int32_t k = found, at = depth; k > 0; k = nodes[k].parent) path[--at] = nodes[k].byte;
  for (int32_t k = 0; k < n; k++) free(nodes[k].key);
  return depth;
}

/* Without escapes first: \uXXXX alone makes 65536 states of every string. */
static int shortest_completion(const struct so_matcher *m, uint8_t *path) {
  const int n = completion_search(m, path, false);
  return n >= 0 ? n : completion_search(m, path, true);
}

/* One walk; prints the output. Returns 0, or 1 after printing why to stderr. */
static bool hex_output; /* --regex: outputs as hex */

static int walk(struct so_vocab *v, struct so_matcher *m, struct so_matcher *probe, bool full_check,
                const int32_t *byte_ids, const struct tokenizer *tok, uint64_t *rng, int max_steps) {
  int32_t n_vocab = so_vocab_size(v);
  uint32_t *mask = malloc(sizeof(uint32_t) * (((size_t)n_vocab + 31) / 32));
  int32_t *allowed = malloc(sizeof(int32_t) * (size_t)n_vocab);
  char *out = malloc(1 << 16);
  size_t out_len = 0;
  int rc = 1;
  uint8_t path[BFS_MAX_LEN];
  int path_len = -1, path_at = 0;
  so_matcher_reset(m);
  for (int step = 0; step < max_steps; step++) {
    double t0 = bench_us ? now_us() : 0;
    int32_t n_allowed = so_vocab_fill_mask(v, m, mask);
    if (bench_us && bench_n < BENCH_MAX_STEPS) bench_us[bench_n++] = now_us() - t0;
    int32_t n_list = 0;
    for (int32_t i = 0; i < n_vocab; i++)
      if (bit(mask, i)) allowed[n_list++] = i;
    if (n_allowed == 0 || n_list != n_allowed) {
      fprintf(stderr, "step %d: mask has %d allowed (%d set) after \"%.*s\"\n", step, n_allowed, n_list, (int)out_len, out);
      goto done;
    }
    int32_t n_check = full_check ? n_vocab : 200;
    for (int32_t k = 0; k < n_check; k++) {
      int32_t id = full_check ? k : (int32_t)(rng_next(rng) % (uint64_t)n_vocab);
      so_matcher_copy_state(probe, m);
      if (so_matcher_accept_token(probe, v, id) != bit(mask, id)) {
        fprintf(stderr, "step %d: token %d mask bit %d but accept says otherwise after \"%.*s\"\n", step, id,
                bit(mask, id), (int)out_len, out);
        goto done;
      }
    }
    bool complete = so_matcher_is_complete(m);
    double pull = step < 40 ? 0.0 : (step - 40) / 60.0;
    int32_t pick = -1;
    const bool follow = !tok && step >= max_steps / 2; /* the test vocabulary: a shortest completion */
    if (complete && (pull > 0 || rng_next(rng) % 4 == 0 || so_matcher_is_terminated(m))) pick = -2; /* EOS */
    else if (!follow && (double)(rng_next(rng) % 1000) / 1000.0 < pull) pick = closing_token(v, mask, byte_ids, rng);
    if (pick == -2) {
      int32_t eos = -1;
      for (int32_t i = 0; i < n_list && eos < 0; i++)
        if (tok ? tokenizer_is_eog(tok, allowed[i]) : allowed[i] == n_vocab - 1) eos = allowed[i];
      if (eos < 0) {
        fprintf(stderr, "step %d: complete but no end-of-generation token allowed\n", step);
        goto done;
      }
      if (hex_output)
        for (size_t k = 0; k < (size_t)out_len; k++) printf("%02x", (unsigned)(uint8_t)out[k]);
      else
        fwrite(out, 1, out_len, stdout);
      fputc('\n', stdout);
      rc = 0;
      goto done;
    }
    if (pick == -1 && follow) {
      if (path_len < 0) {
        path_at = 0;
        if ((path_len = shortest_completion(m, path)) < 0) {
          fprintf(stderr, "step %d: no completion within %d states after \"%.*s\"\n", step, BFS_MAX_NODES, (int)out_len, out);
          goto done;
        }
      }
      if (path_at < path_len) pick = byte_ids[path[path_at++]];
    }
    if (pick < 0) pick = allowed[rng_next(rng) % (uint64_t)n_list];
    if (tok ? tokenizer_is_eog(tok, pick) : pick == n_vocab - 1) continue; /* EOS drawn: retry */
    char piece[256];
    int64_t plen;
    if (tok) plen = tokenizer_token_to_piece(tok, pick, false, piece, sizeof(piece));
    else {
      plen = 0;
      for (int32_t b = 0; b < 256; b++)
        if (byte_ids[b] == pick) piece[plen++] = (char)b;
      if (plen == 0) {
        plen = (int64_t)strlen(extra_pieces[pick - 255]);
        memcpy(piece, extra_pieces[pick - 255], (size_t)plen);
      }
    }
    if (!so_matcher_accept_token(m, v, pick)) {
      fprintf(stderr, "step %d: allowed token %d refused\n", step, pick);
      goto done;
    }
    if (plen < 0 || plen > 255 || out_len + (size_t)plen >= (1 << 16)) goto done;
    memcpy(out + out_len, piece, (size_t)plen);
    out_len += (size_t)plen;
  }
  fprintf(stderr, "walk unfinished after %d steps: \"%.*s\"\n", max_steps, (int)out_len, out);
done:
  free(mask);
  free(allowed);
  free(out);
  return rc;
}

/* --accept: one verdict per hex line of path. */
static int accept_lines(const struct so_grammar *g, const char *path) {
  size_t len = 0;
  char *text = read_file(path, &len);
  struct so_matcher *m = NULL;
  uint8_t *bytes = malloc(len / 2 + 1);
  if (!text || !bytes || so_matcher_create(g, &m) != LLB_STATUS_OK) {
    fprintf(stderr, "so_walk: cannot read %s\n", path);
    return 2;
  }
  for (char *line = text, *nl; *line; line = nl + 1) { /* empty lines are the empty output */
    if (!(nl = strchr(line, '\n'))) break;
    *nl = '\0';
    size_t n = 0;
    for (; line[2 * n] && line[2 * n + 1]; n++) {
      unsigned v;
      sscanf(line + 2 * n, "%2x", &v);
      bytes[n] = (uint8_t)v;
    }
    so_matcher_reset(m);
    printf("%d\n", so_matcher_accept_bytes(m, bytes, n) && so_matcher_is_complete(m));
  }
  so_matcher_destroy(m);
  free(bytes);
  free(text);
  return 0;
}

int main(int argc, char **argv) {
  const char *schema = NULL, *choice = NULL, *model = NULL, *regex = NULL, *grammar = NULL, *accept = NULL;
  bool json_object = false;
  int samples = 20, max_steps = 400;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    bool has = i + 1 < argc;
    if (!strcmp(argv[i], "--schema") && has) schema = argv[++i];
    else if (!strcmp(argv[i], "--choice") && has) choice = argv[++i];
    else if (!strcmp(argv[i], "--regex") && has) regex = argv[++i], hex_output = true;
    else if (!strcmp(argv[i], "--grammar") && has) grammar = argv[++i], hex_output = grammar_mode = true;
    else if (!strcmp(argv[i], "--accept") && has) accept = argv[++i];
    else if (!strcmp(argv[i], "--model") && has) model = argv[++i];
    else if (!strcmp(argv[i], "--samples") && has) samples = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && has) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--max-steps") && has) max_steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json-object")) json_object = true;
    else if (!strcmp(argv[i], "--bench")) bench_us = malloc(sizeof(double) * BENCH_MAX_STEPS);
    else {
      fprintf(stderr, "so_walk: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  struct so_grammar *g = NULL;
  llb_status st;
  if (json_object) st = so_grammar_compile_json_object(&g);
  else {
    size_t len = 0;
    const char *path = schema ? schema : choice ? choice : regex ? regex : grammar;
    char *text = path ? read_file(path, &len) : NULL;
    if (!text) {
      fprintf(stderr, "so_walk: cannot read %s\n", path ? path : "(nothing)");
      return 2;
    }
    st = schema ? so_grammar_compile_json_schema(text, len, &g)
         : choice ? so_grammar_compile_choice(text, len, &g)
         : regex  ? so_grammar_compile_regex(text, len, &g)
                  : so_grammar_compile_gbnf(text, len, &g);
    free(text);
  }
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "so_walk: compile: %s: %s\n", llb_strerror(st), llb_err_last());
    return 3;
  }
  if (accept) {
    int rc = accept_lines(g, accept);
    so_grammar_destroy(g);
    return rc;
  }
  struct gguf_file *gf = NULL;
  struct tokenizer *tok = NULL;
  struct so_vocab *v = NULL;
  int32_t byte_ids[256];
  for (int b = 0; b < 256; b++) byte_ids[b] = -1;
  if (model) {
    FILE *probe = fopen(model, "rb");
    if (!probe) {
      fprintf(stderr, "SKIP: no model at %s\n", model);
      return 77;
    }
    fclose(probe);
    if (gguf_open(model, &gf) != LLB_STATUS_OK || tokenizer_load(gf, &tok) != LLB_STATUS_OK ||
        so_vocab_from_tokenizer(tok, &v) != LLB_STATUS_OK) {
      fprintf(stderr, "so_walk: model %s: %s\n", model, llb_err_last());
      return 2;
    }
    for (int b = 1; b < 256; b++) {
      char c = (char)b;
      int32_t *ids = NULL;
      int64_t n = 0;
      if (tokenizer_encode(tok, &c, 1, false, false, &ids, &n) == LLB_STATUS_OK && n == 1) byte_ids[b] = ids[0];
      free(ids);
    }
  } else {
    int32_t eos;
    if (test_vocab(&v, &eos) != LLB_STATUS_OK) return 2;
    for (int b = 1; b < 256; b++) byte_ids[b] = b - 1;
  }
  struct so_matcher *m = NULL, *probe = NULL;
  if (so_matcher_create(g, &m) != LLB_STATUS_OK || so_matcher_create(g, &probe) != LLB_STATUS_OK) return 2;
  int rc = 0;
  uint64_t rng = seed;
  for (int s = 0; s < samples && rc == 0; s++) rc = walk(v, m, probe, model == NULL, byte_ids, tok, &rng, max_steps);
  if (bench_us && bench_n > 0) {
    qsort(bench_us, (size_t)bench_n, sizeof(double), cmp_double);
    fprintf(stderr, "fill_mask over %d tokens: %d steps, median %.1f us, p90 %.1f us, max %.1f us\n",
            so_vocab_size(v), bench_n, bench_us[bench_n / 2], bench_us[bench_n * 9 / 10], bench_us[bench_n - 1]);
  }
  free(bench_us);
  so_matcher_destroy(m);
  so_matcher_destroy(probe);
  so_vocab_destroy(v);
  so_grammar_destroy(g);
  tokenizer_destroy(tok);
  gguf_close(gf);
  return rc;
}

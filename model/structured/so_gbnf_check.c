/* What the GBNF matcher needs to know of a compiled grammar before it runs (see
 * so_internal.h): which rules can match "" (nullable), which can finish at all (productive),
 * that no rule reachable from the root is unproductive or left-recursive (either would let
 * the matcher run into a dead end or expand forever), and the bytes each alternative can
 * start with from each position (so that a byte no frame can take is refused at once and
 * expanding a reference skips alternatives that cannot take it).
 * Fixpoints run over a worklist of the rules that refer to a changed rule, so a long chain
 * of rules (x{0,1000} makes one) costs linear time. */
#include <stdlib.h>
#include <string.h>

#include "model/structured/so_internal.h"

struct ana {
  struct so_gbnf *gb;
  int32_t *rev, *rev_start; /* rules referring to rule s: rev[rev_start[s] .. rev_start[s + 1]) */
  uint8_t *nullable, *productive;
  uint32_t *first;       /* [n_rules][8] */
  uint32_t *class_first; /* [n_classes][8] */
};

/* Rule of each element position is not kept: walk rule r's alternatives. */
#define FOR_ALTS(gb, r, a) for (int32_t a = (gb)->rule_alts[r]; a < (gb)->rule_alts[(r) + 1]; a++)

static bool update_nullable(struct ana *a, int32_t r) {
  const struct so_gbnf *gb = a->gb;
  if (a->nullable[r]) return false;
  FOR_ALTS(gb, r, k) {
    int32_t p = gb->alts[k];
    while (gb->elems[p].kind == SO_GBNF_REF && a->nullable[gb->elems[p].arg]) p++;
    if (gb->elems[p].kind == SO_GBNF_END) {
      a->nullable[r] = 1;
      return true;
    }
  }
  return false;
}

static bool update_productive(struct ana *a, int32_t r) {
  const struct so_gbnf *gb = a->gb;
  if (a->productive[r]) return false;
  FOR_ALTS(gb, r, k) {
    int32_t p = gb->alts[k];
    while (gb->elems[p].kind == SO_GBNF_CHARS || (gb->elems[p].kind == SO_GBNF_REF && a->productive[gb->elems[p].arg]))
      p++;
    if (gb->elems[p].kind == SO_GBNF_END) {
      a->productive[r] = 1;
      return true;
    }
  }
  return false;
}

/* The first bytes of the text from position p to the end of its alternative, into set. */
static void first_from(const struct ana *a, int32_t p, uint32_t *set) {
  const struct so_gbnf *gb = a->gb;
  for (;; p++) {
    const struct so_gbnf_elem *e = &gb->elems[p];
    if (e->kind == SO_GBNF_END) return;
    const uint32_t *add = e->kind == SO_GBNF_CHARS ? &a->class_first[8 * e->arg] : &a->first[8 * e->arg];
    for (int i = 0; i < 8; i++) set[i] |= add[i];
    if (e->kind == SO_GBNF_CHARS || !a->nullable[e->arg]) return;
  }
}

static bool update_first(struct ana *a, int32_t r) {
  uint32_t set[8];
  memcpy(set, &a->first[8 * r], sizeof set);
  FOR_ALTS(a->gb, r, k) first_from(a, a->gb->alts[k], set);
  if (memcmp(set, &a->first[8 * r], sizeof set) == 0) return false;
  memcpy(&a->first[8 * r], set, sizeof set);
  return true;
}

static bool fixpoint(struct ana *a, bool (*update)(struct ana *, int32_t)) {
  const int32_t n = a->gb->n_rules;
  int32_t *queue = malloc(sizeof(int32_t) * ((size_t)n + 1));
  uint8_t *queued = malloc((size_t)n + 1);
  if (!queue || !queued) {
    free(queue);
    free(queued);
    return false;
  }
  int32_t head = 0, count = n; /* a ring of at most n rules */
  for (int32_t r = 0; r < n; r++) queue[r] = r, queued[r] = 1;
  while (count > 0) {
    int32_t r = queue[head];
    head = (head + 1) % n;
    count--;
    queued[r] = 0;
    if (!update(a, r)) continue;
    for (int32_t i = a->rev_start[r]; i < a->rev_start[r + 1]; i++) {
      int32_t s = a->rev[i];
      if (queued[s]) continue;
      queued[s] = 1;
      queue[(head + count++) % n] = s;
    }
  }
  free(queue);
  free(queued);
  return true;
}

static void set_bytes(uint32_t *set, uint32_t lo, uint32_t hi) {
  for (uint32_t b = lo; b <= hi; b++) set[b / 32] |= 1u << (b % 32);
}

/* UTF-8 lead bytes of the code points of class k. */
static void class_first_bytes(const struct so_gbnf *gb, int32_t k, uint32_t *set) {
  static const uint32_t lo_cp[] = {0, 0x80, 0x800, 0x10000}, hi_cp[] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
  static const uint32_t lead[] = {0, 0xc0, 0xe0, 0xf0};
  static const int shift[] = {0, 6, 12, 18};
  for (int32_t i = gb->class_ranges[k]; i < gb->class_ranges[k + 1]; i++) {
    for (int n = 0; n < 4; n++) {
      uint32_t lo = gb->ranges[2 * i] > lo_cp[n] ? gb->ranges[2 * i] : lo_cp[n];
      uint32_t hi = gb->ranges[2 * i + 1] < hi_cp[n] ? gb->ranges[2 * i + 1] : hi_cp[n];
      if (lo <= hi) set_bytes(set, lead[n] | lo >> shift[n], lead[n] | hi >> shift[n]);
    }
  }
}

static llb_status rule_error(const int32_t *owner, const char *const *names, const int32_t *lines,
                             const int32_t *cols, int32_t r, const char *what) {
  int32_t o = owner[r];
  return LLB_ERRF(LLB_STATUS_MALFORMED, "grammar line %d column %d: rule '%s' %s", lines[o], cols[o],
                  names[o] ? names[o] : "?", what);
}

/* Iterative depth-first search from root over the references (all of them, or only those
 * after a nullable prefix when left_only): *found = a rule that reaches itself (left_only)
 * or -1; reached[r] set for every rule visited. */
static bool search(const struct ana *a, int32_t root, bool left_only, uint8_t *reached, int32_t *found) {
  const struct so_gbnf *gb = a->gb;
  const int32_t n = gb->n_rules;
  int32_t *stack = malloc(sizeof(int32_t) * 2 * ((size_t)n + 1)); /* (rule, next position) */
  uint8_t *on_path = calloc((size_t)n + 1, 1);
  if (!stack || !on_path) {
    free(stack);
    free(on_path);
    return false;
  }
  *found = -1;
  int32_t depth = 0;
  stack[0] = root, stack[1] = gb->alts[gb->rule_alts[root]];
  reached[root] = on_path[root] = 1;
  depth = 1;
  while (depth > 0 && *found < 0) {
    int32_t *top = &stack[2 * (depth - 1)];
    const int32_t r = top[0];
    const int32_t end = gb->rule_alts[r + 1] == gb->n_alts ? gb->n_elems : gb->alts[gb->rule_alts[r + 1]];
    int32_t p = top[1], next = -1;
    while (p < end && next < 0) {
      const struct so_gbnf_elem *e = &gb->elems[p];
      bool skip_rest = left_only && (e->kind == SO_GBNF_CHARS || (e->kind == SO_GBNF_REF && !a->nullable[e->arg]));
      if (e->kind == SO_GBNF_REF) {
        if (left_only && on_path[e->arg]) *found = e->arg;
        else if (!reached[e->arg]) next = e->arg;
      }
      p++;
      if (skip_rest) /* to the next alternative */
        while (p < end && gb->elems[p - 1].kind != SO_GBNF_END) p++;
      if (*found >= 0) break;
    }
    top[1] = p;
    if (*found >= 0) break;
    if (next < 0) {
      on_path[r] = 0;
      depth--;
      continue;
    }
    reached[next] = on_path[next] = 1;
    stack[2 * depth] = next, stack[2 * depth + 1] = gb->alts[gb->rule_alts[next]];
    depth++;
  }
  free(stack);
  free(on_path);
  return true;
}

static llb_status build_rev(struct ana *a) {
  const struct so_gbnf *gb = a->gb;
  a->rev_start = calloc((size_t)gb->n_rules + 2, sizeof(int32_t));
  int32_t n_refs = 0;
  for (int32_t p = 0; p < gb->n_elems; p++) n_refs += gb->elems[p].kind == SO_GBNF_REF;
  a->rev = malloc(sizeof(int32_t) * ((size_t)n_refs + 1));
  if (!a->rev_start || !a->rev) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar analysis");
  for (int32_t r = 0; r < gb->n_rules; r++)
    FOR_ALTS(gb, r, k)
  for (int32_t p = gb->alts[k]; gb->elems[p].kind != SO_GBNF_END; p++)
    if (gb->elems[p].kind == SO_GBNF_REF) a->rev_start[gb->elems[p].arg + 2]++;
  for (int32_t s = 0; s < gb->n_rules; s++) a->rev_start[s + 2] += a->rev_start[s + 1];
  for (int32_t r = 0; r < gb->n_rules; r++)
    FOR_ALTS(gb, r, k)
  for (int32_t p = gb->alts[k]; gb->elems[p].kind != SO_GBNF_END; p++)
    if (gb->elems[p].kind == SO_GBNF_REF) a->rev[a->rev_start[gb->elems[p].arg + 1]++] = r;
  return LLB_STATUS_OK;
}

static void ana_free(struct ana *a) {
  free(a->rev);
  free(a->rev_start);
  free(a->nullable);
  free(a->productive);
  free(a->first);
  free(a->class_first);
}

llb_status so_gbnf_check(struct so_gbnf *gb, const char *const *names, const int32_t *owner,
                         const int32_t *lines, const int32_t *cols) {
  struct ana a = {.gb = gb};
  const size_t nr = (size_t)gb->n_rules + 1;
  llb_status st = build_rev(&a);
  a.nullable = calloc(nr, 1);
  a.productive = calloc(nr, 1);
  a.first = calloc(nr, 8 * sizeof(uint32_t));
  a.class_first = calloc((size_t)gb->n_classes + 1, 8 * sizeof(uint32_t));
  uint8_t *reached = calloc(nr, 1), *left = calloc(nr, 1);
  gb->nullable_from = malloc((size_t)gb->n_elems);
  gb->first_from = calloc((size_t)gb->n_elems + 1, 8 * sizeof(uint32_t));
  if (st == LLB_STATUS_OK && (!a.nullable || !a.productive || !a.first || !a.class_first || !reached || !left ||
                              !gb->nullable_from || !gb->first_from))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar analysis");
  const int32_t root = gb->elems[0].arg;
  int32_t found = -1;
  if (st == LLB_STATUS_OK &&
      (!fixpoint(&a, update_nullable) || !fixpoint(&a, update_productive) || !search(&a, root, false, reached, &found)))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar analysis");
  for (int32_t r = 0; st == LLB_STATUS_OK && r < gb->n_rules; r++)
    if (reached[r] && !a.productive[r])
      st = rule_error(owner, names, lines, cols, r, "can never finish (every alternative needs the rule again)");
  if (st == LLB_STATUS_OK) { /* left recursion: a search from every reachable rule not yet cleared */
    for (int32_t r = 0; r < gb->n_rules && st == LLB_STATUS_OK; r++) {
      if (!reached[r] || left[r]) continue;
      if (!search(&a, r, true, left, &found)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar analysis");
      else if (found >= 0)
        st = rule_error(owner, names, lines, cols, found,
                        "is left-recursive (it can reach itself before reading a character), which is not supported");
    }
  }
  if (st == LLB_STATUS_OK) {
    for (int32_t k = 0; k < gb->n_classes; k++) class_first_bytes(gb, k, &a.class_first[8 * k]);
    if (!fixpoint(&a, update_first)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar analysis");
  }
  if (st == LLB_STATUS_OK) {
    for (int32_t p = gb->n_elems - 1; p >= 0; p--) {
      const struct so_gbnf_elem *e = &gb->elems[p];
      gb->nullable_from[p] = e->kind == SO_GBNF_END ||
                             (e->kind == SO_GBNF_REF && a.nullable[e->arg] && gb->nullable_from[p + 1]);
      if (e->kind == SO_GBNF_END) continue;
      uint32_t *set = &gb->first_from[8 * (size_t)p];
      const uint32_t *add = e->kind == SO_GBNF_CHARS ? &a.class_first[8 * e->arg] : &a.first[8 * e->arg];
      const bool through = e->kind == SO_GBNF_REF && a.nullable[e->arg];
      for (int i = 0; i < 8; i++) set[i] = add[i] | (through ? set[8 + i] : 0u);
    }
  }
  free(reached);
  free(left);
  ana_free(&a);
  return st;
}

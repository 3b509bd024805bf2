/* GBNF / EBNF grammars → rules of code-point classes for the structured-output matcher
 * (vLLM's structured_outputs.grammar / guided_grammar in the dialect xgrammar accepts, which
 * is llama.cpp's GBNF: grammars/README.md and src/llama-grammar.cpp of llama.cpp were the
 * reference of the syntax; nothing is taken from their code).
 *
 *   grammar   ::= (name "::=" alternates)*           one rule named "root" is the output
 *   alternates::= sequence ("|" sequence)*            a sequence may be empty
 *   sequence  ::= (item quantifier*)*
 *   item      ::= name | "literal" | [class] | [^class] | . | "(" alternates ")"
 *   quantifier::= * | + | ? | {m} | {m,} | {m,n}
 *
 * Names are [a-zA-Z0-9_-]+. Space, tabs, newlines and # comments may come between any two
 * symbols; a rule ends where the next `name ::=` begins (llama.cpp's stricter rule, newlines
 * only inside parentheses or after |, is a special case). Escapes in literals and classes:
 * \xHH \uHHHH \UHHHHHHHH \t \n \r \f \v \a \b \e \0 and \ before \ " ' [ ] - ^ / ?.
 * Quantifiers are rewritten into rules as llama.cpp does (S* → R ::= S R | ""; S{m,n} → m
 * copies of S, then n-m nested optional rules). Token references (<...>, !<...>) are refused.
 * Errors carry the line and column (1-based, columns in bytes). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strmap.h"
#include "model/structured/so_internal.h"

#define GBNF_MAX_RULES 8192
#define GBNF_MAX_ELEMS 65536
#define GBNF_MAX_REPEAT 1000
#define GBNF_MAX_NESTING 64
#define GBNF_MAX_CLASS_RANGES 1024
#define GBNF_MAX_CP 0x10FFFFu

struct vec {
  int32_t *v; /* element codes: class k >= 0, reference to rule r = -1 - r */
  int32_t n, cap;
};

struct prule {
  char *name; /* NULL for a generated rule; owned */
  size_t name_len;
  int32_t owner;     /* the named rule it was written in */
  int32_t line, col; /* definition, or first use while undefined */
  bool defined;
  struct vec *alts; /* [n_alts], owned */
  int32_t n_alts, cap_alts;
};

struct gp {
  const char *s;
  size_t len, pos;
  struct prule *rules;
  int32_t n_rules, cap_rules;
  uint32_t *ranges; /* pairs */
  int32_t n_ranges, cap_ranges;
  int32_t *class_start; /* [n_classes + 1] */
  int32_t n_classes, cap_classes;
  int32_t ascii_class[128]; /* interned one-character classes; -1 = none yet */
  int32_t any_class;
  int64_t n_elems;
  int depth;
  int32_t owner; /* named rule being parsed */
  struct llb_strmap *named; /* rule name -> rule + 1 */
};

static void where(const struct gp *p, size_t pos, int32_t *line, int32_t *col) {
  int32_t l = 1;
  size_t start = 0;
  for (size_t i = 0; i < pos && i < p->len; i++)
    if (p->s[i] == '\n') l++, start = i + 1;
  *line = l;
  *col = (int32_t)(pos - start) + 1;
}

static llb_status fail(const struct gp *p, size_t pos, llb_status st, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int32_t line, col;
  where(p, pos, &line, &col);
  return LLB_ERRF(st, "grammar line %d column %d: %s", line, col, msg);
}

static llb_status oom(void) { return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar"); }

static llb_status vec_push(struct gp *p, struct vec *q, int32_t x) {
  if (++p->n_elems > GBNF_MAX_ELEMS)
    return fail(p, p->pos, LLB_STATUS_TOO_LARGE, "the grammar needs more than %d elements", GBNF_MAX_ELEMS);
  if (llb_array_reserve32((void **)&q->v, &q->cap, q->n + 1, sizeof(int32_t)) != LLB_STATUS_OK) return oom();
  q->v[q->n++] = x;
  return LLB_STATUS_OK;
}

static llb_status new_rule(struct gp *p, int32_t *out) {
  if (p->n_rules == GBNF_MAX_RULES)
    return fail(p, p->pos, LLB_STATUS_TOO_LARGE, "the grammar needs more than %d rules", GBNF_MAX_RULES);
  if (llb_array_reserve32((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof(struct prule)) != LLB_STATUS_OK) return oom();
  struct prule *r = &p->rules[p->n_rules];
  memset(r, 0, sizeof(*r));
  r->owner = p->owner;
  r->defined = true;
  where(p, p->pos, &r->line, &r->col);
  *out = p->n_rules++;
  return LLB_STATUS_OK;
}

/* Adds alternative q to rule r (takes q's array even on failure). */
static llb_status add_alt(struct gp *p, int32_t r, struct vec *q) {
  struct prule *ru = &p->rules[r];
  if (llb_array_reserve32((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof(struct vec)) != LLB_STATUS_OK) {
    free(q->v);
    return oom();
  }
  ru->alts[ru->n_alts++] = *q;
  *q = (struct vec){0};
  return LLB_STATUS_OK;
}

/* The rule named s[0..n): found, or added as undefined (first used here). */
static llb_status rule_named(struct gp *p, const char *s, size_t n, int32_t *out) {
  char *name = malloc(n + 1); /* names are [a-zA-Z0-9_-]+: no NUL inside */
  if (!name) return oom();
  memcpy(name, s, n);
  name[n] = '\0';
  const intptr_t found = (intptr_t)llb_strmap_get(p->named, name);
  if (found) {
    free(name);
    *out = (int32_t)(found - 1);
    return LLB_STATUS_OK;
  }
  llb_status st = new_rule(p, out);
  if (st == LLB_STATUS_OK) st = llb_strmap_put(p->named, name, (void *)(intptr_t)(*out + 1));
  if (st != LLB_STATUS_OK) {
    free(name);
    return st;
  }
  struct prule *r = &p->rules[*out];
  r->defined = false;
  r->owner = *out;
  r->name = name;
  r->name_len = n;
  return LLB_STATUS_OK;
}

static bool at_end(const struct gp *p) { return p->pos >= p->len; }
static int peek(const struct gp *p, size_t ahead) {
  return p->pos + ahead < p->len ? (uint8_t)p->s[p->pos + ahead] : -1;
}

static void skip_space(struct gp *p) {
  while (!at_end(p)) {
    int c = peek(p, 0);
    if (c == '#') {
      while (!at_end(p) && peek(p, 0) != '\n' && peek(p, 0) != '\r') p->pos++;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      p->pos++;
    } else {
      return;
    }
  }
}

static bool is_name_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static size_t name_len_at(const struct gp *p, size_t pos) {
  size_t n = 0;
  while (pos + n < p->len && is_name_char((uint8_t)p->s[pos + n])) n++;
  return n;
}

/* Does `name ::=` start at the current position? (the end of the rule before it) */
static bool at_rule_start(const struct gp *p) {
  size_t i = p->pos + name_len_at(p, p->pos);
  if (i == p->pos) return false;
  while (i < p->len && (p->s[i] == ' ' || p->s[i] == '\t')) i++;
  return i + 3 <= p->len && memcmp(p->s + i, "::=", 3) == 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One UTF-8 character of the grammar text (RFC 3629: no overlong forms, no surrogates). */
static llb_status parse_utf8(struct gp *p, uint32_t *cp) {
  const uint8_t b = (uint8_t)p->s[p->pos];
  int n = b < 0x80 ? 0 : (b & 0xe0) == 0xc0 ? 1 : (b & 0xf0) == 0xe0 ? 2 : (b & 0xf8) == 0xf0 ? 3 : -1;
  static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
  uint32_t v = n == 0 ? b : n == 1 ? (b & 0x1fu) : n == 2 ? (b & 0x0fu) : (b & 0x07u);
  for (int i = 1; n > 0 && i <= n; i++) {
    int c = peek(p, (size_t)i);
    if (c < 0 || (c & 0xc0) != 0x80) n = -1;
    else v = v << 6 | ((uint32_t)c & 0x3fu);
  }
  if (n < 0 || v < min_cp[n] || v > GBNF_MAX_CP || (v >= 0xd800 && v <= 0xdfff))
    return fail(p, p->pos, LLB_STATUS_MALFORMED, "invalid UTF-8");
  p->pos += (size_t)n + 1;
  *cp = v;
  return LLB_STATUS_OK;
}

/* One character of a literal or class, escapes decoded. */
static llb_status parse_char(struct gp *p, uint32_t *cp) {
  if (peek(p, 0) != '\\') return parse_utf8(p, cp);
  const size_t at = p->pos;
  const int e = peek(p, 1);
  int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
  if (digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
      int h = hexval(peek(p, 2 + (size_t)i));
      if (h < 0) return fail(p, at, LLB_STATUS_MALFORMED, "expecting %d hex digits after \\%c", digits, e);
      v = v << 4 | (uint32_t)h;
    }
    if (v > GBNF_MAX_CP || (v >= 0xd800 && v <= 0xdfff))
      return fail(p, at, LLB_STATUS_MALFORMED, "U+%X is not a Unicode scalar value", v);
    p->pos += 2 + (size_t)digits;
    *cp = v;
    return LLB_STATUS_OK;
  }
  static const char plain[] = "\\\"'[]-^/?";
  static const char named[] = "tnrfvabe0", value[] = "\t\n\r\f\v\a\b\x1b";
  const char *k = e > 0 ? strchr(named, e) : NULL;
  if (e > 0 && k) *cp = e == '0' ? 0 : (uint8_t)value[k - named];
  else if (e > 0 && strchr(plain, e)) *cp = (uint32_t)e;
  else return fail(p, at, LLB_STATUS_MALFORMED, e < 0 ? "unterminated escape" : "unknown escape '\\%c'", e);
  p->pos += 2;
  return LLB_STATUS_OK;
}

static int cmp_range(const void *a, const void *b) {
  const uint32_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

static llb_status push_range(struct gp *p, uint32_t lo, uint32_t hi) {
  if (llb_array_reserve32((void **)&p->ranges, &p->cap_ranges, p->n_ranges + 1, 2 * sizeof(uint32_t)) != LLB_STATUS_OK) return oom();
  p->ranges[2 * p->n_ranges] = lo;
  p->ranges[2 * p->n_ranges + 1] = hi;
  p->n_ranges++;
  return LLB_STATUS_OK;
}

/* Adds a class from raw ranges r[0..n) (pairs; sorted here): merged, complemented when neg,
 * surrogates removed. *out = -1 when it matches nothing. */
static llb_status add_class(struct gp *p, uint32_t *r, int32_t n, bool neg, int32_t *out) {
  if (n > 0) qsort(r, (size_t)n, 2 * sizeof(uint32_t), cmp_range);
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++) {
    if (m > 0 && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
      if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
    } else {
      r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1], m++;
    }
  }
  if (llb_array_reserve32((void **)&p->class_start, &p->cap_classes, p->n_classes + 2, sizeof(int32_t)) != LLB_STATUS_OK) return oom();
  const int32_t first = p->n_ranges;
  uint32_t next = 0; /* complement: the first code point not yet covered */
  for (int32_t i = 0; i <= m; i++) {
    uint32_t lo = neg ? next : (i < m ? r[2 * i] : 1), hi = neg ? (i < m ? r[2 * i] : GBNF_MAX_CP + 1) : 0;
    if (neg) {
      if (i < m) next = r[2 * i + 1] + 1;
      if (hi == 0) continue;
      hi--;
      if (lo > hi) continue;
    } else {
      if (i == m) break;
      hi = r[2 * i + 1];
    }
    llb_status st = LLB_STATUS_OK;
    if (lo < 0xd800 && hi > 0xdfff) {
      st = push_range(p, lo, 0xd7ff);
      if (st == LLB_STATUS_OK) st = push_range(p, 0xe000, hi);
    } else if (hi < 0xd800 || lo > 0xdfff) {
      st = push_range(p, lo, hi);
    } else if (lo < 0xd800) {
      st = push_range(p, lo, 0xd7ff);
    } else if (hi > 0xdfff) {
      st = push_range(p, 0xe000, hi);
    }
    if (st != LLB_STATUS_OK) return st;
  }
  if (p->n_ranges == first) {
    *out = -1;
    return LLB_STATUS_OK;
  }
  if (p->n_classes == 0) p->class_start[0] = 0;
  p->class_start[p->n_classes + 1] = p->n_ranges;
  *out = p->n_classes++;
  return LLB_STATUS_OK;
}

/* The class of one code point (ASCII ones interned). */
static llb_status char_class(struct gp *p, uint32_t cp, int32_t *out) {
  if (cp < 128 && p->ascii_class[cp] >= 0) {
    *out = p->ascii_class[cp];
    return LLB_STATUS_OK;
  }
  uint32_t r[2] = {cp, cp};
  llb_status st = add_class(p, r, 1, false, out);
  if (st == LLB_STATUS_OK && cp < 128) p->ascii_class[cp] = *out;
  return st;
}

static llb_status parse_literal(struct gp *p, struct vec *seq) {
  const size_t at = p->pos++;
  while (peek(p, 0) != '"') {
    if (at_end(p)) return fail(p, at, LLB_STATUS_MALFORMED, "unterminated string literal");
    uint32_t cp;
    int32_t k;
    llb_status st = parse_char(p, &cp);
    if (st == LLB_STATUS_OK) st = char_class(p, cp, &k);
    if (st == LLB_STATUS_OK) st = vec_push(p, seq, k);
    if (st != LLB_STATUS_OK) return st;
  }
  p->pos++;
  return LLB_STATUS_OK;
}

static llb_status parse_class(struct gp *p, struct vec *seq) {
  const size_t at = p->pos++;
  const bool neg = peek(p, 0) == '^';
  if (neg) p->pos++;
  uint32_t *r = NULL;
  int32_t n = 0, cap = 0;
  llb_status st = LLB_STATUS_OK;
  while (st == LLB_STATUS_OK && peek(p, 0) != ']') {
    uint32_t lo = 0, hi = 0; /* read below even when the class already failed */
    if (at_end(p)) st = fail(p, at, LLB_STATUS_MALFORMED, "unterminated character class");
    else if (n == GBNF_MAX_CLASS_RANGES)
      st = fail(p, at, LLB_STATUS_TOO_LARGE, "character class of more than %d ranges", GBNF_MAX_CLASS_RANGES);
    if (st == LLB_STATUS_OK) st = parse_char(p, &lo);
    hi = lo;
    if (st == LLB_STATUS_OK && peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
      const size_t dash = p->pos++;
      st = parse_char(p, &hi);
      if (st == LLB_STATUS_OK && hi < lo)
        st = fail(p, dash, LLB_STATUS_MALFORMED, "character range out of order (U+%X-U+%X)", lo, hi);
    }
    if (st == LLB_STATUS_OK && llb_array_reserve32((void **)&r, &cap, n + 1, 2 * sizeof(uint32_t)) != LLB_STATUS_OK) st = oom();
    if (st == LLB_STATUS_OK) r[2 * n] = lo, r[2 * n + 1] = hi, n++;
  }
  int32_t k = -1;
  if (st == LLB_STATUS_OK) {
    p->pos++;
    st = add_class(p, r, n, neg, &k);
  }
  free(r);
  if (st == LLB_STATUS_OK && k < 0) st = fail(p, at, LLB_STATUS_MALFORMED, "character class matches no character");
  return st == LLB_STATUS_OK ? vec_push(p, seq, k) : st;
}

static llb_status parse_int(struct gp *p, uint32_t *out) {
  const size_t at = p->pos;
  uint64_t v = 0;
  while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
    v = v * 10 + (uint64_t)(peek(p, 0) - '0');
    if (v > GBNF_MAX_REPEAT)
      return fail(p, at, LLB_STATUS_TOO_LARGE, "repetition count above %d", GBNF_MAX_REPEAT);
    p->pos++;
  }
  if (p->pos == at) return fail(p, at, LLB_STATUS_MALFORMED, "expecting a number");
  *out = (uint32_t)v;
  return LLB_STATUS_OK;
}

/* {m}, {m,}, {m,n} at the current '{': *max = -1 when unbounded. */
static llb_status parse_braces(struct gp *p, int64_t *min, int64_t *max) {
  const size_t at = p->pos++;
  uint32_t m = 0, n = 0; /* set by parse_int before any use */
  skip_space(p);
  llb_status st = parse_int(p, &m);
  if (st != LLB_STATUS_OK) return st;
  skip_space(p);
  *min = m, *max = m;
  if (peek(p, 0) == ',') {
    p->pos++;
    skip_space(p);
    *max = -1;
    if (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
      if ((st = parse_int(p, &n)) != LLB_STATUS_OK) return st;
      if (n < m) return fail(p, at, LLB_STATUS_MALFORMED, "repetition {%u,%u}: maximum below minimum", m, n);
      *max = n;
      skip_space(p);
    }
  }
  if (peek(p, 0) != '}') return fail(p, p->pos, LLB_STATUS_MALFORMED, "expecting '}'");
  p->pos++;
  return LLB_STATUS_OK;
}

/* A new rule with alternatives (e + tail) and "" (tail < 0: none). */
static llb_status optional_rule(struct gp *p, const int32_t *e, int32_t n, int32_t tail, int32_t *out) {
  llb_status st = new_rule(p, out);
  struct vec a = {0}, empty = {0};
  for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) st = vec_push(p, &a, e[i]);
  if (st == LLB_STATUS_OK && tail >= 0) st = vec_push(p, &a, -1 - tail);
  if (st == LLB_STATUS_OK) st = add_alt(p, *out, &a);
  if (st == LLB_STATUS_OK) st = add_alt(p, *out, &empty);
  free(a.v);
  return st;
}

/* Applies {min,max} (max -1: unbounded) to the item seq[start..n). */
static llb_status repeat(struct gp *p, struct vec *seq, int32_t start, int64_t min, int64_t max) {
  int32_t n = seq->n - start;
  if (n == 0 || (min == 1 && max == 1)) return LLB_STATUS_OK;
  int32_t *e = malloc(sizeof(int32_t) * (size_t)n);
  if (!e) return oom();
  memcpy(e, seq->v + start, sizeof(int32_t) * (size_t)n);
  p->n_elems -= n;
  seq->n = start;
  llb_status st = LLB_STATUS_OK;
  if (n > 1) { /* copied more than once: one rule, copies are references */
    int32_t w;
    struct vec a = {0};
    st = new_rule(p, &w);
    for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) st = vec_push(p, &a, e[i]);
    if (st == LLB_STATUS_OK) st = add_alt(p, w, &a);
    free(a.v);
    e[0] = -1 - w;
    n = 1;
  }
  for (int64_t i = 0; i < min && st == LLB_STATUS_OK; i++)
    for (int32_t j = 0; j < n && st == LLB_STATUS_OK; j++) st = vec_push(p, seq, e[j]);
  int32_t prev = -1;
  if (st == LLB_STATUS_OK && max < 0) {
    st = new_rule(p, &prev);
    struct vec a = {0}, empty = {0};
    for (int32_t j = 0; j < n && st == LLB_STATUS_OK; j++) st = vec_push(p, &a, e[j]);
    if (st == LLB_STATUS_OK) st = vec_push(p, &a, -1 - prev);
    if (st == LLB_STATUS_OK) st = add_alt(p, prev, &a);
    if (st == LLB_STATUS_OK) st = add_alt(p, prev, &empty);
    free(a.v);
  }
  for (int64_t k = min; max >= 0 && k < max && st == LLB_STATUS_OK; k++) st = optional_rule(p, e, n, prev, &prev);
  if (st == LLB_STATUS_OK && prev >= 0) st = vec_push(p, seq, -1 - prev);
  free(e);
  return st;
}

static llb_status parse_alternates(struct gp *p, int32_t rule);

static llb_status parse_group(struct gp *p, struct vec *seq) {
  const size_t at = p->pos++;
  if (++p->depth > GBNF_MAX_NESTING)
    return fail(p, at, LLB_STATUS_TOO_LARGE, "parentheses nested more than %d deep", GBNF_MAX_NESTING);
  int32_t r;
  llb_status st = new_rule(p, &r);
  if (st == LLB_STATUS_OK) st = parse_alternates(p, r);
  if (st == LLB_STATUS_OK && peek(p, 0) != ')')
    st = fail(p, at_end(p) ? at : p->pos, LLB_STATUS_MALFORMED, at_end(p) ? "unclosed '('" : "expecting ')'");
  p->depth--;
  if (st != LLB_STATUS_OK) return st;
  p->pos++;
  return vec_push(p, seq, -1 - r);
}

static llb_status parse_item(struct gp *p, struct vec *seq, int c) {
  if (c == '"') return parse_literal(p, seq);
  if (c == '[') return parse_class(p, seq);
  if (c == '(') return parse_group(p, seq);
  if (c == '.') {
    p->pos++;
    llb_status st = LLB_STATUS_OK;
    if (p->any_class < 0) {
      uint32_t r[2] = {0, GBNF_MAX_CP};
      st = add_class(p, r, 1, false, &p->any_class);
    }
    return st == LLB_STATUS_OK ? vec_push(p, seq, p->any_class) : st;
  }
  if (is_name_char(c)) {
    size_t n = name_len_at(p, p->pos);
    int32_t r;
    llb_status st = rule_named(p, p->s + p->pos, n, &r);
    p->pos += n;
    return st == LLB_STATUS_OK ? vec_push(p, seq, -1 - r) : st;
  }
  if (c == '<' || c == '!')
    return fail(p, p->pos, LLB_STATUS_UNSUPPORTED, "token references (<...>, !<...>) are not supported");
  if (c == '\'')
    return fail(p, p->pos, LLB_STATUS_MALFORMED, "string literals are written in double quotes");
  return fail(p, p->pos, LLB_STATUS_MALFORMED, c >= 0x20 && c < 0x7f ? "unexpected '%c'" : "unexpected byte 0x%02x", c);
}

static llb_status parse_sequence(struct gp *p, struct vec *seq) {
  int32_t last = -1; /* where the last item starts in seq */
  for (;;) {
    skip_space(p);
    int c = peek(p, 0);
    if (c < 0 || c == ')' || c == '|' || at_rule_start(p)) return LLB_STATUS_OK;
    llb_status st;
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last < 0) return fail(p, p->pos, LLB_STATUS_MALFORMED, "'%c' repeats nothing", c);
      int64_t min = c == '+', max = c == '?' ? 1 : -1;
      if (c == '{') st = parse_braces(p, &min, &max);
      else p->pos++, st = LLB_STATUS_OK;
      if (st == LLB_STATUS_OK) st = repeat(p, seq, last, min, max);
    } else {
      last = seq->n;
      st = parse_item(p, seq, c);
    }
    if (st != LLB_STATUS_OK) return st;
  }
}

static llb_status parse_alternates(struct gp *p, int32_t rule) {
  for (;;) {
    struct vec seq = {0};
    llb_status st = parse_sequence(p, &seq);
    if (st == LLB_STATUS_OK) st = add_alt(p, rule, &seq);
    free(seq.v);
    if (st != LLB_STATUS_OK) return st;
    if (peek(p, 0) != '|') return LLB_STATUS_OK;
    p->pos++;
  }
}

static llb_status parse_rule(struct gp *p) {
  const size_t at = p->pos;
  size_t n = name_len_at(p, at);
  if (n == 0) return fail(p, at, LLB_STATUS_MALFORMED, "expecting a rule name");
  if (!at_rule_start(p)) {
    size_t i = at + n;
    while (i < p->len && (p->s[i] == ' ' || p->s[i] == '\t')) i++;
    if (i < p->len && p->s[i] == ':')
      return fail(p, i, LLB_STATUS_UNSUPPORTED, "expecting '::=' (Lark syntax is not supported: write GBNF/EBNF rules, "
                  "`root ::= ...`)");
    return fail(p, i, LLB_STATUS_MALFORMED, "expecting '::=' after the rule name");
  }
  int32_t r;
  llb_status st = rule_named(p, p->s + at, n, &r);
  if (st != LLB_STATUS_OK) return st;
  if (p->rules[r].defined) return fail(p, at, LLB_STATUS_MALFORMED, "rule '%.*s' defined twice", (int)n, p->s + at);
  p->rules[r].defined = true;
  where(p, at, &p->rules[r].line, &p->rules[r].col);
  p->owner = r;
  size_t i = at + n;
  while (p->s[i] != ':') i++; /* at_rule_start saw the "::=" after spaces */
  p->pos = i + 3;
  st = parse_alternates(p, r);
  if (st == LLB_STATUS_OK && peek(p, 0) == ')') st = fail(p, p->pos, LLB_STATUS_MALFORMED, "unbalanced ')'");
  return st;
}

void so_gbnf_free(struct so_gbnf *gb) {
  if (!gb) return;
  free(gb->elems);
  free(gb->alts);
  free(gb->rule_alts);
  free(gb->ranges);
  free(gb->class_ranges);
  free(gb->class_ascii);
  free(gb->nullable_from);
  free(gb->first_from);
  free(gb);
}

static void gp_free(struct gp *p) {
  for (int32_t i = 0; i < p->n_rules; i++) {
    for (int32_t j = 0; j < p->rules[i].n_alts; j++) free(p->rules[i].alts[j].v);
    free(p->rules[i].alts);
    free(p->rules[i].name);
  }
  free(p->rules);
  free(p->ranges);
  free(p->class_start);
  llb_strmap_destroy(p->named);
}

/* The parsed rules, back to back, behind the start [REF root, END]. */
static llb_status flatten(const struct gp *p, int32_t root, struct so_gbnf *gb) {
  int64_t n_elems = 2, n_alts = 0;
  for (int32_t r = 0; r < p->n_rules; r++) {
    n_alts += p->rules[r].n_alts;
    for (int32_t a = 0; a < p->rules[r].n_alts; a++) n_elems += p->rules[r].alts[a].n + 1;
  }
  gb->n_rules = p->n_rules;
  gb->n_alts = (int32_t)n_alts;
  gb->n_classes = p->n_classes;
  gb->elems = malloc(sizeof(*gb->elems) * (size_t)n_elems);
  gb->alts = malloc(sizeof(int32_t) * (size_t)(n_alts + 1));
  gb->rule_alts = malloc(sizeof(int32_t) * ((size_t)p->n_rules + 1));
  gb->ranges = malloc(sizeof(uint32_t) * 2 * ((size_t)p->n_ranges + 1));
  gb->class_ranges = malloc(sizeof(int32_t) * ((size_t)p->n_classes + 1));
  gb->class_ascii = calloc((size_t)p->n_classes + 1, 4 * sizeof(uint32_t));
  if (!gb->elems || !gb->alts || !gb->rule_alts || !gb->ranges || !gb->class_ranges || !gb->class_ascii) return oom();
  if (p->n_ranges) memcpy(gb->ranges, p->ranges, sizeof(uint32_t) * 2 * (size_t)p->n_ranges);
  gb->class_ranges[0] = 0;
  for (int32_t k = 0; k < p->n_classes; k++) {
    gb->class_ranges[k + 1] = p->class_start[k + 1];
    for (int32_t i = p->class_start[k]; i < p->class_start[k + 1]; i++)
      for (uint32_t c = p->ranges[2 * i]; c <= p->ranges[2 * i + 1] && c < 128; c++)
        gb->class_ascii[4 * k + c / 32] |= 1u << (c % 32);
  }
  int32_t e = 0, k = 0;
  gb->elems[e++] = (struct so_gbnf_elem){SO_GBNF_REF, root};
  gb->elems[e++] = (struct so_gbnf_elem){SO_GBNF_END, 0};
  for (int32_t r = 0; r < p->n_rules; r++) {
    gb->rule_alts[r] = k;
    for (int32_t a = 0; a < p->rules[r].n_alts; a++) {
      gb->alts[k++] = e;
      const struct vec *q = &p->rules[r].alts[a];
      for (int32_t i = 0; i < q->n; i++)
        gb->elems[e++] = q->v[i] >= 0 ? (struct so_gbnf_elem){SO_GBNF_CHARS, q->v[i]}
                                       : (struct so_gbnf_elem){SO_GBNF_REF, -1 - q->v[i]};
      gb->elems[e++] = (struct so_gbnf_elem){SO_GBNF_END, 0};
    }
  }
  gb->rule_alts[p->n_rules] = k;
  gb->n_elems = e;
  return LLB_STATUS_OK;
}

/* Parses, checks the references, flattens and analyses (so_gbnf_check.c). */
static llb_status compile_gbnf(struct gp *p, struct so_gbnf **out) {
  skip_space(p);
  if (at_end(p)) return LLB_ERRF(LLB_STATUS_MALFORMED, "grammar is empty (expecting `root ::= ...`)");
  bool has_rule = false;
  for (size_t i = 0; i + 3 <= p->len && !has_rule; i++) has_rule = memcmp(p->s + i, "::=", 3) == 0;
  if (!has_rule)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "grammar has no `name ::= ...` rule: GBNF/EBNF (llama.cpp's and "
                    "xgrammar's dialect, `root ::= ...`) is accepted; Lark syntax is not supported");
  llb_status st = LLB_STATUS_OK;
  while (st == LLB_STATUS_OK && (skip_space(p), !at_end(p))) st = parse_rule(p);
  if (st != LLB_STATUS_OK) return st;
  int32_t root = -1;
  for (int32_t r = 0; r < p->n_rules; r++) {
    const struct prule *ru = &p->rules[r];
    if (!ru->defined) {
      int32_t line = ru->line, col = ru->col;
      return LLB_ERRF(LLB_STATUS_MALFORMED, "grammar line %d column %d: undefined rule '%s'", line, col, ru->name);
    }
    if (ru->name && strcmp(ru->name, "root") == 0) root = r;
  }
  if (root < 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "grammar has no rule named 'root' (the whole output)");
  struct so_gbnf *gb = calloc(1, sizeof(*gb));
  const char **names = calloc((size_t)p->n_rules, sizeof(char *));
  int32_t *info = malloc(sizeof(int32_t) * 3 * (size_t)p->n_rules);
  if (!gb || !names || !info) st = oom();
  else st = flatten(p, root, gb);
  if (st == LLB_STATUS_OK) {
    for (int32_t r = 0; r < p->n_rules; r++) {
      names[r] = p->rules[r].name;
      info[r] = p->rules[r].owner;
      info[p->n_rules + r] = p->rules[r].line;
      info[2 * p->n_rules + r] = p->rules[r].col;
    }
    st = so_gbnf_check(gb, names, info, info + p->n_rules, info + 2 * p->n_rules);
  }
  free(names);
  free(info);
  if (st != LLB_STATUS_OK) {
    so_gbnf_free(gb);
    return st;
  }
  *out = gb;
  return LLB_STATUS_OK;
}

llb_status so_gbnf_compile(const char *text, size_t len, struct so_gbnf **out) {
  *out = NULL;
  if (len > SO_MAX_SPEC_BYTES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "grammar of %zu bytes (at most %d)", len, SO_MAX_SPEC_BYTES);
  struct gp p = {.s = text, .len = len, .any_class = -1};
  memset(p.ascii_class, -1, sizeof p.ascii_class);
  llb_status st = llb_strmap_create(0, &p.named);
  if (st == LLB_STATUS_OK) st = compile_gbnf(&p, out);
  gp_free(&p);
  return st == LLB_STATUS_OK ? st : LLB_UPDATE_ERR_STACK(st);
}

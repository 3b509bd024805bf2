/* Regular expressions for structured output (vLLM's `regex` / guided_regex, and JSON Schema's
 * `pattern`): the pattern is parsed into a small syntax tree over bytes (UTF-8 characters
 * become byte sequences), built into a Thompson NFA and determinized into a byte DFA that the
 * matcher walks. By default the whole output must match (anchors implied, as vLLM/xgrammar);
 * with SO_REGEX_SEARCH (a schema's `pattern`, which JSON Schema reads as a search) a top-level
 * branch not anchored by ^ / $ may have any text before / after it. `.` and negated classes
 * match any valid UTF-8 character (but `.` not "\n"). Supported: literals, escapes (\d \w \s
 * \D \W \S, \n \t \r \f \v, \xHH, \uHHHH, escaped punctuation), classes with ranges,
 * groups ((...), (?:...), (?P<name>...), (?<name>...)), alternation, * + ? {m} {m,} {m,n}
 * (lazy forms alike), ^ at the start and $ at the end of the pattern or of a top-level
 * alternative. Refused as UNSUPPORTED, naming the construct: backreferences, lookaround, \b,
 * inline flags, anchors elsewhere, non-ASCII class ranges and non-ASCII members of negated
 * classes. Bounds: SO_RX_MAX_NFA NFA states, SO_RX_MAX_DFA DFA states, repetition counts up
 * to 1000 (TOO_LARGE past them). */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "model/structured/so_internal.h"

#define SO_RX_MAX_NFA 16384
#define SO_RX_MAX_DFA 2048
#define SO_RX_MAX_AST 4096 /* also bounds the builder's recursion depth */
#define SO_RX_MAX_REPEAT 1000

enum { RX_SET, RX_CAT, RX_ALT, RX_REP, RX_EMPTY };

struct rx_ast {
  uint8_t kind;
  int32_t a, b;       /* CAT / ALT children; REP: a */
  int32_t min, max;   /* REP; max -1 = unbounded */
  uint32_t set[8];    /* SET: the bytes */
};

struct rx_parser {
  const uint8_t *p, *end, *start;
  bool search; /* SO_REGEX_SEARCH */
  struct rx_ast *ast;
  int32_t n_ast;
  llb_status st;
};

static int32_t fail(struct rx_parser *ps, llb_status st, const char *what) {
  if (ps->st == LLB_STATUS_OK)
    ps->st = LLB_ERRF(st, "regex at offset %d: %s", (int)(ps->p - ps->start), what);
  return -1;
}

static int32_t node(struct rx_parser *ps, uint8_t kind, int32_t a, int32_t b) {
  if (ps->st) return -1;
  if (ps->n_ast == SO_RX_MAX_AST) return fail(ps, LLB_STATUS_TOO_LARGE, "pattern too large");
  struct rx_ast *n = &ps->ast[ps->n_ast];
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->a = a;
  n->b = b;
  return ps->n_ast++;
}

static void set_add(uint32_t *set, unsigned lo, unsigned hi) {
  for (unsigned c = lo; c <= hi; c++) set[c / 32] |= 1u << (c % 32);
}

static int32_t byte_set(struct rx_parser *ps, unsigned lo, unsigned hi) {
  int32_t n = node(ps, RX_SET, -1, -1);
  if (n >= 0) set_add(ps->ast[n].set, lo, hi);
  return n;
}

static int32_t cat(struct rx_parser *ps, int32_t a, int32_t b) {
  if (a < 0 || b < 0) return a < 0 ? b : a;
  return node(ps, RX_CAT, a, b);
}

static int32_t alt(struct rx_parser *ps, int32_t a, int32_t b) {
  if (a < 0 || b < 0) return a < 0 ? b : a;
  return node(ps, RX_ALT, a, b);
}

/* A byte sequence given as ranges: lo[i]..hi[i] for i < n. */
static int32_t seq(struct rx_parser *ps, const uint8_t *lo, const uint8_t *hi, int n) {
  int32_t r = -1;
  for (int i = 0; i < n; i++) r = cat(ps, r, byte_set(ps, lo[i], hi[i]));
  return r;
}

/* Any valid multi-byte UTF-8 character (RFC 3629 table). */
static int32_t any_multibyte(struct rx_parser *ps) {
  static const uint8_t rows[][2][4] = {
      {{0xc2, 0x80}, {0xdf, 0xbf}},
      {{0xe0, 0xa0, 0x80}, {0xe0, 0xbf, 0xbf}},
      {{0xe1, 0x80, 0x80}, {0xec, 0xbf, 0xbf}},
      {{0xed, 0x80, 0x80}, {0xed, 0x9f, 0xbf}},
      {{0xee, 0x80, 0x80}, {0xef, 0xbf, 0xbf}},
      {{0xf0, 0x90, 0x80, 0x80}, {0xf0, 0xbf, 0xbf, 0xbf}},
      {{0xf1, 0x80, 0x80, 0x80}, {0xf3, 0xbf, 0xbf, 0xbf}},
      {{0xf4, 0x80, 0x80, 0x80}, {0xf4, 0x8f, 0xbf, 0xbf}},
  };
  static const int lens[] = {2, 3, 3, 3, 3, 4, 4, 4};
  int32_t r = -1;
  for (int i = 0; i < 8; i++) r = alt(ps, r, seq(ps, rows[i][0], rows[i][1], lens[i]));
  return r;
}

/* The code point at ps->p (UTF-8, validated) as a byte sequence node; *cp gets its value. */
static int32_t utf8_char(struct rx_parser *ps, uint32_t *cp) {
  const uint8_t c = *ps->p;
  int len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (len == 0 || ps->end - ps->p < len) return fail(ps, LLB_STATUS_MALFORMED, "invalid UTF-8");
  uint32_t v = len == 1 ? c : c & (0xff >> (len + 1));
  for (int i = 1; i < len; i++) {
    if ((ps->p[i] & 0xc0) != 0x80) return fail(ps, LLB_STATUS_MALFORMED, "invalid UTF-8");
    v = v << 6 | (ps->p[i] & 0x3f);
  }
  int32_t r = -1;
  for (int i = 0; i < len; i++) r = cat(ps, r, byte_set(ps, ps->p[i], ps->p[i]));
  ps->p += len;
  *cp = v;
  return r;
}

/* The UTF-8 bytes of code point v as a node (v < 0x110000, not a surrogate). */
static int32_t code_point(struct rx_parser *ps, uint32_t v) {
  uint8_t b[4];
  int n;
  if (v >= 0xd800 && v <= 0xdfff) return fail(ps, LLB_STATUS_MALFORMED, "surrogate code point");
  if (v < 0x80) b[0] = (uint8_t)v, n = 1;
  else if (v < 0x800) b[0] = (uint8_t)(0xc0 | v >> 6), b[1] = (uint8_t)(0x80 | (v & 0x3f)), n = 2;
  else if (v < 0x10000)
    b[0] = (uint8_t)(0xe0 | v >> 12), b[1] = (uint8_t)(0x80 | (v >> 6 & 0x3f)), b[2] = (uint8_t)(0x80 | (v & 0x3f)), n = 3;
  else if (v < 0x110000)
    b[0] = (uint8_t)(0xf0 | v >> 18), b[1] = (uint8_t)(0x80 | (v >> 12 & 0x3f)),
    b[2] = (uint8_t)(0x80 | (v >> 6 & 0x3f)), b[3] = (uint8_t)(0x80 | (v & 0x3f)), n = 4;
  else return fail(ps, LLB_STATUS_MALFORMED, "code point out of range");
  return seq(ps, b, b, n);
}

static int hexval(uint8_t c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reads n hex digits. */
static bool hex(struct rx_parser *ps, int n, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < n; i++) {
    if (ps->p >= ps->end || hexval(*ps->p) < 0) return false;
    *v = *v << 4 | (uint32_t)hexval(*ps->p++);
  }
  return true;
}

/* The ASCII bytes of a class escape (\d \w \s); false when c is not one. */
static bool class_escape(uint8_t c, uint32_t *set) {
  switch (c | 0x20) {
  case 'd': set_add(set, '0', '9'); return true;
  case 'w': set_add(set, '0', '9'), set_add(set, 'a', 'z'), set_add(set, 'A', 'Z'), set_add(set, '_', '_'); return true;
  case 's': set_add(set, '\t', '\r'), set_add(set, ' ', ' '); return true; /* \t \n \v \f \r and space */
  default: return false;
  }
}

/* After a backslash outside a class's class escapes: the escaped code point (MALFORMED when
 * the pattern ends at the backslash). */
static bool escape_char(struct rx_parser *ps, uint32_t *v) {
  if (ps->p >= ps->end) {
    fail(ps, LLB_STATUS_MALFORMED, "a backslash at the end of the pattern");
    return false;
  }
  const uint8_t c = *ps->p++;
  switch (c) {
  case 'n': *v = '\n'; return true;
  case 't': *v = '\t'; return true;
  case 'r': *v = '\r'; return true;
  case 'f': *v = '\f'; return true;
  case 'v': *v = '\v'; return true;
  case '0': *v = 0; return true;
  case 'x': if (hex(ps, 2, v)) return true; fail(ps, LLB_STATUS_MALFORMED, "\\x needs two hex digits"); return false;
  case 'u': if (hex(ps, 4, v)) return true; fail(ps, LLB_STATUS_MALFORMED, "\\u needs four hex digits"); return false;
  default:
    if (c < 0x80 && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && !(c >= '1' && c <= '9')) {
      *v = c; /* escaped punctuation */
      return true;
    }
    fail(ps, LLB_STATUS_UNSUPPORTED, c == 'b' || c == 'B' ? "\\b word boundaries are not supported"
                                     : c >= '1' && c <= '9' ? "backreferences are not supported"
                                                            : "unknown escape");
    return false;
  }
}

static int32_t parse_alt(struct rx_parser *ps, int depth);

/* [...] after the '['. */
static int32_t parse_class(struct rx_parser *ps) {
  bool neg = ps->p < ps->end && *ps->p == '^';
  if (neg) ps->p++;
  uint32_t set[8] = {0};
  int32_t multi = -1; /* non-ASCII members (positive classes only) */
  bool first = true;
  while (ps->p < ps->end && (*ps->p != ']' || first)) {
    first = false;
    uint32_t lo;
    if (*ps->p == '\\') {
      ps->p++;
      if (ps->p >= ps->end) break;
      if (class_escape(*ps->p, set)) {
        if (*ps->p >= 'A' && *ps->p <= 'Z') return fail(ps, LLB_STATUS_UNSUPPORTED, "\\D \\W \\S inside a class");
        ps->p++;
        continue;
      }
      if (!escape_char(ps, &lo)) return -1;
    } else if (*ps->p >= 0x80) {
      if (neg) return fail(ps, LLB_STATUS_UNSUPPORTED, "non-ASCII characters in a negated class");
      int32_t ch = utf8_char(ps, &lo);
      if (ch < 0) return -1; /* invalid UTF-8 is not consumed: stop here, or the loop spins on it */
      if (ps->p < ps->end - 1 && *ps->p == '-' && ps->p[1] != ']')
        return fail(ps, LLB_STATUS_UNSUPPORTED, "non-ASCII ranges in a class");
      multi = alt(ps, multi, ch);
      continue;
    } else {
      lo = *ps->p++;
    }
    uint32_t hi = lo;
    if (ps->p < ps->end - 1 && *ps->p == '-' && ps->p[1] != ']') {
      ps->p++;
      if (*ps->p == '\\') {
        ps->p++;
        if (!escape_char(ps, &hi)) return -1;
      } else if (*ps->p >= 0x80) {
        return fail(ps, LLB_STATUS_UNSUPPORTED, "non-ASCII ranges in a class");
      } else {
        hi = *ps->p++;
      }
      if (hi < lo) return fail(ps, LLB_STATUS_MALFORMED, "class range out of order");
    }
    if (hi >= 0x80) {
      if (lo != hi || neg) return fail(ps, LLB_STATUS_UNSUPPORTED, "non-ASCII ranges in a class");
      multi = alt(ps, multi, code_point(ps, lo));
      continue;
    }
    set_add(set, lo, hi);
  }
  if (ps->p >= ps->end) return fail(ps, LLB_STATUS_MALFORMED, "unterminated class");
  ps->p++;
  int32_t r = node(ps, RX_SET, -1, -1);
  if (r < 0) return -1;
  for (int w = 0; w < 4; w++) ps->ast[r].set[w] = neg ? ~set[w] : set[w];
  if (neg) return alt(ps, r, any_multibyte(ps)); /* the ASCII complement, and every other character */
  return multi >= 0 ? alt(ps, r, multi) : r;
}

static int32_t parse_atom(struct rx_parser *ps, int depth) {
  const uint8_t c = *ps->p;
  if (c == '(') {
    ps->p++;
    if (ps->p < ps->end && *ps->p == '?') {
      ps->p++;
      if (ps->p < ps->end && *ps->p == ':') ps->p++;
      else if (ps->p < ps->end && (*ps->p == 'P' || *ps->p == '<') && !(ps->p + 1 < ps->end && (ps->p[1] == '=' || ps->p[1] == '!'))) {
        while (ps->p < ps->end && *ps->p != '>') ps->p++;
        if (ps->p >= ps->end) return fail(ps, LLB_STATUS_MALFORMED, "unterminated group name");
        ps->p++;
      } else {
        return fail(ps, LLB_STATUS_UNSUPPORTED, "lookaround and inline flags are not supported");
      }
    }
    int32_t r = parse_alt(ps, depth + 1);
    if (ps->st) return -1;
    if (ps->p >= ps->end || *ps->p != ')') return fail(ps, LLB_STATUS_MALFORMED, "missing )");
    ps->p++;
    return r >= 0 ? r : node(ps, RX_EMPTY, -1, -1);
  }
  if (c == '[') {
    ps->p++;
    return parse_class(ps);
  }
  if (c == '.') {
    ps->p++;
    int32_t r = byte_set(ps, 0, 0x7f);
    if (r >= 0) ps->ast[r].set['\n' / 32] &= ~(1u << ('\n' % 32));
    return alt(ps, r, any_multibyte(ps));
  }
  if (c == '^' || c == '$')
    return fail(ps, LLB_STATUS_UNSUPPORTED, "^ and $ only at the pattern's ends or those of its top-level alternatives");
  if (c == '*' || c == '+' || c == '?' || c == '{') return fail(ps, LLB_STATUS_MALFORMED, "nothing to repeat");
  if (c == '\\') {
    ps->p++;
    if (ps->p >= ps->end) return fail(ps, LLB_STATUS_MALFORMED, "trailing backslash");
    uint32_t set[8] = {0};
    if (class_escape(*ps->p, set)) {
      const bool upper = *ps->p >= 'A' && *ps->p <= 'Z';
      ps->p++;
      int32_t r = node(ps, RX_SET, -1, -1);
      if (r < 0) return -1;
      for (int w = 0; w < 4; w++) ps->ast[r].set[w] = upper ? ~set[w] : set[w];
      return upper ? alt(ps, r, any_multibyte(ps)) : r;
    }
    uint32_t v;
    if (!escape_char(ps, &v)) return -1;
    return code_point(ps, v);
  }
  uint32_t cp;
  return utf8_char(ps, &cp);
}

static bool read_int(struct rx_parser *ps, int32_t *v) {
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return false;
  int64_t x = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    x = x * 10 + (*ps->p++ - '0');
    if (x > SO_RX_MAX_REPEAT) x = SO_RX_MAX_REPEAT + 1;
  }
  *v = (int32_t)x;
  return true;
}

static int32_t parse_repeat(struct rx_parser *ps, int depth) {
  int32_t r = parse_atom(ps, depth);
  while (r >= 0 && ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' || *ps->p == '{')) {
    int32_t min = 0, max = -1;
    const uint8_t c = *ps->p++;
    if (c == '+') min = 1;
    else if (c == '?') max = 1;
    else if (c == '{') {
      if (!read_int(ps, &min)) return fail(ps, LLB_STATUS_MALFORMED, "bad {m,n}");
      max = min;
      if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        max = -1;
        if (ps->p < ps->end && *ps->p != '}' && !read_int(ps, &max)) return fail(ps, LLB_STATUS_MALFORMED, "bad {m,n}");
      }
      if (ps->p >= ps->end || *ps->p != '}') return fail(ps, LLB_STATUS_MALFORMED, "bad {m,n}");
      ps->p++;
      if (min > SO_RX_MAX_REPEAT || max > SO_RX_MAX_REPEAT) return fail(ps, LLB_STATUS_TOO_LARGE, "repetition over 1000");
      if (max >= 0 && max < min) return fail(ps, LLB_STATUS_MALFORMED, "{m,n} with n < m");
    }
    if (ps->p < ps->end && *ps->p == '?') ps->p++; /* lazy: the same language */
    else if (ps->p < ps->end && *ps->p == '+') return fail(ps, LLB_STATUS_UNSUPPORTED, "possessive quantifiers");
    int32_t n = node(ps, RX_REP, r, -1);
    if (n < 0) return -1;
    ps->ast[n].min = min;
    ps->ast[n].max = max;
    r = n;
  }
  return r;
}

/* Any text: (.|\n)* */
static int32_t any_text(struct rx_parser *ps) {
  int32_t r = node(ps, RX_REP, alt(ps, byte_set(ps, 0, 0x7f), any_multibyte(ps)), -1);
  if (r >= 0) ps->ast[r].min = 0, ps->ast[r].max = -1;
  return r;
}

static int32_t parse_alt(struct rx_parser *ps, int depth) {
  if (depth > 64) return fail(ps, LLB_STATUS_TOO_LARGE, "groups nested too deep");
  int32_t r = -1;
  bool have = false;
  for (;;) {
    int32_t seq_r = -1;
    bool head = depth == 0 && ps->p < ps->end && *ps->p == '^', tail = false;
    if (head) ps->p++;
    while (!ps->st && ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
      if (depth == 0 && *ps->p == '$' && (ps->p + 1 == ps->end || ps->p[1] == '|')) {
        ps->p++;
        tail = true;
        break;
      }
      seq_r = cat(ps, seq_r, parse_repeat(ps, depth));
    }
    if (ps->st) return -1;
    if (seq_r < 0) seq_r = node(ps, RX_EMPTY, -1, -1);
    if (ps->search && depth == 0 && !head) seq_r = cat(ps, any_text(ps), seq_r);
    if (ps->search && depth == 0 && !tail) seq_r = cat(ps, seq_r, any_text(ps));
    r = have ? alt(ps, r, seq_r) : seq_r;
    have = true;
    if (ps->p < ps->end && *ps->p == '|') {
      ps->p++;
      continue;
    }
    return r;
  }
}

/* ---- NFA (Thompson) ---- */

struct nfa_state {
  uint8_t lo, hi;   /* byte edge lo..hi to `next` when next >= 0 */
  int32_t next;
  int32_t eps[2];   /* epsilon edges, -1 = none */
};

struct nfa {
  struct nfa_state *s;
  int32_t n;
  llb_status st;
};

static int32_t nfa_new(struct nfa *a) {
  if (a->st) return -1;
  if (a->n == SO_RX_MAX_NFA) {
    a->st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "regex needs more than %d NFA states", SO_RX_MAX_NFA);
    return -1;
  }
  a->s[a->n] = (struct nfa_state){.next = -1, .eps = {-1, -1}};
  return a->n++;
}

static void eps(struct nfa *a, int32_t from, int32_t to) {
  if (a->st) return;
  struct nfa_state *s = &a->s[from];
  s->eps[s->eps[0] < 0 ? 0 : 1] = to;
}

/* Builds ast node i as a fragment start -> end. */
static bool build(struct nfa *a, const struct rx_ast *ast, int32_t i, int32_t *start, int32_t *end) {
  const struct rx_ast *n = &ast[i];
  int32_t s = nfa_new(a), e = nfa_new(a);
  if (a->st) return false;
  *start = s;
  *end = e;
  switch (n->kind) {
  case RX_EMPTY: eps(a, s, e); return true;
  case RX_SET: { /* one byte edge per run of consecutive bytes, reached through a chain of splits */
    int32_t from = s;
    for (int c = 0; c < 256;) {
      if (!(n->set[c / 32] >> (c % 32) & 1u)) {
        c++;
        continue;
      }
      const int lo = c;
      while (c < 256 && (n->set[c / 32] >> (c % 32) & 1u)) c++;
      int32_t edge = nfa_new(a);
      if (a->st) return false;
      a->s[edge].lo = (uint8_t)lo;
      a->s[edge].hi = (uint8_t)(c - 1);
      a->s[edge].next = e;
      eps(a, from, edge);
      bool more = false;
      for (int d = c; d < 256 && !more; d++) more = n->set[d / 32] >> (d % 32) & 1u;
      if (more) {
        int32_t split = nfa_new(a);
        eps(a, from, split);
        from = split;
      }
    }
    return !a->st;
  }
  case RX_CAT: {
    int32_t as, ae, bs, be;
    if (!build(a, ast, n->a, &as, &ae) || !build(a, ast, n->b, &bs, &be)) return false;
    eps(a, s, as);
    eps(a, ae, bs);
    eps(a, be, e);
    return true;
  }
  case RX_ALT: {
    int32_t as, ae, bs, be;
    if (!build(a, ast, n->a, &as, &ae) || !build(a, ast, n->b, &bs, &be)) return false;
    eps(a, s, as);
    eps(a, s, bs);
    eps(a, ae, e);
    eps(a, be, e);
    return true;
  }
  default: { /* RX_REP: min copies, then (max - min) optional ones or a loop */
    int32_t cur = s;
    for (int32_t k = 0; k < n->min; k++) {
      int32_t cs, ce;
      if (!build(a, ast, n->a, &cs, &ce)) return false;
      eps(a, cur, cs);
      cur = ce;
    }
    if (n->max < 0) {
      int32_t cs, ce, loop = nfa_new(a);
      if (!build(a, ast, n->a, &cs, &ce)) return false;
      eps(a, cur, loop);
      eps(a, loop, cs);
      eps(a, loop, e);
      eps(a, ce, loop);
      return !a->st;
    }
    for (int32_t k = n->min; k < n->max; k++) {
      int32_t cs, ce, split = nfa_new(a);
      if (!build(a, ast, n->a, &cs, &ce)) return false;
      eps(a, cur, split);
      eps(a, split, cs);
      eps(a, split, e); /* stop here */
      cur = ce;
    }
    eps(a, cur, e);
    return !a->st;
  }
  }
}

/* ---- DFA (subset construction over bitsets of NFA states) ---- */

/* The construction works on byte classes, not bytes: bytes that no NFA edge tells apart (no
 * edge's lo..hi range starts or ends between them) lead every NFA set to the same successor,
 * so each DFA state needs one closure per class (RE2's and regex-automata's "byte classes").
 * `work` counts everything the construction does in proportion to its size, in units of about
 * one closure step's time: closure steps, the classes an edge spans, and the set words cleared,
 * hashed and compared (streamed, SO_RX_WORDS_PER_STEP of them cost about one step). */
#define SO_RX_WORDS_PER_STEP 8
struct dfa_build {
  const struct nfa *a;
  size_t words;          /* uint64 words of one NFA-state set */
  uint64_t *sets;        /* [n_states * words] */
  int32_t *trans;        /* [n_states * 256] */
  int32_t n_states;
  int32_t *table;        /* [table_cap] state ids, -1 empty; private: keys are NFA-state bitsets, not u64 */
  int32_t table_cap;
  int32_t *stack;        /* [a->n] closure work list */
  int64_t work;          /* steps so far */
  uint8_t class_of[256]; /* byte -> class */
  int n_classes;
};

/* The work units of streaming one set's words once. */
static int64_t set_steps(const struct dfa_build *d) { return 1 + (int64_t)d->words / SO_RX_WORDS_PER_STEP; }

static void closure(struct dfa_build *d, uint64_t *set) {
  int32_t top = 0;
  for (size_t w = 0; w < d->words; w++)
    for (uint64_t bits = set[w]; bits; bits &= bits - 1) d->stack[top++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
  d->work += top + set_steps(d);
  while (top > 0) {
    const struct nfa_state *st = &d->a->s[d->stack[--top]];
    for (int k = 0; k < 2; k++) {
      const int32_t t = st->eps[k];
      if (t >= 0 && !(set[t / 64] >> (t % 64) & 1u)) {
        set[t / 64] |= 1ull << (t % 64);
        d->stack[top++] = t;
        d->work++;
      }
    }
  }
}

/* Byte classes from the edges' range boundaries: class_of[b] grows by one at every byte where
 * some edge's range begins or where one ended just before. */
static void byte_classes(struct dfa_build *d) {
  uint8_t cut[257] = {0};
  for (int32_t i = 0; i < d->a->n; i++) {
    const struct nfa_state *s = &d->a->s[i];
    if (s->next < 0) continue;
    cut[s->lo] = 1;
    cut[s->hi + 1] = 1;
  }
  int c = 0;
  for (int b = 0; b < 256; b++) {
    if (b > 0 && cut[b]) c++;
    d->class_of[b] = (uint8_t)c;
  }
  d->n_classes = c + 1;
}

static uint64_t set_hash(const uint64_t *set, size_t words) {
  uint64_t h = LLB_SPLITMIX64_GAMMA;
  for (size_t i = 0; i < words; i++) h = llb_fnv1a64_word(h, set[i]);
  return h ^ h >> 29;
}

/* The id of the DFA state with NFA set `set` (added when new); -1 when out of room (st set). */
static int32_t dfa_state(struct dfa_build *d, const uint64_t *set, llb_status *st) {
  size_t slot = (size_t)(set_hash(set, d->words) & (uint64_t)(d->table_cap - 1));
  for (; d->table[slot] >= 0; slot = (slot + 1) & (size_t)(d->table_cap - 1)) {
    d->work += set_steps(d);
    if (memcmp(d->sets + (size_t)d->table[slot] * d->words, set, d->words * 8) == 0) return d->table[slot];
  }
  if (d->n_states == SO_RX_MAX_DFA) {
    *st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "regex needs more than %d DFA states", SO_RX_MAX_DFA);
    return -1;
  }
  const int32_t id = d->n_states++;
  memcpy(d->sets + (size_t)id * d->words, set, d->words * 8);
  d->table[slot] = id;
  return id;
}

/* The successors of DFA state i on every class at once, in nexts[class * words]; has[class]
 * says which are non-empty. */
static void successors(struct dfa_build *d, int32_t i, uint64_t *nexts, uint8_t *has) {
  memset(nexts, 0, (size_t)d->n_classes * d->words * 8);
  memset(has, 0, (size_t)d->n_classes);
  d->work += d->n_classes * set_steps(d);
  const uint64_t *cur = d->sets + (size_t)i * d->words;
  for (size_t w = 0; w < d->words; w++)
    for (uint64_t bits = cur[w]; bits; bits &= bits - 1) {
      const struct nfa_state *s = &d->a->s[w * 64 + (size_t)__builtin_ctzll(bits)];
      if (s->next < 0) continue;
      const int c_hi = d->class_of[s->hi];
      for (int c = d->class_of[s->lo]; c <= c_hi; c++) {
        nexts[(size_t)c * d->words + (size_t)s->next / 64] |= 1ull << (s->next % 64);
        has[c] = 1;
      }
      d->work += c_hi - d->class_of[s->lo] + 1;
    }
}

/* Adds the DFA states reachable from state i and fills its row of d->trans. */
static llb_status expand(struct dfa_build *d, int32_t i, uint64_t *nexts, uint8_t *has, int64_t budget) {
  llb_status st = LLB_STATUS_OK;
  int32_t to[256];
  successors(d, i, nexts, has);
  for (int c = 0; c < d->n_classes && st == LLB_STATUS_OK; c++) {
    to[c] = -1;
    if (has[c]) {
      closure(d, nexts + (size_t)c * d->words);
      to[c] = dfa_state(d, nexts + (size_t)c * d->words, &st);
    }
    if (d->work > budget) st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "regex too complex to determinize");
  }
  if (st == LLB_STATUS_OK)
    for (int b = 0; b < 256; b++) d->trans[(size_t)i * 256 + (size_t)b] = to[d->class_of[b]];
  return st;
}

static llb_status determinize(const struct nfa *a, int32_t start, int32_t final, int64_t budget, struct so_dfa *out,
                              int64_t *used) {
  struct dfa_build d = {.a = a, .words = ((size_t)a->n + 63) / 64, .table_cap = 2 * SO_RX_MAX_DFA * 2};
  llb_status st = LLB_STATUS_OK;
  byte_classes(&d);
  d.sets = calloc((size_t)SO_RX_MAX_DFA * d.words, 8);
  d.trans = malloc((size_t)SO_RX_MAX_DFA * 256 * sizeof(int32_t));
  d.table = malloc((size_t)d.table_cap * sizeof(int32_t));
  d.stack = malloc((size_t)a->n * sizeof(int32_t));
  uint64_t *next = calloc(d.words, 8), *nexts = malloc((size_t)d.n_classes * d.words * 8);
  uint8_t has[256];
  if (!d.sets || !d.trans || !d.table || !d.stack || !next || !nexts) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "regex DFA");
    goto done;
  }
  memset(d.table, 0xff, (size_t)d.table_cap * sizeof(int32_t));
  next[start / 64] |= 1ull << (start % 64);
  closure(&d, next);
  dfa_state(&d, next, &st);
  for (int32_t i = 0; i < d.n_states && st == LLB_STATUS_OK; i++) st = expand(&d, i, nexts, has, budget);
  if (st == LLB_STATUS_OK) {
    out->next = realloc(d.trans, (size_t)d.n_states * 256 * sizeof(int32_t));
    if (!out->next) out->next = d.trans;
    d.trans = NULL;
    out->accept = malloc((size_t)d.n_states);
    if (!out->accept) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "regex DFA");
      goto done;
    }
    for (int32_t i = 0; i < d.n_states; i++)
      out->accept[i] = (uint8_t)(d.sets[(size_t)i * d.words + (size_t)final / 64] >> (final % 64) & 1u);
    out->n = d.n_states;
    st = so_dfa_trim(out);
  }
done:
  *used = d.work;
  free(d.sets);
  free(d.trans);
  free(d.table);
  free(d.stack);
  free(next);
  free(nexts);
  return st;
}

llb_status so_regex_compile(const char *text, size_t len, unsigned flags, int64_t *work, struct so_dfa *out) {
  so_dfa_free(out);
  if (len > SO_MAX_SPEC_BYTES) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "regex of %zu bytes, at most %d", len, SO_MAX_SPEC_BYTES);
  struct rx_parser ps = {.p = (const uint8_t *)text, .end = (const uint8_t *)text + len, .start = (const uint8_t *)text,
                         .search = (flags & SO_REGEX_SEARCH) != 0};
  struct nfa a = {0};
  ps.ast = malloc(SO_RX_MAX_AST * sizeof(*ps.ast));
  a.s = malloc(SO_RX_MAX_NFA * sizeof(*a.s));
  llb_status st = LLB_STATUS_OK;
  if (!ps.ast || !a.s) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "regex");
    goto done;
  }
  int32_t root = parse_alt(&ps, 0);
  if (!ps.st && ps.p < ps.end) fail(&ps, LLB_STATUS_MALFORMED, "unbalanced )");
  if ((st = ps.st)) goto done;
  int32_t start, end;
  if (!build(&a, ps.ast, root, &start, &end)) {
    st = a.st;
    goto done;
  }
  int64_t used = 0;
  st = determinize(&a, start, end, work ? *work : SO_REGEX_MAX_WORK, out, &used);
  if (work) *work -= used;
  if (st != LLB_STATUS_OK) so_dfa_free(out);
done:
  free(ps.ast);
  free(a.s);
  return st;
}

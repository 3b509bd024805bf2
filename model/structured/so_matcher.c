/* The byte-level pushdown matcher of structured output: a set of stacks (the grammar is
 * ambiguous only where anyOf alternatives or a maybe-finished number/literal leave several
 * readings open), each advanced byte by byte. Grammar of JSON: RFC 8259, compact. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#include "model/structured/so_internal.h"

/* Object phases */
enum { OB_OPEN, OB_FIRST, OB_COLON, OB_VALUE, OB_AFTER, OB_NEXT };
/* Array phases */
enum { AR_OPEN, AR_FIRST, AR_VALUE, AR_AFTER };
/* String phases (keys share them) */
enum { ST_OPEN, ST_BODY, ST_ESC, ST_U1, ST_U2, ST_U3, ST_U4, ST_UTF8 };
/* Number phases */
enum { NU_START, NU_MINUS, NU_ZERO, NU_INT, NU_DOT, NU_FRAC, NU_EXP, NU_EXP_SIGN, NU_EXP_DIGITS };

#define SO_KEY_FREE 0x80u

/* anyOf expansions per byte and stack: a hostile schema (a DAG of anyOf over shared $refs)
 * could otherwise make one byte cost exponential time. Past it readings are dropped, which
 * only narrows what may follow. */
#define SO_MAX_EXPANSIONS 512
/* GBNF rule entries per byte over all stacks together: nested repetitions ("x+"+ ...) reach
 * every stack's cap at once, and each entry walks the stack (155 ms a mask step over a
 * 49k vocabulary at 512 per stack; found by fuzz_gbnf). Same rule: past it readings are
 * dropped, which only narrows what may follow. */
#define SO_MAX_GBNF_EXPANSIONS 128

struct feed_ctx {
  const struct so_grammar *g;
  struct so_state *out;
  int32_t expansions;      /* per stack */
  int32_t gbnf_expansions; /* per byte, all stacks */
};

static const struct so_node *node_of(const struct feed_ctx *c, int32_t i) { return &c->g->nodes[i]; }

static void emit(struct feed_ctx *c, const struct so_stack *st) {
  size_t bytes = (size_t)st->depth * sizeof(struct so_frame);
  for (int32_t i = 0; i < c->out->n; i++) {
    const struct so_stack *o = &c->out->s[i];
    if (o->depth == st->depth && memcmp(o->f, st->f, bytes) == 0) return;
  }
  /* Dropping a reading only narrows what may follow: the output stays valid. */
  if (c->out->n == SO_MAX_STACKS) return;
  struct so_stack *d = &c->out->s[c->out->n++];
  d->depth = st->depth;
  memcpy(d->f, st->f, bytes);
}

static void stack_copy(struct so_stack *dst, const struct so_stack *src) {
  dst->depth = src->depth;
  memcpy(dst->f, src->f, (size_t)src->depth * sizeof(struct so_frame));
}

static bool push(struct so_stack *st, uint8_t kind, int32_t node) {
  if (st->depth == SO_MAX_DEPTH) return false;
  struct so_frame *f = &st->f[st->depth++];
  memset(f, 0, sizeof(*f));
  f->kind = kind;
  f->node = node;
  return true;
}

/* Counts past every bound they are compared with are clamped, so that states that behave
 * the same are equal (fewer stacks, and the vocabulary's mask cache hits inside long
 * strings and arrays). */
static uint32_t clamp_count(uint32_t n, int64_t min, int64_t max) {
  return max < 0 && (int64_t)n > min ? (uint32_t)min : n;
}

/* Pops a finished value and tells its container. */
static void pop_value(const struct so_grammar *g, struct so_stack *st) {
  st->depth--;
  if (st->depth == 0) return;
  struct so_frame *p = &st->f[st->depth - 1];
  if (p->kind == SO_FR_OBJECT && p->phase == OB_VALUE) p->phase = OB_AFTER;
  else if (p->kind == SO_FR_ARRAY && p->phase == AR_VALUE) {
    const struct so_node *nd = &g->nodes[p->node];
    const int64_t floor = nd->min_items > nd->n_children ? nd->min_items : nd->n_children;
    p->n = clamp_count(p->n + 1, floor, nd->max_items);
    p->phase = AR_AFTER;
  }
}


static bool is_hex(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

enum str_result { STR_REJECT, STR_CONT, STR_CHAR, STR_CLOSE };

/* One byte of a JSON string body (after the opening quote). STR_CHAR: a code point ended. */
static enum str_result str_step(struct so_frame *f, uint8_t b) {
  switch (f->phase) {
  case ST_BODY:
    if (b == '"') return STR_CLOSE;
    if (b == '\\') {
      f->phase = ST_ESC;
      return STR_CONT;
    }
    if (b < 0x20 || b == 0x7f) return STR_REJECT;
    if (b < 0x80) return STR_CHAR;
    /* UTF-8 lead bytes; flags: rule for the first continuation (RFC 3629 table) */
    if (b >= 0xc2 && b <= 0xdf) f->aux = 1, f->flags = (uint8_t)(f->flags & ~7u);
    else if (b >= 0xe0 && b <= 0xef) {
      f->aux = 2;
      f->flags = (uint8_t)((f->flags & ~7u) | (b == 0xe0 ? 1u : b == 0xed ? 2u : 0u));
    } else if (b >= 0xf0 && b <= 0xf4) {
      f->aux = 3;
      f->flags = (uint8_t)((f->flags & ~7u) | (b == 0xf0 ? 3u : b == 0xf4 ? 4u : 0u));
    } else return STR_REJECT;
    f->phase = ST_UTF8;
    return STR_CONT;
  case ST_UTF8: {
    uint8_t lo = 0x80, hi = 0xbf;
    switch (f->flags & 7u) {
    case 1: lo = 0xa0; break;
    case 2: hi = 0x9f; break;
    case 3: lo = 0x90; break;
    case 4: hi = 0x8f; break;
    default: break;
    }
    if (b < lo || b > hi) return STR_REJECT;
    f->flags = (uint8_t)(f->flags & ~7u);
    if (--f->aux > 0) return STR_CONT;
    f->phase = ST_BODY;
    return STR_CHAR;
  }
  case ST_ESC:
    if (b == 'u') {
      f->phase = ST_U1;
      return STR_CONT;
    }
    if (!strchr("\"\\/bfnrt", b) || b == 0) return STR_REJECT;
    f->phase = ST_BODY;
    return STR_CHAR;
  case ST_U1:
    if (!is_hex(b)) return STR_REJECT;
    f->aux = (b == 'd' || b == 'D'); /* D800-DFFF are surrogates: refused below */
    f->phase = ST_U2;
    return STR_CONT;
  case ST_U2:
    if (!is_hex(b)) return STR_REJECT;
    if (f->aux && !(b >= '0' && b <= '7')) return STR_REJECT;
    f->aux = 0;
    f->phase = ST_U3;
    return STR_CONT;
  case ST_U3:
    if (!is_hex(b)) return STR_REJECT;
    f->phase = ST_U4;
    return STR_CONT;
  case ST_U4:
    if (!is_hex(b)) return STR_REJECT;
    f->phase = ST_BODY;
    return STR_CHAR;
  default: return STR_REJECT;
  }
}

/* Number grammar; returns the next phase or -1. */
static int num_step(int phase, uint8_t b, bool integer) {
  bool digit = b >= '0' && b <= '9';
  switch (phase) {
  case NU_START:
    if (b == '-') return NU_MINUS;
    /* fall through */
  case NU_MINUS: return b == '0' ? NU_ZERO : digit ? NU_INT : -1;
  case NU_INT:
    if (digit) return NU_INT;
    /* fall through */
  case NU_ZERO:
    if (integer) return -1;
    return b == '.' ? NU_DOT : (b == 'e' || b == 'E') ? NU_EXP : -1;
  case NU_DOT: return digit ? NU_FRAC : -1;
  case NU_FRAC:
    if (digit) return NU_FRAC;
    return (b == 'e' || b == 'E') ? NU_EXP : -1;
  case NU_EXP:
    if (b == '+' || b == '-') return NU_EXP_SIGN;
    /* fall through */
  case NU_EXP_SIGN:
  case NU_EXP_DIGITS: return digit ? NU_EXP_DIGITS : -1;
  default: return -1;
  }
}

static bool num_complete(int phase) {
  return phase == NU_ZERO || phase == NU_INT || phase == NU_FRAC || phase == NU_EXP_DIGITS;
}

/* Literals of node still matching after n bytes with candidates mask: is one exactly done? */
static bool lit_complete(const struct so_node *nd, uint64_t mask, uint32_t n) {
  for (int32_t i = 0; i < nd->n_lits; i++)
    if ((mask >> i & 1u) && nd->lit_lens[i] == n) return true;
  return false;
}

/* An object frame: mask = named properties seen, n = other keys seen (counted under
 * maxProperties; under minProperties alone only whether there was one, so that states compare
 * equal otherwise). Other keys count as one property towards minProperties: two could be the
 * same key (so_schema.c compiles minProperties only where that is exact). */
static bool object_can_close(const struct so_node *nd, const struct so_frame *f) {
  return (f->mask & nd->required_mask) == nd->required_mask &&
         __builtin_popcountll(f->mask) + (f->n > 0) >= nd->min_props;
}

/* Room for one more key that is not required, with every missing required key after it? */
static bool object_room_for_optional(const struct so_node *nd, const struct so_frame *f) {
  if (nd->max_props < 0) return true;
  const int64_t missing = __builtin_popcountll(nd->required_mask & ~f->mask);
  return __builtin_popcountll(f->mask) + (int64_t)f->n + 1 + missing <= nd->max_props;
}

/* Can another key still come? (a missing required property, or room and an unused property
 * or free-form keys) */
static bool object_key_possible(const struct so_node *nd, const struct so_frame *f) {
  if (nd->required_mask & ~f->mask) return true;
  if (!object_room_for_optional(nd, f)) return false;
  if (nd->additional >= 0) return true;
  for (int32_t i = 0; i < nd->n_props; i++)
    if (!(f->mask >> i & 1u) && nd->props[i].node >= 0) return true;
  return false;
}

static void feed(struct feed_ctx *c, struct so_stack *st, uint8_t b);
static bool gbnf_stack_complete(const struct so_grammar *g, const struct so_stack *s);

static void feed_value(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  if (nd->kind == SO_NODE_ANY_OF) {
    if (++c->expansions > SO_MAX_EXPANSIONS) return;
    struct so_stack alt;
    for (int32_t i = 0; i < nd->n_children; i++) {
      stack_copy(&alt, st);
      alt.f[alt.depth - 1].node = nd->children[i];
      feed_value(c, &alt, b);
    }
    return;
  }
  static const uint8_t kinds[] = {
      [SO_NODE_OBJECT] = SO_FR_OBJECT, [SO_NODE_ARRAY] = SO_FR_ARRAY,
      [SO_NODE_STRING] = SO_FR_STRING, [SO_NODE_NUMBER] = SO_FR_NUMBER,
      [SO_NODE_INTEGER] = SO_FR_NUMBER, [SO_NODE_LITERALS] = SO_FR_LIT, [SO_NODE_REGEX] = SO_FR_REGEX,
      [SO_NODE_GBNF] = SO_FR_GBNF, [SO_NODE_NUMBER_DFA] = SO_FR_REGEX};
  f->kind = kinds[nd->kind];
  f->phase = 0;
  f->mask = nd->kind == SO_NODE_LITERALS ? (nd->n_lits == 64 ? ~0ull : (1ull << nd->n_lits) - 1) : 0;
  feed(c, st, b);
}

static void start_key(struct feed_ctx *c, struct so_stack *st, const struct so_node *nd, int32_t obj_node) {
  if (!push(st, SO_FR_KEY, obj_node)) return;
  struct so_frame *k = &st->f[st->depth - 1];
  k->phase = ST_BODY;
  k->mask = nd->n_props == 64 ? ~0ull : (1ull << nd->n_props) - 1;
  /* free-form keys only while there is room for a key that is not required */
  if (nd->additional >= 0 && object_room_for_optional(nd, &st->f[st->depth - 2])) k->flags = SO_KEY_FREE;
  emit(c, st);
}

static void feed_object(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  switch (f->phase) {
  case OB_OPEN:
    if (b != '{') return;
    f->phase = OB_FIRST;
    emit(c, st);
    return;
  case OB_FIRST:
  case OB_AFTER:
    if (b == '}' && object_can_close(nd, f)) {
      pop_value(c->g, st);
      emit(c, st);
    } else if (f->phase == OB_FIRST && b == '"' && object_key_possible(nd, f)) {
      f->phase = OB_COLON; /* set for real when the key closes */
      start_key(c, st, nd, f->node);
    } else if (f->phase == OB_AFTER && b == ',' && object_key_possible(nd, f)) {
      f->phase = OB_NEXT;
      emit(c, st);
    }
    return;
  case OB_NEXT:
    if (b != '"') return;
    f->phase = OB_COLON;
    start_key(c, st, nd, f->node);
    return;
  case OB_COLON: {
    if (b != ':') return;
    int32_t prop = (int32_t)f->n2;
    int32_t value = prop >= 0 ? nd->props[prop].node : nd->additional;
    f->phase = OB_VALUE;
    if (!push(st, SO_FR_VALUE, value)) return;
    emit(c, st);
    return;
  }
  default: return;
  }
}

static int hex_digit(uint8_t b) {
  return b >= '0' && b <= '9' ? b - '0' : b >= 'a' && b <= 'f' ? b - 'a' + 10 : b >= 'A' && b <= 'F' ? b - 'A' + 10 : -1;
}

/* The code point of name at byte `at` (UTF-8, valid: it came from the parsed schema). */
static uint32_t name_code_point(const struct so_property *p, uint32_t at) {
  const uint8_t *s = (const uint8_t *)p->name + at;
  const int len = s[0] < 0x80 ? 1 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
  uint32_t v = len == 1 ? s[0] : s[0] & (0x7fu >> len);
  for (int i = 1; i < len && at + (uint32_t)i < p->name_len; i++) v = v << 6 | (s[i] & 0x3fu);
  return v;
}

/* Characters JSON must escape in a string (and DEL, which the matcher takes only escaped). */
static bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7f; }

/* Names of mask whose next code point after n bytes lies in [lo, hi] and must be escaped: what
 * an escape in a key may spell of a name. */
static uint64_t names_with_escaped_next(const struct so_node *nd, uint64_t mask, uint32_t n, uint32_t lo, uint32_t hi) {
  uint64_t m = 0;
  for (int32_t i = 0; i < nd->n_props; i++) {
    if (!(mask >> i & 1u) || nd->props[i].name_len <= n) continue;
    const uint32_t cp = name_code_point(&nd->props[i], n);
    if (cp >= lo && cp <= hi && needs_escape(cp)) m |= 1ull << i;
  }
  return m;
}

/* The names of mask that continue with d[0..len) after n bytes. */
static uint64_t names_continuing(const struct so_node *nd, uint64_t mask, uint32_t n, const uint8_t *d, int len) {
  uint64_t m = 0;
  for (int32_t i = 0; i < nd->n_props; i++)
    if ((mask >> i & 1u) && nd->props[i].name_len >= n + (size_t)len && memcmp(nd->props[i].name + n, d, (size_t)len) == 0)
      m |= 1ull << i;
  return m;
}

/* A key frame: mask = names its decoded text still matches, n = decoded bytes so far, n2 = the
 * hex digits of a \uXXXX escape being read. Names are compared decoded, so that a key that
 * spells a name another way ("\u0061" for "a") can never pass for a free-form key; and a name is
 * written as JSON writes it: an escape that spells a name's next character is refused unless
 * that character must be escaped. Once the key has left every name, anything goes. In a closed
 * object some unseen name whose value can be written stays possible at every byte. */
static void feed_key(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *k = &st->f[st->depth - 1];
  struct so_frame *obj = &st->f[st->depth - 2];
  const struct so_node *nd = node_of(c, k->node);
  const uint8_t phase = k->phase;
  if (phase == ST_BODY && b == '"') {
    int32_t match = -1;
    for (int32_t i = 0; i < nd->n_props && match < 0; i++)
      if ((k->mask >> i & 1u) && nd->props[i].name_len == k->n) match = i;
    if (match >= 0 && ((obj->mask >> match & 1u) || nd->props[match].node < 0)) return; /* twice, or forbidden */
    if (match < 0 && !(k->flags & SO_KEY_FREE)) return;
    const bool required = match >= 0 && (nd->required_mask >> match & 1u);
    if (!required && !object_room_for_optional(nd, obj)) return;
    if (match >= 0) obj->mask |= 1ull << match;
    else if (nd->max_props >= 0) obj->n++;
    else if (nd->min_props > 0) obj->n = 1;
    obj->n2 = (uint32_t)match;
    st->depth--;
    emit(c, st);
    return;
  }
  if (str_step(k, b) == STR_REJECT) return;
  uint8_t d[4];
  int len = 0;
  uint64_t m = k->mask;
  const bool closed = !(k->flags & SO_KEY_FREE);
  uint64_t usable = 0; /* unseen names whose value can be written (only required ones once full) */
  for (int32_t i = 0; i < nd->n_props; i++)
    if (!(obj->mask >> i & 1u) && nd->props[i].node >= 0) usable |= 1ull << i;
  if (!object_room_for_optional(nd, obj)) usable &= nd->required_mask;
  if ((phase == ST_BODY && b != '\\') || phase == ST_UTF8) {
    d[len++] = b; /* raw */
  } else if (phase == ST_ESC && b != 'u') {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    d[len++] = (uint8_t)to[strchr(from, b) - from];
  } else if (phase >= ST_U1 && phase <= ST_U4) {
    const uint32_t v = k->n2 << 4 | (uint32_t)hex_digit(b);
    if (phase < ST_U4) {
      k->n2 = v;
      const int left = 4 * (ST_U4 - phase);
      if (closed && !names_with_escaped_next(nd, m & usable, k->n, v << left, (v << left) | ((1u << left) - 1))) return;
    } else {
      k->n2 = 0;
      if (v < 0x80) d[len++] = (uint8_t)v;
      else if (v < 0x800) d[len++] = (uint8_t)(0xc0 | v >> 6), d[len++] = (uint8_t)(0x80 | (v & 0x3f));
      else d[len++] = (uint8_t)(0xe0 | v >> 12), d[len++] = (uint8_t)(0x80 | (v >> 6 & 0x3f)), d[len++] = (uint8_t)(0x80 | (v & 0x3f));
    }
  } else if (closed && !names_with_escaped_next(nd, m & usable, k->n, 0, 0xffff)) {
    return; /* '\\' or 'u': an escape must still be able to spell a name's next character */
  }
  if (len > 0) {
    const bool escaped = phase != ST_BODY && phase != ST_UTF8;
    m = names_continuing(nd, m, k->n, d, len);
    if (escaped && m && !needs_escape(d[0])) return; /* a name's character written as an escape */
    k->mask = m;
    k->n = m ? k->n + (uint32_t)len : 0; /* no name matches: the position no longer matters */
    if (closed && !(m & usable)) return;
  }
  emit(c, st);
}

static void feed_array(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  const int32_t elem = (int64_t)f->n < nd->n_children ? nd->children[f->n] : nd->items; /* prefixItems, then items */
  bool can_close = (int64_t)f->n >= nd->min_items;
  bool can_add = (nd->max_items < 0 || (int64_t)f->n < nd->max_items) && elem >= 0;
  switch (f->phase) {
  case AR_OPEN:
    if (b != '[') return;
    f->phase = AR_FIRST;
    emit(c, st);
    return;
  case AR_FIRST:
  case AR_AFTER:
    if (b == ']' && can_close) {
      pop_value(c->g, st);
      emit(c, st);
    } else if (f->phase == AR_FIRST && b != ']' && can_add) {
      f->phase = AR_VALUE;
      if (push(st, SO_FR_VALUE, elem)) feed(c, st, b);
    } else if (f->phase == AR_AFTER && b == ',' && can_add) {
      f->phase = AR_VALUE;
      if (push(st, SO_FR_VALUE, elem)) emit(c, st);
    }
    return;
  default: return;
  }
}

/* Steps the content DFA of a string frame (state in n2) by decoded bytes d[0..n). */
static bool content_step(const struct so_dfa *dfa, struct so_frame *f, const uint8_t *d, int n) {
  int32_t s = (int32_t)f->n2;
  for (int i = 0; i < n && s >= 0; i++) s = dfa->next[(size_t)s * 256 + d[i]];
  if (s < 0) return false;
  f->n2 = (uint32_t)s;
  return true;
}

/* A string whose decoded content must be in the node's DFA (pattern, format, lengths): raw
 * bytes and escapes are decoded and stepped through it; a \uXXXX escape is refused at the
 * first hex digit after which no code point it could still name is allowed (mask: the digits
 * so far). */
static void feed_string_dfa(struct feed_ctx *c, struct so_stack *st, const struct so_dfa *dfa, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  switch (f->phase) {
  case ST_BODY:
    if (b == '"') {
      if (!dfa->accept[f->n2]) return;
      pop_value(c->g, st);
      break;
    }
    if (b == '\\') { /* some character must still be possible: every one can be escaped (\\uXXXX) */
      if (!so_dfa_range_possible(dfa, (int32_t)f->n2, 0, 0xffff)) return;
      f->phase = ST_ESC;
    } else if (b < 0x20 || b == 0x7f || !content_step(dfa, f, &b, 1)) {
      return;
    }
    break;
  case ST_ESC: {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *at = b ? strchr(from, b) : NULL;
    if (b == 'u') {
      if (!so_dfa_range_possible(dfa, (int32_t)f->n2, 0, 0xffff)) return;
      f->phase = ST_U1;
      f->mask = 0;
      break;
    }
    if (!at || !content_step(dfa, f, (const uint8_t *)&to[at - from], 1)) return;
    f->phase = ST_BODY;
    break;
  }
  case ST_U1:
  case ST_U2:
  case ST_U3:
  case ST_U4: {
    const int h = hex_digit(b);
    if (h < 0) return;
    const uint32_t v = (uint32_t)(f->mask << 4) | (uint32_t)h;
    const int left = 4 * (ST_U4 - f->phase); /* bits of the code point still to come */
    const uint32_t lo = v << left, hi = lo | ((1u << left) - 1);
    if (!so_dfa_range_possible(dfa, (int32_t)f->n2, lo, hi)) return;
    if (f->phase < ST_U4) {
      f->mask = v;
      f->phase++;
      break;
    }
    uint8_t u[3];
    const int n = v < 0x80 ? 1 : v < 0x800 ? 2 : 3;
    if (n == 1) u[0] = (uint8_t)v;
    else if (n == 2) u[0] = (uint8_t)(0xc0 | v >> 6), u[1] = (uint8_t)(0x80 | (v & 0x3f));
    else u[0] = (uint8_t)(0xe0 | v >> 12), u[1] = (uint8_t)(0x80 | (v >> 6 & 0x3f)), u[2] = (uint8_t)(0x80 | (v & 0x3f));
    if (!content_step(dfa, f, u, n)) return;
    f->mask = 0;
    f->phase = ST_BODY;
    break;
  }
  default: return;
  }
  emit(c, st);
}

static void feed_string(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  if (f->phase != ST_OPEN && nd->dfa.n > 0) {
    feed_string_dfa(c, st, &nd->dfa, b);
    return;
  }
  if (f->phase == ST_OPEN) {
    if (b != '"') return;
    f->phase = ST_BODY;
    emit(c, st);
    return;
  }
  bool full = nd->max_length >= 0 && (int64_t)f->n >= nd->max_length;
  if (f->phase == ST_BODY && b != '"' && full) return;
  switch (str_step(f, b)) {
  case STR_REJECT: return;
  case STR_CLOSE:
    if ((int64_t)f->n < nd->min_length) return;
    pop_value(c->g, st);
    emit(c, st);
    return;
  case STR_CHAR: f->n = clamp_count(f->n + 1, nd->min_length, nd->max_length); /* fall through */
  case STR_CONT: emit(c, st); return;
  }
}

static void feed_number(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  int next = num_step(f->phase, b, nd->kind == SO_NODE_INTEGER);
  if (next >= 0 && f->n < SO_NUMBER_MAX_BYTES) {
    struct so_stack cont;
    stack_copy(&cont, st);
    cont.f[cont.depth - 1].phase = (uint8_t)next;
    cont.f[cont.depth - 1].n++;
    emit(c, &cont);
  }
  if (num_complete(f->phase) && st->depth > 1) {
    pop_value(c->g, st);
    feed(c, st, b);
  }
}

static void feed_lit(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  uint64_t m = 0;
  for (int32_t i = 0; i < nd->n_lits; i++)
    if ((f->mask >> i & 1u) && nd->lit_lens[i] > f->n && (uint8_t)nd->lits[i][f->n] == b) m |= 1ull << i;
  bool done = lit_complete(nd, f->mask, f->n);
  if (m) {
    struct so_stack cont;
    stack_copy(&cont, st);
    cont.f[cont.depth - 1].mask = m;
    cont.f[cont.depth - 1].n++;
    emit(c, &cont);
  }
  if (done && st->depth > 1) {
    pop_value(c->g, st);
    feed(c, st, b);
  }
}

/* A DFA text: a root regex, or a number with bounds (n: DFA state, n2: bytes so far). A
 * number may end where its DFA accepts: the byte then goes to its container; it stays within
 * SO_NUMBER_MAX_BYTES, never entering a state too far from acceptance. */
static void feed_regex(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_node *nd = node_of(c, f->node);
  const int32_t next = nd->dfa.next[(size_t)f->n * 256 + b];
  const bool capped = nd->kind == SO_NODE_NUMBER_DFA;
  if (next >= 0 && (!capped || f->n2 + 1u + nd->dfa.dist[next] <= SO_NUMBER_MAX_BYTES)) {
    struct so_stack cont;
    stack_copy(&cont, st);
    cont.f[cont.depth - 1].n = (uint32_t)next;
    cont.f[cont.depth - 1].n2 += capped;
    emit(c, &cont);
  }
  if (nd->dfa.accept[f->n] && st->depth > 1) {
    pop_value(c->g, st);
    feed(c, st, b);
  }
}

/* GBNF (so_gbnf.c): a frame per rule being read, the top one at the element to read next
 * (n); references expand lazily, when a byte comes. A code point is read byte by byte
 * (aux, phase, n2); each byte must leave some code point of the element's class possible,
 * so no token can stop inside a character that cannot be finished. */

/* Does class k hold a code point in [lo, hi]? */
static bool gbnf_class_meets(const struct so_gbnf *gb, int32_t k, uint32_t lo, uint32_t hi) {
  for (int32_t i = gb->class_ranges[k]; i < gb->class_ranges[k + 1]; i++) {
    if (gb->ranges[2 * i] > hi) return false;
    if (gb->ranges[2 * i + 1] >= lo) return true;
  }
  return false;
}

/* Can the code point of `len` bytes whose bits so far are v, `rem` bytes still due, be in class k? */
static bool gbnf_char_possible(const struct so_gbnf *gb, int32_t k, uint32_t v, int len, int rem) {
  static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000}, max_cp[] = {0, 0x7f, 0x7ff, 0xffff, 0x10ffff};
  uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
  if (lo < min_cp[len]) lo = min_cp[len];
  if (hi > max_cp[len]) hi = max_cp[len];
  return lo <= hi && gbnf_class_meets(gb, k, lo, hi);
}

/* The top frame read its element: on to the next; a finished rule's frame goes. */
static void gbnf_advance(struct feed_ctx *c, struct so_stack *st, const struct so_gbnf *gb) {
  struct so_frame *f = &st->f[st->depth - 1];
  f->aux = f->phase = 0;
  f->n2 = 0;
  f->n++;
  while (st->depth > 0 && gb->elems[st->f[st->depth - 1].n].kind == SO_GBNF_END) st->depth--;
  emit(c, st);
}

static void gbnf_char_byte(struct feed_ctx *c, struct so_stack *st, const struct so_gbnf *gb, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const int32_t k = gb->elems[f->n].arg;
  if (f->aux > 0) { /* a continuation byte */
    if ((b & 0xc0) != 0x80) return;
    const uint32_t v = f->n2 << 6 | (b & 0x3fu);
    if (!gbnf_char_possible(gb, k, v, f->phase, f->aux - 1)) return;
    if (--f->aux == 0) {
      gbnf_advance(c, st, gb);
      return;
    }
    f->n2 = v;
    emit(c, st);
    return;
  }
  if (b < 0x80) {
    if (gb->class_ascii[4 * k + b / 32] >> (b % 32) & 1u) gbnf_advance(c, st, gb);
    return;
  }
  const int len = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
  if (len == 0) return;
  const uint32_t v = b & (len == 2 ? 0x1fu : len == 3 ? 0x0fu : 0x07u);
  if (!gbnf_char_possible(gb, k, v, len, len - 1)) return;
  f->aux = (uint8_t)(len - 1);
  f->phase = (uint8_t)len;
  f->n2 = v;
  emit(c, st);
}

static bool gbnf_first_has(const struct so_gbnf *gb, uint32_t p, uint8_t b) {
  return gb->first_from[8 * (size_t)p + b / 32] >> (b % 32) & 1u;
}

/* Can b be read by frames d, d-1, ... of st (the first that can start with b, every one
 * above it able to end)? A byte no frame can take is refused before anything is copied. */
static bool gbnf_viable(const struct so_gbnf *gb, const struct so_stack *st, int32_t d, uint8_t b) {
  for (; d >= 0; d--) {
    const uint32_t p = st->f[d].n;
    if (gbnf_first_has(gb, p, b)) return true;
    if (!gb->nullable_from[p]) return false;
  }
  return false;
}

static void feed_gbnf(struct feed_ctx *c, struct so_stack *st, uint8_t b);

/* st's top frame (at a reference) reads the alternative starting at `start`: in place of the
 * frame when the reference ends its alternative, else on a new frame above it. */
static void gbnf_enter(struct feed_ctx *c, struct so_stack *st, bool tail, int32_t start, uint8_t b) {
  struct so_frame *t = &st->f[st->depth - 1];
  if (tail) {
    t->n = (uint32_t)start;
  } else {
    t->n++;
    if (!push(st, SO_FR_GBNF, t->node)) return;
    st->f[st->depth - 1].n = (uint32_t)start;
  }
  feed_gbnf(c, st, b);
}

static void feed_gbnf(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  struct so_frame *f = &st->f[st->depth - 1];
  const struct so_gbnf *gb = node_of(c, f->node)->gbnf;
  const struct so_gbnf_elem *e = &gb->elems[f->n];
  if (f->aux == 0 && !gbnf_viable(gb, st, st->depth - 1, b)) return;
  if (e->kind == SO_GBNF_CHARS) {
    gbnf_char_byte(c, st, gb, b);
    return;
  }
  if (e->kind == SO_GBNF_END) { /* an empty alternative: the rule is read, b goes on */
    st->depth--;
    if (st->depth > 0) feed(c, st, b);
    return;
  }
  if (++c->expansions > SO_MAX_EXPANSIONS || ++c->gbnf_expansions > SO_MAX_GBNF_EXPANSIONS) return;
  const bool tail = gb->elems[f->n + 1].kind == SO_GBNF_END; /* replace the frame, not stack one */
  const uint32_t next = f->n + 1;
  /* an alternative that can be empty may pass b on to what follows the reference */
  const bool after = tail ? gbnf_viable(gb, st, st->depth - 2, b)
                          : gbnf_first_has(gb, next, b) || (gb->nullable_from[next] && gbnf_viable(gb, st, st->depth - 2, b));
  int32_t first = -1; /* the first viable alternative goes last, on st itself: a copy saved */
  struct so_stack alt;
  for (int32_t a = gb->rule_alts[e->arg]; a < gb->rule_alts[e->arg + 1]; a++) {
    const int32_t start = gb->alts[a];
    if (!gbnf_first_has(gb, (uint32_t)start, b) && !(gb->nullable_from[start] && after)) continue;
    if (first < 0) {
      first = start;
      continue;
    }
    stack_copy(&alt, st);
    gbnf_enter(c, &alt, tail, start, b);
  }
  if (first >= 0) gbnf_enter(c, st, tail, first, b);
}

/* Feeds b to st (scratch: may be changed), emitting every resulting stack. */
static void feed(struct feed_ctx *c, struct so_stack *st, uint8_t b) {
  if (st->depth == 0) return;
  switch (st->f[st->depth - 1].kind) {
  case SO_FR_VALUE: feed_value(c, st, b); return;
  case SO_FR_OBJECT: feed_object(c, st, b); return;
  case SO_FR_KEY: feed_key(c, st, b); return;
  case SO_FR_ARRAY: feed_array(c, st, b); return;
  case SO_FR_STRING: feed_string(c, st, b); return;
  case SO_FR_NUMBER: feed_number(c, st, b); return;
  case SO_FR_LIT: feed_lit(c, st, b); return;
  case SO_FR_REGEX: feed_regex(c, st, b); return;
  case SO_FR_GBNF: feed_gbnf(c, st, b); return;
  default: return;
  }
}

bool so_state_feed(const struct so_grammar *g, const struct so_state *src, uint8_t b,
                   struct so_state *dst) {
  struct feed_ctx c = {.g = g, .out = dst};
  struct so_stack scratch;
  dst->n = 0;
  for (int32_t i = 0; i < src->n; i++) {
    stack_copy(&scratch, &src->s[i]);
    c.expansions = 0;
    feed(&c, &scratch, b);
  }
  return dst->n > 0;
}

/* A GBNF stack is complete when every frame can end here: the rest of each rule read is
 * nullable and no character is half read. */
static bool gbnf_stack_complete(const struct so_grammar *g, const struct so_stack *s) {
  const struct so_gbnf *gb = g->nodes[s->f[0].node].gbnf;
  for (int32_t d = 0; d < s->depth; d++) {
    const struct so_frame *f = &s->f[d];
    if (f->aux > 0 || !gb->nullable_from[f->n]) return false;
  }
  return true;
}

bool so_state_is_complete(const struct so_grammar *g, const struct so_state *src) {
  for (int32_t i = 0; i < src->n; i++) {
    const struct so_stack *s = &src->s[i];
    if (s->depth == 0) return true;
    if (g->nodes[s->f[0].node].kind == SO_NODE_GBNF) {
      if (gbnf_stack_complete(g, s)) return true; /* a VALUE frame at the start is at position 0 */
      continue;
    }
    if (s->depth != 1) continue;
    const struct so_frame *f = &s->f[0];
    if (f->kind == SO_FR_NUMBER && num_complete(f->phase)) return true;
    if (f->kind == SO_FR_LIT && lit_complete(&g->nodes[f->node], f->mask, f->n)) return true;
    if (f->kind == SO_FR_REGEX && g->nodes[f->node].dfa.accept[f->n]) return true;
    if (f->kind == SO_FR_VALUE && g->nodes[f->node].kind == SO_NODE_REGEX && g->nodes[f->node].dfa.accept[0])
      return true; /* a regex that matches the empty text */
  }
  return false;
}

void so_state_init(const struct so_grammar *g, struct so_state *st) {
  st->n = 1;
  st->s[0].depth = 0;
  push(&st->s[0], SO_FR_VALUE, g->root);
}

void so_state_copy(struct so_state *dst, const struct so_state *src) {
  dst->n = src->n;
  for (int32_t i = 0; i < src->n; i++) stack_copy(&dst->s[i], &src->s[i]);
}

llb_status so_matcher_create(const struct so_grammar *g, struct so_matcher **out) {
  *out = NULL;
  struct so_matcher *m = malloc(sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output matcher");
  m->g = g;
  so_state_init(g, &m->cur);
  *out = m;
  return LLB_STATUS_OK;
}

void so_matcher_destroy(struct so_matcher *m) { free(m); }

void so_matcher_copy_state(struct so_matcher *dst, const struct so_matcher *src) {
  so_state_copy(&dst->cur, &src->cur);
}

void so_matcher_reset(struct so_matcher *m) { so_state_init(m->g, &m->cur); }

bool so_matcher_accept_bytes(struct so_matcher *m, const uint8_t *bytes, size_t n) {
  if (n == 0) return true;
  struct so_state *from = &m->cur, *to = &m->tmp;
  for (size_t i = 0; i < n; i++) {
    if (!so_state_feed(m->g, from, bytes[i], to)) return false;
    from = to;
    to = to == &m->tmp ? &m->tmp2 : &m->tmp;
  }
  so_state_copy(&m->cur, from);
  return true;
}

bool so_matcher_is_complete(const struct so_matcher *m) { return so_state_is_complete(m->g, &m->cur); }

bool so_matcher_is_terminated(struct so_matcher *m) {
  if (!so_matcher_is_complete(m)) return false;
  for (int b = 0; b < 256; b++)
    if (so_state_feed(m->g, &m->cur, (uint8_t)b, &m->tmp)) return false;
  return true;
}

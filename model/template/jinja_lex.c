/* Jinja lexer with Hugging Face's settings (jinja2 3.1 lexer.py: trim_blocks and
 * lstrip_blocks on, `-`/`+` whitespace control, newlines normalized to \n and one trailing
 * newline dropped). Comments are consumed here; data and tag tokens come out. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

struct lexer {
  struct jx_arena *a;
  const char *s;
  size_t n, pos;
  size_t lc_pos; /* line/col known up to here */
  int line, col;
  struct jtok *toks;
  size_t n_toks, cap;
};

static void linecol(struct lexer *L, size_t pos, int *line, int *col) {
  if (pos < L->lc_pos) { L->lc_pos = 0; L->line = 1; L->col = 1; }
  for (; L->lc_pos < pos; L->lc_pos++) {
    if (L->s[L->lc_pos] == '\n') { L->line++; L->col = 1; }
    else if (((unsigned char)L->s[L->lc_pos] & 0xC0) != 0x80) L->col++;
  }
  *line = L->line;
  *col = L->col;
}

static llb_status lex_err(struct lexer *L, size_t pos, const char *what) {
  int line, col;
  linecol(L, pos, &line, &col);
  return LLB_ERRF(LLB_STATUS_MALFORMED, "jinja template line %d col %d: %s", line, col, what);
}

static struct jtok *push(struct lexer *L, enum jt_kind k, size_t pos) {
  if (L->n_toks == L->cap) {
    size_t cap = L->cap ? L->cap * 2 : 256;
    struct jtok *t = jx_alloc(L->a, cap * sizeof(*t));
    if (!t) return NULL;
    if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof(*t));
    L->toks = t;
    L->cap = cap;
  }
  struct jtok *t = &L->toks[L->n_toks++];
  memset(t, 0, sizeof(*t));
  t->kind = k;
  linecol(L, pos, &t->line, &t->col);
  return t;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static void put_utf8(char *o, size_t *n, uint32_t cp) {
  if (cp < 0x80) { o[(*n)++] = (char)cp; }
  else if (cp < 0x800) { o[(*n)++] = (char)(0xC0 | (cp >> 6)); o[(*n)++] = (char)(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    o[(*n)++] = (char)(0xE0 | (cp >> 12)); o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    o[(*n)++] = (char)(0xF0 | (cp >> 18)); o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[(*n)++] = (char)(0x80 | (cp & 0x3F));
  }
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal at L->pos (quote char there): Python's unicode-escape decoding. */
static llb_status lex_string(struct lexer *L) {
  size_t start = L->pos;
  char q = L->s[L->pos++];
  size_t end = L->pos;
  while (end < L->n && L->s[end] != q) end += L->s[end] == '\\' && end + 1 < L->n ? 2 : 1;
  if (end >= L->n) return lex_err(L, start, "unterminated string");
  char *o = jx_alloc(L->a, end - L->pos + 1);
  if (!o) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  size_t n = 0;
  for (size_t i = L->pos; i < end; i++) {
    char c = L->s[i];
    if (c != '\\') { o[n++] = c; continue; }
    char e = L->s[++i];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
      uint32_t cp = 0;
      bool ok = i + (size_t)digits < end;
      for (int k = 1; ok && k <= digits; k++) {
        int h = hexval(L->s[i + (size_t)k]);
        if (h < 0) ok = false;
        else cp = cp * 16 + (uint32_t)h;
      }
      if (!ok || cp > 0x10FFFF) return lex_err(L, i, "bad escape in string");
      put_utf8(o, &n, cp);
      i += (size_t)digits;
      continue;
    }
    switch (e) {
    case 'n': o[n++] = '\n'; break;
    case 't': o[n++] = '\t'; break;
    case 'r': o[n++] = '\r'; break;
    case 'b': o[n++] = '\b'; break;
    case 'f': o[n++] = '\f'; break;
    case 'v': o[n++] = '\v'; break;
    case 'a': o[n++] = '\a'; break;
    case '0': o[n++] = '\0'; break;
    case '\\': case '\'': case '"': o[n++] = e; break;
    case '\n': break;
    default: o[n++] = '\\'; o[n++] = e;
    }
  }
  struct jtok *t = push(L, JT_STRING, start);
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  o[n] = '\0';
  t->s = o;
  t->len = n;
  L->pos = end + 1;
  return LLB_STATUS_OK;
}

static llb_status lex_number(struct lexer *L) {
  size_t start = L->pos, i = L->pos;
  char buf[160]; /* digits are copied while < 159; longer literals are refused below */
  size_t n = 0;
  bool is_float = false;
  while (i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_')) {
    if (L->s[i] != '_' && n < sizeof(buf) - 1) buf[n++] = L->s[i];
    i++;
  }
  if (i + 1 < L->n && L->s[i] == '.' && isdigit((unsigned char)L->s[i + 1])) {
    is_float = true;
    if (n < sizeof(buf) - 1) buf[n++] = L->s[i];
    i++;
    while (i < L->n && (isdigit((unsigned char)L->s[i]) || L->s[i] == '_')) {
      if (L->s[i] != '_' && n < sizeof(buf) - 1) buf[n++] = L->s[i];
      i++;
    }
  }
  if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
    size_t j = i + 1;
    if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
    if (j < L->n && isdigit((unsigned char)L->s[j])) {
      is_float = true;
      while (i < j && n < sizeof(buf) - 1) buf[n++] = L->s[i++];
      while (i < L->n && isdigit((unsigned char)L->s[i])) {
        if (n < sizeof(buf) - 1) buf[n++] = L->s[i];
        i++;
      }
    }
  }
  if (i - start > 40) return lex_err(L, start, "number literal longer than 40 characters");
  buf[n] = '\0';
  struct jtok *t = push(L, is_float ? JT_FLOAT : JT_INT, start);
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  if (is_float) {
    t->f = strtod(buf, NULL);
  } else {
    if (n > 18) return lex_err(L, start, "integer literal too large");
    t->i = strtoll(buf, NULL, 10);
  }
  L->pos = i;
  return LLB_STATUS_OK;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/* Tokens inside a tag until its end; *is_block says which end is expected. Leaves L->pos
 * after the end delimiter and its whitespace handling. */
static llb_status lex_tag(struct lexer *L, bool is_block, bool *line_starting) {
  int depth = 0;
  const char *end2 = is_block ? "%}" : "}}";
  for (;;) {
    while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
    if (L->pos >= L->n) return lex_err(L, L->pos, is_block ? "missing end of block tag %}" : "missing end of print tag }}");
    const char *p = L->s + L->pos;
    size_t left = L->n - L->pos;
    if (depth == 0) {
      char sign = (*p == '-' || (*p == '+' && is_block)) ? *p : 0;
      size_t off = sign ? 1 : 0;
      if (left >= off + 2 && memcmp(p + off, end2, 2) == 0) {
        if (!push(L, is_block ? JT_BLOCK_END : JT_VAR_END, L->pos)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
        L->pos += off + 2;
        if (sign == '-') {
          while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
        } else if (is_block && sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
          L->pos++; /* trim_blocks */
        }
        *line_starting = L->s[L->pos - 1] == '\n';
        return LLB_STATUS_OK;
      }
    }
    char c = *p;
    if (c == '\'' || c == '"') {
      llb_status st = lex_string(L);
      if (st) return st;
    } else if (isdigit((unsigned char)c)) {
      llb_status st = lex_number(L);
      if (st) return st;
    } else if (isalpha((unsigned char)c) || c == '_') {
      size_t e = L->pos;
      while (e < L->n && (isalnum((unsigned char)L->s[e]) || L->s[e] == '_')) e++;
      struct jtok *t = push(L, JT_NAME, L->pos);
      if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
      t->s = p;
      t->len = e - L->pos;
      L->pos = e;
    } else {
      size_t len = 0;
      for (size_t k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++)
        if (left >= 2 && memcmp(p, ops2[k], 2) == 0) len = 2;
      if (!len && strchr(ops1, c) && c) len = 1;
      if (!len) return lex_err(L, L->pos, "unexpected character in tag");
      if (c == '(' || c == '[' || c == '{') depth++;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
      struct jtok *t = push(L, JT_OP, L->pos);
      if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
      t->s = p;
      t->len = len;
      L->pos += len;
    }
  }
}

/* Text before a tag with `-` / lstrip_blocks applied (jinja2 tokeniter). */
static llb_status emit_text(struct lexer *L, size_t start, size_t end, char sign, bool lstrip,
                            bool line_starting) {
  if (sign == '-') {
    while (end > start && is_ws(L->s[end - 1])) end--;
  } else if (sign != '+' && lstrip) {
    size_t l_pos = end;
    while (l_pos > start && L->s[l_pos - 1] != '\n') l_pos--;
    if (l_pos > start || line_starting) {
      bool all_ws = l_pos < end;
      for (size_t i = l_pos; i < end; i++)
        if (!is_ws(L->s[i])) all_ws = false;
      if (all_ws) end = l_pos;
    }
  }
  if (end == start) return LLB_STATUS_OK;
  struct jtok *t = push(L, JT_TEXT, start);
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  t->s = L->s + start;
  t->len = end - start;
  return LLB_STATUS_OK;
}

static llb_status lex_comment(struct lexer *L, size_t body, bool *line_starting) {
  const char *e = NULL;
  for (size_t i = body; i + 1 < L->n; i++)
    if (L->s[i] == '#' && L->s[i + 1] == '}') { e = L->s + i; break; }
  if (!e) return lex_err(L, body, "missing end of comment tag #}");
  size_t end = (size_t)(e - L->s);
  char sign = end > body && (L->s[end - 1] == '-' || L->s[end - 1] == '+') ? L->s[end - 1] : 0;
  L->pos = end + 2;
  if (sign == '-') {
    while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
  } else if (sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
    L->pos++;
  }
  *line_starting = L->s[L->pos - 1] == '\n';
  return LLB_STATUS_OK;
}

/* Copies src with \r\n and \r turned into \n and one trailing \n dropped. */
static char *normalize(struct jx_arena *a, const char *src, size_t len, size_t *n_out) {
  char *s = jx_alloc(a, len + 1);
  if (!s) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      s[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      s[n++] = src[i];
    }
  }
  if (n && s[n - 1] == '\n') n--;
  s[n] = '\0';
  *n_out = n;
  return s;
}

llb_status jx_lex(struct jx_arena *a, const char *src, size_t len, struct jtok **toks, size_t *n_toks) {
  struct lexer L = {.a = a, .line = 1, .col = 1};
  L.s = normalize(a, src, len, &L.n);
  if (!L.s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  bool line_starting = true;
  while (L.pos < L.n) {
    const char *tag = NULL;
    for (size_t i = L.pos; i + 1 < L.n; i++)
      if (L.s[i] == '{' && (L.s[i + 1] == '{' || L.s[i + 1] == '%' || L.s[i + 1] == '#')) { tag = L.s + i; break; }
    if (!tag) {
      llb_status st = emit_text(&L, L.pos, L.n, 0, false, false);
      if (st) return st;
      break;
    }
    size_t at = (size_t)(tag - L.s);
    char kind = tag[1];
    char sign = at + 2 < L.n && (tag[2] == '-' || tag[2] == '+') ? tag[2] : 0;
    llb_status st = emit_text(&L, L.pos, at, sign, kind != '{', line_starting);
    if (st) return st;
    size_t body = at + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      st = lex_comment(&L, body, &line_starting);
    } else {
      if (!push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, at)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
      L.pos = body;
      st = lex_tag(&L, kind == '%', &line_starting);
    }
    if (st) return st;
  }
  if (!push(&L, JT_EOF, L.n)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja lexer");
  *toks = L.toks;
  *n_toks = L.n_toks;
  return LLB_STATUS_OK;
}

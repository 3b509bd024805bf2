/* Numeric keywords of JSON Schema (minimum, maximum, exclusiveMinimum, exclusiveMaximum,
 * multipleOf) as a byte DFA over the number's text: the value range becomes digit-by-digit
 * alternatives (as llama.cpp's json-schema-to-grammar _build_min_max_int does for integers,
 * here also for decimals: a longer integer part is larger; at equal length the first digit
 * that differs decides; then the fraction the same way), written as regexes, compiled by
 * so_regex.c and intersected; multipleOf is a remainder automaton built directly. The text
 * is JSON's without an exponent: -?(0|[1-9][0-9]*)(\.[0-9]+)?, never "-0"; the bounds are the
 * schema's numbers read exactly (an integer as written, a real by its shortest round-trip
 * form, as Python prints it). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/structured/so_internal.h"

#define DEC_DIGITS 40 /* digits of a bound: more cannot matter to a 40-byte number */

/* An exact decimal: neg, integer digits (no leading zeros, "0" for zero), fraction digits
 * (no trailing zeros, maybe none). */
struct decimal {
  bool neg;
  char i[DEC_DIGITS + 1];
  char f[DEC_DIGITS + 1];
};

/* Digits d[0..n) times 10^exp (exp may be negative) into *out. */
static bool decimal_set(struct decimal *out, bool neg, const char *d, int n, int exp) {
  memset(out, 0, sizeof(*out));
  while (n > 0 && d[0] == '0') d++, n--, (void)0;
  while (n > 0 && d[n - 1] == '0') n--, exp++;
  if (n == 0) {
    out->i[0] = '0';
    return true;
  }
  const int int_len = n + exp; /* digits left of the point */
  if (int_len > DEC_DIGITS || -exp > DEC_DIGITS || (int_len > 0 ? int_len : 0) + (exp < 0 ? -exp : 0) > DEC_DIGITS)
    return false;
  out->neg = neg;
  if (int_len <= 0) {
    out->i[0] = '0';
    memset(out->f, '0', (size_t)-int_len);
    memcpy(out->f - int_len, d, (size_t)n);
  } else if (exp >= 0) {
    memcpy(out->i, d, (size_t)n);
    memset(out->i + n, '0', (size_t)exp);
  } else {
    memcpy(out->i, d, (size_t)int_len);
    memcpy(out->f, d + int_len, (size_t)(n - int_len));
  }
  return true;
}

/* The value of a JSON number as a decimal. Errors: MALFORMED (not a number), UNSUPPORTED
 * (more than DEC_DIGITS digits written out). */
static llb_status decimal_from_json(const json_t *v, const char *kw, struct decimal *out) {
  char text[64];
  if (json_is_integer(v)) snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) {
    const double x = json_real_value(v);
    for (int p = 1; p <= 17; p++) { /* the shortest text that reads back as x */
      snprintf(text, sizeof(text), "%.*g", p, x);
      if (strtod(text, NULL) == x) break;
    }
  } else return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a number", kw);
  const char *p = text;
  bool neg = *p == '-';
  if (neg) p++;
  char digits[32];
  int n = 0, exp = 0;
  bool point = false;
  for (; *p && *p != 'e'; p++) {
    if (*p == '.') point = true;
    else if (n < 31) {
      digits[n++] = *p;
      if (point) exp--;
    }
  }
  if (*p == 'e') exp += atoi(p + 1);
  if (!decimal_set(out, neg, digits, n, exp))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema %s %s needs more than %d digits", kw, text, DEC_DIGITS);
  return LLB_STATUS_OK;
}

static bool decimal_is_zero(const struct decimal *d) { return strcmp(d->i, "0") == 0 && !d->f[0]; }

/* Compares magnitudes. */
static int magnitude_cmp(const struct decimal *a, const struct decimal *b) {
  const size_t la = strlen(a->i), lb = strlen(b->i);
  if (la != lb) return la < lb ? -1 : 1;
  int c = strcmp(a->i, b->i);
  if (c) return c < 0 ? -1 : 1;
  c = strcmp(a->f, b->f); /* no trailing zeros: plain string order is numeric order */
  return c < 0 ? -1 : c > 0;
}

static int decimal_cmp(const struct decimal *a, const struct decimal *b) {
  const bool na = a->neg && !decimal_is_zero(a), nb = b->neg && !decimal_is_zero(b);
  if (na != nb) return na ? -1 : 1;
  return na ? -magnitude_cmp(a, b) : magnitude_cmp(a, b);
}

/* ---- regex text ---- */

struct rxbuf {
  char s[16384];
  size_t n;
  bool over;
  int alts; /* alternatives written at the current level */
};

static void put(struct rxbuf *b, const char *s, size_t n) {
  if (b->n + n >= sizeof(b->s)) {
    b->over = true;
    return;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void puts_(struct rxbuf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(struct rxbuf *b, const char *fmt, int x, int y) {
  char t[48];
  int n = snprintf(t, sizeof(t), fmt, x, y);
  put(b, t, (size_t)n);
}

static void alt_begin(struct rxbuf *b) {
  if (b->alts++) puts_(b, "|");
}

/* [lo-hi] of digits */
static void digit_range(struct rxbuf *b, char lo, char hi) {
  if (lo == hi) putf(b, "%c", lo, 0);
  else putf(b, "[%c-%c]", lo, hi);
}

static void any_digits(struct rxbuf *b, int n) {
  if (n == 1) puts_(b, "[0-9]");
  else if (n > 1) putf(b, "[0-9]{%d}", n, 0);
}

#define FRAC_ANY "(?:\\.[0-9]+)?"
enum cmp_kind { CMP_GE, CMP_GT, CMP_LE, CMP_LT };

/* Integer parts greater than I (no leading zeros). */
static void int_greater(struct rxbuf *b, const char *I) {
  const int L = (int)strlen(I);
  alt_begin(b);
  putf(b, "[1-9][0-9]{%d,}", L, 0);
  for (int k = 0; k < L; k++) {
    if (I[k] == '9') continue;
    alt_begin(b);
    put(b, I, (size_t)k);
    digit_range(b, (char)(I[k] + 1), '9');
    any_digits(b, L - k - 1);
  }
}

/* Integer parts less than I. */
static void int_less(struct rxbuf *b, const char *I) {
  const int L = (int)strlen(I);
  if (L >= 2) {
    alt_begin(b);
    puts_(b, "0");
    alt_begin(b);
    puts_(b, "[1-9]");
    if (L > 2) putf(b, "[0-9]{0,%d}", L - 2, 0);
  }
  for (int k = 0; k < L; k++) {
    const char lo = k == 0 && L > 1 ? '1' : '0';
    if (I[k] - 1 < lo) continue;
    alt_begin(b);
    put(b, I, (size_t)k);
    digit_range(b, lo, (char)(I[k] - 1));
    any_digits(b, L - k - 1);
  }
}

/* Fractions (digits after the point) compared with F: "digit k differs" alternatives. */
static void frac_differs(struct rxbuf *b, const char *F, bool greater) {
  for (int k = 0; F[k]; k++) {
    if (greater ? F[k] == '9' : F[k] == '0') continue;
    alt_begin(b);
    put(b, F, (size_t)k);
    if (greater) digit_range(b, (char)(F[k] + 1), '9');
    else digit_range(b, '0', (char)(F[k] - 1));
    puts_(b, "[0-9]*");
  }
}

/* Alternatives: texts whose integer part is I and whose fraction compares with F as `kind`. */
static void equal_int_part(struct rxbuf *b, const struct decimal *d, enum cmp_kind kind, bool frac) {
  const char *F = d->f;
  const bool ge = kind == CMP_GE || kind == CMP_GT;
  if (!F[0]) {
    if (kind == CMP_LT || (kind == CMP_GT && !frac)) return; /* nothing equal-integer is below I / above it */
    alt_begin(b);
    puts_(b, d->i);
    if (frac) puts_(b, kind == CMP_GE ? FRAC_ANY : kind == CMP_GT ? "\\.[0-9]*[1-9][0-9]*" : "(?:\\.0+)?");
    return;
  }
  if (ge && !frac) return; /* a fraction is needed to reach F */
  alt_begin(b);
  puts_(b, d->i);
  if (!frac) return; /* LE / LT: I alone is below I.F */
  struct rxbuf inner = {0};
  frac_differs(&inner, F, ge);
  if (kind == CMP_GE || kind == CMP_GT) {
    alt_begin(&inner);
    puts_(&inner, F);
    puts_(&inner, kind == CMP_GE ? "[0-9]*" : "0*[1-9][0-9]*");
  } else {
    for (int k = 1; F[k]; k++) { /* proper prefixes of F */
      alt_begin(&inner);
      put(&inner, F, (size_t)k);
    }
    if (kind == CMP_LE) {
      alt_begin(&inner);
      puts_(&inner, F);
      puts_(&inner, "0*");
    }
  }
  puts_(b, ge ? "\\.(?:" : "(?:\\.(?:");
  puts_(b, inner.s);
  puts_(b, ge ? ")" : "))?");
  if (inner.over) b->over = true;
}

/* Regex of non-negative number texts m with m `kind` |d| (integers only unless frac); false
 * when none. */
static bool magnitude_regex(struct rxbuf *b, const struct decimal *d, enum cmp_kind kind, bool frac) {
  struct rxbuf ints = {0};
  if (kind == CMP_GE || kind == CMP_GT) int_greater(&ints, d->i);
  else int_less(&ints, d->i);
  const int before = b->alts;
  if (ints.alts) {
    alt_begin(b);
    puts_(b, "(?:");
    puts_(b, ints.s);
    puts_(b, ")");
    if (frac) puts_(b, FRAC_ANY);
  }
  equal_int_part(b, d, kind, frac);
  return b->alts > before;
}

/* Compiles "prefix(?:alternatives)" into *out; an empty language when there are none. */
static llb_status side_dfa(const char *prefix, const struct decimal *d, enum cmp_kind kind, bool frac, int64_t *work,
                           struct so_dfa *out) {
  struct rxbuf alts = {0}, full = {0};
  so_dfa_free(out);
  if (d) {
    if (!magnitude_regex(&alts, d, kind, frac)) return LLB_STATUS_OK;
  } else {
    alts.alts = 1;
    puts_(&alts, frac ? "(?:0|[1-9][0-9]*)" FRAC_ANY : "(?:0|[1-9][0-9]*)");
  }
  puts_(&full, prefix);
  puts_(&full, "(?:");
  puts_(&full, alts.s);
  puts_(&full, ")");
  if (alts.over || full.over) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "numeric bounds too long");
  return so_regex_compile(full.s, full.n, 0, work, out);
}

/* The intersection of two sides; *out empty when either is. */
static llb_status part_dfa(const char *prefix, const struct decimal *a, enum cmp_kind ka, const struct decimal *b2,
                           enum cmp_kind kb, bool frac, int64_t *work, struct so_dfa *out) {
  struct so_dfa x = {0}, y = {0};
  llb_status st = side_dfa(prefix, a, ka, frac, work, &x);
  if (st == LLB_STATUS_OK) st = side_dfa(prefix, b2, kb, frac, work, &y);
  if (st == LLB_STATUS_OK) st = so_dfa_product(&x, &y, false, out);
  so_dfa_free(&x);
  so_dfa_free(&y);
  return st;
}

static const struct decimal zero = {.i = "0"};

/* Numbers in [lo, hi] (NULL = unbounded; *_excl: the bound itself excluded). */
static llb_status range_dfa(const struct decimal *lo, bool lo_excl, const struct decimal *hi, bool hi_excl, bool frac,
                            int64_t *work, struct so_dfa *out) {
  struct so_dfa pos = {0}, neg = {0};
  llb_status st = LLB_STATUS_OK;
  const bool lo_neg = lo && lo->neg && !decimal_is_zero(lo), hi_neg = hi && hi->neg && !decimal_is_zero(hi);
  /* m >= 0 */
  if (!hi_neg && !(hi && decimal_is_zero(hi) && hi_excl)) {
    const struct decimal *l = lo && !lo_neg && !(decimal_is_zero(lo) && !lo_excl) ? lo : NULL;
    st = part_dfa("", l, lo_excl ? CMP_GT : CMP_GE, hi, hi_excl ? CMP_LT : CMP_LE, frac, work, &pos);
  }
  /* -m with m > 0: -m >= lo is m <= |lo|; -m <= hi is m >= |hi| (or m > 0 when hi >= 0) */
  if (st == LLB_STATUS_OK && (!lo || lo_neg))
    st = part_dfa("-", lo, lo_excl ? CMP_LT : CMP_LE, hi_neg ? hi : &zero, hi_neg ? (hi_excl ? CMP_GT : CMP_GE) : CMP_GT,
                  frac, work, &neg);
  if (st == LLB_STATUS_OK) st = so_dfa_product(&pos, &neg, true, out);
  so_dfa_free(&pos);
  so_dfa_free(&neg);
  return st;
}

/* Numbers that are multiples of a * 10^-e: with N the digits read so far (j of them after the
 * point) the state is N mod a; the value times 10^e is N * 10^(e-j), and past e fraction digits
 * only zeros may follow. Integers only unless frac. */
static llb_status multiple_dfa(uint64_t a, int e, bool frac, struct so_dfa *out) {
  /* states: 0 start, 1 after '-', 2 "0", INT(r) 3.., DOT(r), FR(j, r) j = 1..e, TAIL */
  const int64_t n64 = 3 + (int64_t)a * (frac ? 2 + e : 1) + 1;
  if (a == 0 || n64 > SO_DFA_MAX_STATES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "multipleOf needs more than %d automaton states", SO_DFA_MAX_STATES);
  so_dfa_free(out);
  out->n = (int32_t)n64;
  out->next = malloc((size_t)n64 * 256 * sizeof(int32_t));
  out->accept = calloc((size_t)n64, 1);
  if (!out->next || !out->accept) {
    so_dfa_free(out);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "multipleOf automaton");
  }
  memset(out->next, 0xff, (size_t)n64 * 256 * sizeof(int32_t));
  const int32_t A = (int32_t)a, INT0 = 3, DOT0 = INT0 + A, FR0 = DOT0 + A, TAIL = (int32_t)n64 - 1;
  int32_t *nx = out->next;
  uint64_t pow10[64]; /* 10^k mod a */
  pow10[0] = 1 % a;
  for (int k = 1; k < 64; k++) pow10[k] = pow10[k - 1] * 10 % a;
  nx[0 * 256 + '-'] = 1;
  for (int s = 0; s < 2; s++) {
    nx[s * 256 + '0'] = 2;
    for (int d = 1; d <= 9; d++) nx[s * 256 + '0' + d] = INT0 + (int32_t)((uint64_t)d % a);
  }
  out->accept[2] = 1;
  if (frac) nx[2 * 256 + '.'] = DOT0;
  for (int32_t r = 0; r < A; r++) {
    for (int d = 0; d <= 9; d++) {
      const int32_t r2 = (int32_t)(((uint64_t)r * 10 + (uint64_t)d) % a);
      nx[(INT0 + r) * 256 + '0' + d] = INT0 + r2;
      if (!frac) continue;
      nx[(DOT0 + r) * 256 + '0' + d] = e >= 1 ? FR0 + r2 : (d == 0 && r == 0 ? TAIL : -1);
      for (int j = 1; j <= e; j++)
        nx[(FR0 + (j - 1) * A + r) * 256 + '0' + d] = j < e ? FR0 + j * A + r2 : (d == 0 && r == 0 ? TAIL : -1);
    }
    out->accept[INT0 + r] = (uint8_t)(r * pow10[e] % a == 0);
    if (!frac) continue;
    nx[(INT0 + r) * 256 + '.'] = DOT0 + r;
    for (int j = 1; j <= e; j++) out->accept[FR0 + (j - 1) * A + r] = (uint8_t)(r * pow10[e - j] % a == 0);
  }
  if (frac) {
    nx[TAIL * 256 + '0'] = TAIL;
    out->accept[TAIL] = 1;
  }
  return so_dfa_trim(out);
}

/* multipleOf d as a * 10^-e (a an integer); for integers, a / gcd(a, 10^e) with e = 0. */
static llb_status multiple_of(const struct decimal *d, bool integer, struct so_dfa *out) {
  char digits[2 * DEC_DIGITS + 2];
  snprintf(digits, sizeof(digits), "%s%s", strcmp(d->i, "0") ? d->i : "", d->f);
  int e = (int)strlen(d->f);
  if (d->neg || decimal_is_zero(d)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema multipleOf must be positive");
  if (strlen(digits) > 18) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "multipleOf %s with more than 18 digits", digits);
  uint64_t a = strtoull(digits, NULL, 10);
  if (integer) { /* a * 10^-e divides an integer x exactly when a / gcd(a, 10^e) does */
    for (int k = 0; k < e && a % 2 == 0; k++) a /= 2;
    for (int k = 0; k < e && a % 5 == 0; k++) a /= 5;
    e = 0;
  }
  return multiple_dfa(a, e, !integer, out);
}

bool so_number_text(const json_t *v, char *out, size_t cap) {
  struct decimal d;
  if (!json_is_number(v) || decimal_from_json(v, "value", &d) != LLB_STATUS_OK) {
    llb_err_clear();
    return false;
  }
  const bool neg = d.neg && !decimal_is_zero(&d);
  const int n = snprintf(out, cap, "%s%s%s%s", neg ? "-" : "", d.i, d.f[0] ? "." : "", d.f);
  return n > 0 && (size_t)n < cap;
}

llb_status so_number_dfa(const struct so_num_keyword *kw, int32_t n, bool integer, int64_t *work, struct so_dfa *out) {
  struct decimal lo, hi, v;
  bool have_lo = false, have_hi = false, lo_excl = false, hi_excl = false;
  llb_status st = LLB_STATUS_OK;
  so_dfa_free(out);
  for (int32_t i = 0; i < n; i++) {
    static const char *const names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"};
    if ((st = decimal_from_json(kw[i].value, names[kw[i].kind], &v))) return st;
    const bool excl = kw[i].kind == SO_NUM_XMIN || kw[i].kind == SO_NUM_XMAX;
    if (kw[i].kind == SO_NUM_MIN || kw[i].kind == SO_NUM_XMIN) {
      const int c = have_lo ? decimal_cmp(&v, &lo) : 1;
      if (c > 0 || (c == 0 && excl)) lo = v, lo_excl = excl, have_lo = true;
    } else if (kw[i].kind == SO_NUM_MAX || kw[i].kind == SO_NUM_XMAX) {
      const int c = have_hi ? decimal_cmp(&v, &hi) : -1;
      if (c < 0 || (c == 0 && excl)) hi = v, hi_excl = excl, have_hi = true;
    }
  }
  st = range_dfa(have_lo ? &lo : NULL, lo_excl, have_hi ? &hi : NULL, hi_excl, !integer, work, out);
  for (int32_t i = 0; i < n && st == LLB_STATUS_OK && out->n > 0; i++) {
    if (kw[i].kind != SO_NUM_MULTIPLE) continue;
    struct so_dfa m = {0};
    if ((st = decimal_from_json(kw[i].value, "multipleOf", &v)) == LLB_STATUS_OK) st = multiple_of(&v, integer, &m);
    if (st == LLB_STATUS_OK) st = so_dfa_intersect(out, &m);
    so_dfa_free(&m);
  }
  if (st == LLB_STATUS_OK) st = so_dfa_set_dist(out);
  if (st != LLB_STATUS_OK) so_dfa_free(out);
  return st;
}

/* Private to model/structured/so_*.c: the compiled grammar (nodes) and the matcher's state (a set of
 * pushdown stacks). Not public API. */
#ifndef LLB_MODEL_SO_INTERNAL_H
#define LLB_MODEL_SO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/structured/structured_output.h"

struct json_t; /* jansson's */

enum so_node_kind {
  SO_NODE_ANY_OF,     /* one of children */
  SO_NODE_OBJECT,     /* props, required_mask, additional (-1 = closed), min/max_props */
  SO_NODE_ARRAY,      /* children (prefixItems), items (-1 = none past them), min_items, max_items */
  SO_NODE_STRING,     /* min_length, max_length (code points); or dfa over the decoded content */
  SO_NODE_NUMBER,     /* JSON number */
  SO_NODE_INTEGER,    /* JSON number without fraction or exponent */
  SO_NODE_LITERALS,   /* exactly one of lits (serialized JSON, or raw text for choices) */
  SO_NODE_REGEX,      /* raw text matching a regex: dfa (so_regex.c); root only */
  SO_NODE_GBNF,       /* raw text in a GBNF/EBNF grammar's language: gbnf (so_gbnf.c); root only */
  SO_NODE_NUMBER_DFA, /* a JSON number whose text is in dfa (bounds, multipleOf), at most
                       * SO_NUMBER_MAX_BYTES bytes (dfa.dist keeps it finishable) */
};

#define SO_NUMBER_MAX_BYTES 40u /* a longer number is not useful output; bounds loops */

/* A byte DFA (so_dfa.c). State 0 is the start; n == 0 is the empty language. After
 * so_dfa_trim every state can reach an accepting one, so a walk never enters a dead end. */
struct so_dfa {
  int32_t *next;   /* [n, 256] next state, -1 = byte refused */
  uint8_t *accept; /* [n] 1 = the text so far is in the language */
  uint8_t *dist;   /* [n] bytes to the nearest accepting state (255 = 255 or more), or NULL */
  int32_t n;
};

#define SO_DFA_MAX_STATES 4096

/* Frees d's arrays and zeroes it; NULL is fine. */
void so_dfa_free(struct so_dfa *d);

/* The intersection (either false) or union (either true) of a and b, reachable states only,
 * trimmed. Errors: TOO_LARGE past SO_DFA_MAX_STATES, OUT_OF_MEMORY. out is freed first. */
llb_status so_dfa_product(const struct so_dfa *a, const struct so_dfa *b, bool either, struct so_dfa *out);

/* *a = *a intersected with b (a's old arrays freed). Errors as so_dfa_product. */
llb_status so_dfa_intersect(struct so_dfa *a, const struct so_dfa *b);

/* Drops every state that cannot reach an accepting one (renumbered, start first; n = 0 when
 * the language is empty). Errors: OUT_OF_MEMORY. */
llb_status so_dfa_trim(struct so_dfa *d);

/* Fills d->dist (allocated). Errors: OUT_OF_MEMORY. */
llb_status so_dfa_set_dist(struct so_dfa *d);

/* Texts of min..max code points (max -1 = unbounded) of any valid UTF-8: the length side of a
 * string with a pattern or format. Errors: TOO_LARGE (a bound over SO_DFA_MAX_STATES - 2),
 * OUT_OF_MEMORY. */
llb_status so_dfa_code_points(int64_t min, int64_t max, struct so_dfa *out);

/* Can some code point in [lo, hi] (UTF-8 encoded; surrogates never) be read from state s?
 * The check of a \uXXXX escape, digit by digit, in a string with a pattern. */
bool so_dfa_range_possible(const struct so_dfa *d, int32_t s, uint32_t lo, uint32_t hi);

/* A compiled GBNF grammar (so_gbnf.c): rules of alternatives, each alternative a sequence of
 * elements ending with END, all back to back in elems; terminals are classes of code points.
 * Position 0 is a synthetic start, [REF root, END]. Every rule reachable from the root is
 * productive (derives some finite text) and none is left-recursive, so expanding the
 * references at a position always ends. */
enum so_gbnf_elem_kind { SO_GBNF_END, SO_GBNF_CHARS, SO_GBNF_REF };

struct so_gbnf_elem {
  int32_t kind; /* enum so_gbnf_elem_kind */
  int32_t arg;  /* CHARS: class; REF: rule */
};

struct so_gbnf {
  struct so_gbnf_elem *elems; /* [n_elems] */
  int32_t n_elems;
  int32_t *alts;      /* [n_alts] first position of each alternative, rule by rule */
  int32_t *rule_alts; /* [n_rules + 1] rule r's alternatives: alts[rule_alts[r] .. rule_alts[r + 1]) */
  int32_t n_rules, n_alts;
  uint32_t *ranges;      /* [class_ranges[n_classes]][2] inclusive code point ranges, sorted, disjoint, no surrogates */
  int32_t *class_ranges; /* [n_classes + 1] class k: ranges[class_ranges[k] .. class_ranges[k + 1]) */
  uint32_t *class_ascii; /* [n_classes][4] bit c: ASCII c is in class k */
  int32_t n_classes;
  uint8_t *nullable_from; /* [n_elems] the rest of the alternative from a position can match "" */
  uint32_t *first_from;   /* [n_elems][8] bit b: the rest of the alternative from a position can start with byte b */
};

/* Compiles GBNF / EBNF text (so_gbnf.c; the syntax and errors of so_grammar_compile_gbnf,
 * which wraps it in a one-node grammar). *out is NULL on failure; caller frees with
 * so_gbnf_free. */
llb_status so_gbnf_compile(const char *text, size_t len, struct so_gbnf **out);

/* Frees a compiled GBNF grammar; NULL is fine. */
void so_gbnf_free(struct so_gbnf *gb);

/* Nullability, productivity, left recursion and first bytes of gb (so_gbnf_check.c); names
 * the rules of errors by names[owner[r]] (generated rules by the named rule they come
 * from), at lines[r]:cols[r]. Fills gb->nullable_from and gb->first_from. Errors: MALFORMED
 * (a reachable rule that can never finish, left recursion), OUT_OF_MEMORY. */
llb_status so_gbnf_check(struct so_gbnf *gb, const char *const *names, const int32_t *owner,
                         const int32_t *lines, const int32_t *cols);


struct so_property {
  char *name; /* the key decoded (UTF-8; the matcher decodes escapes in keys to compare), owned */
  size_t name_len;
  int32_t node; /* -1: the key may not appear (its schema allows no value) */
};

struct so_node {
  enum so_node_kind kind;
  struct so_property *props; /* [n_props], owned */
  int32_t n_props;
  uint64_t required_mask; /* bit i: props[i] required */
  int32_t additional;     /* node of extra properties' values; -1 = none allowed */
  int32_t items;          /* node of array elements */
  int64_t min_items, max_items;   /* max -1 = unbounded */
  int64_t min_length, max_length; /* max -1 = unbounded */
  int64_t min_props, max_props;   /* min counts named properties only; max -1 = unbounded */
  char **lits;                    /* [n_lits], owned */
  size_t *lit_lens;               /* [n_lits], owned */
  int32_t n_lits;
  int32_t *children; /* [n_children], owned: anyOf alternatives; an array's prefixItems */
  int32_t n_children;
  struct so_dfa dfa;     /* regex, number DFA, string content (n 0 = none); owned unless dfa_shared */
  bool dfa_shared;       /* dfa is another node's (the same constraints met twice): not freed here */
  struct so_gbnf *gbnf;  /* GBNF: owned */
};

struct so_grammar {
  uint64_t id;           /* unique in the process: keys the vocabulary's mask cache */
  struct so_node *nodes; /* [n_nodes], owned */
  int32_t n_nodes;
  int32_t root;
};

/* Frame kinds of a stack. */
enum so_frame_kind {
  SO_FR_VALUE,  /* a value of node, not started (anyOf not yet chosen) */
  SO_FR_OBJECT, /* mask: properties seen; n2: property whose value is being read */
  SO_FR_KEY,    /* a key of the object node below; mask: names still matching; n: bytes */
  SO_FR_ARRAY,  /* n: elements so far */
  SO_FR_STRING, /* n: code points so far */
  SO_FR_NUMBER, /* phase: position in the number grammar; n: bytes */
  SO_FR_LIT,    /* mask: literals still matching; n: bytes */
  SO_FR_REGEX,  /* n: DFA state */
  SO_FR_GBNF,   /* n: element position; aux: UTF-8 continuation bytes still due of the code
                 * point being read at n, phase: its length in bytes, n2: its bits so far */
};

/* One frame; no padding, so stacks compare with memcmp. */
struct so_frame {
  int32_t node;
  uint8_t kind;
  uint8_t phase;
  uint8_t aux;   /* strings: UTF-8 continuation bytes still due */
  uint8_t flags; /* strings: bits 0-2 first-continuation rule; keys: bit 7 free-form key */
  uint32_t n;
  uint32_t n2;
  uint64_t mask;
};

#define SO_MAX_DEPTH 40
#define SO_MAX_STACKS 16

struct so_stack {
  int32_t depth;
  struct so_frame f[SO_MAX_DEPTH];
};

/* The matcher's state: every stack a prefix of the output so far can be in. */
struct so_state {
  int32_t n;
  struct so_stack s[SO_MAX_STACKS];
};

/* dst = the states after byte b from src (dst != src). Returns false when none (b not
 * allowed). Only the used frames are copied. */
bool so_state_feed(const struct so_grammar *g, const struct so_state *src, uint8_t b,
                   struct so_state *dst);

/* src is a complete value. */
bool so_state_is_complete(const struct so_grammar *g, const struct so_state *src);

/* The state at the start of g. */
void so_state_init(const struct so_grammar *g, struct so_state *st);

/* dst = src, copying only the used frames. */
void so_state_copy(struct so_state *dst, const struct so_state *src);

/* A numeric keyword of a schema (so_number.c). */
enum so_num_kind { SO_NUM_MIN, SO_NUM_XMIN, SO_NUM_MAX, SO_NUM_XMAX, SO_NUM_MULTIPLE };

struct so_num_keyword {
  const struct json_t *value; /* a JSON number (checked by so_number_dfa) */
  enum so_num_kind kind;
};

/* The texts of the JSON numbers (integers when `integer`) that meet every keyword of
 * kw[0..n): -?(0|[1-9][0-9]*)(\.[0-9]+)?, no exponent, never "-0"; trimmed, dist set; n 0 when
 * no number does. work: the regex work budget, as so_regex_compile's. Errors: MALFORMED (a value not a number, multipleOf <= 0), UNSUPPORTED (a
 * bound of more than 40 digits written out), TOO_LARGE (multipleOf needing more than
 * SO_DFA_MAX_STATES states), OUT_OF_MEMORY. */
llb_status so_number_dfa(const struct so_num_keyword *kw, int32_t n, bool integer, int64_t *work, struct so_dfa *out);

/* The regex (whole-string match over the decoded string) of JSON Schema format `name`, or
 * NULL when the format is not enforced (so_format.c). */
const char *so_format_regex(const char *name);

/* The enforced formats' names, comma separated (for error messages). */
const char *so_format_names(void);

/* ---- JSON Schema: a conjunction of schemas merged into one constraint set (so_schema_merge.c) ---- */

/* A list of schemas (borrowed from the parsed document), all of which a value must meet. */
struct so_schema_list {
  const struct json_t **v; /* [n], owned array */
  int32_t n, cap;
};

/* JSON types as bits; number includes integer (SO_T_NUMBER | SO_T_INTEGER is "number"). */
enum {
  SO_T_NULL = 1,
  SO_T_BOOLEAN = 2,
  SO_T_OBJECT = 4,
  SO_T_ARRAY = 8,
  SO_T_STRING = 16,
  SO_T_INTEGER = 32,
  SO_T_NUMBER = 64,
  SO_T_ALL = 127,
};

#define SO_CONS_MAX 16        /* patterns, formats, enums, consts, numeric keywords of one conjunction */
#define SO_MAX_PREFIX_ITEMS 64

struct so_named_list {
  const char *name; /* borrowed */
  struct so_schema_list schemas;
};

/* What a conjunction of schemas asks, keyword by keyword (JSON Schema 2020-12, with draft 4-7's
 * tuple items / additionalItems and boolean exclusiveMinimum / exclusiveMaximum). Type-specific
 * parts apply to values of that type only. */
struct so_cons {
  uint32_t types; /* SO_T_* allowed */
  const struct json_t *enums[SO_CONS_MAX]; /* arrays of allowed values; all must hold */
  int32_t n_enums;
  const struct json_t *consts[SO_CONS_MAX];
  int32_t n_consts;
  int64_t min_length, max_length; /* max -1 = unbounded */
  const char *patterns[SO_CONS_MAX];
  int32_t n_patterns;
  const char *formats[SO_CONS_MAX];
  int32_t n_formats;
  struct so_num_keyword nums[SO_CONS_MAX];
  int32_t n_nums;
  struct so_schema_list prefix[SO_MAX_PREFIX_ITEMS]; /* element i < n_prefix meets prefix[i] */
  int32_t n_prefix;
  struct so_schema_list items; /* elements past the prefix */
  int64_t min_items, max_items;
  bool unique_items;
  struct so_named_list props[SO_MAX_PROPERTIES];
  int32_t n_props;
  uint64_t required; /* bit i: props[i] */
  struct so_schema_list additional; /* what other keys' values meet */
  bool closed;                      /* no other keys (additionalProperties absent beside properties) */
  int64_t min_props, max_props;
};

/* Merges the own keywords of holders[0..n) (schema objects; $ref, allOf, anyOf, oneOf are the
 * caller's) into *out (initialized here; free with so_cons_free even on failure). Errors:
 * MALFORMED (a keyword's value of the wrong kind), UNSUPPORTED (a keyword that cannot be
 * enforced, named), TOO_LARGE (past SO_CONS_MAX, SO_MAX_PROPERTIES, SO_MAX_PREFIX_ITEMS),
 * OUT_OF_MEMORY. */
llb_status so_cons_merge(const struct json_t *const *holders, int32_t n, struct so_cons *out);

/* Frees the lists of c. */
void so_cons_free(struct so_cons *c);

/* Appends s to l. Errors: OUT_OF_MEMORY. */
llb_status so_schema_list_add(struct so_schema_list *l, const struct json_t *s);

/* True for the keywords that only annotate (title, description, $defs, ...): a schema of
 * annotations alone allows anything. */
bool so_keyword_is_annotation(const char *key);

/* The plain decimal text of JSON number v as the engine writes numbers (no exponent, no
 * trailing zeros, "0" for -0; 1e3 is "1000") into out[cap]; false when v is not a number or
 * needs more than 40 digits or cap bytes. */
bool so_number_text(const struct json_t *v, char *out, size_t cap);

/* so_regex_compile flags */
#define SO_REGEX_SEARCH 1u /* JSON Schema `pattern`: matches anywhere unless ^ / $ anchor a
                            * top-level branch; `.` and the gaps take any character */

/* The work units a subset construction may spend (so_regex.c: closure steps, set words, byte
 * classes; one unit is 2-4 ns on a Zen 4 core): bounds one compile to ~10 ms. The largest of
 * the 455 coverage-corpus schemas spends 0.07 M; a 1,000-character anchored class repeat 0.6 M. */
#define SO_REGEX_MAX_WORK (2ll << 20)

/* Compiles regex text[0..len) (so_regex.c for the syntax) into *out (trimmed; freed first).
 * work: the work units still allowed, decremented by what this compile took (a schema's
 * patterns, formats and bounds share one budget); NULL = SO_REGEX_MAX_WORK for this one.
 * Errors: MALFORMED, UNSUPPORTED (the construct named), TOO_LARGE (past the bounds or the
 * budget), OUT_OF_MEMORY. */
llb_status so_regex_compile(const char *text, size_t len, unsigned flags, int64_t *work, struct so_dfa *out);

struct so_matcher {
  const struct so_grammar *g;
  struct so_state cur;
  struct so_state tmp;
  struct so_state tmp2;
};

#endif

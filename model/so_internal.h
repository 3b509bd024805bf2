/* Private to model/so_*.c: the compiled grammar (nodes) and the matcher's state (a set of
 * pushdown stacks). Not public API. */
#ifndef LLB_MODEL_SO_INTERNAL_H
#define LLB_MODEL_SO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/structured_output.h"

enum so_node_kind {
  SO_NODE_ANY_OF,   /* one of children */
  SO_NODE_OBJECT,   /* props, required_mask, additional (-1 = closed) */
  SO_NODE_ARRAY,    /* items, min_items, max_items */
  SO_NODE_STRING,   /* min_length, max_length (code points) */
  SO_NODE_NUMBER,   /* JSON number */
  SO_NODE_INTEGER,  /* JSON number without fraction or exponent */
  SO_NODE_LITERALS, /* exactly one of lits (serialized JSON, or raw text for choices) */
  SO_NODE_REGEX,    /* raw text matching a regex: dfa, dfa_accept (so_regex.c); root only */
  SO_NODE_GBNF,     /* raw text in a GBNF/EBNF grammar's language: gbnf (so_gbnf.c); root only */
};

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

/* Frees a compiled GBNF grammar; NULL is fine. */
void so_gbnf_free(struct so_gbnf *gb);

/* Nullability, productivity, left recursion and first bytes of gb (so_gbnf_check.c); names
 * the rules of errors by names[owner[r]] (generated rules by the named rule they come
 * from), at lines[r]:cols[r]. Fills gb->nullable_from and gb->first_from. Errors: MALFORMED
 * (a reachable rule that can never finish, left recursion), OUT_OF_MEMORY. */
llb_status so_gbnf_check(struct so_gbnf *gb, const char *const *names, const int32_t *owner,
                         const int32_t *lines, const int32_t *cols);

/* A unique grammar id (keys the vocabulary's mask cache). */
uint64_t so_grammar_next_id(void);

struct so_property {
  char *name; /* the key as it appears between the quotes (JSON-escaped), owned */
  size_t name_len;
  int32_t node;
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
  char **lits;                    /* [n_lits], owned */
  size_t *lit_lens;               /* [n_lits], owned */
  int32_t n_lits;
  int32_t *children; /* [n_children], owned */
  int32_t n_children;
  int32_t *dfa;          /* regex: [n_dfa_states, 256] next state, -1 = byte refused; owned */
  uint8_t *dfa_accept;   /* regex: [n_dfa_states] 1 = the text so far matches; owned */
  int32_t n_dfa_states;  /* regex: state 0 is the start */
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

/* Compiles regex text[0..len) (so_regex.c for the syntax) into out's dfa, dfa_accept and
 * n_dfa_states. Errors: MALFORMED, UNSUPPORTED (the construct named), TOO_LARGE,
 * OUT_OF_MEMORY. */
llb_status so_regex_compile(const char *text, size_t len, struct so_node *out);

struct so_matcher {
  const struct so_grammar *g;
  struct so_state cur;
  struct so_state tmp;
  struct so_state tmp2;
};

#endif

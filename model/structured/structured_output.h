/* Structured output: a grammar compiled from a JSON Schema (or "any JSON object", or a
 * fixed list of choices), a byte-level pushdown matcher over it, and the vocabulary mask
 * that says which tokens may come next (vLLM's structured_outputs, OpenAI's
 * response_format; the role of xgrammar's GrammarCompiler / GrammarMatcher).
 *
 * The output is compact JSON: no whitespace between tokens (xgrammar's any_whitespace=False),
 * so a model cannot loop on blanks. Object properties may come in any order, each at most
 * once; an object ends only once every required property is there. A schema object that
 * lists properties without additionalProperties is closed (OpenAI strict mode). Strings: no
 * control bytes, valid UTF-8, \uXXXX escapes outside the surrogate range, min/maxLength in
 * code points. What a schema asks that the matcher cannot enforce (not, if/then/else,
 * uniqueItems, patternProperties, ...) is refused at compile time as UNSUPPORTED with the
 * keyword named, never silently ignored; docs/structured-output.md lists both sides.
 *
 * Thread safety: a grammar is immutable after creation and may be shared; a vocabulary too,
 * except that so_vocab_fill_mask uses scratch inside it (one call at a time per vocabulary);
 * a matcher belongs to one request. Only the create functions allocate. */
#ifndef LLB_MODEL_STRUCTURED_OUTPUT_H
#define LLB_MODEL_STRUCTURED_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tokenizer;
struct so_grammar;
struct so_matcher;
struct so_vocab;

/* Bounds on what a request may ask (enforced by the compilers). */
#define SO_MAX_SPEC_BYTES (64 * 1024) /* schema / choice list text */
#define SO_MAX_NODES 4096             /* compiled schema nodes */
#define SO_MAX_PROPERTIES 64          /* properties of one object */
#define SO_MAX_LITERALS 64            /* choices; literals of one grammar node */
#define SO_MAX_ENUM_VALUES 1024       /* values of one enum */
#define SO_MAX_ANY_OF 64              /* alternatives of one anyOf/oneOf (after distributing) */

/* Compiles a JSON Schema (text[0..len), UTF-8 JSON; draft 2020-12 and draft 4-7 forms) into
 * *out, exactly (model/structured/so_schema.c): type (one or a list); enum and const of any JSON values;
 * minLength, maxLength, pattern (a search, ECMA-262's ASCII classes), format (date, time,
 * date-time, uuid, email, uri, ipv4); minimum, maximum, exclusiveMinimum, exclusiveMaximum
 * (numbers written without an exponent once bounded), multipleOf; items, prefixItems,
 * additionalItems, minItems, maxItems; properties, required, additionalProperties,
 * minProperties (met by named properties), maxProperties; allOf, anyOf, oneOf (read as anyOf:
 * alternatives should be disjoint) beside any other keyword and each other; $ref to any JSON
 * pointer into the document (recursion allowed); annotations ignored. Errors: MALFORMED (not
 * JSON, bad keyword value, bad $ref, a schema no value meets), UNSUPPORTED (a keyword the
 * matcher cannot enforce; the message names it), TOO_LARGE (past the SO_MAX_* bounds or the
 * automata's), OUT_OF_MEMORY. Caller frees with so_grammar_destroy. */
llb_status so_grammar_compile_json_schema(const char *text, size_t len, struct so_grammar **out);

/* A grammar for any JSON object (response_format {"type": "json_object"}). Errors:
 * OUT_OF_MEMORY. Caller frees with so_grammar_destroy. */
llb_status so_grammar_compile_json_object(struct so_grammar **out);

/* A grammar whose output is exactly one of the given strings (vLLM's guided_choice):
 * text[0..len) is a JSON array of 1..SO_MAX_LITERALS non-empty strings. Errors: MALFORMED,
 * TOO_LARGE, OUT_OF_MEMORY. Caller frees with so_grammar_destroy. */
llb_status so_grammar_compile_choice(const char *text, size_t len, struct so_grammar **out);

/* A grammar whose output, as raw text, matches regex text[0..len) as a whole (vLLM's
 * guided_regex / structured_outputs.regex; anchors implied): literals, escapes \d \w \s \D
 * \W \S \n \t \r \f \v \xHH \uHHHH and escaped punctuation, classes with ranges and
 * negation, groups (capturing, (?:...), named), alternation, * + ? {m} {m,} {m,n} (lazy forms
 * alike), ^ / $ at the ends; `.` and negated classes match any UTF-8 character except that `.`
 * excludes "\n". Compiled to a byte DFA (model/structured/so_regex.c). Errors: MALFORMED, UNSUPPORTED
 * naming the construct (backreferences, lookaround, \b, inline flags, non-ASCII class
 * ranges), TOO_LARGE (past 2048 DFA states or repetition over 1000), OUT_OF_MEMORY. Caller
 * frees with so_grammar_destroy. */
llb_status so_grammar_compile_regex(const char *text, size_t len, struct so_grammar **out);

/* A grammar whose output, as raw text, is in the language of the GBNF/EBNF grammar
 * text[0..len) (vLLM's structured_outputs.grammar / guided_grammar; xgrammar's and
 * llama.cpp's dialect, syntax in model/structured/so_gbnf.c): rules `name ::= ...`, the output is rule
 * `root`; literals, character classes (ranges, negation, \x \u \U escapes, UTF-8), `.`,
 * grouping, alternation, * + ? {m} {m,} {m,n}, # comments. Matched over code points, byte by
 * byte (UTF-8). Errors name the line and column (1-based; columns count bytes): MALFORMED (a
 * syntax error, an undefined or twice-defined rule, no `root`, a class that matches nothing,
 * a reachable rule that can never finish, left recursion), UNSUPPORTED (token references
 * <...>, Lark syntax), TOO_LARGE (over SO_MAX_SPEC_BYTES, 8192 rules, 65536 elements after
 * rewriting repetitions, a count above 1000, parentheses nested over 64), OUT_OF_MEMORY.
 * A reading that would nest rules deeper than the matcher's stack (40 frames) is dropped.
 * Caller frees with so_grammar_destroy. */
llb_status so_grammar_compile_gbnf(const char *text, size_t len, struct so_grammar **out);

/* Frees a grammar; NULL is fine. Every matcher over it must be gone first. */
void so_grammar_destroy(struct so_grammar *g);

/* A matcher at the start of g (g must outlive it). Errors: OUT_OF_MEMORY. Caller frees
 * with so_matcher_destroy. */
llb_status so_matcher_create(const struct so_grammar *g, struct so_matcher **out);

/* Frees a matcher; NULL is fine. */
void so_matcher_destroy(struct so_matcher *m);

/* dst takes src's state (both over the same grammar): a checkpoint to try tokens on. */
void so_matcher_copy_state(struct so_matcher *dst, const struct so_matcher *src);

/* Back to the start of the grammar (a resumed request replays its output from here). */
void so_matcher_reset(struct so_matcher *m);

/* Advances by bytes[0..n) when the grammar allows all of them and returns true; otherwise
 * returns false and leaves the matcher unchanged. */
bool so_matcher_accept_bytes(struct so_matcher *m, const uint8_t *bytes, size_t n);

/* True when the bytes so far form a complete value (end of generation is allowed). */
bool so_matcher_is_complete(const struct so_matcher *m);

/* True when no byte at all may follow (complete and nothing can extend it). */
bool so_matcher_is_terminated(struct so_matcher *m);

/* A vocabulary for masking: piece i = pieces[i][0..lens[i]) (the bytes token i adds to the
 * text; empty pieces, e.g. control tokens, are never allowed), eog_ids[0..n_eog) the tokens
 * that end generation (allowed exactly when the matcher is complete). Copies what it needs.
 * Errors: INVALID_ARGUMENT (n_vocab <= 0, an eog id out of range), OUT_OF_MEMORY. Caller
 * frees with so_vocab_destroy. */
llb_status so_vocab_create(int32_t n_vocab, const char *const *pieces, const size_t *lens,
                           const int32_t *eog_ids, int32_t n_eog, struct so_vocab **out);

/* The vocabulary of a tokenizer (tokenizer_token_to_piece without special rendering; its
 * end-of-generation set). Errors as so_vocab_create. */
llb_status so_vocab_from_tokenizer(const struct tokenizer *t, struct so_vocab **out);

/* Frees a vocabulary; NULL is fine. */
void so_vocab_destroy(struct so_vocab *v);

/* Number of tokens of v. */
int32_t so_vocab_size(const struct so_vocab *v);

/* Writes the allowed-next-token bitmask for m into bitmask[(n_vocab + 31) / 32] (bit i % 32
 * of word i / 32 set = token i allowed; xgrammar's layout). Walks each token's bytes through
 * a copy of the matcher state, sharing the work of common prefixes (pieces are kept sorted).
 * Returns the number of allowed tokens (never 0 while the matcher is live: a complete value
 * allows EOG). */
int32_t so_vocab_fill_mask(struct so_vocab *v, const struct so_matcher *m, uint32_t *bitmask);

/* Advances m by token id: its piece, or for an EOG token nothing (allowed only when
 * complete). Returns false, leaving m unchanged, when the token is not allowed. */
bool so_matcher_accept_token(struct so_matcher *m, const struct so_vocab *v, int32_t id);

#endif

/* Command-line flags of every llmbus program, parsed one way.
 *
 * A command describes its flags once, as tables of struct flag (one table per section of its
 * --help), and flags_parse builds one getopt_long table from them and runs glibc's
 * getopt_long_only over argv. So every command takes, the same way:
 *   --flag VALUE and --flag=VALUE; -x VALUE, -xVALUE for a flag with a short name;
 *   a long flag with one dash too (-np, llama-server's spelling; a lone letter is the short
 *     flag); an unambiguous prefix of a long flag (getopt's rule);
 *   underscores for dashes in a long flag's name (--max_model_len, as vLLM accepts);
 *   positional arguments anywhere among the flags, and `--` ending the flags (everything
 *     after it is positional, "-5" or "--x" included);
 *   --help / -h: the help (sections in order) on stdout, exit code 0;
 *   with flag_command.config, `--config FILE`: a YAML mapping of long flag names to values, as
 *     vLLM's `--config` (a list for a repeatable flag, true/false for a switch, a nested
 *     mapping as JSON text); the file's flags go first, so the command line overrides them.
 * A usage error prints one line (`<program>: <what>`) and a hint on stderr, exit code 2.
 *
 * getopt keeps global state: one flags_parse at a time (a program parses its flags once, on
 * its main thread; tests call it in sequence).
 */
#ifndef LLB_CMD_FLAGS_H
#define LLB_CMD_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* How a flag's value is stored into its target. */
enum flag_kind {
  FLAG_KIND_BOOL,   /* no value; *(bool *)target = true */
  FLAG_KIND_FALSE,  /* no value; *(bool *)target = false (the --no-X of a BOOL --X) */
  FLAG_KIND_INT32,  /* decimal; *(int32_t *)target */
  FLAG_KIND_INT64,  /* decimal; *(int64_t *)target */
  FLAG_KIND_DOUBLE, /* a finite number; *(double *)target */
  FLAG_KIND_STRING, /* *(const char **)target: into argv, or storage of the flag_args */
  FLAG_KIND_LIST,   /* repeatable: each value appended to *(struct flag_list *)target */
};

#define FLAG_LIST_MAX 32

/* The values of a FLAG_KIND_LIST flag, in the order given. */
struct flag_list {
  const char *items[FLAG_LIST_MAX]; /* [num]: into argv or storage of the flag_args */
  int num;
};

/* One flag. Targets hold the defaults before parsing (--help shows those of INT32, INT64,
 * DOUBLE and non-NULL STRING targets). */
struct flag {
  const char *name;    /* long name without "--": "max-num-seqs" */
  const char *aliases; /* more long names, '|'-separated ("np|parallel"); NULL = none */
  char short_name;     /* -x; 0 = none */
  enum flag_kind kind;
  void *target;        /* see enum flag_kind; must outlive the use of the values */
  const char *metavar; /* the value's name in --help ("N", "PATH"); NULL = "V" */
  const char *help;    /* one line (may be long: it is not wrapped) */
  /* Optional: called with the value (NULL for BOOL / FALSE) instead of storing it; an error
   * status (message recorded with LLB_ERRF) is a usage error. */
  llb_status (*set)(const struct flag *f, const char *value);
  bool greedy;         /* LIST: the words that follow are values too, up to the next flag
                        * (vLLM's nargs='+': --served-model-name a b) */
  double min, max;     /* INT32 / INT64 / DOUBLE: the value must lie in [min, max] when max > min
                        * (a usage error naming the range otherwise); 0, 0 = any */
};

/* A titled group of flags in --help ("common flags", "engine flags"). */
struct flag_section {
  const char *title; /* NULL = no title line */
  const struct flag *flags;
  int num_flags;
};

/* Everything flags_parse needs to know of a command. */
struct flag_command {
  const char *program; /* "llmbus serve": the prefix of error lines */
  const char *usage;   /* --help's first lines (usage, what it does), ending in '\n' */
  const struct flag_section *sections;
  int num_sections;
  const char *epilog;  /* printed after the flags; NULL = none */
  bool config;         /* accept --config FILE (YAML), see the top */
  int max_positional;  /* more is a usage error; -1 = any number */
};

/* What flags_parse leaves besides the targets: the positional arguments and the memory that
 * string values taken from a --config file live in. */
struct flag_args {
  char **positional; /* [num_positional]: into argv or the storage below */
  int num_positional;
  struct flag_storage *storage; /* private; flag_args_free */
};

/* flags_parse's return value when the program should go on. */
#define FLAGS_CONTINUE (-1)

/* Parses argv[1..argc) as described at the top into the targets of c's flags and `out`.
 * Returns FLAGS_CONTINUE, 0 after --help (printed), or 2 on a usage error (printed). argv
 * must outlive the use of string values; `out` must be freed with flag_args_free in every
 * case (it owns the strings of a --config file). */
int flags_parse(const struct flag_command *c, int argc, char **argv, struct flag_args *out);

/* Frees what `a` owns (string values from a --config file die with it). NULL ok. */
void flag_args_free(struct flag_args *a);

/* Writes c's --help (usage, each section's flags, epilog) to `f`. */
void flags_print_help(FILE *f, const struct flag_command *c);

/* Prints `<program>: <message>` and the --help hint on stderr; returns 2 (the usage exit code),
 * for checks a command makes after parsing. printf-style. */
int flags_usage_error(const struct flag_command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a decimal integer in [min, max] (for `set` hooks). INVALID_ARGUMENT naming the value
 * and the range otherwise. */
llb_status flags_parse_int64(const char *value, int64_t min, int64_t max, int64_t *out);

/* Parses a finite number in [min, max]. INVALID_ARGUMENT naming the value otherwise. */
llb_status flags_parse_double(const char *value, double min, double max, double *out);

/* The args a YAML --config file stands for, in its order: "--name", then its value (or values
 * for a list; none for true on a switch; "--no-name" or nothing for false), for the flags of c.
 * argv-like: *args_out[*num_out] malloc'd strings in one malloc'd array (free each, then the
 * array). Errors: IO (unreadable), MALFORMED (not YAML, not a mapping of names to scalars, lists
 * or mappings; the message names the line), NOT_FOUND naming a key that is no flag of c.
 * Defined in flags_yaml.c. */
llb_status flags_config_args(const struct flag_command *c, const char *path, char ***args_out, int *num_out);

/* The flag of c whose long name or alias is `name` (without dashes), or NULL. Defined in
 * flags_yaml.c, the config reader that looks keys up by name. */
const struct flag *flags_find(const struct flag_command *c, const char *name);

#endif

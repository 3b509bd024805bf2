/* One flag parser over getopt_long_only for every llmbus program; see flags.h. */
#include "cmd/flags/flags.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FLAG_VAL_BASE 256 /* getopt val of flag i: FLAG_VAL_BASE + i (shorts return their char) */

/* What a parse allocates: the argv getopt runs over, strings it made (a --config file's args,
 * names with '_' made '-'), the long-option table and the positional list. */
struct flag_storage {
  char **argv;          /* [argc] */
  int argc;
  char **owned;         /* [num_owned] malloc'd strings */
  int num_owned, cap_owned;
  struct option *longopts;
  char **alias_names;   /* [num_alias_names] copies of the aliases' names */
  int num_alias_names;
  const struct flag **by_index; /* [num_flags] every flag of every section */
  int num_flags;
};

llb_status flags_parse_int64(const char *value, int64_t min, int64_t max, int64_t *out) {
  if (!value || !*value) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "expected an integer, got an empty value");
  errno = 0;
  char *end = NULL;
  long long v = strtoll(value, &end, 10);
  if (errno != 0 || *end != '\0' || end == value) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s' is not an integer", value);
  if (v < min || v > max)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s is not in [%" PRId64 ", %" PRId64 "]", value, min, max);
  *out = (int64_t)v;
  return LLB_STATUS_OK;
}

llb_status flags_parse_double(const char *value, double min, double max, double *out) {
  errno = 0;
  char *end = NULL;
  double v = value ? strtod(value, &end) : NAN;
  if (!value || !*value || errno != 0 || *end != '\0' || !isfinite(v))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s' is not a number", value ? value : "");
  if (v < min || v > max) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s is not in [%g, %g]", value, min, max);
  *out = v;
  return LLB_STATUS_OK;
}

static bool kind_takes_value(enum flag_kind k) { return k != FLAG_KIND_BOOL && k != FLAG_KIND_FALSE; }

/* --- help ------------------------------------------------------------------------------ */

static void print_flag(FILE *f, const struct flag *fl) {
  char head[160];
  int n = fl->short_name ? snprintf(head, sizeof head, "  -%c, --%s", fl->short_name, fl->name)
                         : snprintf(head, sizeof head, "  --%s", fl->name);
  for (const char *a = fl->aliases; a && *a && n < (int)sizeof head;) {
    size_t len = strcspn(a, "|");
    n += snprintf(head + n, sizeof head - (size_t)n, ", %s%.*s", len > 2 ? "--" : "-", (int)len, a);
    a += len + (a[len] == '|');
  }
  if (kind_takes_value(fl->kind) && n < (int)sizeof head)
    snprintf(head + n, sizeof head - (size_t)n, " %s%s", fl->metavar ? fl->metavar : "V", fl->greedy ? " [V ...]" : "");
  if (strlen(head) < 32) fprintf(f, "%-32s %s", head, fl->help ? fl->help : "");
  else fprintf(f, "%s\n%33s%s", head, "", fl->help ? fl->help : ""); /* a long head: the help below it */
  if (!fl->set && fl->target) {
    switch (fl->kind) {
    case FLAG_KIND_INT32: fprintf(f, " (default %" PRId32 ")", *(int32_t *)fl->target); break;
    case FLAG_KIND_INT64: fprintf(f, " (default %" PRId64 ")", *(int64_t *)fl->target); break;
    case FLAG_KIND_DOUBLE: fprintf(f, " (default %g)", *(double *)fl->target); break;
    case FLAG_KIND_STRING: {
      const char *v = *(const char **)fl->target;
      if (v) fprintf(f, " (default %s)", *v ? v : "\"\"");
      break;
    }
    case FLAG_KIND_BOOL:
    case FLAG_KIND_FALSE:
    case FLAG_KIND_LIST: break;
    }
  }
  fputc('\n', f);
}

void flags_print_help(FILE *f, const struct flag_command *c) {
  fputs(c->usage ? c->usage : "", f);
  for (int s = 0; s < c->num_sections; s++) {
    const struct flag_section *sec = &c->sections[s];
    if (sec->num_flags == 0) continue;
    fprintf(f, "\n%s%s", sec->title ? sec->title : "", sec->title ? ":\n" : "");
    for (int i = 0; i < sec->num_flags; i++) print_flag(f, &sec->flags[i]);
  }
  fprintf(f, "\n%-32s %s\n", "  -h, --help", "print this help and exit");
  if (c->config)
    fprintf(f, "%-32s %s\n", "  --config FILE",
            "YAML file of flags (long names as keys, as vLLM's --config); the command line overrides it");
  fprintf(f, "%-32s %s\n", "  --", "end of flags: what follows is positional");
  if (c->epilog) fprintf(f, "\n%s", c->epilog);
}

int flags_usage_error(const struct flag_command *c, const char *fmt, ...) {
  fprintf(stderr, "%s: ", c->program);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(%s --help lists the flags)\n", c->program);
  return 2;
}

/* --- storage --------------------------------------------------------------------------- */

static char *own(struct flag_storage *s, char *str) {
  if (!str) return NULL;
  if (s->num_owned == s->cap_owned) {
    int cap = s->cap_owned ? 2 * s->cap_owned : 16;
    char **p = realloc(s->owned, (size_t)cap * sizeof *p);
    if (!p) {
      free(str);
      return NULL;
    }
    s->owned = p;
    s->cap_owned = cap;
  }
  return s->owned[s->num_owned++] = str;
}

void flag_args_free(struct flag_args *a) {
  if (!a) return;
  struct flag_storage *s = a->storage;
  if (s) {
    for (int i = 0; i < s->num_owned; i++) free(s->owned[i]);
    for (int i = 0; i < s->num_alias_names; i++) free(s->alias_names[i]);
    free(s->owned);
    free(s->alias_names);
    free(s->argv);
    free(s->longopts);
    free(s->by_index);
    free(s);
  }
  free(a->positional);
  memset(a, 0, sizeof *a);
}

/* --- argv ------------------------------------------------------------------------------ */

/* "--max_model_len=8" -> "--max-model-len=8" (a copy owned by s); other args as they are. */
static char *normalized(struct flag_storage *s, char *arg) {
  if (strncmp(arg, "--", 2) != 0 || !arg[2]) return arg;
  size_t name_len = strcspn(arg, "=");
  if (!memchr(arg, '_', name_len)) return arg;
  char *copy = own(s, strdup(arg));
  if (!copy) return NULL;
  for (size_t i = 2; i < name_len; i++)
    if (copy[i] == '_') copy[i] = '-';
  return copy;
}

/* The argv getopt runs over: argv[0], the --config file's args (when c->config and one is
 * given), then argv's own args without --config FILE, long names normalized. Returns
 * FLAGS_CONTINUE or 2 (printed). */
static int build_argv(const struct flag_command *c, int argc, char **argv, struct flag_storage *s) {
  const char *config = NULL;
  int config_at = -1, config_len = 0;
  for (int i = 1; c->config && i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--config") == 0) {
      if (i + 1 >= argc) return flags_usage_error(c, "--config needs a value");
      config = argv[i + 1], config_at = i, config_len = 2;
    } else if (strncmp(argv[i], "--config=", 9) == 0) {
      config = argv[i] + 9, config_at = i, config_len = 1;
    }
  }
  char **extra = NULL;
  int num_extra = 0;
  if (config && flags_config_args(c, config, &extra, &num_extra) != LLB_STATUS_OK)
    return flags_usage_error(c, "--config %s: %s", config, llb_err_last());
  s->argv = calloc((size_t)(argc + num_extra + 1), sizeof *s->argv);
  bool ok = s->argv != NULL;
  for (int i = 0; i < num_extra; i++) /* owned even when the array could not be made */
    if (!own(s, extra[i])) ok = false;
  free(extra);
  if (!ok) return flags_usage_error(c, "out of memory");
  int n = 0;
  s->argv[n++] = argv[0];
  for (int i = 0; i < num_extra; i++) s->argv[n++] = s->owned[s->num_owned - num_extra + i];
  bool ended = false;
  for (int i = 1; i < argc; i++) {
    if (i >= config_at && i < config_at + config_len) continue;
    char *a = ended ? argv[i] : normalized(s, argv[i]);
    if (!a) return flags_usage_error(c, "out of memory");
    ended |= strcmp(argv[i], "--") == 0;
    s->argv[n++] = a;
  }
  s->argc = n;
  return FLAGS_CONTINUE;
}

/* getopt's tables: longopts (every name and alias, plus help) and the short-option string. */
static int build_tables(const struct flag_command *c, struct flag_storage *s, char *optstring, size_t cap) {
  int num = 0, num_names = 1 /* help */, num_aliases = 0;
  for (int k = 0; k < c->num_sections; k++) {
    num += c->sections[k].num_flags;
    for (int i = 0; i < c->sections[k].num_flags; i++)
      for (const char *a = c->sections[k].flags[i].aliases; a && *a; a += strcspn(a, "|") + (a[strcspn(a, "|")] == '|'))
        num_aliases++;
  }
  num_names += num + num_aliases;
  s->by_index = calloc((size_t)num + 1, sizeof *s->by_index);
  s->longopts = calloc((size_t)num_names + 1, sizeof *s->longopts);
  s->alias_names = calloc((size_t)num_aliases + 1, sizeof *s->alias_names);
  if (!s->by_index || !s->longopts || !s->alias_names) return flags_usage_error(c, "out of memory");
  size_t o = 0;
  optstring[o++] = '-'; /* positionals come back in order, as option 1 */
  optstring[o++] = ':'; /* ':' for a missing value; no messages of getopt's own */
  int l = 0;
  for (int k = 0; k < c->num_sections; k++)
    for (int i = 0; i < c->sections[k].num_flags; i++) {
      const struct flag *f = &c->sections[k].flags[i];
      const int has_arg = kind_takes_value(f->kind) ? required_argument : no_argument;
      const int val = FLAG_VAL_BASE + s->num_flags;
      s->by_index[s->num_flags++] = f;
      s->longopts[l++] = (struct option){f->name, has_arg, NULL, val};
      for (const char *a = f->aliases; a && *a;) {
        size_t len = strcspn(a, "|");
        char *name = strndup(a, len);
        if (!name) return flags_usage_error(c, "out of memory");
        s->alias_names[s->num_alias_names++] = name;
        s->longopts[l++] = (struct option){name, has_arg, NULL, val};
        a += len + (a[len] == '|');
      }
      if (f->short_name && o + 3 < cap) {
        optstring[o++] = f->short_name;
        if (has_arg) optstring[o++] = ':';
      }
    }
  s->longopts[l++] = (struct option){"help", no_argument, NULL, 'h'};
  optstring[o++] = 'h';
  optstring[o] = '\0';
  return FLAGS_CONTINUE;
}

/* The flag getopt answered `val` for (a short char or FLAG_VAL_BASE + index), or NULL. */
static const struct flag *flag_of_val(const struct flag_storage *s, int val) {
  if (val >= FLAG_VAL_BASE && val - FLAG_VAL_BASE < s->num_flags) return s->by_index[val - FLAG_VAL_BASE];
  for (int i = 0; val > 0 && val < FLAG_VAL_BASE && i < s->num_flags; i++)
    if (s->by_index[i]->short_name == val) return s->by_index[i];
  return NULL;
}

static llb_status store(const struct flag *f, const char *value) {
  if (f->set) return f->set(f, value);
  const bool ranged = f->max > f->min;
  int64_t v = 0;
  double d = 0;
  llb_status st = LLB_STATUS_OK;
  switch (f->kind) {
  case FLAG_KIND_BOOL: *(bool *)f->target = true; break;
  case FLAG_KIND_FALSE: *(bool *)f->target = false; break;
  case FLAG_KIND_INT32:
    st = flags_parse_int64(value, ranged ? (int64_t)f->min : INT32_MIN, ranged ? (int64_t)f->max : INT32_MAX, &v);
    if (!st) *(int32_t *)f->target = (int32_t)v;
    break;
  case FLAG_KIND_INT64:
    st = flags_parse_int64(value, ranged ? (int64_t)f->min : INT64_MIN, ranged ? (int64_t)f->max : INT64_MAX, &v);
    if (!st) *(int64_t *)f->target = v;
    break;
  case FLAG_KIND_DOUBLE:
    if (!(st = flags_parse_double(value, ranged ? f->min : -HUGE_VAL, ranged ? f->max : HUGE_VAL, &d)))
      *(double *)f->target = d;
    break;
  case FLAG_KIND_STRING: *(const char **)f->target = value; break;
  case FLAG_KIND_LIST: {
    struct flag_list *list = f->target;
    if (list->num >= FLAG_LIST_MAX)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "at most %d values", FLAG_LIST_MAX);
    list->items[list->num++] = value;
    break;
  }
  }
  return st;
}

static int add_positional(const struct flag_command *c, struct flag_args *out, char *arg) {
  char **p = realloc(out->positional, (size_t)(out->num_positional + 1) * sizeof *p);
  if (!p) return flags_usage_error(c, "out of memory");
  out->positional = p;
  p[out->num_positional++] = arg;
  return FLAGS_CONTINUE;
}

/* The message for getopt's '?': an unknown or ambiguous name, or a value given to a switch. */
static int unknown_flag(const struct flag_command *c, const struct flag_storage *s) {
  const struct flag *f = flag_of_val(s, optopt);
  if (f && !kind_takes_value(f->kind)) return flags_usage_error(c, "--%s takes no value", f->name);
  if (optopt > 0 && optopt < FLAG_VAL_BASE && optopt != '?') return flags_usage_error(c, "unknown flag -%c", optopt);
  const char *arg = optind > 0 && optind <= s->argc ? s->argv[optind - 1] : "?";
  return flags_usage_error(c, "unknown or ambiguous flag '%.*s'", (int)strcspn(arg, "="), arg);
}

int flags_parse(const struct flag_command *c, int argc, char **argv, struct flag_args *out) {
  memset(out, 0, sizeof *out);
  struct flag_storage *s = calloc(1, sizeof *s);
  if (!s) return flags_usage_error(c, "out of memory");
  out->storage = s;
  char optstring[512];
  int rc = build_argv(c, argc, argv, s);
  if (rc == FLAGS_CONTINUE) rc = build_tables(c, s, optstring, sizeof optstring);
  const struct flag *greedy = NULL; /* the list flag whose values may go on */
  optind = 0;                      /* glibc: start over (a fresh scan of a fresh argv) */
  opterr = 0;
  while (rc == FLAGS_CONTINUE) {
    const int ch = getopt_long_only(s->argc, s->argv, optstring, s->longopts, NULL);
    if (ch == -1) break;
    if (ch == 1) { /* a positional among the flags, or one more value of a greedy list */
      if (greedy && store(greedy, optarg) != LLB_STATUS_OK)
        rc = flags_usage_error(c, "--%s: %s", greedy->name, llb_err_last());
      else if (!greedy)
        rc = add_positional(c, out, optarg);
      continue;
    }
    greedy = NULL;
    if (ch == 'h') {
      flags_print_help(stdout, c);
      rc = 0;
    } else if (ch == '?') {
      rc = unknown_flag(c, s);
    } else if (ch == ':') {
      const struct flag *f = flag_of_val(s, optopt);
      if (f && optopt < FLAG_VAL_BASE) rc = flags_usage_error(c, "-%c needs a value", optopt);
      else rc = flags_usage_error(c, "--%s needs a value", f ? f->name : "?");
    } else {
      const struct flag *f = flag_of_val(s, ch);
      if (!f) rc = flags_usage_error(c, "internal: no flag for getopt value %d", ch);
      else if (store(f, kind_takes_value(f->kind) ? optarg : NULL) != LLB_STATUS_OK)
        rc = flags_usage_error(c, "--%s: %s", f->name, llb_err_last());
      else if (f->kind == FLAG_KIND_LIST && f->greedy)
        greedy = f;
    }
  }
  for (int i = optind; rc == FLAGS_CONTINUE && i < s->argc; i++) rc = add_positional(c, out, s->argv[i]);
  if (rc == FLAGS_CONTINUE && c->max_positional >= 0 && out->num_positional > c->max_positional)
    rc = c->max_positional == 0 ? flags_usage_error(c, "unexpected argument '%s'", out->positional[0])
                                : flags_usage_error(c, "unexpected argument '%s' (at most %d; quote a prompt with spaces)",
                                                    out->positional[c->max_positional], c->max_positional);
  return rc;
}

/* Jinja interpreter fuzzing (model/template/jinja.h): the input is a template; it is parsed and, when
 * it parses, rendered with a small chat context under tight bounds. Nothing may crash, leak,
 * hang or read out of bounds (ASan/UBSan), whatever the bytes.
 *  - Always: the standalone driver (LLB_FUZZ_STANDALONE_DRIVER) mutates seed templates
 *    (byte flips, insertions of template syntax, truncations, splices) for N seconds under
 *    ctest (`fuzz_jinja_driver`).
 *  - -DLLB_FUZZ=ON (clang, `make fuzz`): the libFuzzer binary `fuzz_jinja`. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja.h"

static const char *const context_json =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"h\\u00e9llo\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static json_t *ctx;
  if (!ctx) ctx = json_loads(context_json, 0, NULL);
  struct jinja_template *t = NULL;
  if (jinja_template_create((const char *)data, size, &t) != LLB_STATUS_OK) return 0;
  struct jinja_render_opts o;
  jinja_render_opts_default(&o);
  o.limits.max_steps = 20000;
  o.limits.max_output_bytes = 1 << 16;
  o.limits.max_memory_bytes = 16 << 20;
  o.limits.max_call_depth = 16;
  o.now_unix_s = 1784111400;
  char *out = NULL;
  if (jinja_template_render(t, ctx, &o, &out, NULL) == LLB_STATUS_OK) free(out);
  jinja_template_destroy(t);
  return 0;
}

#ifdef LLB_FUZZ_STANDALONE_DRIVER
#include <time.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

static const char *const seeds[] = {
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') | trim + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}",
    "{% set ns = namespace(sys='') %}{% for m in messages if m.role == 'system' %}{% set ns.sys = m.content %}{% endfor %}"
    "{{ bos_token }}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{% for m in messages[1:] %}"
    "[{{ loop.index0 }}] {{ m.content if m.content is string else m.tool_calls[0].function.arguments | tojson }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}{{ ns.sys | upper }}",
    "{% macro f(x, y=2) %}{{ x ~ y }}{% if x < 5 %}{{ f(x + 1) }}{% endif %}{% endmacro %}{{ f(0) }}"
    "{{ 'a,b'.split(',') | join('-') }}{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}"
    "{{ range(3) | list }}{{ {'k': [1, 2.5, none]}.items() | list }}{{ 'x'[::-1] }}{{ 7 // 2 }}{% filter upper %}z{% endfilter %}",
};
static const char *const pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "{", "}", "'", "\"",
                                     "|", ".", ",", ":", " if ", " else ", " for ", " in ", " endfor ", " endif ",
                                     " set ", "loop", "ns", "~", "*", "**", "//", "range(99999)", "\\", "\n", "\xc3"};

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3.0;
  size_t n_seeds = sizeof(seeds) / sizeof(*seeds), n_pieces = sizeof(pieces) / sizeof(*pieces);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double end = (double)now.tv_sec + now.tv_nsec * 1e-9 + seconds; /* wall clock: the machine is shared */
  uint64_t runs = 0;
  char buf[4096];
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)now.tv_sec + now.tv_nsec * 1e-9 >= end) break;
    const char *s = seeds[rng_next() % n_seeds];
    size_t n = strlen(s);
    memcpy(buf, s, n);
    int edits = 1 + (int)(rng_next() % 4);
    for (int e = 0; e < edits && n > 0; e++) {
      size_t at = rng_next() % n;
      switch (rng_next() % 4) {
      case 0: buf[at] = (char)rng_next(); break;
      case 1: n = at; break;
      case 2: {
        const char *p = pieces[rng_next() % n_pieces];
        size_t pl = strlen(p);
        if (n + pl < sizeof(buf)) {
          memmove(buf + at + pl, buf + at, n - at);
          memcpy(buf + at, p, pl);
          n += pl;
        }
        break;
      }
      default: {
        const char *o = seeds[rng_next() % n_seeds];
        size_t from = rng_next() % strlen(o), len = strlen(o) - from;
        if (at + len < sizeof(buf)) { memcpy(buf + at, o + from, len); n = at + len; }
      }
      }
    }
    char *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past the end */
    if (!copy) return 1;
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput((const uint8_t *)copy, n);
    free(copy);
    runs++;
  }
  for (size_t i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput((const uint8_t *)seeds[i], strlen(seeds[i]));
  printf("fuzz_jinja_driver: %llu runs\n", (unsigned long long)runs);
  return 0;
}
#endif

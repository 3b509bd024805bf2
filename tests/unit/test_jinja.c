/* Jinja interpreter (model/template/jinja.h): the language on hand-written templates whose jinja2
 * output is known, errors that name line and column, and the bounds that keep a hostile
 * template or context from hanging or exhausting an actor. Real chat templates are checked
 * against Python jinja2 by test_jinja_templates.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja.h"

/* Renders src with the JSON context ctx (NULL = none); returns status, *out malloc'd. */
static llb_status render_opts(const char *src, const char *ctx, const struct jinja_render_opts *o, char **out) {
  struct jinja_template *t = NULL;
  *out = NULL;
  llb_status st = jinja_template_create(src, strlen(src), &t);
  if (st != LLB_STATUS_OK) return st;
  json_t *j = NULL;
  if (ctx) {
    json_error_t e;
    j = json_loads(ctx, 0, &e);
    if (!j) fail_msg("bad test context: %s", e.text);
  }
  st = jinja_template_render(t, j, o, out, NULL);
  json_decref(j);
  jinja_template_destroy(t);
  return st;
}

static void expect(const char *src, const char *ctx, const char *want) {
  char *out;
  llb_status st = render_opts(src, ctx, NULL, &out);
  if (st != LLB_STATUS_OK) fail_msg("%s: %s", src, llb_err_last());
  if (strcmp(out, want) != 0) fail_msg("%s\n got: [%s]\nwant: [%s]", src, out, want);
  free(out);
}

static void expect_error(const char *src, const char *ctx, llb_status want_st, const char *want_msg) {
  char *out;
  llb_status st = render_opts(src, ctx, NULL, &out);
  if (st != want_st) fail_msg("%s: status %s (%s), want %s", src, llb_strerror(st), llb_err_last(), llb_strerror(want_st));
  if (!strstr(llb_err_last(), want_msg)) fail_msg("%s: error [%s] lacks [%s]", src, llb_err_last(), want_msg);
  assert_null(out);
}

static void test_whitespace_control_matches_hf_settings(void **s) {
  (void)s;
  /* trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before */
  expect("{% if true %}\n  x\n  {% endif %}\ny", NULL, "  x\ny");
  expect("a  {{- ' b ' -}}  c", NULL, "a b c");
  expect("a\n  {%+ if true %}b{% endif %}", NULL, "a\n  b");
  expect("{# c #}\nx\n", NULL, "x"); /* one trailing newline dropped */
  expect("{{ 'a' }}\n{{ 'b' }}", NULL, "a\nb");
}

static void test_loops_expose_jinja2_loop_variables(void **s) {
  (void)s;
  expect("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
         "{\"xs\": [\"a\", \"b\"]}", "102TrueFalse2;211FalseTrue2;");
  expect("{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}", "{\"xs\": [1, 2, 3]}", "2/2 3/2 ");
  expect("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
  expect("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", "{\"d\": {\"b\": 1, \"a\": [1]}}", "b=1,a=[1],");
  expect("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", NULL, "13");
  expect("{% for x in [1, 2] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", NULL, "|2;1|;");
}

static void test_scopes_and_namespace_follow_jinja2(void **s) {
  (void)s;
  /* a set inside a loop does not leak out; a namespace attribute does */
  expect("{% set x = 1 %}{% set ns = namespace(y=1) %}{% for i in [1, 2] %}{% set x = x + i %}{% set ns.y = ns.y + i %}{% endfor %}{{ x }} {{ ns.y }}",
         NULL, "1 4");
  expect("{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21");
  expect("{% set t %}in {{ 'block' }}{% endset %}{{ t | upper }}", NULL, "IN BLOCK");
}

static void test_macros_take_defaults_keywords_and_caller(void **s) {
  (void)s;
  expect("{% macro f(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, b=2) }} {{ f() }}", NULL, "1-d 1-2 -d");
  expect("{% macro w(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call w('p') %}body{% endcall %}", NULL, "<p>body</p>");
  expect("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
}

static void test_python_values_print_as_python(void **s) {
  (void)s;
  expect("{{ none }} {{ true }} {{ 1.0 }} {{ 1e-5 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}", NULL,
         "None True 1.0 1e-05 2.5 3 2 1024");
  expect("{{ ['a', 1, none] }} {{ {'k': \"it's\"} }} {{ (1,) }}", NULL, "['a', 1, None] {'k': \"it's\"} (1,)");
  expect("{{ 'héllo'[1:3] }}{{ [1, 2, 3][::-1] }}{{ 'abc'[-1] }}{{ 'héllo' | length }}", NULL, "él[3, 2, 1]c5");
  /* slices of strings by code point, multi-byte ones kept whole, reversed, stepped */
  expect("{{ 'añb€c'[::-1] }} {{ 'añb€c'[::2] }} {{ 'añb€c'[-2:] }} {{ 'añb€c'[3:0:-1] }}", NULL, "c€bña abc €c €bñ");
  expect("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ x or 'dflt' }}", NULL, "True False True True dflt");
}

static void test_filters_and_tests(void **s) {
  (void)s;
  expect("{{ {'b': 'é', 'a': [1, 2.5, none, true]} | tojson }}", NULL, "{\"b\": \"é\", \"a\": [1, 2.5, null, true]}");
  expect("{{ {'a': [1]} | tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1\n  ]\n}");
  expect("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}",
         "{\"ms\": [{\"role\": \"user\", \"c\": \"x\"}, {\"role\": \"bot\", \"c\": \"y\"}, {\"role\": \"user\", \"c\": \"z\"}]}", "x,z");
  expect("{{ ' a ' | trim }}|{{ 'ab' | upper }}|{{ 'hello world' | title }}|{{ [3, 1, 2] | sort | list }}|{{ ['a', 'A', 'b'] | unique | list }}",
         NULL, "a|AB|Hello World|[1, 2, 3]|['a', 'b']");
  expect("{{ x | default('d') }} {{ '' | default('e', true) }} {{ 'a\\nb' | indent(2) }} {{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}",
         NULL, "d e a\n  b 13");
  expect("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [1] is iterable }} {{ 3 is odd }} {{ 1 is number }}",
         NULL, "False True True True True True True");
}

static void test_string_and_dict_methods(void **s) {
  (void)s;
  expect("{{ 'xxaxx'.strip('x') }} {{ ' a b '.split() }} {{ 'a,b'.split(',') }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}",
         NULL, "a ['a', 'b'] ['a', 'b'] True True");
  expect("{{ '{}-{name}'.format(1, name='n') }} {{ 'aXa'.replace('a', 'b') }} {{ 'abc'.find('c') }} {{ d.get('k', 'no') }} {{ d.keys() | list }}",
         "{\"d\": {\"a\": 1}}", "1-n bXb 2 no ['a']");
}

static void test_errors_name_line_and_column(void **s) {
  (void)s;
  expect_error("line1\n{% if x %}", NULL, LLB_STATUS_MALFORMED, "line 2");
  expect_error("{{ 1 + }}", NULL, LLB_STATUS_MALFORMED, "line 1 col");
  expect_error("{% bogus %}", NULL, LLB_STATUS_MALFORMED, "unknown tag 'bogus'");
  expect_error("a\n\n{{ x.y }}", NULL, LLB_STATUS_INVALID_ARGUMENT, "line 3 col");
  expect_error("{{ 1 + 'a' }}", NULL, LLB_STATUS_INVALID_ARGUMENT, "unsupported operand");
  expect_error("{{ raise_exception('no system role') }}", NULL, LLB_STATUS_INVALID_ARGUMENT, "no system role");
  expect_error("{{ x | nosuchfilter }}", NULL, LLB_STATUS_INVALID_ARGUMENT, "No filter named 'nosuchfilter'");
}

static void test_sandbox_refuses_mutation(void **s) {
  (void)s;
  expect_error("{% set l = [] %}{{ l.append(1) }}", NULL, LLB_STATUS_INVALID_ARGUMENT, "unsafe");
  expect_error("{{ d.update({}) }}", "{\"d\": {}}", LLB_STATUS_INVALID_ARGUMENT, "unsafe");
}

static void test_hostile_templates_hit_bounds(void **s) {
  (void)s;
  struct jinja_render_opts o;
  jinja_render_opts_default(&o);
  o.limits.max_steps = 10000;
  o.limits.max_output_bytes = 1 << 16;
  o.limits.max_memory_bytes = 8 << 20;
  char *out;
  /* nested loops that would run 10^10 iterations */
  assert_int_equal(render_opts("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL, &o, &out),
                   LLB_STATUS_TOO_LARGE);
  /* output doubling */
  assert_int_equal(render_opts("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                               NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  /* unbounded recursion */
  assert_int_equal(render_opts("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  /* a range past the sandbox's MAX_RANGE, string repetition past memory */
  assert_int_equal(render_opts("{{ range(1000000000) | length }}", NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  assert_int_equal(render_opts("{{ 'x' * 1000000000 }}", NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  /* a self-containing namespace prints bounded */
  assert_int_equal(render_opts("{% set ns = namespace() %}{% set ns.me = [ns, ns] %}{{ ns }}", NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  /* deep nesting in the source */
  char deep[2000];
  size_t n = 0;
  n += (size_t)sprintf(deep, "{{ ");
  for (int i = 0; i < 600; i++) deep[n++] = '(';
  deep[n++] = '1';
  for (int i = 0; i < 600; i++) deep[n++] = ')';
  strcpy(deep + n, " }}");
  assert_int_equal(render_opts(deep, NULL, &o, &out), LLB_STATUS_TOO_LARGE);
  /* garbage never crashes */
  const char *junk[] = {"{{", "{%", "{#", "{{ 'unterminated }}", "{% for %}", "{% set = 1 %}", "{{ a[ }}", "{{ }}",
                        "{% macro (x) %}{% endmacro %}", "{{ 1 if }}", "{% endfor %}", "{{ x | }}", "{{ a.1.b }}"};
  for (size_t i = 0; i < sizeof(junk) / sizeof(*junk); i++) {
    llb_status st = render_opts(junk[i], NULL, &o, &out);
    if (st == LLB_STATUS_OK) free(out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_whitespace_control_matches_hf_settings),
      cmocka_unit_test(test_loops_expose_jinja2_loop_variables),
      cmocka_unit_test(test_scopes_and_namespace_follow_jinja2),
      cmocka_unit_test(test_macros_take_defaults_keywords_and_caller),
      cmocka_unit_test(test_python_values_print_as_python),
      cmocka_unit_test(test_filters_and_tests),
      cmocka_unit_test(test_string_and_dict_methods),
      cmocka_unit_test(test_errors_name_line_and_column),
      cmocka_unit_test(test_sandbox_refuses_mutation),
      cmocka_unit_test(test_hostile_templates_hit_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* CORS as vLLM's server answers browsers (Starlette's CORSMiddleware with vLLM's flags): the
 * headers of a plain request, preflights allowed and refused, credentials never with "*". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/api_server/api_server_cors.h"

static const char *header(const struct api_server_cors_header *h, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(h[i].name, name) == 0) return h[i].value;
  return NULL;
}

static void test_defaults_allow_any_origin_with_a_star(void **state) {
  (void)state;
  struct api_server_cors c;
  assert_int_equal(api_server_cors_parse(NULL, NULL, NULL, false, &c), LLB_STATUS_OK);
  struct api_server_cors_header h[6];
  int n;
  char why[128];
  assert_int_equal(api_server_cors_check(&c, false, "https://app.example", NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
  assert_string_equal(header(h, n, "Access-Control-Allow-Origin"), "*");
  assert_null(header(h, n, "Access-Control-Allow-Credentials"));
  /* no Origin: not a CORS request, no headers */
  assert_int_equal(api_server_cors_check(&c, false, NULL, NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
  assert_int_equal(n, 0);
  /* a preflight: every method, the requested headers mirrored, cached 600 s */
  assert_int_equal(api_server_cors_check(&c, true, "https://app.example", "POST", "authorization, content-type", h, &n, why,
                                  sizeof why),
                   API_SERVER_CORS_PREFLIGHT);
  assert_non_null(strstr(header(h, n, "Access-Control-Allow-Methods"), "POST"));
  assert_string_equal(header(h, n, "Access-Control-Allow-Headers"), "authorization, content-type");
  assert_string_equal(header(h, n, "Access-Control-Max-Age"), "600");
  /* OPTIONS without Access-Control-Request-Method is no preflight */
  assert_int_equal(api_server_cors_check(&c, true, "https://app.example", NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
}

static void test_listed_origins_methods_and_headers_only(void **state) {
  (void)state;
  struct api_server_cors c;
  assert_int_equal(api_server_cors_parse("https://a.example, https://b.example", "GET,POST", "Authorization", true, &c),
                   LLB_STATUS_OK);
  struct api_server_cors_header h[6];
  int n;
  char why[128];
  assert_int_equal(api_server_cors_check(&c, false, "https://b.example", NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
  assert_string_equal(header(h, n, "Access-Control-Allow-Origin"), "https://b.example"); /* echoed, never * */
  assert_string_equal(header(h, n, "Vary"), "Origin");
  assert_string_equal(header(h, n, "Access-Control-Allow-Credentials"), "true");
  /* another origin: served, but without CORS headers (the browser hides the answer) */
  assert_int_equal(api_server_cors_check(&c, false, "https://evil.example", NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
  assert_int_equal(n, 0);
  /* preflights: a safelisted header passes; an unlisted method, header or origin is refused */
  assert_int_equal(api_server_cors_check(&c, true, "https://a.example", "post", "Content-Type, authorization", h, &n, why,
                                  sizeof why),
                   API_SERVER_CORS_PREFLIGHT);
  assert_string_equal(header(h, n, "Access-Control-Allow-Methods"), "GET, POST");
  assert_int_equal(api_server_cors_check(&c, true, "https://a.example", "DELETE", NULL, h, &n, why, sizeof why), API_SERVER_CORS_DENIED);
  assert_string_equal(why, "Disallowed CORS method");
  assert_int_equal(api_server_cors_check(&c, true, "https://evil.example", "POST", "X-Secret", h, &n, why, sizeof why),
                   API_SERVER_CORS_DENIED);
  assert_string_equal(why, "Disallowed CORS origin, headers");
  assert_int_equal(n, 0);
}

/* Credentials never with every origin: Starlette would echo any Origin back with credentials,
 * and every web page could then read a logged-in user's answers. Refused at start, named. */
static void test_credentials_with_every_origin_are_refused(void **state) {
  (void)state;
  struct api_server_cors c;
  assert_int_equal(api_server_cors_parse(NULL, NULL, NULL, true, &c), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "--allow-credentials"));
  assert_int_equal(api_server_cors_parse("*", NULL, NULL, true, &c), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_cors_parse("https://a.example, *", NULL, NULL, true, &c), LLB_STATUS_INVALID_ARGUMENT);
  /* without credentials, every origin gets "*" (no credentials go with it) */
  assert_int_equal(api_server_cors_parse("*", NULL, NULL, false, &c), LLB_STATUS_OK);
  struct api_server_cors_header h[6];
  int n;
  char why[128];
  assert_int_equal(api_server_cors_check(&c, false, "https://evil.example", NULL, NULL, h, &n, why, sizeof why), API_SERVER_CORS_PASS);
  assert_string_equal(header(h, n, "Access-Control-Allow-Origin"), "*");
  assert_null(header(h, n, "Access-Control-Allow-Credentials"));
}

static void test_bad_option_values_are_refused(void **state) {
  (void)state;
  struct api_server_cors c;
  assert_int_equal(api_server_cors_parse("https://a.example,,https://b", NULL, NULL, false, &c), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_cors_parse(NULL, "GET;DROP", NULL, false, &c), LLB_STATUS_INVALID_ARGUMENT);
  char many[4096] = "";
  for (int i = 0; i < 40; i++) strcat(many, "https://x.example,");
  strcat(many, "https://y");
  assert_int_equal(api_server_cors_parse(many, NULL, NULL, false, &c), LLB_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_allow_any_origin_with_a_star),
      cmocka_unit_test(test_listed_origins_methods_and_headers_only),
      cmocka_unit_test(test_credentials_with_every_origin_are_refused),
      cmocka_unit_test(test_bad_option_values_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* file:// image URLs (api_server_images.h): read only when the path opens inside
 * --allowed-local-media-path with no symbolic link and no "..", as a regular file (a FIFO does
 * not block the server); a missing path, a path outside it, a symlink (even one pointing inside),
 * a FIFO and a directory all get the same 400 text (no existence oracle); a non-image file and a
 * file over API_SERVER_MAX_IMAGE_BYTES are 400s naming the part. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/api_server/api_server_images.h"
#include "actors/api_server/api_server_request.h"

static char g_dir[PATH_MAX], g_real[PATH_MAX];

static void write_file(const char *name, const void *data, size_t n) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static llb_status parse_url(const char *url, const char *allowed, struct api_server_request *r, struct api_server_error *e) {
  char body[PATH_MAX * 2];
  snprintf(body, sizeof body,
           "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
           "\"image_url\":{\"url\":\"%s\"}}]}]}", url);
  const struct api_server_parse_options o = {.served_model = "smol", .allowed_local_media_path = allowed};
  return api_server_request_parse(API_SERVER_ENDPOINT_CHAT, body, strlen(body), &o, r, e);
}

static void test_file_urls_are_read_only_inside_the_allowed_directory(void **state) {
  (void)state;
  static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  write_file("a.png", png, sizeof png);
  write_file("note.txt", "hello", 5);
  char *big = calloc(1, API_SERVER_MAX_IMAGE_BYTES + 1);
  assert_non_null(big);
  memcpy(big, png, sizeof png);
  write_file("big.png", big, API_SERVER_MAX_IMAGE_BYTES + 1);
  free(big);
  char link[PATH_MAX + 64], url[PATH_MAX + 64];
  snprintf(link, sizeof link, "%s/sub", g_dir);
  assert_int_equal(mkdir(link, 0700), 0);
  snprintf(link, sizeof link, "%s/out.png", g_dir);
  assert_int_equal(symlink("/etc/passwd", link), 0);
  char target[PATH_MAX + 64];
  snprintf(link, sizeof link, "%s/in.png", g_dir);
  snprintf(target, sizeof target, "%s/a.png", g_real);
  assert_int_equal(symlink(target, link), 0); /* a link, even to a file inside: refused */
  snprintf(link, sizeof link, "%s/fifo.png", g_dir);
  assert_int_equal(mkfifo(link, 0600), 0); /* no writer: a blocking open would hang the server */

  struct api_server_request r;
  struct api_server_error e;
  snprintf(url, sizeof url, "file://%s/a.png", g_real);
  if (parse_url(url, g_real, &r, &e) != LLB_STATUS_OK) fail_msg("%s: %s", e.param, e.message);
  assert_int_equal(r.num_mm_items, 1);
  assert_int_equal(r.mm_items[0].data_bytes, sizeof png);
  assert_string_equal(r.mm_items[0].dtype.data, "png");
  api_server_request_free(&r);

  static const struct {
    const char *name, *needle;
    bool allowed;
  } bad[] = {
      {"a.png", "file:// URLs are refused", false},
      {"out.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"in.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"fifo.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"note.txt", "neither a JPEG nor a PNG", true},
      {"big.png", "larger than", true},
      {"missing.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"sub", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"../a.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true},
      {"sub/../../a.png", API_SERVER_LOCAL_MEDIA_NOT_FOUND, true}, /* ".." that stays inside is fine */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(url, sizeof url, "file://%s/%s", g_real, bad[i].name);
    assert_int_equal(parse_url(url, bad[i].allowed ? g_real : NULL, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.param, "messages[0].content[0].image_url");
    if (!strstr(e.message, bad[i].needle)) fail_msg("%s: '%s' lacks '%s'", bad[i].name, e.message, bad[i].needle);
  }
  /* a path outside the directory altogether, one that exists and one that does not: the same
   * answer as a missing file inside */
  char missing_msg[sizeof e.message];
  snprintf(url, sizeof url, "file://%s/missing.png", g_real);
  assert_int_equal(parse_url(url, g_real, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  snprintf(missing_msg, sizeof missing_msg, "%s", e.message);
  assert_int_equal(parse_url("file:///etc/passwd", g_real, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(e.message, missing_msg);
  assert_int_equal(parse_url("file:///etc/no-such-file-here", g_real, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(e.message, missing_msg);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/llmbus-api-images-XXXXXX");
  if (!mkdtemp(g_dir) || !realpath(g_dir, g_real)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_urls_are_read_only_inside_the_allowed_directory),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  const char *names[] = {"a.png", "note.txt", "big.png", "out.png", "in.png", "fifo.png"};
  for (size_t i = 0; i < 6; i++) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
    unlink(p);
  }
  char sub[PATH_MAX + 8];
  snprintf(sub, sizeof sub, "%s/sub", g_dir);
  rmdir(sub);
  rmdir(g_dir);
  return rc;
}

/* model/vision/image.h: a progressive JPEG re-reads its coefficients at every scan, so a small file
 * of many tiny scans costs a pass over the image each; one of more than LLB_IMAGE_MAX_JPEG_SCANS
 * is refused (TOO_LARGE) while an ordinary progressive file decodes. The files are written here
 * with libjpeg's own encoder and a scan script: one DC scan, then each AC coefficient in two
 * successive-approximation scans (127 scans in all, a valid script). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "model/vision/image.h"

/* A 32x32 gray JPEG into *out (malloc'd by libjpeg); many_scans: the 127-scan script, else
 * libjpeg's simple progression. */
static size_t write_jpeg(bool many_scans, unsigned char **out) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned long len = 0;
  *out = NULL;
  jpeg_mem_dest(&c, out, &len);
  c.image_width = 32, c.image_height = 32, c.input_components = 1, c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  static jpeg_scan_info scans[1 + 2 * 63];
  if (many_scans) {
    int n = 0;
    scans[n++] = (jpeg_scan_info){.comps_in_scan = 1, .component_index = {0}, .Ss = 0, .Se = 0, .Ah = 0, .Al = 0};
    for (int k = 1; k <= 63; k++) {
      scans[n++] = (jpeg_scan_info){.comps_in_scan = 1, .component_index = {0}, .Ss = k, .Se = k, .Ah = 0, .Al = 1};
      scans[n++] = (jpeg_scan_info){.comps_in_scan = 1, .component_index = {0}, .Ss = k, .Se = k, .Ah = 1, .Al = 0};
    }
    c.scan_info = scans;
    c.num_scans = n;
  } else {
    jpeg_simple_progression(&c);
  }
  jpeg_start_compress(&c, TRUE);
  unsigned char row[32];
  while (c.next_scanline < 32) {
    for (int x = 0; x < 32; x++) row[x] = (unsigned char)(x * 7 + c.next_scanline * 3);
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return len;
}

static void test_a_jpeg_of_too_many_scans_is_refused(void **state) {
  (void)state;
  unsigned char *jpeg = NULL;
  size_t len = write_jpeg(false, &jpeg);
  struct llb_image img;
  assert_int_equal(llb_image_decode(jpeg, len, NULL, &img), LLB_STATUS_OK); /* progressive, ~10 scans */
  assert_int_equal(img.width, 32);
  llb_image_free(&img);
  free(jpeg);
  len = write_jpeg(true, &jpeg);
  assert_int_equal(llb_image_decode(jpeg, len, NULL, &img), LLB_STATUS_TOO_LARGE);
  assert_non_null(strstr(llb_err_last(), "scans"));
  assert_null(img.rgb);
  free(jpeg);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_a_jpeg_of_too_many_scans_is_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

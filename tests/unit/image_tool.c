/* Test tool for model/vision/image.h (tests/unit/test_image.py compares it with Pillow):
 *   image_tool IN [W H [FILTER]]  decodes IN (JPEG or PNG), resizes to W x H when given (Pillow's
 *                         BILINEAR, or FILTER: enum llb_image_filter's number), writes "W H\n"
 *                         then the raw RGB bytes to stdout.
 * On an error: exit 2 and "<status name>: <message>" on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "model/vision/image.h"

int main(int argc, char **argv) {
  if (argc != 2 && argc != 4 && argc != 5) {
    fprintf(stderr, "usage: image_tool IN [W H [FILTER]]\n");
    return 1;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 1;
  static uint8_t buf[64 << 20];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  struct llb_image img, out;
  llb_status st = llb_image_decode(buf, len, NULL, &img);
  if (st == LLB_STATUS_OK && argc >= 4) {
    st = argc == 5 ? llb_image_resize(&img, atoi(argv[2]), atoi(argv[3]), (enum llb_image_filter)atoi(argv[4]), &out)
                   : llb_image_resize_bilinear(&img, atoi(argv[2]), atoi(argv[3]), &out);
    llb_image_free(&img);
    img = out;
  }
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", llb_strerror(st), llb_err_last());
    return 2;
  }
  printf("%d %d\n", img.width, img.height);
  fwrite(img.rgb, 1, (size_t)img.width * (size_t)img.height * 3, stdout);
  llb_image_free(&img);
  return 0;
}

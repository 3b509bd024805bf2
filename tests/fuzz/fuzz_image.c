/* libFuzzer target for model/vision/image.h: any bytes as a JPEG or PNG (libjpeg-turbo / libpng
 * behind our bounds), then the resize and normalization the vision encoder applies. Small
 * limits keep each input fast; an accepted image must have the size the limits allow. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/vision/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const struct llb_image_limits lim = {.max_side = 512, .max_pixels = 64 * 1024};
  struct llb_image img, small;
  if (llb_image_decode(data, size, &lim, &img) != LLB_STATUS_OK) return 0;
  if (img.width < 1 || img.height < 1 || img.width > 512 || (int64_t)img.width * img.height > 64 * 1024) abort();
  if (llb_image_resize_bilinear(&img, 14, 14, &small) == LLB_STATUS_OK) {
    static float t[3 * 14 * 14];
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    if (llb_image_to_tensor(&small, mean, std, t) != LLB_STATUS_OK) abort();
    llb_image_free(&small);
  }
  llb_image_free(&img);
  return 0;
}

/* JPEG / PNG decoding, Pillow-compatible bilinear resizing and normalization (see image.h). */
#include "model/vision/image.h"

#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

enum llb_image_format llb_image_sniff(const uint8_t *d, size_t len) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (len >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return LLB_IMAGE_JPEG;
  if (len >= 8 && memcmp(d, png_sig, 8) == 0) return LLB_IMAGE_PNG;
  return LLB_IMAGE_UNKNOWN;
}

void llb_image_free(struct llb_image *img) {
  if (!img) return;
  free(img->rgb);
  memset(img, 0, sizeof *img);
}

/* TOO_LARGE when w x h is over the limits, MALFORMED for an empty image. */
static llb_status check_size(int64_t w, int64_t h, const struct llb_image_limits *lim, const char *what) {
  int64_t side = lim && lim->max_side > 0 ? lim->max_side : LLB_IMAGE_DEFAULT_MAX_SIDE;
  int64_t pixels = lim && lim->max_pixels > 0 ? lim->max_pixels : LLB_IMAGE_DEFAULT_MAX_PIXELS;
  if (w <= 0 || h <= 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "%s image of %lldx%lld pixels", what, (long long)w, (long long)h);
  if (w > side || h > side || w * h > pixels)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s image of %lldx%lld pixels is over the limit (%lld per side, %lld in all)",
                    what, (long long)w, (long long)h, (long long)side, (long long)pixels);
  return LLB_STATUS_OK;
}

/* ---- JPEG (libjpeg-turbo): errors longjmp back here instead of exit(); a warning such as
 * "premature end of data" (a truncated file, which libjpeg would fill with gray) is an error. */

struct jpeg_err {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  struct jpeg_progress_mgr progress;
};

static void jpeg_on_error(j_common_ptr cinfo) {
  struct jpeg_err *e = (struct jpeg_err *)cinfo->err;
  e->mgr.format_message(cinfo, e->message);
  longjmp(e->jump, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_on_error(cinfo); /* warnings: corrupt or truncated data */
}

/* A progressive JPEG re-reads its coefficients for every scan: thousands of tiny scans make a
 * small file cost seconds of CPU (libjpeg-turbo's advice: a scan limit, as djpeg -maxscans). */
static void jpeg_on_progress(j_common_ptr cinfo) {
  const j_decompress_ptr d = (j_decompress_ptr)cinfo;
  if (cinfo->is_decompressor && d->input_scan_number > LLB_IMAGE_MAX_JPEG_SCANS) {
    struct jpeg_err *e = (struct jpeg_err *)cinfo->err;
    snprintf(e->message, sizeof e->message, "more than %d scans (a progressive JPEG built to be costly)",
             LLB_IMAGE_MAX_JPEG_SCANS);
    longjmp(e->jump, 2);
  }
}

static llb_status decode_jpeg(const uint8_t *data, size_t len, const struct llb_image_limits *lim,
                              struct llb_image *out) {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_err err = {0};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  uint8_t *volatile rgb = NULL;
  volatile llb_status st = LLB_STATUS_OK;
  switch (setjmp(err.jump)) {
    case 0: break;
    case 2: /* the scan limit */
      free(rgb);
      jpeg_destroy_decompress(&cinfo);
      return LLB_ERRF(LLB_STATUS_TOO_LARGE, "JPEG: %s", err.message);
    default:
      free(rgb);
      jpeg_destroy_decompress(&cinfo);
      return st != LLB_STATUS_OK ? st : LLB_ERRF(LLB_STATUS_MALFORMED, "JPEG: %s", err.message);
  }
  jpeg_create_decompress(&cinfo);
  err.progress.progress_monitor = jpeg_on_progress;
  cinfo.progress = &err.progress;
  jpeg_mem_src(&cinfo, data, (unsigned long)len);
  jpeg_read_header(&cinfo, TRUE);
  st = check_size(cinfo.image_width, cinfo.image_height, lim, "JPEG");
  if (st == LLB_STATUS_OK && cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
      cinfo.jpeg_color_space != JCS_RGB)
    st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "JPEG: colour space %d (CMYK/YCCK) is not supported; send RGB",
                  (int)cinfo.jpeg_color_space);
  if (st != LLB_STATUS_OK) {
    jpeg_destroy_decompress(&cinfo);
    return st;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  size_t stride = (size_t)cinfo.output_width * 3;
  rgb = malloc(stride * cinfo.output_height);
  if (!rgb) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "JPEG: %ux%u pixels", cinfo.output_width, cinfo.output_height);
    jpeg_destroy_decompress(&cinfo);
    return st;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = rgb + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out->width = (int32_t)cinfo.output_width;
  out->height = (int32_t)cinfo.output_height;
  out->rgb = rgb;
  return LLB_STATUS_OK;
}

/* ---- PNG (libpng's simplified API: no longjmp reaches us) ------------------------------- */

static llb_status decode_png(const uint8_t *data, size_t len, const struct llb_image_limits *lim,
                             struct llb_image *out) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, len)) {
    llb_status st = LLB_ERRF(LLB_STATUS_MALFORMED, "PNG: %s", img.message);
    png_image_free(&img);
    return st;
  }
  llb_status st = check_size(img.width, img.height, lim, "PNG");
  if (st != LLB_STATUS_OK) {
    png_image_free(&img);
    return st;
  }
  img.format = PNG_FORMAT_RGB; /* gray expanded, alpha composited away, 16-bit reduced */
  uint8_t *rgb = malloc(PNG_IMAGE_SIZE(img));
  if (!rgb) {
    png_image_free(&img);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "PNG: %ux%u pixels", img.width, img.height);
  }
  if (!png_image_finish_read(&img, NULL, rgb, 0, NULL) || PNG_IMAGE_FAILED(img)) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "PNG: %s", img.message[0] ? img.message : "decoding failed");
    free(rgb);
    png_image_free(&img);
    return st;
  }
  out->width = (int32_t)img.width;
  out->height = (int32_t)img.height;
  out->rgb = rgb;
  png_image_free(&img);
  return LLB_STATUS_OK;
}

llb_status llb_image_decode(const uint8_t *data, size_t len, const struct llb_image_limits *lim,
                            struct llb_image *out) {
  memset(out, 0, sizeof *out);
  if (!data || len == 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "empty image");
  switch (llb_image_sniff(data, len)) {
  case LLB_IMAGE_JPEG: return decode_jpeg(data, len, lim, out);
  case LLB_IMAGE_PNG: return decode_png(data, len, lim, out);
  default: return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "not a JPEG or PNG image (%zu bytes)", len);
  }
}

/* ---- resizing: Pillow's BILINEAR (Resample.c's algorithm) ------------------------------ */

#define RESAMPLE_PRECISION_BITS (32 - 8 - 2)

/* Per output pixel: the first input pixel, the count, and `ksize` fixed-point weights. */
struct resample_coeffs {
  int ksize;
  int *bounds;      /* [out * 2]: first, count */
  int32_t *weights; /* [out * ksize] */
};

static double triangle(double x) {
  x = fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic (Resample.c: a = -0.5) */
static double bicubic(double x) {
  const double a = -0.5;
  x = fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

static double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= 3.141592653589793238462643383279502884;
  return sin(x) / x;
}

/* Pillow's lanczos (a = 3) */
static double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0; }

static double filter_eval(enum llb_image_filter f, double x) {
  return f == LLB_IMAGE_FILTER_LANCZOS ? lanczos(x) : f == LLB_IMAGE_FILTER_BICUBIC ? bicubic(x) : triangle(x);
}

static double filter_support(enum llb_image_filter f) {
  return f == LLB_IMAGE_FILTER_LANCZOS ? 3.0 : f == LLB_IMAGE_FILTER_BICUBIC ? 2.0 : 1.0;
}

static bool coeffs_make(int in_size, int out_size, enum llb_image_filter f, struct resample_coeffs *c) {
  double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = filter_support(f) * filterscale;
  c->ksize = (int)ceil(support) * 2 + 1;
  c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
  c->weights = calloc((size_t)out_size * (size_t)c->ksize, sizeof *c->weights);
  double *w = malloc((size_t)c->ksize * sizeof *w);
  if (!c->bounds || !c->weights || !w) {
    free(w);
    return false;
  }
  for (int xx = 0; xx < out_size; xx++) {
    double center = (xx + 0.5) * scale, sum = 0.0, ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > in_size) xmax = in_size;
    int n = xmax - xmin;
    for (int x = 0; x < n; x++) sum += w[x] = filter_eval(f, (x + xmin - center + 0.5) * ss);
    for (int x = 0; x < n; x++) {
      double v = sum != 0.0 ? w[x] / sum : 0.0; /* then to fixed point, rounded half away from 0 */
      double f = v * (1 << RESAMPLE_PRECISION_BITS);
      c->weights[(size_t)xx * (size_t)c->ksize + (size_t)x] = (int32_t)(f < 0 ? f - 0.5 : f + 0.5);
    }
    c->bounds[xx * 2] = xmin;
    c->bounds[xx * 2 + 1] = n;
  }
  free(w);
  return true;
}

static void coeffs_free(struct resample_coeffs *c) {
  free(c->bounds);
  free(c->weights);
}

static uint8_t clip8(int64_t acc) {
  int64_t v = acc >> RESAMPLE_PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One separable pass over 3-channel rows: horizontal (along x) or vertical (along y). */
static void resample_pass(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, bool horizontal,
                          const struct resample_coeffs *c) {
  for (int y = 0; y < dh; y++)
    for (int x = 0; x < dw; x++) {
      int o = horizontal ? x : y;
      int first = c->bounds[o * 2], n = c->bounds[o * 2 + 1];
      const int32_t *k = c->weights + (size_t)o * (size_t)c->ksize;
      for (int ch = 0; ch < 3; ch++) {
        int64_t acc = 1 << (RESAMPLE_PRECISION_BITS - 1);
        for (int i = 0; i < n; i++) {
          int sx = horizontal ? first + i : x, sy = horizontal ? y : first + i;
          acc += (int64_t)src[((size_t)sy * (size_t)sw + (size_t)sx) * 3 + (size_t)ch] * k[i];
        }
        dst[((size_t)y * (size_t)dw + (size_t)x) * 3 + (size_t)ch] = clip8(acc);
      }
    }
  (void)sh;
}

llb_status llb_image_resize_bilinear(const struct llb_image *src, int32_t width, int32_t height,
                                     struct llb_image *dst) {
  return llb_image_resize(src, width, height, LLB_IMAGE_FILTER_BILINEAR, dst);
}

llb_status llb_image_resize(const struct llb_image *src, int32_t width, int32_t height,
                            enum llb_image_filter filter, struct llb_image *dst) {
  memset(dst, 0, sizeof *dst);
  if (filter != LLB_IMAGE_FILTER_BILINEAR && filter != LLB_IMAGE_FILTER_BICUBIC && filter != LLB_IMAGE_FILTER_LANCZOS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "resize: filter %d", (int)filter);
  if (!src || !src->rgb || src->width < 1 || src->height < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "resize: empty source image");
  llb_status st = check_size(width, height, NULL, "resized");
  if (st != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "resize: %s", llb_err_last());
  struct resample_coeffs ch = {0}, cv = {0};
  uint8_t *mid = malloc((size_t)src->height * (size_t)width * 3);
  uint8_t *out = malloc((size_t)height * (size_t)width * 3);
  bool ok = mid && out && coeffs_make(src->width, width, filter, &ch) &&
            coeffs_make(src->height, height, filter, &cv);
  if (ok) {
    resample_pass(src->rgb, src->width, src->height, mid, width, src->height, true, &ch);
    resample_pass(mid, width, src->height, out, width, height, false, &cv);
  }
  coeffs_free(&ch);
  coeffs_free(&cv);
  free(mid);
  if (!ok) {
    free(out);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "resize to %dx%d", width, height);
  }
  dst->width = width;
  dst->height = height;
  dst->rgb = out;
  return LLB_STATUS_OK;
}

llb_status llb_image_to_tensor(const struct llb_image *img, const float mean[3], const float std[3], float *out) {
  if (!img || !img->rgb || img->width < 1 || img->height < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "to_tensor: empty image");
  for (int c = 0; c < 3; c++)
    if (!isfinite(mean[c]) || !isfinite(std[c]) || !(std[c] > 0.0f))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "to_tensor: channel %d mean %g std %g", c, (double)mean[c],
                      (double)std[c]);
  size_t plane = (size_t)img->width * (size_t)img->height;
  for (size_t i = 0; i < plane; i++)
    for (int c = 0; c < 3; c++)
      out[(size_t)c * plane + i] = ((float)img->rgb[i * 3 + (size_t)c] / 255.0f - mean[c]) / std[c];
  return LLB_STATUS_OK;
}

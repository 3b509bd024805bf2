/* Images for the vision encoder (issue 22): JPEG and PNG decoded with Debian's libjpeg-turbo
 * and libpng, bounded before any pixel is decoded, then resized and normalized into the
 * encoder's input as a CLIP/SigLIP mmproj's metadata says (clip.vision.image_size,
 * clip.vision.image_mean, clip.vision.image_std; llama.cpp tools/mtmd/clip.cpp).
 *
 * Everything here treats its input as hostile: a header that claims more pixels than the
 * limits allow is refused from the header alone, a truncated or corrupt file is an error (not
 * a gray-filled image), and the libraries' own error paths never exit or print. Thread-safe:
 * no shared state. */
#ifndef LLB_MODEL_IMAGE_H
#define LLB_MODEL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Bounds checked against the header before decoding. */
struct llb_image_limits {
  int32_t max_side;   /* width and height each at most this (default 8192) */
  int64_t max_pixels; /* width * height at most this (default 16,777,216 = 4096^2) */
};

#define LLB_IMAGE_DEFAULT_MAX_SIDE 8192
#define LLB_IMAGE_DEFAULT_MAX_PIXELS (16LL * 1024 * 1024)
/* Scans of a progressive JPEG at most (a baseline file has 1, a progressive one ~10): each scan
 * costs a pass over the image, so more is a file built to be costly (TOO_LARGE). */
#define LLB_IMAGE_MAX_JPEG_SCANS 100

/* A decoded image: 8-bit RGB, row-major, rgb[(y * width + x) * 3 + c]. */
struct llb_image {
  int32_t width, height;
  uint8_t *rgb; /* malloc'd [height * width * 3]; llb_image_free releases it */
};

/* The container a buffer holds, from its magic bytes. */
enum llb_image_format { LLB_IMAGE_UNKNOWN = 0, LLB_IMAGE_JPEG = 1, LLB_IMAGE_PNG = 2 };

/* The format of data[0..len) by its magic bytes (JPEG FF D8 FF; PNG's 8-byte signature). */
enum llb_image_format llb_image_sniff(const uint8_t *data, size_t len);

/* Decodes a JPEG or PNG image into *out (8-bit RGB: grayscale is expanded, alpha dropped,
 * 16-bit PNG reduced; CMYK JPEGs are refused). `lim` NULL = the defaults. Errors (the
 * message says which): UNSUPPORTED (not JPEG or PNG, or a JPEG colour space we do not
 * convert), TOO_LARGE (a side or the pixel count over the limits; told from the header),
 * MALFORMED (corrupt or truncated data, zero size), OUT_OF_MEMORY. On error *out is zeroed. */
llb_status llb_image_decode(const uint8_t *data, size_t len, const struct llb_image_limits *lim,
                            struct llb_image *out);

/* Frees what llb_image_decode allocated and zeroes `img`. NULL ok. */
void llb_image_free(struct llb_image *img);

/* dst = src resized to width x height (each >= 1, within the default limits) with Pillow's
 * BILINEAR filter: separable triangle filter, widened by the scale when downsampling
 * (antialiasing), weights in 22-bit fixed point, horizontal pass first, each pass rounded to
 * 8 bits -- what llama.cpp's mtmd (resize_pillow) does, so the encoder sees the pixels it
 * sees (a single Pillow 13 resize call may run the vertical pass first for some shapes). Errors: INVALID_ARGUMENT, OUT_OF_MEMORY; on error
 * *dst is zeroed. Caller frees dst with llb_image_free. */
llb_status llb_image_resize_bilinear(const struct llb_image *src, int32_t width, int32_t height,
                                     struct llb_image *dst);

/* Pillow's resampling filters (Resample.c), as llama.cpp's mtmd resize_pillow runs them. */
enum llb_image_filter {
  LLB_IMAGE_FILTER_BILINEAR = 0, /* triangle, support 1 */
  LLB_IMAGE_FILTER_BICUBIC = 1,  /* cubic with a = -0.5, support 2 */
  LLB_IMAGE_FILTER_LANCZOS = 2,  /* Lanczos-3, support 3 */
};

/* As llb_image_resize_bilinear with the given filter (same fixed-point arithmetic, same pass
 * order, support widened by the scale when downsampling). INVALID_ARGUMENT also for an
 * unknown filter. */
llb_status llb_image_resize(const struct llb_image *src, int32_t width, int32_t height,
                            enum llb_image_filter filter, struct llb_image *dst);

/* The encoder's input from an image already at the encoder's size: each 8-bit value scaled to
 * [0, 1], then (v - mean[c]) / std[c] (clip.vision.image_mean / image_std), written planar:
 * out[c * height * width + y * width + x] (float32 [3][height][width]). INVALID_ARGUMENT for a
 * std entry that is not a positive finite number, a mean that is not finite, or an empty
 * image. */
llb_status llb_image_to_tensor(const struct llb_image *img, const float mean[3], const float std[3],
                               float *out);

#endif

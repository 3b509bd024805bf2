/* llmbus-clip-bench: the flags of cmd/bench/clip_bench.h (one table, cmd/flags/flags.h).
 *
 *   llmbus-clip-bench --mmproj PATH [--threads N] [--runs N] [--sizes WxH[,WxH...]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench/clip_bench.h"
#include "cmd/flags/flags.h"
#include "model/vision/image.h"

/* "224x224,512x384" -> o->sizes. */
static llb_status set_sizes(const struct flag *f, const char *v) {
  struct clip_bench_options *o = f->target;
  int n = 0;
  for (const char *s = v; *s && n < CLIP_BENCH_MAX_SIZES;) {
    char *end;
    long w = strtol(s, &end, 10);
    if (*end != 'x') return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s': WxH[,WxH...]", v);
    long h = strtol(end + 1, &end, 10);
    if (w < 1 || h < 1 || w > LLB_IMAGE_DEFAULT_MAX_SIDE || h > LLB_IMAGE_DEFAULT_MAX_SIDE || (*end && *end != ','))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s': WxH[,WxH...], sides 1..%d", v, LLB_IMAGE_DEFAULT_MAX_SIDE);
    o->sizes[n][0] = (int32_t)w, o->sizes[n][1] = (int32_t)h, n++;
    s = *end ? end + 1 : end;
  }
  if (n < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s': WxH[,WxH...]", v);
  o->n_sizes = n;
  return LLB_STATUS_OK;
}

int main(int argc, char **argv) {
  struct clip_bench_options o = {.threads = 2, .runs = 3,
                                 .sizes = {{224, 224}, {384, 384}, {512, 512}, {1024, 768}}, .n_sizes = 4};
  const struct flag t[] = {
      {.name = "mmproj", .kind = FLAG_KIND_STRING, .target = &o.mmproj, .metavar = "PATH",
       .help = "the mmproj GGUF (required)"},
      {.name = "threads", .short_name = 't', .kind = FLAG_KIND_INT32, .target = &o.threads, .metavar = "N",
       .help = "encoder threads"},
      {.name = "runs", .kind = FLAG_KIND_INT32, .target = &o.runs, .metavar = "N", .help = "runs per size"},
      {.name = "sizes", .kind = FLAG_KIND_STRING, .target = &o, .metavar = "WxH[,WxH...]", .set = set_sizes,
       .help = "synthetic image sizes (default 224x224,384x384,512x512,1024x768)"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {
      .program = "llmbus-clip-bench", .sections = &sec, .num_sections = 1, .max_positional = 0,
      .usage = "usage: llmbus-clip-bench --mmproj PATH [flags]\nImages per second of the image encoder, per size.\n"};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE && !o.mmproj) rc = flags_usage_error(&cmd, "--mmproj is required");
  if (rc == FLAGS_CONTINUE) rc = clip_bench_run(&o);
  flag_args_free(&args);
  return rc;
}

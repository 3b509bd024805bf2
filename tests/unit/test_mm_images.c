/* Images in chat messages (actors/input_processor/mm_images.h) through input_processor_process: the
 * template's "<image>" (or mtmd's "<__media__>") becomes the plan's text, each image gets one
 * feature whose is_embed marks exactly its "<image>" tokens, mm_hash follows the file and the
 * mmproj, and bad files / counts are field errors. The planner here stands in for
 * clip_image_plan with idefics3's layout (one tile per 2 pixels of width, 3 rows a tile), on a
 * vocabulary written with the GGUF writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/input_processor.h"
#include "model/gguf/gguf.h"
#include "model/template/jinja.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/unit/gguf_writer.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4 };

static const char *const k_texts[] = {
    "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<image>", "<fake_token_around_image>",
    "<row_1_col_1>", "<row_1_col_2>", "<global-img>", "\xe2\x96\x81hi", "\xe2\x96\x81look", "\n"};
static const int32_t k_types[] = {TT_UNKNOWN, TT_CONTROL, TT_CONTROL, TT_CONTROL, TT_CONTROL,
                                  TT_USER_DEFINED, TT_USER_DEFINED, TT_USER_DEFINED, TT_USER_DEFINED,
                                  TT_USER_DEFINED, TT_NORMAL, TT_NORMAL, TT_NORMAL};
enum { N_VOCAB = sizeof k_texts / sizeof k_texts[0], ID_IMAGE = 5, ID_FAKE = 6, ID_GLOBAL = 9 };

/* 4x3 RGB PNG. */
static const uint8_t k_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x03, 0x08, 0x02, 0x00, 0x00, 0x00, 0x3b, 0x96, 0x39, 0x91, 0x00, 0x00, 0x00,
    0x30, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x60, 0x60, 0xd0, 0x70, 0x63, 0x08, 0xe8, 0x61, 0xa8,
    0xb8, 0xc4, 0xc0, 0x10, 0xc5, 0x60, 0xd4, 0xe4, 0x66, 0xb4, 0xaa, 0xc7, 0xe8, 0xd2, 0x25, 0x23, 0x86, 0x2d,
    0x0c, 0x29, 0x77, 0xdc, 0x52, 0x58, 0x7a, 0x52, 0x74, 0x2e, 0xa5, 0x00, 0x00, 0xc6, 0x6b, 0x0c, 0x4d, 0xe4,
    0x03, 0x0d, 0x4e, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

/* SmolVLM's way: content parts, "<image>" per image part. */
static const char k_vision_template[] =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}";
/* A text model's template: knows no images. */
static const char k_text_template[] =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}";

static struct tokenizer *tok;
static struct gguf_file *gf;
static void *gbuf;
static int plan_calls;

/* idefics3's layout for a w x h image: ceil(w / 2) tiles in one row, then the overview. */
static llb_status fake_plan(void *ctx, int32_t w, int32_t h, struct input_processor_image_plan *out) {
  (void)ctx;
  (void)h;
  plan_calls++;
  int32_t tiles = (w + 1) / 2, per = 3;
  char buf[1024];
  size_t n = 0;
  for (int32_t c = 0; c < tiles; c++) {
    n += (size_t)snprintf(buf + n, sizeof buf - n, "<fake_token_around_image><row_1_col_%d>", c + 1);
    for (int32_t k = 0; k < per; k++) n += (size_t)snprintf(buf + n, sizeof buf - n, "<image>");
  }
  n += (size_t)snprintf(buf + n, sizeof buf - n, "\n\n<fake_token_around_image><global-img>");
  for (int32_t k = 0; k < per; k++) n += (size_t)snprintf(buf + n, sizeof buf - n, "<image>");
  snprintf(buf + n, sizeof buf - n, "<fake_token_around_image>");
  out->text = strdup(buf);
  out->rows = (tiles + 1) * per;
  return out->text ? LLB_STATUS_OK : LLB_STATUS_OUT_OF_MEMORY;
}

static uint64_t fixed_random(void *ctx) {
  (void)ctx;
  return 7;
}

static struct input_processor *make_proc(const char *tmpl_src, struct jinja_template **t, const char *mmproj_id) {
  assert_int_equal(jinja_template_create(tmpl_src, strlen(tmpl_src), t), LLB_STATUS_OK);
  struct input_processor_config cfg = {.max_model_len = 512, .max_n = 4, .jinja_template = *t, .bos_token = "<s>",
                              .eos_token = "</s>", .hidden_size = 8, .random_u64 = fixed_random,
                              .image = {.plan = fake_plan, .mmproj_id = mmproj_id}};
  struct input_processor *p = NULL;
  assert_int_equal(input_processor_create(tok, &cfg, &p), LLB_STATUS_OK);
  return p;
}

/* A user message "look <img> hi <img>" with both images (a and b). */
struct two_images {
  struct chat_message msg;
  struct chat_message_extra extra;
  uint32_t offsets[2];
  struct input_processor_mm_item items[2];
  struct llb_sampling_params sp; /* req's (borrowed) */
  struct input_processor_generate_request req;
};

static void two_images_init(struct two_images *x, const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
  memset(x, 0, sizeof *x);
  x->msg = (struct chat_message){"user", " look hi "};
  x->offsets[0] = 5;
  x->offsets[1] = 9;
  x->extra = (struct chat_message_extra){.image_offsets = x->offsets, .num_image_offsets = 2};
  x->items[0] = (struct input_processor_mm_item){.modality = "image", .data = a, .data_bytes = (int64_t)na, .dtype = "png"};
  x->items[1] = (struct input_processor_mm_item){.modality = "image", .data = b, .data_bytes = (int64_t)nb, .dtype = "png"};
  x->req = (struct input_processor_generate_request){.request_id = "r", .messages = &x->msg, .num_messages = 1,
                                            .message_extras = &x->extra, .mm_items = x->items, .num_mm_items = 2,
                                            .cache_salt = "1:t", .reply_to = "_INBOX.x", .sampling_params = &x->sp};
  llb_sampling_params_init(&x->sp);
  x->sp.max_tokens = 4;
}

/* Each feature starts at its plan's first token, spans it, and marks exactly its <image> ids. */
static void check_features(const struct input_processor_processed *out, int32_t want_rows) {
  int32_t image_tokens = 0;
  for (int64_t i = 0; i < out->num_prompt_tokens; i++) image_tokens += out->prompt_token_ids[i] == ID_IMAGE;
  assert_int_equal(image_tokens, 2 * want_rows);
  int32_t prev_end = 0;
  for (int32_t k = 0; k < out->num_mm_features; k++) {
    const struct input_processor_mm_feature *f = &out->mm_features[k];
    assert_true(f->offset >= prev_end);
    assert_int_equal(out->prompt_token_ids[f->offset], ID_FAKE);
    assert_int_equal(out->prompt_token_ids[f->offset + f->length - 1], ID_FAKE);
    assert_int_equal(f->num_embeds, want_rows);
    assert_non_null(f->is_embed);
    for (int32_t i = 0; i < f->length; i++)
      assert_int_equal(f->is_embed[i], out->prompt_token_ids[f->offset + i] == ID_IMAGE);
    prev_end = f->offset + f->length;
  }
}

static void test_image_parts_expand_into_the_plan_with_embed_masks(void **state) {
  (void)state;
  struct jinja_template *t;
  struct input_processor *p = make_proc(k_vision_template, &t, "mmproj-a");
  struct two_images x;
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  struct input_processor_processed out;
  struct input_processor_errors errs;
  plan_calls = 0;
  llb_status st = input_processor_process(p, &x.req, &out, &errs);
  if (st != LLB_STATUS_OK) fail_msg("%s: %s", errs.num_errors ? errs.errors[0].field : "", errs.num_errors ? errs.errors[0].message : llb_err_last());
  assert_int_equal(plan_calls, 2);
  assert_int_equal(out.num_mm_features, 2);
  check_features(&out, 3 * 3); /* width 4: 2 tiles + the overview, 3 rows each */
  /* the same file gives the same hash; the text between the images sits between them */
  assert_string_equal(out.mm_features[0].mm_hash, out.mm_features[1].mm_hash);
  assert_true(out.mm_features[1].offset > out.mm_features[0].offset + out.mm_features[0].length);
  input_processor_processed_free(&out);
  input_processor_destroy(p);
  jinja_template_destroy(t);
}

static void test_template_without_images_gets_mtmd_default_marker(void **state) {
  (void)state;
  struct jinja_template *t;
  struct input_processor *p = make_proc(k_text_template, &t, "mmproj-a");
  struct two_images x;
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  struct input_processor_processed out;
  struct input_processor_errors errs;
  assert_int_equal(input_processor_process(p, &x.req, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.num_mm_features, 2);
  check_features(&out, 9);
  input_processor_processed_free(&out);
  input_processor_destroy(p);
  jinja_template_destroy(t);
}

static void test_mm_hash_changes_with_the_mmproj_and_the_file(void **state) {
  (void)state;
  struct jinja_template *t1, *t2;
  struct input_processor *p1 = make_proc(k_vision_template, &t1, "mmproj-a");
  struct input_processor *p2 = make_proc(k_vision_template, &t2, "mmproj-b");
  uint8_t other[sizeof k_png];
  memcpy(other, k_png, sizeof k_png);
  struct two_images x;
  two_images_init(&x, k_png, sizeof k_png, other, sizeof other);
  struct input_processor_processed a, b;
  struct input_processor_errors errs;
  assert_int_equal(input_processor_process(p1, &x.req, &a, &errs), LLB_STATUS_OK);
  assert_int_equal(input_processor_process(p2, &x.req, &b, &errs), LLB_STATUS_OK);
  assert_string_equal(a.mm_features[0].mm_hash, a.mm_features[1].mm_hash); /* same bytes */
  assert_string_not_equal(a.mm_features[0].mm_hash, b.mm_features[0].mm_hash);
  input_processor_processed_free(&a);
  input_processor_processed_free(&b);
  input_processor_destroy(p1);
  input_processor_destroy(p2);
  jinja_template_destroy(t1);
  jinja_template_destroy(t2);
}

/* Runs x through p and expects one error on `field` whose message holds `needle`. */
static void expect_error(struct input_processor *p, struct two_images *x, const char *field, const char *needle) {
  struct input_processor_processed out;
  struct input_processor_errors errs;
  assert_int_equal(input_processor_process(p, &x->req, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_true(errs.num_errors >= 1);
  assert_string_equal(errs.errors[0].field, field);
  if (!strstr(errs.errors[0].message, needle)) fail_msg("'%s' lacks '%s'", errs.errors[0].message, needle);
  input_processor_processed_free(&out);
}

static void test_bad_images_and_counts_are_field_errors(void **state) {
  (void)state;
  struct jinja_template *t;
  struct input_processor *p = make_proc(k_vision_template, &t, "m");
  struct two_images x;
  two_images_init(&x, k_png, sizeof k_png - 20, k_png, sizeof k_png); /* truncated */
  expect_error(p, &x, "mm_items[0].data", "cannot be decoded");
  static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  two_images_init(&x, k_png, sizeof k_png, gif, sizeof gif);
  expect_error(p, &x, "mm_items[1].data", "neither a JPEG nor a PNG");
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  x.items[1].dtype = "jpeg";
  expect_error(p, &x, "mm_items[1].data", "declared 'jpeg'");
  /* a 100000 x 100000 header is refused before any pixel */
  uint8_t huge[sizeof k_png];
  memcpy(huge, k_png, sizeof k_png);
  const uint8_t side[4] = {0x00, 0x01, 0x86, 0xa0};
  memcpy(huge + 16, side, 4);
  memcpy(huge + 20, side, 4);
  two_images_init(&x, huge, sizeof huge, k_png, sizeof k_png);
  expect_error(p, &x, "mm_items[0].data", "cannot be decoded");
  /* two items but one image part */
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  x.extra.num_image_offsets = 1;
  expect_error(p, &x, "mm_items", "1 image parts in the messages but 2 image items");
  /* the user typed the image token: it would take no row; refused */
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  x.msg.content = " look hi <image>";
  expect_error(p, &x, "messages", "image token '<image>' 1 times outside");
  /* an offset outside the content */
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  x.offsets[1] = 99;
  expect_error(p, &x, "messages[0].image_offsets", "not inside");
  input_processor_destroy(p);
  jinja_template_destroy(t);
}

static void test_images_are_refused_without_a_planner(void **state) {
  (void)state;
  struct jinja_template *t;
  assert_int_equal(jinja_template_create(k_vision_template, strlen(k_vision_template), &t), LLB_STATUS_OK);
  struct input_processor_config cfg = {.max_model_len = 512, .jinja_template = t, .hidden_size = 8, .random_u64 = fixed_random};
  struct input_processor *p = NULL;
  assert_int_equal(input_processor_create(tok, &cfg, &p), LLB_STATUS_OK);
  struct two_images x;
  two_images_init(&x, k_png, sizeof k_png, k_png, sizeof k_png);
  expect_error(p, &x, "mm_items", "--mmproj");
  input_processor_destroy(p);
  jinja_template_destroy(t);
}

int main(void) {
  struct gguf_writer *w;
  if (gguf_writer_create(3, &w) != LLB_STATUS_OK) return 1;
  gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
  float scores[N_VOCAB];
  for (int i = 0; i < N_VOCAB; i++) scores[i] = (float)-i;
  gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", (const char **)k_texts, N_VOCAB);
  gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, k_types, N_VOCAB);
  gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, N_VOCAB);
  size_t size;
  if (gguf_writer_write_memory(w, &gbuf, &size) != LLB_STATUS_OK) return 1;
  gguf_writer_destroy(w);
  if (gguf_open_memory(gbuf, size, &gf) != LLB_STATUS_OK || tokenizer_load(gf, &tok) != LLB_STATUS_OK) {
    fprintf(stderr, "vocabulary: %s\n", llb_err_last());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_image_parts_expand_into_the_plan_with_embed_masks),
      cmocka_unit_test(test_template_without_images_gets_mtmd_default_marker),
      cmocka_unit_test(test_mm_hash_changes_with_the_mmproj_and_the_file),
      cmocka_unit_test(test_bad_images_and_counts_are_field_errors),
      cmocka_unit_test(test_images_are_refused_without_a_planner),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tokenizer_destroy(tok);
  gguf_close(gf);
  free(gbuf);
  return rc;
}

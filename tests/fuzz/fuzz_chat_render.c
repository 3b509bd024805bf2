/* libFuzzer target for chat rendering from a request (model/template/chat_render.h):
 * messages of any role with any content (null too), tool calls, tool call ids and names, image
 * offsets, tools, chat_template_kwargs, add_generation_prompt and continue_final_message,
 * rendered by the default model's own template (SmolLM2's, from its GGUF; a ChatML-like one when
 * the model file is absent) or by a template that reads tools and tool calls. Input: a
 * fuzz_reader stream (flags, then the messages and strings). Oracle beyond no crash, leak or
 * hang (run.sh's 1 s limit): a refusal carries a message; a render is a NUL-ended string. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/chat_render.h"
#include "model/gguf/gguf.h"
#include "tests/fuzz/fuzz_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct jinja_template *model_tmpl, *tools_tmpl;

static const char k_chatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
static const char k_tools[] =
    "{{ bos_token }}{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}[{{ m.role }}]"
    "{% if m.content is string %}{{ m.content | trim }}{% else %}{% for p in m.content %}{{ p.type }}"
    "{% endfor %}{% endif %}{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}"
    "{% endfor %}{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}{{ enable_thinking }}";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *src = getenv("LLMBUS_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
  struct gguf_file *f = NULL;
  if (gguf_open(path, &f) == LLB_STATUS_OK) (void)chat_render_load(f, NULL, &model_tmpl);
  gguf_close(f);
  if (!model_tmpl && jinja_template_create(k_chatml, strlen(k_chatml), &model_tmpl) != LLB_STATUS_OK) abort();
  if (jinja_template_create(k_tools, strlen(k_tools), &tools_tmpl) != LLB_STATUS_OK) abort();
  return 0;
}

enum { MAX_MESSAGES = 6 };
static const char *const roles[] = {"system", "user", "assistant", "tool", "user"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char strings[1 << 17];
  struct fuzz_reader r = {.p = data, .n = size, .strings = strings, .cap = sizeof strings};
  const uint8_t flags = fuzz_byte(&r);
  struct chat_message msgs[MAX_MESSAGES];
  struct chat_message_extra x[MAX_MESSAGES];
  uint32_t offsets[MAX_MESSAGES][4];
  memset(x, 0, sizeof x);
  const size_t num = fuzz_byte(&r) % (MAX_MESSAGES + 1);
  for (size_t i = 0; i < num; i++) {
    const uint8_t b = fuzz_byte(&r);
    msgs[i].role = roles[b % 5];
    msgs[i].content = b & 0x80 ? NULL : fuzz_str(&r);
    if (b & 0x08) x[i].tool_calls_json = fuzz_str(&r);
    if (b & 0x10) x[i].tool_call_id = fuzz_str(&r);
    if (b & 0x20) x[i].name = fuzz_str(&r);
    /* offsets as the input processor passes them: in order, inside the content (mm_images.c) */
    const uint32_t len = msgs[i].content ? (uint32_t)strlen(msgs[i].content) : 0;
    x[i].num_image_offsets = (b & 0x40) ? fuzz_byte(&r) % 4 : 0;
    for (int32_t k = 0; k < x[i].num_image_offsets; k++) {
      uint32_t o = len ? fuzz_u16(&r) % (len + 1) : 0;
      offsets[i][k] = k && o < offsets[i][k - 1] ? offsets[i][k - 1] : o;
    }
    x[i].image_offsets = offsets[i];
  }
  struct chat_render_input in = {
      .messages = msgs, .extras = x, .num_messages = num, .add_generation_prompt = flags & 1,
      .continue_final_message = flags & 2, .tools_json = flags & 4 ? fuzz_str(&r) : NULL,
      .chat_template_kwargs_json = flags & 8 ? fuzz_str(&r) : NULL, .bos_token = "<s>", .eos_token = "</s>",
      .image_format = flags & 16 ? CHAT_IMAGE_FORMAT_OPENAI : CHAT_IMAGE_FORMAT_STRING, .image_marker = "<image>"};
  char *text = NULL;
  llb_status st = chat_render_jinja(flags & 32 ? tools_tmpl : model_tmpl, &in, &text);
  if (st != LLB_STATUS_OK) {
    if (text || !llb_err_last()[0]) abort();
    return 0;
  }
  if (!text) abort();
  (void)strlen(text);
  free(text);
  return 0;
}

/* libFuzzer target for the tokenizers (model/tokenizer/tokenizer.h): any bytes, with any of the encode
 * options, must tokenize without a crash, an out-of-bounds access or undefined behaviour
 * (ASan/UBSan), and every id it returns must be in the vocabulary and decode.
 *
 * Tokenizers: the default model's byte-level BPE (SmolLM2, GPT-2 pre-tokenizer regex through
 * PCRE2) from $LLMBUS_MODEL, or models/SmolLM2-135M-Instruct.Q4_1.gguf under
 * $LLMBUS_SOURCE_DIR; and the SPM vocabulary of the tiny llama test model
 * (tests/unit/arch_models.h). The first input byte picks the tokenizer and the options; the
 * rest is the text. Oracle for BPE without special-token parsing on valid UTF-8 text without
 * C0 controls other than \t \n \r, in planes 0-3: decode(encode(text)) == text (what tokenizer_decode
 * promises for text the model can represent). Not for other bytes: SmolLM2's vocabulary has
 * no token for some control bytes (0x04), which llama.cpp drops as we do, and the
 * pre-tokenizer works on code points, so bytes that are not UTF-8 are not representable:
 * those are only required not to crash). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/unit/arch_models.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gguf_file *bpe_file, *spm_file;
static struct tokenizer *bpe, *spm;
static void *spm_buf;

static void load_bpe(void) {
  char path[4096];
  const char *model = getenv("LLMBUS_MODEL");
  if (!model) {
    const char *src = getenv("LLMBUS_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    model = path;
  }
  if (gguf_open(model, &bpe_file) != LLB_STATUS_OK || tokenizer_load(bpe_file, &bpe) != LLB_STATUS_OK) {
    fprintf(stderr, "fuzz_tokenizer: no BPE model at %s (%s): set LLMBUS_MODEL\n", model, llb_err_last());
    exit(1);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  load_bpe();
  size_t size = 0;
  if (arch_model_write("llama", &spm_buf, &size) != LLB_STATUS_OK ||
      gguf_open_memory(spm_buf, size, &spm_file) != LLB_STATUS_OK || tokenizer_load(spm_file, &spm) != LLB_STATUS_OK) {
    fprintf(stderr, "fuzz_tokenizer: SPM test vocabulary: %s\n", llb_err_last());
    exit(1);
  }
  return 0;
}

/* Every id in range; the whole decode and the streamed one agree on length bounds. */
static void check_ids(const struct tokenizer *t, const int32_t *ids, int64_t n, const uint8_t *text,
                      size_t len, bool round_trip) {
  int32_t vocab = tokenizer_vocab_size(t);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) {
      fprintf(stderr, "id %d out of [0, %d)\n", ids[i], vocab);
      abort();
    }
  char *out = NULL;
  size_t out_len = 0;
  if (tokenizer_decode(t, ids, n, false, &out, &out_len) != LLB_STATUS_OK) abort();
  if (round_trip && (out_len != len || memcmp(out, text, len) != 0)) {
    fprintf(stderr, "BPE round trip: %zu bytes in, %zu out\n", len, out_len);
    abort();
  }
  struct detok_stream s;
  if (detok_stream_init(&s, t, false, false) == LLB_STATUS_OK) {
    size_t streamed = 0;
    const char *piece;
    size_t piece_len;
    for (int64_t i = 0; i < n; i++)
      if (detok_stream_push(&s, ids[i], &piece, &piece_len) == LLB_STATUS_OK) streamed += piece_len;
    detok_stream_flush(&s, &piece, &piece_len);
    streamed += piece_len;
    detok_stream_free(&s);
    (void)streamed;
  }
  free(out);
}

/* True when b[0..n) is well-formed UTF-8 (no overlongs or surrogates) of code points in planes
 * 0-3 (lead bytes up to 0xF0: SmolLM2's vocabulary has no token for the lead bytes of the
 * unassigned planes 8-11, e.g. 0xF2) without C0 controls other than \t \n \r and DEL. */
static bool valid_utf8(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n;) {
    uint8_t c = b[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) return false;
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || i + k > n) return false;
    uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x7f >> k));
    for (size_t j = 1; j < k; j++) {
      if ((b[i + j] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b[i + j] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[k] || cp > 0x3ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += k;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t opt = data[0];
  const uint8_t *text = data + 1;
  size_t len = size - 1;
  const struct tokenizer *t = (opt & 1) ? spm : bpe;
  bool add_special = opt & 2, parse_special = opt & 4;
  int32_t *ids = NULL;
  int64_t n = 0;
  llb_status st = tokenizer_encode(t, (const char *)text, len, add_special, parse_special, &ids, &n);
  if (st != LLB_STATUS_OK) {
    if (st != LLB_STATUS_INVALID_ARGUMENT && st != LLB_STATUS_TOO_LARGE) {
      fprintf(stderr, "encode: unexpected %s: %s\n", llb_strerror(st), llb_err_last());
      abort();
    }
    return 0;
  }
  check_ids(t, ids, n, text, len, t == bpe && !add_special && !parse_special && valid_utf8(text, len));
  free(ids);
  return 0;
}

/* Byte-level BPE (tokenizer.ggml.model = "gpt2"): pre-tokenizer regexes per
 * tokenizer.ggml.pre, GPT-2 byte-to-unicode mapping, and merges by rank with a binary heap
 * (O(k log k) per pre-tokenized word of k bytes).
 * Source followed: llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe: regex list per pre
 * type, applied in sequence, text between matches kept as its own piece; BPE session) and
 * OpenAI GPT-2 encoder.py (bytes_to_unicode). */
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "model/tokenizer/tokenizer_internal.h"

/* ---- GPT-2 bytes_to_unicode ---- */

static bool byte_is_printable(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_bpe_byte_to_cpt(uint8_t b) {
  if (byte_is_printable(b)) return b;
  if (b <= 0x20) return 256u + b;             /* 0x00..0x20: 33 bytes */
  if (b <= 0xA0) return 256u + 33 + (b - 0x7F); /* 0x7F..0xA0: 34 bytes */
  return 256u + 67;                          /* 0xAD */
}

int tok_bpe_cpt_to_byte(uint32_t cpt) {
  if (cpt < 256) return byte_is_printable(cpt) ? (int)cpt : -1;
  if (cpt >= 256 + 68) return -1;
  uint32_t i = cpt - 256;
  if (i < 33) return (int)i;
  if (i < 67) return (int)(0x7F + i - 33);
  return 0xAD;
}

/* ---- pre-tokenizer regexes (llama.cpp llm_tokenizer_bpe, HF tokenizer.json) ---- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                         \
  RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                  "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                      \
  RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
                  "\\s+(?!\\S)|\\s+"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_GPT4O_WORD                                                                         \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
/* deepseek-llm's letter class, as listed in llama.cpp (Latin, Greek, Cyrillic, ... letters) */
#define RE_DEEPSEEK_LLM_LETTERS                                                                              \
  "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-"  \
  "\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"   \
  "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-"      \
  "\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59" \
  "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-" \
  "\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126"   \
  "\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-" \
  "\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-" \
  "\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"     \
  "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-"         \
  "\U0001e943]+"

struct pre_spec {
  const char *names[12];  /* tokenizer.ggml.pre values */
  const char *regex[6];   /* applied in sequence */
  bool ignore_merges;     /* a word that is a token is taken whole */
  bool add_bos;           /* llama.cpp's default add_bos for this pre type */
};

static const struct pre_spec k_pre_specs[] = {
    {{"default"},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "mpt", "olmo", "jais",
      "exaone4", "roberta-bpe"},
     {RE_GPT2}, false, false},
    {{"jina-v1-en", "jina-v2-code", "a.x-4.0", "mellum", "modern-bert", "trillion", "granite-docling"},
     {RE_GPT2}, false, false},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     {"\\p{N}", RE_GPT2}, false, false},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {{"deepseek-coder"}, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, false, false},
    {{"deepseek-llm"},
     {"[\\r\\n]", RE_DEEPSEEK_LLM_LETTERS,
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$", RE_CJK,
      "\\p{N}+"},
     false, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
     {RE_LLAMA3}, true, true},
    {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {RE_LLAMA3}, false, false},
    {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"}, {RE_QWEN2}, false, false},
    {{"gpt-4o", "llama4"},
     {RE_GPT4O_WORD "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, false, false},
    {{"tekken"},
     {RE_GPT4O_WORD "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, true, true},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"}, false, false},
};

llb_status tok_bpe_init(struct tokenizer *t) {
  const struct pre_spec *spec = NULL;
  for (size_t i = 0; i < sizeof(k_pre_specs) / sizeof(k_pre_specs[0]) && !spec; i++)
    for (size_t j = 0; j < 12 && k_pre_specs[i].names[j]; j++)
      if (strcmp(k_pre_specs[i].names[j], t->pre_name) == 0) spec = &k_pre_specs[i];
  if (!spec)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED,
                    "tokenizer.ggml.pre '%s' is not supported (byte-level BPE pre-tokenizers: default, gpt-2, "
                    "starcoder, smollm, falcon, deepseek-coder, deepseek-llm, llama-bpe/llama3, qwen2, mpt, refact, "
                    "gpt-4o, tekken, ...)",
                    t->pre_name);
  t->ignore_merges = spec->ignore_merges;
  t->add_bos = spec->add_bos;
  for (int i = 0; i < 6 && spec->regex[i]; i++) {
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)spec->regex[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &erroff, NULL);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return LLB_ERRF(LLB_STATUS_INTERNAL, "pre-tokenizer '%s' regex %d: %s at %zu", t->pre_name, i, (char *)msg,
                      (size_t)erroff);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; interpreter otherwise */
    t->regex[t->n_regex++] = re;
  }
  return LLB_STATUS_OK;
}

/* ---- splitting ---- */

struct span {
  size_t start, len;
};

struct span_vec {
  struct span *data;
  size_t len, cap;
};

static llb_status span_push(struct span_vec *v, size_t start, size_t len) {
  if (v->len == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    struct span *d = realloc(v->data, cap * sizeof(*d));
    if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pre-tokenizer spans");
    v->data = d;
    v->cap = cap;
  }
  v->data[v->len++] = (struct span){start, len};
  return LLB_STATUS_OK;
}

/* Length of the valid UTF-8 sequence at s (n bytes left); 0 if invalid or truncated. */
static size_t utf8_valid_len(const unsigned char *s, size_t n) {
  size_t prefix;
  const int len = llb_utf8_scan(s, n, &prefix);
  return len > 0 ? (size_t)len : 0;
}

/* Splits one valid-UTF-8 span with regex re: matches and the text between them become
 * spans of out (llama.cpp unicode_regex_split keeps unmatched text as its own piece). */
static llb_status split_span(const pcre2_code *re, pcre2_match_data *md, const char *text, struct span sp,
                             struct span_vec *out) {
  PCRE2_SPTR subj = (PCRE2_SPTR)(text + sp.start);
  size_t off = 0, last = 0;
  llb_status st;
  while (off < sp.len) {
    int rc = pcre2_match(re, subj, sp.len, off, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return LLB_ERRF(LLB_STATUS_INTERNAL, "pre-tokenizer regex match failed: %s", (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) { /* empty match: step one character */
      off = ov[0] + tok_utf8_len(subj[ov[0]]);
      continue;
    }
    if (ov[0] > last && (st = span_push(out, sp.start + last, ov[0] - last)) != LLB_STATUS_OK) return st;
    if ((st = span_push(out, sp.start + ov[0], ov[1] - ov[0])) != LLB_STATUS_OK) return st;
    off = last = ov[1];
  }
  if (sp.len > last) return span_push(out, sp.start + last, sp.len - last);
  return LLB_STATUS_OK;
}

/* ---- merges ---- */

struct bpe_sym {
  uint32_t start, len; /* bytes of the encoded word */
  int32_t prev, next;
};

struct bpe_pair {
  int32_t rank, left, right;
  uint32_t size;
};

struct bpe_ctx {
  char *word;          /* [word_cap] GPT-2-encoded bytes of the current word */
  size_t word_cap;
  struct bpe_sym *syms;
  size_t syms_cap;
  struct bpe_pair *heap;
  size_t heap_len, heap_cap;
};

static bool pair_before(const struct bpe_pair *a, const struct bpe_pair *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static llb_status heap_push(struct bpe_ctx *c, struct bpe_pair p) {
  if (c->heap_len == c->heap_cap) {
    size_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
    struct bpe_pair *h = realloc(c->heap, cap * sizeof(*h));
    if (!h) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "BPE heap");
    c->heap = h;
    c->heap_cap = cap;
  }
  size_t i = c->heap_len++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!pair_before(&p, &c->heap[parent])) break;
    c->heap[i] = c->heap[parent];
    i = parent;
  }
  c->heap[i] = p;
  return LLB_STATUS_OK;
}

static struct bpe_pair heap_pop(struct bpe_ctx *c) {
  struct bpe_pair top = c->heap[0], last = c->heap[--c->heap_len];
  size_t i = 0, n = c->heap_len;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const struct bpe_pair *best = &last;
    if (l < n && pair_before(&c->heap[l], best)) m = l, best = &c->heap[l];
    if (r < n && pair_before(&c->heap[r], best)) m = r;
    if (m == i) break;
    c->heap[i] = c->heap[m];
    i = m;
  }
  if (n) c->heap[i] = last;
  return top;
}

static llb_status try_pair(const struct tokenizer *t, struct bpe_ctx *c, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return LLB_STATUS_OK;
  const struct bpe_sym *a = &c->syms[left], *b = &c->syms[right];
  int32_t rank = tok_merge_rank(t, c->word + a->start, a->len, c->word + b->start, b->len);
  if (rank < 0) return LLB_STATUS_OK;
  return heap_push(c, (struct bpe_pair){rank, left, right, a->len + b->len});
}

/* Encodes one pre-tokenized word of raw bytes. */
static llb_status bpe_word(const struct tokenizer *t, struct bpe_ctx *c, const char *raw, size_t n,
                           struct tok_ids *out) {
  if (c->word_cap < 2 * n) {
    char *w = realloc(c->word, 2 * n);
    if (!w) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "BPE word of %zu bytes", n);
    c->word = w;
    c->word_cap = 2 * n;
  }
  if (c->syms_cap < n) {
    struct bpe_sym *s = realloc(c->syms, n * sizeof(*s));
    if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "BPE symbols for %zu bytes", n);
    c->syms = s;
    c->syms_cap = n;
  }
  uint32_t wl = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cpt = tok_bpe_byte_to_cpt((uint8_t)raw[i]);
    c->syms[i] = (struct bpe_sym){wl, cpt < 0x80 ? 1u : 2u, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    if (cpt < 0x80) {
      c->word[wl++] = (char)cpt;
    } else {
      c->word[wl++] = (char)(0xC0 | (cpt >> 6));
      c->word[wl++] = (char)(0x80 | (cpt & 0x3F));
    }
  }
  if (t->ignore_merges) {
    int32_t id = tok_lookup(t, c->word, wl);
    if (id >= 0) return tok_ids_push(out, id);
  }
  llb_status st;
  c->heap_len = 0;
  for (size_t i = 1; i < n; i++)
    if ((st = try_pair(t, c, (int32_t)i - 1, (int32_t)i)) != LLB_STATUS_OK) return st;
  while (c->heap_len) {
    struct bpe_pair p = heap_pop(c);
    struct bpe_sym *a = &c->syms[p.left], *b = &c->syms[p.right];
    /* stale: a side was merged away, or they are no longer exactly these two symbols */
    if (a->len == 0 || b->len == 0 || a->next != p.right || a->len + b->len != p.size) continue;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) c->syms[b->next].prev = p.left;
    if ((st = try_pair(t, c, a->prev, p.left)) != LLB_STATUS_OK || (st = try_pair(t, c, p.left, a->next)) != LLB_STATUS_OK)
      return st;
  }
  for (int32_t i = 0; i >= 0; i = c->syms[i].next) {
    const struct bpe_sym *s = &c->syms[i];
    int32_t id = tok_lookup(t, c->word + s->start, s->len);
    if (id >= 0) {
      if ((st = tok_ids_push(out, id)) != LLB_STATUS_OK) return st;
      continue;
    }
    /* not a token: one token per byte (llama.cpp drops bytes that have none) */
    for (uint32_t k = 0; k < s->len;) {
      size_t l = tok_utf8_len((unsigned char)c->word[s->start + k]);
      uint32_t cpt = l == 1 ? (unsigned char)c->word[s->start + k]
                            : (((uint32_t)c->word[s->start + k] & 0x1F) << 6) | (c->word[s->start + k + 1] & 0x3F);
      int b = tok_bpe_cpt_to_byte(cpt);
      if (b >= 0 && t->byte_tokens[b] >= 0 && (st = tok_ids_push(out, t->byte_tokens[b])) != LLB_STATUS_OK) return st;
      k += (uint32_t)l;
    }
  }
  return LLB_STATUS_OK;
}

llb_status tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out) {
  struct span_vec a = {0}, b = {0};
  struct bpe_ctx c = {0};
  pcre2_match_data *md = NULL;
  llb_status st = LLB_STATUS_OK;
  if (t->n_regex) {
    md = pcre2_match_data_create(1, NULL);
    if (!md) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "regex match data");
  }
  /* Valid UTF-8 runs go through the regexes; each invalid byte is a word of its own. */
  size_t pos = 0;
  while (pos < len) {
    size_t run = pos;
    while (run < len) {
      size_t l = utf8_valid_len((const unsigned char *)text + run, len - run);
      if (!l) break;
      run += l;
    }
    if (run > pos) {
      a.len = 0;
      if ((st = span_push(&a, pos, run - pos)) != LLB_STATUS_OK) goto done;
      for (int r = 0; r < t->n_regex; r++) {
        b.len = 0;
        for (size_t i = 0; i < a.len; i++)
          if ((st = split_span(t->regex[r], md, text, a.data[i], &b)) != LLB_STATUS_OK) goto done;
        struct span_vec tmp = a;
        a = b;
        b = tmp;
      }
      for (size_t i = 0; i < a.len; i++) /* the bound first: a long word is the costly one */
        if ((st = tok_ids_check_bound(t, out, len - a.data[i].start)) != LLB_STATUS_OK ||
            (st = bpe_word(t, &c, text + a.data[i].start, a.data[i].len, out)) != LLB_STATUS_OK)
          goto done;
      pos = run;
    }
    if (pos < len) {
      if ((st = bpe_word(t, &c, text + pos, 1, out)) != LLB_STATUS_OK) goto done;
      pos++;
    }
  }
done:
  pcre2_match_data_free(md);
  free(a.data);
  free(b.data);
  free(c.word);
  free(c.syms);
  free(c.heap);
  return st;
}

/* `llmbus generate --inproc`: one prompt through the model in this process, no bus.
 *
 * GGUF -> chat template (unless --raw) -> tokenizer -> prefill (steps of PREFILL_CHUNK rows) and
 * decode through a model/forward/session.h session -> sampler -> streaming detokenizer to stdout. Stops
 * at a token of the model's end-of-generation set (tokenizer_is_eog: EOS, EOT, <|im_end|>, ...
 * as llama.cpp; a control token outside it, such as <file_sep>, is generated and hidden like any
 * control token) or after --max-tokens. --json prints, instead of the streamed text, one JSON
 * line shaped like the bus path's RequestOutput (`llmbus generate --json`): prompt_token_ids,
 * outputs[0] with text, token_ids (the stopping token included, as the engine's), finish_reason
 * ("stop" or "length") and stop_reason (the stopping token's id when it is not EOS, else null),
 * finished. Sampling defaults are vLLM's (temperature 1, top_p 1, ...); without --seed a seed is
 * drawn from the clock. Flags: one table (cmd/flags/flags.h), the sampling ones shared with the
 * bus client (client_sampling_flags). A one-line timing summary goes to stderr. --json-object,
 * --json-schema FILE and --choice JSON constrain the output with the structured-output mask
 * (cmd/client/generate_structured.h): masked tokens get -inf before sampling.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/log.h"
#include "base/status.h"
#include "cmd/client/client.h"
#include "cmd/client/commands.h"
#include "cmd/flags/flags.h"
#include "cmd/client/generate_structured.h"
#include "model/forward/forward.h"
#include "model/forward/session.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"
#include "model/template/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/sampling_params.h"

#define PREFILL_CHUNK 512
#define DEFAULT_MAX_TOKENS 256

struct inproc_opts {
  const char *model_path;
  const char *prompt;
  const char *system;
  const char *chat_template; /* NULL = the model's own */
  bool raw;
  bool json;
  int32_t threads;
  enum llama_matmul_mode matmul; /* --numerics packed|ggml */
  struct llb_sampling_params sp;
  bool json_object;               /* --json-object */
  const char *json_schema_path;   /* --json-schema FILE */
  const char *choice;             /* --choice JSON array of strings */
};

static llb_status set_threads(const struct flag *f, const char *v) {
  int64_t n;
  llb_status st = flags_parse_int64(v, 1, 256, &n);
  if (!st) *(int32_t *)f->target = (int32_t)n;
  return st;
}

static llb_status set_numerics(const struct flag *f, const char *v) {
  if (strcmp(v, "packed") && strcmp(v, "ggml")) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "packed or ggml");
  *(enum llama_matmul_mode *)f->target = !strcmp(v, "ggml") ? LLAMA_MATMUL_GGML : LLAMA_MATMUL_PACKED;
  return LLB_STATUS_OK;
}

#define INPROC_MAX_FLAGS 24

/* The flags into o (one table with the sampling flags of the bus client but --stop and --n);
 * `args` keeps what the values point into. Returns FLAGS_CONTINUE, 0 after --help, 2. */
static int parse_args(int argc, char **argv, struct inproc_opts *o, struct flag_args *args) {
  llb_sampling_params_init(&o->sp);
  o->sp.max_tokens = DEFAULT_MAX_TOKENS;
  o->sp.seed = (uint64_t)llb_wall_ns();
  o->threads = 2;
  bool inproc = true;
  struct flag t[INPROC_MAX_FLAGS];
  int n = 0;
  struct flag sampling[INPROC_MAX_FLAGS];
  const int num_sampling = client_sampling_flags(&o->sp, sampling, INPROC_MAX_FLAGS);
  for (int i = 0; i < num_sampling; i++)
    if (strcmp(sampling[i].name, "stop") && strcmp(sampling[i].name, "n")) t[n++] = sampling[i];
  const struct flag own[] = {
      {.name = "inproc", .kind = FLAG_KIND_BOOL, .target = &inproc, .help = "this mode: no bus"},
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &o->model_path, .metavar = "M.gguf",
       .help = "the model (required)"},
      {.name = "raw", .kind = FLAG_KIND_BOOL, .target = &o->raw, .help = "no chat template: the prompt is plain text to continue"},
      {.name = "system", .kind = FLAG_KIND_STRING, .target = &o->system, .metavar = "TEXT", .help = "system message"},
      {.name = "chat-template", .kind = FLAG_KIND_STRING, .target = &o->chat_template, .metavar = "NAME",
       .help = "name a template instead of the model's (chatml, smollm2, llama3, mistral, mistral-v3, gemma, gemma3, phi3)"},
      {.name = "json", .kind = FLAG_KIND_BOOL, .target = &o->json,
       .help = "one JSON line at the end instead of the streamed text: prompt and output token ids, text, "
               "finish_reason, stop_reason"},
      {.name = "json-object", .kind = FLAG_KIND_BOOL, .target = &o->json_object,
       .help = "the output is a JSON object (OpenAI response_format json_object)"},
      {.name = "json-schema", .kind = FLAG_KIND_STRING, .target = &o->json_schema_path, .metavar = "FILE",
       .help = "the output is JSON valid against the JSON Schema in FILE"},
      {.name = "choice", .kind = FLAG_KIND_STRING, .target = &o->choice, .metavar = "JSON",
       .help = "the output is one of the strings of a JSON array (guided_choice)"},
      {.name = "threads", .short_name = 't', .kind = FLAG_KIND_INT32, .target = &o->threads, .metavar = "N",
       .set = set_threads, .help = "forward-pass threads (default 2)"},
      {.name = "numerics", .kind = FLAG_KIND_STRING, .target = &o->matmul, .metavar = "packed|ggml",
       .set = set_numerics,
       .help = "packed (the engine's int8 panels, default) or ggml (llama.cpp's CPU arithmetic, bit-exact logits)"},
  };
  memcpy(t + n, own, sizeof own);
  n += (int)(sizeof own / sizeof own[0]);
  const struct flag_section sec = {"flags", t, n};
  const struct flag_command cmd = {
      .program = "llmbus generate", .sections = &sec, .num_sections = 1, .max_positional = 1, .config = true,
      .usage = "usage: llmbus generate --inproc --model M.gguf [flags] [--] PROMPT\n"
               "Runs the model in this process (no bus) and streams the answer to stdout (seed: the clock's\n"
               "unless --seed; --max-tokens capped by the context length).\n"};
  int rc = flags_parse(&cmd, argc, argv, args);
  if (rc == FLAGS_CONTINUE && (!o->model_path || args->num_positional != 1))
    rc = flags_usage_error(&cmd, "--model and a prompt are required");
  if (rc == FLAGS_CONTINUE) o->prompt = args->positional[0];
  return rc;
}

/* The sampler's params from the flags' (client_sampling_flags fills the bus client's
 * llb_sampling_params: temperature, top_p, top_k, min_p, seed; the rest keep vLLM's defaults). */
static void sampler_params_of_flags(const struct llb_sampling_params *sp, struct sampler_params *out) {
  sampler_params_init(out);
  out->temperature = sp->temperature;
  out->top_p = sp->top_p;
  out->top_k = sp->top_k;
  out->min_p = sp->min_p;
  out->seed = sp->seed;
}

/* Prompt ids: chat-templated (system + user) unless raw. *ids: malloc'd, caller frees. */
static llb_status encode_prompt(const struct gguf_file *f, const struct tokenizer *tok,
                                const struct inproc_opts *o, int32_t **ids, int64_t *n) {
  /* Special-token text in a raw prompt is that token, as in the engine (vLLM, llama.cpp). */
  if (o->raw) return tokenizer_encode(tok, o->prompt, strlen(o->prompt), true, true, ids, n);
  enum chat_template_kind kind;
  llb_status st = o->chat_template ? chat_template_from_name(o->chat_template, &kind)
                                   : chat_template_from_gguf(f, &kind);
  if (st != LLB_STATUS_OK) return st;
  struct chat_message msgs[2];
  size_t num = 0;
  if (o->system) msgs[num++] = (struct chat_message){.role = "system", .content = o->system};
  msgs[num++] = (struct chat_message){.role = "user", .content = o->prompt};
  char *text = NULL;
  st = chat_template_apply(kind, msgs, num, true, &text);
  if (st != LLB_STATUS_OK) return st;
  st = tokenizer_encode(tok, text, strlen(text), true, true, ids, n);
  free(text);
  return st;
}

struct inproc_run {
  struct gguf_file *gguf;
  struct tokenizer *tok;
  struct llama_model *model;
  struct llama_session *session;
  struct sampler *sampler;
  struct detok_stream detok;
  int32_t *seq;         /* [capacity] prompt + output ids */
  float *logits;        /* [vocab_size] the session's, of the last token fed */
  char *text;           /* [text_cap] output text so far (--json) */
  size_t text_len, text_cap;
  struct gen_structured structured;
};

/* Appends len bytes to r->text (--json). OUT_OF_MEMORY on failure. */
static llb_status text_append(struct inproc_run *r, const char *s, size_t len) {
  if (r->text_len + len > r->text_cap) {
    size_t cap = r->text_cap ? r->text_cap : 256;
    while (cap < r->text_len + len) cap *= 2;
    char *p = realloc(r->text, cap);
    if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "output text of %zu bytes", cap);
    r->text = p;
    r->text_cap = cap;
  }
  memcpy(r->text + r->text_len, s, len);
  r->text_len += len;
  return LLB_STATUS_OK;
}

/* Streams len bytes of output text to stdout, or keeps them for the JSON line. */
static llb_status emit_text(struct inproc_run *r, bool json, const char *s, size_t len) {
  if (json) return text_append(r, s, len);
  fwrite(s, 1, len, stdout);
  fflush(stdout);
  return LLB_STATUS_OK;
}

static json_t *json_ids(const int32_t *ids, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

/* The --json line: RequestOutput's shape (cmd/client/client.c request_output_json) for one output.
 * stop_token: the token that stopped generation, -1 when it ran to the length limit. */
static int print_json(const struct inproc_run *r, int64_t n_prompt, int32_t n_gen, int32_t stop_token) {
  const bool stopped = stop_token >= 0;
  json_t *stop_reason = stopped && stop_token != tokenizer_eos_id(r->tok) ? json_integer(stop_token) : json_null();
  json_t *out = json_pack("{s:i, s:s#, s:o, s:s, s:o}", "index", 0, "text", r->text ? r->text : "",
                          r->text_len, "token_ids", json_ids(r->seq + n_prompt, n_gen), "finish_reason",
                          stopped ? "stop" : "length", "stop_reason", stop_reason);
  json_t *j = out ? json_pack("{s:o, s:[o], s:b}", "prompt_token_ids", json_ids(r->seq, n_prompt), "outputs", out,
                              "finished", 1)
                  : NULL;
  char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!line) {
    fprintf(stderr, "llmbus generate: out of memory for the JSON line\n");
    return 1;
  }
  puts(line);
  fflush(stdout);
  free(line);
  return 0;
}

static void run_free(struct inproc_run *r) {
  gen_structured_free(&r->structured);
  detok_stream_free(&r->detok);
  free(r->seq);
  free(r->text);
  sampler_destroy(r->sampler);
  llama_session_destroy(r->session);
  llama_model_destroy(r->model);
  tokenizer_destroy(r->tok);
  gguf_close(r->gguf);
}

static int fail_status(const char *what) {
  fprintf(stderr, "llmbus generate: %s: %s\n", what, llb_err_last_where());
  return 1;
}

int cmd_generate_inproc(int argc, char **argv) {
  struct inproc_opts o = {0};
  struct flag_args args;
  int rc = parse_args(argc, argv, &o, &args);
  if (rc != FLAGS_CONTINUE) {
    flag_args_free(&args);
    return rc;
  }

  struct inproc_run r = {0};
  int32_t *prompt = NULL;
  int64_t n_prompt = 0;
  rc = 1;
  if (gguf_open(o.model_path, &r.gguf) != LLB_STATUS_OK) { rc = fail_status("open model"); goto done; }
  if (tokenizer_load(r.gguf, &r.tok) != LLB_STATUS_OK) { rc = fail_status("tokenizer"); goto done; }
  if (llama_model_load(r.gguf, &r.model) != LLB_STATUS_OK) { rc = fail_status("model"); goto done; }
  if (gen_structured_init(&r.structured, r.tok, o.json_object, o.json_schema_path, o.choice) != LLB_STATUS_OK) {
    rc = fail_status("structured output");
    goto done;
  }
  if (encode_prompt(r.gguf, r.tok, &o, &prompt, &n_prompt) != LLB_STATUS_OK) {
    rc = fail_status("prompt");
    goto done;
  }
  const struct llama_config *cfg = llama_model_config(r.model);
  if (n_prompt < 1 || n_prompt >= cfg->context_length) {
    fprintf(stderr, "llmbus generate: prompt of %lld tokens does not fit the context (%d)\n",
            (long long)n_prompt, cfg->context_length);
    goto done;
  }
  int32_t max_new = o.sp.max_tokens;
  if (max_new < 0 || max_new > cfg->context_length - n_prompt) max_new = cfg->context_length - (int32_t)n_prompt;
  const int32_t capacity = (int32_t)n_prompt + max_new;
  const int32_t chunk = n_prompt < PREFILL_CHUNK ? (int32_t)n_prompt : PREFILL_CHUNK;
  const struct llama_session_options so = {
      .max_context = capacity, .forward = {.max_num_tokens = chunk, .n_threads = o.threads, .matmul = o.matmul}};
  if (llama_session_create(r.model, &so, &r.session) != LLB_STATUS_OK ||
      sampler_create(cfg->vocab_size, &r.sampler) != LLB_STATUS_OK ||
      detok_stream_init(&r.detok, r.tok, false, false) != LLB_STATUS_OK) {
    rc = fail_status("set-up");
    goto done;
  }
  r.seq = malloc((size_t)capacity * sizeof *r.seq);
  if (!r.seq) {
    fprintf(stderr, "llmbus generate: out of memory\n");
    goto done;
  }
  memcpy(r.seq, prompt, (size_t)n_prompt * sizeof *r.seq);

  int64_t t0 = llb_now_ns();
  if (llama_session_eval(r.session, 0, r.seq, (int32_t)n_prompt, &r.logits) != LLB_STATUS_OK) {
    rc = fail_status("prefill");
    goto done;
  }
  int64_t t1 = llb_now_ns();
  int32_t n_out = 0, n_gen = 0, stop_token = -1;
  struct sampler_params sp;
  sampler_params_of_flags(&o.sp, &sp);
  for (;;) {
    struct sampler_result res;
    gen_structured_mask_logits(&r.structured, r.logits, cfg->vocab_size);
    if (sampler_sample(r.sampler, &sp, r.logits, r.seq, n_prompt, r.seq + n_prompt, n_out, 0,
                       n_out, &res) != LLB_STATUS_OK) {
      rc = fail_status("sample");
      goto done;
    }
    if (gen_structured_accept(&r.structured, res.token_id) != LLB_STATUS_OK) {
      rc = fail_status("structured output");
      goto done;
    }
    int32_t pos = (int32_t)n_prompt + n_out;
    r.seq[pos] = res.token_id;
    n_gen = n_out + 1; /* the stopping token is part of the output ids, as the engine's */
    if (!o.sp.ignore_eos && tokenizer_is_eog(r.tok, res.token_id)) {
      stop_token = res.token_id;
      break;
    }
    const char *text;
    size_t len;
    if (detok_stream_push(&r.detok, res.token_id, &text, &len) != LLB_STATUS_OK ||
        emit_text(&r, o.json, text, len) != LLB_STATUS_OK) {
      rc = fail_status("detokenize");
      goto done;
    }
    n_out++;
    if (n_out >= max_new) break;
    if (llama_session_eval(r.session, 0, r.seq + pos, 1, &r.logits) != LLB_STATUS_OK) {
      rc = fail_status("decode");
      goto done;
    }
  }
  int64_t t2 = llb_now_ns();
  const char *rest;
  size_t rest_len;
  detok_stream_flush(&r.detok, &rest, &rest_len);
  if (emit_text(&r, o.json, rest, rest_len) != LLB_STATUS_OK) {
    rc = fail_status("detokenize");
    goto done;
  }
  if (o.json) {
    if (print_json(&r, n_prompt, n_gen, stop_token) != 0) goto done;
  } else {
    fputc('\n', stdout);
    fflush(stdout);
  }
  double prefill_s = (double)(t1 - t0) / 1e9, decode_s = (double)(t2 - t1) / 1e9;
  /* Decode rate counts forward steps: every output token but the last needed one. */
  int32_t decode_steps = n_out > 0 ? n_out - (n_out >= max_new ? 1 : 0) : 0;
  fprintf(stderr,
          "prefill: %lld tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n",
          (long long)n_prompt, prefill_s, prefill_s > 0 ? (double)n_prompt / prefill_s : 0.0,
          n_out, decode_s, decode_s > 0 && decode_steps > 0 ? decode_steps / decode_s : 0.0);
  rc = 0;
done:
  free(prompt);
  run_free(&r);
  flag_args_free(&args);
  return rc;
}

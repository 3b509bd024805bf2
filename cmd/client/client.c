/* NATS client for the generate / chat / run commands; see client.h. */
#include "cmd/client/client.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/credentials.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define CLIENT_MAX_N 16          /* completions printed per request (the input processor's max n) */
#define CLIENT_WAIT_SLICE_MS 100 /* wait granularity: interrupts and idle work */
#define CLIENT_REQUEST_ID "cli"  /* the input processor appends a unique suffix */
#define CLIENT_NO_RESPONDER_TRIES 8 /* resends of a request no input processor took */
#define CLIENT_STATE_LOST_TRIES 3   /* resends of a request whose end the output processor lost */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

void client_install_sigint(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

bool client_interrupted(void) { return interrupted != 0; }

void client_quiet_logs(void) {
  llb_log_set_actor("llmbus");
  if (!getenv("LLMBUS_LOG_LEVEL")) llb_log_set_level(LLB_LOG_LEVEL_WARN);
}

int client_report(const char *cmd, llb_status st) {
  fprintf(stderr, "%s: %s\n", cmd, llb_err_last());
  return st == LLB_STATUS_ABORTED ? 130 : 1;
}

void client_clear_interrupt(void) { interrupted = 0; }

void client_options_init(struct client_options *o) {
  memset(o, 0, sizeof *o);
  llb_sampling_params_init(&o->sp);
  o->sp.max_tokens = CLIENT_DEFAULT_MAX_TOKENS;
  o->sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  o->timeout_s = CLIENT_DEFAULT_TIMEOUT_S;
}

void client_options_free(struct client_options *o) {
  if (!o) return;
  free(o->conn);
  o->conn = NULL;
}

/* --- flags: each setter checks its value and stores it into f->target ---------------- */

static llb_status set_float(const char *v, double lo, double hi, float *out) {
  double d;
  llb_status st = flags_parse_double(v, lo, hi, &d);
  if (!st) *out = (float)d;
  return st;
}

static llb_status set_temperature(const struct flag *f, const char *v) { return set_float(v, 0, 1e6, f->target); }
static llb_status set_top_p(const struct flag *f, const char *v) {
  llb_status st = set_float(v, 0, 1, f->target);
  if (!st && *(float *)f->target <= 0) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "must be in (0, 1]");
  return st;
}
static llb_status set_min_p(const struct flag *f, const char *v) { return set_float(v, 0, 1, f->target); }

static llb_status set_int32(const char *v, int64_t lo, int64_t hi, int32_t *out) {
  int64_t n;
  llb_status st = flags_parse_int64(v, lo, hi, &n);
  if (!st) *out = (int32_t)n;
  return st;
}

static llb_status set_top_k(const struct flag *f, const char *v) { return set_int32(v, 0, INT32_MAX, f->target); }
static llb_status set_n(const struct flag *f, const char *v) { return set_int32(v, 1, CLIENT_MAX_N, f->target); }
static llb_status set_max_tokens(const struct flag *f, const char *v) {
  llb_status st = set_int32(v, -1, INT32_MAX, f->target);
  if (!st && *(int32_t *)f->target == 0) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "0 tokens: give -1 or more");
  return st;
}

static llb_status set_seed(const struct flag *f, const char *v) {
  struct llb_sampling_params *sp = f->target;
  int64_t n;
  llb_status st = flags_parse_int64(v, 0, INT64_MAX, &n);
  if (!st) sp->seed = (uint64_t)n, sp->has_seed = true;
  return st;
}

static llb_status set_stop(const struct flag *f, const char *v) {
  struct llb_sampling_params *sp = f->target;
  if (sp->num_stop >= LLB_MAX_STOP_STRINGS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "at most %d stop strings", LLB_MAX_STOP_STRINGS);
  if (!v[0] || strlen(v) > LLB_MAX_STOP_STRING_BYTES)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "empty or longer than %d bytes", LLB_MAX_STOP_STRING_BYTES);
  snprintf(sp->stop[sp->num_stop++], LLB_MAX_STOP_STRING_BYTES + 1, "%s", v);
  return LLB_STATUS_OK;
}

static llb_status set_prefix(const struct flag *f, const char *v) {
  llb_status st = bus_prefix_check(v);
  if (!st) *(const char **)f->target = v;
  return st;
}

static llb_status set_tenant(const struct flag *f, const char *v) {
  if (!bus_token_valid(v)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s' is not a subject token", v);
  *(const char **)f->target = v;
  return LLB_STATUS_OK;
}

static llb_status set_timeout(const struct flag *f, const char *v) {
  int64_t n;
  llb_status st = flags_parse_int64(v, 1, 86400, &n);
  if (!st) *(int64_t *)f->target = n;
  return st;
}

#define CLIENT_NUM_SAMPLING_FLAGS 8

int client_sampling_flags(struct llb_sampling_params *sp, struct flag *out, int cap) {
  if (cap < CLIENT_NUM_SAMPLING_FLAGS) return -1;
  const struct flag t[CLIENT_NUM_SAMPLING_FLAGS] = {
      {.name = "temperature", .kind = FLAG_KIND_DOUBLE, .target = &sp->temperature, .metavar = "T",
       .set = set_temperature, .help = "0 = greedy (default 1, as vLLM)"},
      {.name = "top-p", .kind = FLAG_KIND_DOUBLE, .target = &sp->top_p, .metavar = "P", .set = set_top_p,
       .help = "nucleus sampling, (0, 1] (default 1 = off)"},
      {.name = "top-k", .kind = FLAG_KIND_INT32, .target = &sp->top_k, .metavar = "K", .set = set_top_k,
       .help = "0 = off (default)"},
      {.name = "min-p", .kind = FLAG_KIND_DOUBLE, .target = &sp->min_p, .metavar = "P", .set = set_min_p,
       .help = "[0, 1] (default 0 = off)"},
      {.name = "max-tokens", .kind = FLAG_KIND_INT32, .target = &sp->max_tokens, .metavar = "N",
       .set = set_max_tokens, .help = "tokens to generate at most (default 256; -1 = up to the context length)"},
      {.name = "seed", .kind = FLAG_KIND_INT64, .target = sp, .metavar = "S", .set = set_seed,
       .help = "reproducible sampling (default: drawn at random here, so that a request sent again repeats itself)"},
      {.name = "stop", .kind = FLAG_KIND_LIST, .target = sp, .metavar = "TEXT", .set = set_stop,
       .help = "stop string (repeatable, up to 8)"},
      {.name = "n", .kind = FLAG_KIND_INT32, .target = &sp->n, .metavar = "N", .set = set_n,
       .help = "completions (default 1)"},
  };
  memcpy(out, t, sizeof t);
  return CLIENT_NUM_SAMPLING_FLAGS;
}

int client_flags_table(struct client_options *o, unsigned groups, struct flag *out, int cap) {
  const struct flag connect[] = {
      {.name = "connect", .kind = FLAG_KIND_STRING, .target = &o->connect, .metavar = "NAME",
       .help = "the llmbus serve to use: a connection file's name or path (default: the newest running one; "
               "cmd/supervisor/connection.h)"},
      {.name = "nats", .kind = FLAG_KIND_STRING, .target = &o->nats_url, .metavar = "URL",
       .help = "NATS server instead (default: the running serve's, else nats://127.0.0.1:4222)"},
      {.name = "nats-user", .kind = FLAG_KIND_STRING, .target = &o->nats_user, .metavar = "U",
       .help = "NATS login (with --nats-password-file)"},
      {.name = "nats-password-file", .kind = FLAG_KIND_STRING, .target = &o->nats_password_file, .metavar = "F",
       .help = "the file holding its password (mode 0600)"},
      {.name = "prefix", .kind = FLAG_KIND_STRING, .target = &o->prefix, .metavar = "P", .set = set_prefix,
       .help = "subject prefix (default llm)"},
      {.name = "tenant", .kind = FLAG_KIND_STRING, .target = &o->tenant, .metavar = "NAME", .set = set_tenant,
       .help = "tenant (default: the serve's first, else default)"},
  };
  const struct flag prompt[] = {
      {.name = "raw", .kind = FLAG_KIND_BOOL, .target = &o->raw, .help = "no chat template: the prompt is plain text to continue"},
      {.name = "system", .aliases = "system-prompt", .kind = FLAG_KIND_STRING, .target = &o->system, .metavar = "TEXT",
       .help = "system message (with the chat template; --system-prompt as vllm chat)"},
      {.name = "chat-template", .kind = FLAG_KIND_STRING, .target = &o->chat_template, .metavar = "NAME",
       .help = "use this template instead of the model's (chatml, smollm2, llama3, mistral, mistral-v3, gemma, "
               "gemma3, phi3)"},
      {.name = "lora", .kind = FLAG_KIND_STRING, .target = &o->lora, .metavar = "NAME",
       .help = "run the LoRA adapter NAME (one of llmbus serve --lora-modules; over HTTP: the request's model)"},
      {.name = "json", .kind = FLAG_KIND_BOOL, .target = &o->json, .help = "print every RequestOutput as one JSON line"},
      {.name = "timeout-s", .kind = FLAG_KIND_INT64, .target = &o->timeout_s, .metavar = "S", .set = set_timeout,
       .help = "longest wait for the engine's next output (default 60)"},
  };
  int n = 0;
  if (groups & CLIENT_FLAGS_CONNECT) {
    if (cap < (int)(sizeof connect / sizeof *connect)) return -1;
    memcpy(out, connect, sizeof connect);
    n += (int)(sizeof connect / sizeof *connect);
  }
  if (groups & CLIENT_FLAGS_SAMPLING) {
    int k = client_sampling_flags(&o->sp, out + n, cap - n);
    if (k < 0) return -1;
    n += k;
  }
  if (groups & CLIENT_FLAGS_PROMPT) {
    if (cap - n < (int)(sizeof prompt / sizeof *prompt)) return -1;
    memcpy(out + n, prompt, sizeof prompt);
    n += (int)(sizeof prompt / sizeof *prompt);
  }
  return n;
}

llb_status client_options_connect(struct client_options *o, bool as_operator) {
  if (o->nats_url) return LLB_STATUS_OK;
  struct serve_connection *c = calloc(1, sizeof *c);
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "connection");
  llb_status st = serve_connection_find(o->connect, c);
  if (st != LLB_STATUS_OK) {
    free(c);
    return o->connect ? st : LLB_STATUS_OK; /* nothing running: the defaults, as before */
  }
  free(o->conn);
  o->conn = c;
  o->nats_url = c->nats_url;
  if (!o->prefix && c->prefix[0]) o->prefix = c->prefix;
  if (!o->tenant && c->tenant[0]) o->tenant = c->tenant;
  const char *user = as_operator ? c->operator_user : c->nats_user;
  const char *pw = as_operator ? c->operator_password_file : c->nats_password_file;
  if (!o->nats_user && !o->nats_password_file && user[0]) o->nats_user = user, o->nats_password_file = pw;
  return LLB_STATUS_OK;
}

llb_status client_connect(const struct client_options *o, struct bus **out) {
  struct bus_options bo;
  bus_options_init(&bo);
  if (o->nats_url) bo.urls = o->nats_url;
  if (o->prefix) bo.prefix = o->prefix;
  bo.name = "llmbus-cli";
  bo.install_signal_handlers = false;
  bo.max_reconnect = 5;
  if ((o->nats_user != NULL) != (o->nats_password_file != NULL))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--nats-user and --nats-password-file go together");
  char password[BUS_PASSWORD_MAX + 1] = "";
  if (o->nats_password_file) {
    llb_status st = bus_password_file_read(o->nats_password_file, password, sizeof password);
    if (st != LLB_STATUS_OK) return st;
    bo.user = o->nats_user;
    bo.password = password;
  }
  llb_status st = bus_connect(&bo, out);
  memset(password, 0, sizeof password);
  return st;
}

/* --- JSON ----------------------------------------------------------------------------- */

static json_t *json_ids(const int32_t *ids, int32_t n) {
  json_t *a = json_array();
  for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

static json_t *json_str(struct llb_str s) { return json_stringn(s.data ? s.data : "", s.len); }

static json_t *json_logprobs(const struct llb_completion_output *c) {
  json_t *a = json_array();
  for (int32_t t = 0; t < c->num_logprobs; t++) {
    const struct llb_token_logprobs *lp = &c->logprobs[t];
    json_t *top = json_array();
    for (int32_t j = 0; j < lp->num_top; j++)
      json_array_append_new(top, json_pack("{s:i, s:f, s:o}", "token_id", lp->top[j].token_id, "logprob",
                                           (double)lp->top[j].logprob, "decoded", json_str(lp->top[j].decoded)));
    json_array_append_new(a, json_pack("{s:i, s:f, s:i, s:o, s:o}", "token_id", lp->token_id, "logprob",
                                       (double)lp->logprob, "rank", lp->rank, "decoded", json_str(lp->decoded),
                                       "top", top));
  }
  return a;
}

/* One RequestOutput as a JSON object (field names of schemas/request_output.h). */
static json_t *request_output_json(const struct llb_request_output *ro) {
  json_t *outs = json_array();
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    const struct llb_completion_output *c = &ro->outputs[i];
    const char *fr = llb_finish_reason_name(c->finish_reason);
    json_t *o = json_pack("{s:i, s:o, s:o, s:f, s:o, s:o}", "index", c->index, "text", json_str(c->text),
                          "token_ids", json_ids(c->token_ids, c->num_token_ids), "cumulative_logprob",
                          c->cumulative_logprob, "finish_reason", fr ? json_string(fr) : json_null(),
                          "stop_reason", c->stop_reason.len ? json_str(c->stop_reason) : json_null());
    if (c->num_logprobs > 0) json_object_set_new(o, "logprobs", json_logprobs(c));
    json_array_append_new(outs, o);
  }
  const struct llb_request_metrics *m = &ro->metrics;
  json_t *metrics = json_pack("{s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:i}", "arrival_time", m->arrival_time,
                              "first_scheduled_time", m->first_scheduled_time, "first_token_time",
                              m->first_token_time, "last_token_time", m->last_token_time, "finished_time",
                              m->finished_time, "num_cached_tokens", m->num_cached_tokens, "num_prompt_tokens",
                              m->num_prompt_tokens, "num_generation_tokens", m->num_generation_tokens);
  json_t *j = json_pack("{s:o, s:o, s:o, s:b, s:o}", "request_id", json_str(ro->request_id), "prompt_token_ids",
                        json_ids(ro->prompt_token_ids, ro->num_prompt_token_ids), "outputs", outs, "finished",
                        ro->finished, "metrics", metrics);
  if (ro->error.code != 0)
    json_object_set_new(j, "error", json_pack("{s:i, s:o, s:o}", "code", ro->error.code, "message",
                                              json_str(ro->error.message), "field", json_str(ro->error.field)));
  return j;
}

/* --- streaming ---------------------------------------------------------------------- */

struct text_buf {
  char *data;
  size_t len, cap;
};

static bool text_append(struct text_buf *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char *p = realloc(t->data, cap);
    if (!p) return false;
    t->data = p;
    t->cap = cap;
  }
  if (n) memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
  return true;
}

/* Builds and publishes the GenerateRequest with reply subject `inbox`. */
static llb_status send_request(struct bus *bus, const struct client_options *o, const struct client_prompt *p,
                               const char *inbox) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_generate(bus_prefix(bus), o->tenant ? o->tenant : BUS_DEFAULT_TENANT, subject,
                                       sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  struct llb_generate_request gr;
  llb_generate_request_init(&gr);
  gr.request_id = llb_str_c(CLIENT_REQUEST_ID);
  gr.sampling_params = &o->sp;
  gr.raw = o->raw;
  if (o->chat_template) gr.chat_template = llb_str_c(o->chat_template);
  if (o->lora) gr.lora_request = (struct llb_lora_request){llb_str_c(o->lora), 0}; /* the engine resolves the id */
  struct llb_chat_message msgs[2];
  struct llb_chat_message *conv = NULL;
  if (p->messages) {
    conv = calloc(p->num_messages ? p->num_messages : 1, sizeof *conv);
    if (!conv) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "messages");
    for (size_t i = 0; i < p->num_messages; i++)
      conv[i] = (struct llb_chat_message){.role = llb_str_c(p->messages[i].role),
                                          .content = llb_str_c(p->messages[i].content)};
    gr.messages = conv;
    gr.num_messages = (int32_t)p->num_messages;
  } else if (o->system && !o->raw) {
    msgs[0] = (struct llb_chat_message){.role = llb_str_c("system"), .content = llb_str_c(o->system)};
    msgs[1] = (struct llb_chat_message){.role = llb_str_c("user"), .content = llb_str_c(p->prompt)};
    gr.messages = msgs;
    gr.num_messages = 2;
  } else {
    gr.prompt = llb_str_c(p->prompt);
  }
  struct llb_buf buf = {0};
  st = llb_generate_request_encode_buf(&gr, &buf);
  free(conv);
  if (st != LLB_STATUS_OK) return st;
  struct bus_out_msg m = {.subject = subject, .reply = inbox, .data = buf.data, .len = buf.len};
  st = bus_publish_msg(bus, &m);
  llb_buf_free(&buf);
  return st;
}

/* Best effort: asks the input processor to abort `request_id`. */
static void send_abort(struct bus *bus, const struct client_options *o, const char *request_id) {
  char subject[BUS_SUBJECT_MAX];
  if (!request_id[0] ||
      bus_subject_abort(bus_prefix(bus), o->tenant ? o->tenant : BUS_DEFAULT_TENANT, subject, sizeof subject) != LLB_STATUS_OK)
    return;
  struct llb_abort_request ar = {.request_id = llb_str_c(request_id)};
  struct llb_buf buf = {0};
  if (llb_abort_request_encode_buf(&ar, &buf) == LLB_STATUS_OK) {
    (void)bus_publish(bus, subject, buf.data, buf.len, NULL);
    (void)bus_flush(bus, 1000);
  }
  llb_buf_free(&buf);
}

/* A random sampling seed (getrandom; the clock if it fails). */
static uint64_t client_random_seed(void) {
  uint64_t seed;
  if (getrandom(&seed, sizeof seed, 0) == (ssize_t)sizeof seed) return seed;
  return (uint64_t)llb_wall_ns() ^ ((uint64_t)getpid() << 32);
}

/* State of one streamed request. */
struct stream {
  const struct client_options *o;
  FILE *out;
  struct text_buf texts[CLIENT_MAX_N];
  char request_id[256];
  bool finished;
  bool no_responders; /* nobody took the request: it may be sent again */
  bool state_lost;    /* the output processor lost its end (STATE_LOST): it may be sent again */
  /* After a resend: bytes of each completion the new request repeats before it says anything
   * new (it is seeded, so it repeats the same tokens); a DELTA stream skips them. */
  size_t skip[CLIENT_MAX_N];
};

/* Handles one RequestOutput: prints, accumulates, and reports an error it carries. */
static llb_status on_output(struct stream *s, const struct llb_request_output *ro) {
  if (!s->request_id[0]) snprintf(s->request_id, sizeof s->request_id, "%s", ro->request_id.data);
  if (s->o->json) {
    json_t *j = request_output_json(ro);
    char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (line) fprintf(s->out, "%s\n", line);
    free(line);
    json_decref(j);
    fflush(s->out);
  }
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    const struct llb_completion_output *c = &ro->outputs[i];
    if (c->index < 0 || c->index >= CLIENT_MAX_N) continue;
    struct text_buf *t = &s->texts[c->index];
    struct llb_str text = c->text;
    /* DELTA appends; CUMULATIVE / FINAL_ONLY outputs hold everything so far. A DELTA output
     * marked resync repeats the completion from its start (the output processor restarted):
     * only the text beyond what is here is new. */
    if (s->o->sp.output_kind != LLB_OUTPUT_KIND_DELTA) t->len = 0;
    else if (c->resync) {
      const size_t have = t->len < text.len ? t->len : text.len;
      text.data += have;
      text.len -= have;
      s->skip[c->index] = 0;
    } else if (s->skip[c->index]) {
      const size_t repeat = s->skip[c->index] < text.len ? s->skip[c->index] : text.len;
      text.data += repeat;
      text.len -= repeat;
      s->skip[c->index] -= repeat;
    }
    if (!text_append(t, text.data, text.len)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "answer text");
    if (!s->o->json && s->o->sp.n == 1 && s->o->sp.output_kind == LLB_OUTPUT_KIND_DELTA && text.len) {
      fwrite(text.data, 1, text.len, s->out);
      fflush(s->out);
    }
  }
  s->finished = ro->finished;
  s->state_lost = ro->error.code == LLB_STATUS_STATE_LOST;
  if (ro->error.code != 0) {
    return LLB_ERRF((llb_status)ro->error.code, "%s%s%.*s", ro->error.field.len ? ro->error.field.data : "",
                    ro->error.field.len ? ": " : "", (int)ro->error.message.len, ro->error.message.data);
  }
  return LLB_STATUS_OK;
}

/* Prints what was held back: the completions of n > 1, the final newline. */
static void print_final(struct stream *s) {
  if (s->o->json) return;
  int32_t n = s->o->sp.n;
  if (n == 1 && s->o->sp.output_kind == LLB_OUTPUT_KIND_DELTA) {
    if (s->texts[0].len && s->texts[0].data[s->texts[0].len - 1] != '\n') fputc('\n', s->out);
  } else {
    for (int32_t i = 0; i < n && i < CLIENT_MAX_N; i++) {
      if (n > 1) fprintf(s->out, "--- completion %d ---\n", i);
      const struct text_buf *t = &s->texts[i];
      fprintf(s->out, "%s%s", t->data ? t->data : "", t->len && t->data[t->len - 1] == '\n' ? "" : "\n");
    }
  }
  fflush(s->out);
}

/* Reads RequestOutputs from `sub` until one is finished. */
static llb_status stream_answer(struct bus *bus, struct bus_sub *sub, struct stream *s, client_idle_fn idle,
                                void *idle_user) {
  const struct client_options *o = s->o;
  int64_t deadline = llb_now_ns() + o->timeout_s * 1000000000LL;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  llb_status st = LLB_STATUS_OK;
  while (!s->finished) {
    if (client_interrupted() || (idle && idle(idle_user))) {
      send_abort(bus, o, s->request_id);
      st = LLB_ERRF(LLB_STATUS_ABORTED, "interrupted%s%s", s->request_id[0] ? "; aborted request " : "",
                    s->request_id);
      break;
    }
    struct bus_msg *m = NULL;
    st = bus_sub_next_msg(sub, CLIENT_WAIT_SLICE_MS, &m);
    if (st == LLB_STATUS_TIMEOUT) {
      st = LLB_STATUS_OK;
      if (llb_now_ns() < deadline) continue;
      send_abort(bus, o, s->request_id);
      st = LLB_ERRF(LLB_STATUS_TIMEOUT, "no answer from the engine within %" PRId64 " s", o->timeout_s);
      break;
    }
    /* NATS "no responders" (the bus reports NOT_FOUND; an empty payload on older servers):
     * nobody subscribes the generate subject. */
    if (st == LLB_STATUS_NOT_FOUND || (st == LLB_STATUS_OK && m->len == 0)) {
      bus_msg_destroy(m);
      s->no_responders = true;
      st = LLB_ERRF(LLB_STATUS_NOT_FOUND, "no input processor listens on %s.generate.%s (is `llmbus serve` running?)",
                    bus_prefix(bus), o->tenant ? o->tenant : BUS_DEFAULT_TENANT);
      break;
    }
    if (st != LLB_STATUS_OK) break;
    deadline = llb_now_ns() + o->timeout_s * 1000000000LL;
    struct llb_request_output ro;
    llb_arena_reset(&arena);
    st = llb_request_output_decode(m->data, m->len, &arena, &ro);
    bus_msg_destroy(m);
    if (st != LLB_STATUS_OK) break;
    st = on_output(s, &ro);
    if (st != LLB_STATUS_OK) break;
  }
  llb_arena_destroy(&arena);
  return st;
}

llb_status client_generate(struct bus *bus, const struct client_options *o, const struct client_prompt *p,
                           FILE *out, client_idle_fn idle, void *idle_user, char **answer_out) {
  if (answer_out) *answer_out = NULL;
  if (!p || (!p->prompt == !p->messages)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "one of prompt or messages");
  char inbox[BUS_SUBJECT_MAX];
  struct bus_sub *sub = NULL;
  llb_status st = bus_new_inbox(bus, inbox, sizeof inbox);
  if (st == LLB_STATUS_OK) st = bus_subscribe_sync(bus, inbox, &sub);
  if (st != LLB_STATUS_OK) return st;
  /* A request sent again must repeat the same tokens: seed it here when the user did not. */
  struct client_options seeded = *o;
  if (!seeded.sp.has_seed) {
    seeded.sp.seed = client_random_seed();
    seeded.sp.has_seed = true;
  }
  o = &seeded;
  struct stream s = {.o = o, .out = out};
  /* No input processor took it (every replica restarting, or the nats-server just back):
   * send it again, 50 ms doubling to 1 s, CLIENT_NO_RESPONDER_TRIES times (about 5 s). An
   * output processor that restarted after the engine finished the request cannot rebuild its
   * end and says STATE_LOST: send it again at once, CLIENT_STATE_LOST_TRIES times, skipping
   * the text already printed (as the api server does, api_server_resend_state_lost). */
  for (int tries = 0, lost_tries = 0;; tries++) {
    s.no_responders = s.state_lost = false;
    st = send_request(bus, o, p, inbox);
    if (st == LLB_STATUS_OK) st = stream_answer(bus, sub, &s, idle, idle_user);
    if (s.state_lost && lost_tries < CLIENT_STATE_LOST_TRIES && !client_interrupted()) {
      LLB_LOG_INFO("generate_resent", "try=%d reason=state_lost request_id=%s", ++lost_tries, s.request_id);
      for (int32_t i = 0; i < CLIENT_MAX_N; i++) s.skip[i] = s.texts[i].len;
      s.finished = false;
      s.request_id[0] = '\0';
      tries--; /* not a no-responders try */
      continue;
    }
    if (!s.no_responders || tries >= CLIENT_NO_RESPONDER_TRIES || client_interrupted()) break;
    int64_t ms = 50LL << tries;
    if (ms > 1000) ms = 1000;
    LLB_LOG_INFO("generate_resent", "try=%d in_ms=%lld reason=no_responders", tries + 1, (long long)ms);
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  (void)bus_unsubscribe(sub);
  if (st == LLB_STATUS_OK) print_final(&s);
  else if (!o->json && o->sp.n == 1 && s.texts[0].len) fputc('\n', out); /* end the partial line */
  if (st == LLB_STATUS_OK && answer_out) {
    *answer_out = s.texts[0].data ? s.texts[0].data : strdup("");
    s.texts[0].data = NULL;
    if (!*answer_out) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "answer text");
  }
  for (int32_t i = 0; i < CLIENT_MAX_N; i++) free(s.texts[i].data);
  return st;
}

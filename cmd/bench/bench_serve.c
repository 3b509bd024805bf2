/* `llmbus-bench serve`: a serving benchmark against any OpenAI-compatible endpoint, after
 * vLLM's benchmarks/benchmark_serving.py (`vllm bench serve`): a dataset of prompts, sent
 * as streamed /v1/completions at a Poisson rate (or all at once) under a concurrency cap;
 * TTFT, TPOT, ITL and end-to-end latency per request; a result table or JSON. When the
 * server is on this machine it also reports the resident memory of its process tree (for
 * llmbus: the supervisor, every actor and the nats-server it started), sampled during the
 * run.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/bench/bench.h"
#include "cmd/bench/bench_http.h"
#include "cmd/flags/flags.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#define THREAD_STACK (256 * 1024)
#define MEM_SAMPLE_NS 500000000LL
#define MIB (1024.0 * 1024.0)

struct serve_opts {
  const char *api_key;
  const char *base_url, *endpoint, *model_path, *served_name, *dataset, *dataset_path, *result_file, *label;
  int64_t num_prompts;
  int32_t input_len, output_len, prefix_len, num_prefixes, warmup;
  double range_ratio, request_rate, temperature, timeout_s;
  int64_t max_concurrency;
  uint64_t seed;
  bool ignore_eos, prompt_ids, progress, json, memory;
  int64_t stack_pid;
  const char *response_format_arg; /* --response-format: json_object or a schema file */
  char *response_format;           /* the "response_format" object sent (JSON text), or NULL */
  /* vLLM spellings: --host/--port (when no --base-url), --backend, --save-result */
  const char *host, *port, *backend, *result_dir;
  const char *spec_metrics_url; /* --spec-metrics-url: the scheduler's metrics port */
  bool save_result, endpoint_given;
  int32_t random_prefix_len; /* --random-prefix-len: the random dataset's shared prefix */
  const char *lora_mix;      /* --lora-mix: comma-separated models (LoRA adapters, the base's name) */
  char lora_buf[2048];       /* lora_mix with its commas cut */
  const char *lora_names[64]; /* [num_lora_names] into lora_buf: request i's model is [i % num] */
  int num_lora_names;
  char base_url_buf[300], result_path[4096];
};

struct run {
  const struct serve_opts *o;
  struct bench_target target;
  char model_name[256];
  struct bench_dataset ds;
  struct bench_dataset warm; /* warm-up prompts: their own seed, so no prompt of ds is cached */
  struct bench_result *results; /* [num] */
  double *arrivals;             /* [num] */
  sem_t slots;
  atomic_int_fast64_t completed, failed;
  atomic_bool finished;
  pid_t stack_root;
  struct bench_mem mem_last, mem_peak;
  int64_t t_start;
  double load_start, load_end; /* 1-minute load average before and after the run */
  struct rusage ru_start, ru_end; /* this process over the run (not its start-up before it) */
  bool have_spec;               /* spec_* read before and after the run */
  double spec_before[3], spec_after[3]; /* drafts, draft tokens, accepted tokens */
};

static const char *const spec_series[3] = {"llmbus:spec_decode_num_drafts_total",
                                           "llmbus:spec_decode_num_draft_tokens_total",
                                           "llmbus:spec_decode_num_accepted_tokens_total"};

/* The scheduler's speculative-decoding counters (--spec-metrics-url); false when unreadable. */
static bool read_spec_counters(const char *url, double out[3]) {
  struct bench_target t;
  int status = 0;
  char *body = NULL;
  llb_status st = bench_target_parse(url, &t);
  if (!st) st = bench_http_get(&t, "/metrics", 10.0, &status, &body);
  if (st || status != 200) {
    free(body);
    fprintf(stderr, "llmbus-bench serve: cannot read %s/metrics (status %d): %s\n", url, status,
            st ? llb_err_last() : "not 200");
    return false;
  }
  bool ok = true;
  for (int k = 0; k < 3; k++) ok &= bench_prom_value(body, spec_series[k], &out[k]);
  free(body);
  if (!ok) fprintf(stderr, "llmbus-bench serve: %s/metrics has no llmbus:spec_decode_* counters\n", url);
  return ok;
}

/* --lora-mix into o->lora_names; 2 (usage) when empty, too long or with an empty name. */
static int lora_mix_split(struct serve_opts *o) {
  if (strlen(o->lora_mix) >= sizeof o->lora_buf) {
    fprintf(stderr, "llmbus-bench serve: --lora-mix longer than %zu bytes\n", sizeof o->lora_buf - 1);
    return 2;
  }
  snprintf(o->lora_buf, sizeof o->lora_buf, "%s", o->lora_mix);
  for (char *s = o->lora_buf, *comma; s; s = comma ? comma + 1 : NULL) {
    if ((comma = strchr(s, ','))) *comma = '\0';
    if (!*s || o->num_lora_names == (int)(sizeof o->lora_names / sizeof o->lora_names[0])) {
      fprintf(stderr, "llmbus-bench serve: --lora-mix: 1..64 non-empty names, comma-separated\n");
      return 2;
    }
    o->lora_names[o->num_lora_names++] = s;
  }
  return 0;
}

/* --response-format: "json_object", or a JSON Schema file sent as json_schema. 0 ok, 2 error. */
static int response_format_load(struct serve_opts *o) {
  json_t *rf;
  if (!strcmp(o->response_format_arg, "json_object")) {
    rf = json_pack("{s:s}", "type", "json_object");
  } else {
    json_error_t e;
    json_t *schema = json_load_file(o->response_format_arg, 0, &e);
    if (!schema) {
      fprintf(stderr, "llmbus-bench serve: --response-format %s: %s\n", o->response_format_arg, e.text);
      return 2;
    }
    rf = json_pack("{s:s, s:{s:s, s:o}}", "type", "json_schema", "json_schema", "name", "bench", "schema", schema);
  }
  o->response_format = rf ? json_dumps(rf, JSON_COMPACT) : NULL;
  json_decref(rf);
  return o->response_format ? 0 : 2;
}

/* --model as vLLM means it (the model's name, which also names its tokenizer) and as we did (a
 * GGUF file): a path to an existing file is the tokenizer, anything else the served name. */
static void model_arg(struct serve_opts *o, const char *v) {
  struct stat sb;
  if (stat(v, &sb) == 0 && S_ISREG(sb.st_mode)) o->model_path = v;
  else o->served_name = v;
}

/* The vLLM flags that combine: --host/--port into the base URL (--base-url wins, as in vLLM),
 * --backend into the endpoint (an explicit --endpoint wins), --save-result with --result-dir
 * and --result-filename into the result file. 0 ok, 2 usage error (printed). */
static int resolve_vllm_flags(struct serve_opts *o) {
  if ((o->host || o->port) && !strcmp(o->base_url, "http://127.0.0.1:8000")) {
    if (!bench_base_url_of(o->host, o->port, o->base_url_buf, sizeof o->base_url_buf)) {
      fprintf(stderr, "llmbus-bench serve: bad --host/--port ('%s', '%s')\n", o->host ? o->host : "",
              o->port ? o->port : "");
      return 2;
    }
    o->base_url = o->base_url_buf;
  }
  if (o->backend) {
    const char *ep = bench_backend_endpoint(o->backend);
    if (!ep) {
      fprintf(stderr, "llmbus-bench serve: --backend %s is not an OpenAI-compatible one (vllm, openai, openai-chat)\n",
              o->backend);
      return 2;
    }
    if (!o->endpoint_given) o->endpoint = ep;
  }
  if (o->save_result || o->result_dir) {
    const char *name = o->result_file ? o->result_file : "llmbus-bench-serve.json";
    int n = o->result_dir ? snprintf(o->result_path, sizeof o->result_path, "%s/%s", o->result_dir, name)
                          : snprintf(o->result_path, sizeof o->result_path, "%s", name);
    if (n <= 0 || (size_t)n >= sizeof o->result_path) {
      fprintf(stderr, "llmbus-bench serve: result path too long\n");
      return 2;
    }
    o->result_file = o->result_path;
  }
  return 0;
}

static llb_status set_model(const struct flag *f, const char *v) {
  model_arg(f->target, v);
  return LLB_STATUS_OK;
}

static llb_status set_endpoint(const struct flag *f, const char *v) {
  struct serve_opts *o = f->target;
  o->endpoint = v;
  o->endpoint_given = true;
  return LLB_STATUS_OK;
}

static llb_status set_rate(const struct flag *f, const char *v) {
  if (!strcmp(v, "inf")) return *(double *)f->target = INFINITY, LLB_STATUS_OK;
  return flags_parse_double(v, 1e-6, 1e9, f->target);
}

static llb_status set_seed(const struct flag *f, const char *v) {
  int64_t n;
  llb_status st = flags_parse_int64(v, 0, INT64_MAX, &n);
  if (!st) *(uint64_t *)f->target = (uint64_t)n;
  return st;
}

static llb_status set_false(const struct flag *f, const char *v) { /* --no-progress, --no-memory */
  (void)v;
  *(bool *)f->target = false;
  return LLB_STATUS_OK;
}

static const char serve_usage[] =
    "usage: llmbus-bench serve [flags]\n"
    "Streams /v1/completions requests at an OpenAI-compatible server and reports request throughput,\n"
    "output tokens/s, TTFT, TPOT, ITL and end-to-end latency (mean, median, p99). vLLM's `vllm bench\n"
    "serve` spellings work too (the aliases below; --host H --port P when no --base-url; --model NAME,\n"
    "or a GGUF file path: the tokenizer).\n";

/* FLAGS_CONTINUE, 0 after --help, 2 on a usage error. `args` keeps the values. */
static int parse(int argc, char **argv, struct serve_opts *o, struct flag_args *args) {
  *o = (struct serve_opts){.base_url = "http://127.0.0.1:8000", .endpoint = "/v1/completions",
                           .dataset = "random", .num_prompts = 100, .input_len = 128, .output_len = 128,
                           .prefix_len = 256, .warmup = 1, .request_rate = INFINITY, .timeout_s = 600,
                           .progress = true, .memory = true, .stack_pid = -1, .label = ""};
  const struct flag t[] = {
      {.name = "base-url", .kind = FLAG_KIND_STRING, .target = &o->base_url, .metavar = "URL", .help = "server"},
      {.name = "endpoint", .kind = FLAG_KIND_STRING, .target = o, .metavar = "PATH", .set = set_endpoint,
       .help = "default /v1/completions; /v1/chat/completions sends messages"},
      {.name = "model", .aliases = "tokenizer", .kind = FLAG_KIND_STRING, .target = o, .metavar = "PATH",
       .set = set_model, .help = "GGUF whose tokenizer makes exact-length prompts (else words); a name that is no "
                                 "file is the served model name"},
      {.name = "served-model-name", .kind = FLAG_KIND_STRING, .target = &o->served_name, .metavar = "N",
       .help = "the request's \"model\" (default: the first of GET /v1/models)"},
      {.name = "lora-mix", .kind = FLAG_KIND_STRING, .target = &o->lora_mix, .metavar = "A,B,..",
       .help = "request i names model i mod n of this list: LoRA adapters (llmbus serve --lora-modules) and the "
               "base model's name, round robin (vLLM's --lora-modules picks at random)"},
      {.name = "host", .kind = FLAG_KIND_STRING, .target = &o->host, .metavar = "H", .help = "vLLM's: server host"},
      {.name = "port", .kind = FLAG_KIND_STRING, .target = &o->port, .metavar = "P", .help = "vLLM's: server port"},
      {.name = "backend", .kind = FLAG_KIND_STRING, .target = &o->backend, .metavar = "B",
       .help = "vLLM's: vllm | openai | openai-chat (the endpoint)"},
      {.name = "dataset", .aliases = "dataset-name", .kind = FLAG_KIND_STRING, .target = &o->dataset, .metavar = "KIND",
       .help = "random | shared-prefix | jsonl"},
      {.name = "dataset-path", .kind = FLAG_KIND_STRING, .target = &o->dataset_path, .metavar = "FILE",
       .help = "JSONL: {\"prompt\": ..., \"output_len\": N} per line"},
      {.name = "num-prompts", .kind = FLAG_KIND_INT64, .target = &o->num_prompts, .metavar = "N", .min = 1, .max = 1e7,
       .help = "prompts"},
      {.name = "input-len", .aliases = "random-input-len", .kind = FLAG_KIND_INT32, .target = &o->input_len,
       .metavar = "N", .min = 0, .max = 1e6, .help = "random prompt tokens"},
      {.name = "output-len", .aliases = "random-output-len", .kind = FLAG_KIND_INT32, .target = &o->output_len,
       .metavar = "N", .min = 1, .max = 1e6, .help = "max_tokens"},
      {.name = "range-ratio", .aliases = "random-range-ratio", .kind = FLAG_KIND_DOUBLE, .target = &o->range_ratio,
       .metavar = "R", .min = 0, .max = 0.999, .help = "lengths uniform in [len*(1-R), len*(1+R)]"},
      {.name = "random-prefix-len", .kind = FLAG_KIND_INT32, .target = &o->random_prefix_len, .metavar = "N",
       .min = 0, .max = 1e6, .help = "random: tokens of a prefix every prompt shares"},
      {.name = "prefix-len", .kind = FLAG_KIND_INT32, .target = &o->prefix_len, .metavar = "N", .min = 0, .max = 1e6,
       .help = "shared-prefix: tokens of the common system prompt"},
      {.name = "num-prefixes", .kind = FLAG_KIND_INT32, .target = &o->num_prefixes, .metavar = "G", .min = 1,
       .max = 1e5, .help = "shared-prefix: G distinct prefixes, request i gets prefix i % G (default 1)"},
      {.name = "seed", .kind = FLAG_KIND_INT64, .target = &o->seed, .metavar = "S", .set = set_seed,
       .help = "dataset and arrival seed (default 0)"},
      {.name = "request-rate", .kind = FLAG_KIND_DOUBLE, .target = &o->request_rate, .metavar = "R", .set = set_rate,
       .help = "Poisson arrivals, requests/s (default inf: all at once)"},
      {.name = "max-concurrency", .kind = FLAG_KIND_INT64, .target = &o->max_concurrency, .metavar = "C", .min = 1,
       .max = 1e6, .help = "requests in flight at most (default 0: no cap)"},
      {.name = "ignore-eos", .kind = FLAG_KIND_BOOL, .target = &o->ignore_eos,
       .help = "generate output-len tokens: sends ignore_eos and min_tokens"},
      {.name = "temperature", .kind = FLAG_KIND_DOUBLE, .target = &o->temperature, .metavar = "T", .min = 0,
       .max = 100, .help = "sampling temperature"},
      {.name = "response-format", .kind = FLAG_KIND_STRING, .target = &o->response_format_arg, .metavar = "F",
       .help = "structured output: json_object, or FILE.json (a JSON Schema, sent as json_schema)"},
      {.name = "prompt-ids", .kind = FLAG_KIND_BOOL, .target = &o->prompt_ids,
       .help = "send prompts as token id arrays (needs --model)"},
      {.name = "warmup", .kind = FLAG_KIND_INT32, .target = &o->warmup, .metavar = "N", .min = 0, .max = 1000,
       .help = "untimed requests first, prompts of their own"},
      {.name = "timeout-s", .kind = FLAG_KIND_DOUBLE, .target = &o->timeout_s, .metavar = "S", .min = 0.1,
       .max = 86400, .help = "longest silence of a stream"},
      {.name = "stack-pid", .kind = FLAG_KIND_INT64, .target = &o->stack_pid, .metavar = "PID", .min = 1,
       .max = 4194304, .help = "process tree whose memory to report (default: the port's listener and its "
                               "llmbus* ancestors)"},
      {.name = "no-memory", .kind = FLAG_KIND_BOOL, .target = &o->memory, .set = set_false, .help = "do not read /proc"},
      {.name = "no-progress", .aliases = "disable-tqdm", .kind = FLAG_KIND_BOOL, .target = &o->progress,
       .set = set_false, .help = "no progress bar"},
      {.name = "json", .kind = FLAG_KIND_BOOL, .target = &o->json, .help = "the result as one JSON object"},
      {.name = "save-result", .kind = FLAG_KIND_BOOL, .target = &o->save_result,
       .help = "vLLM's: write the JSON result (to --result-dir/--result-file)"},
      {.name = "result-dir", .kind = FLAG_KIND_STRING, .target = &o->result_dir, .metavar = "DIR",
       .help = "vLLM's: where --save-result writes"},
      {.name = "result-file", .aliases = "result-filename", .kind = FLAG_KIND_STRING, .target = &o->result_file,
       .metavar = "FILE", .help = "also write the JSON result there"},
      {.name = "label", .kind = FLAG_KIND_STRING, .target = &o->label, .metavar = "TEXT",
       .help = "a name for this run in the output"},
      {.name = "spec-metrics-url", .kind = FLAG_KIND_STRING, .target = &o->spec_metrics_url, .metavar = "URL",
       .help = "the engine scheduler's metrics port: reports the speculative-decoding acceptance of the run"},
      {.name = "api-key", .kind = FLAG_KIND_STRING, .target = &o->api_key, .metavar = "KEY",
       .help = "sent as `Authorization: Bearer KEY` (default $OPENAI_API_KEY)"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {.program = "llmbus-bench serve", .usage = serve_usage, .sections = &sec,
                                   .num_sections = 1, .config = true, .max_positional = 0};
  int rc = flags_parse(&cmd, argc, argv, args);
  if (rc != FLAGS_CONTINUE) return rc;
  if (resolve_vllm_flags(o) != 0) return 2;
  if (strcmp(o->dataset, "random") && strcmp(o->dataset, "shared-prefix") && strcmp(o->dataset, "jsonl")) {
    fprintf(stderr, "llmbus-bench serve: --dataset is random, shared-prefix or jsonl\n");
    return 2;
  }
  if (!strcmp(o->dataset, "jsonl") && !o->dataset_path) {
    fprintf(stderr, "llmbus-bench serve: --dataset jsonl needs --dataset-path\n");
    return 2;
  }
  if (o->prompt_ids && bench_endpoint_is_chat(o->endpoint)) {
    fprintf(stderr, "llmbus-bench serve: --prompt-ids sends token ids, which a chat endpoint cannot take\n");
    return 2;
  }
  if (o->prompt_ids && !o->model_path) {
    fprintf(stderr, "llmbus-bench serve: --prompt-ids needs --model (the tokenizer)\n");
    return 2;
  }
  if (o->lora_mix && (rc = lora_mix_split(o)) != 0) return rc;
  rc = o->response_format_arg ? response_format_load(o) : 0;
  return rc == 0 ? FLAGS_CONTINUE : rc;
}

/* The JSON body of prompt p (bench_request_body), request `index` of the run. malloc'd. */
static char *request_body(const struct run *r, const struct bench_prompt *p, int64_t index, int32_t max_tokens) {
  const struct serve_opts *o = r->o;
  const char *model = o->num_lora_names ? o->lora_names[index % o->num_lora_names] : r->model_name;
  struct bench_request_spec spec = {.model = model, .text = p->text ? p->text : "",
                                    .max_tokens = max_tokens, .temperature = o->temperature,
                                    .ignore_eos = o->ignore_eos, .response_format = o->response_format};
  if (o->prompt_ids && p->ids) {
    spec.ids = p->ids;
    spec.num_ids = p->num_ids;
    spec.text = NULL;
  }
  return bench_request_body(o->endpoint, &spec);
}

struct job {
  struct run *r;
  int64_t index;
};

static void *request_thread(void *arg) {
  struct job *j = arg;
  struct run *r = j->r;
  const struct bench_prompt *p = &r->ds.prompts[j->index];
  struct bench_result *res = &r->results[j->index];
  char *body = request_body(r, p, j->index, p->output_len);
  if (!body) {
    memset(res, 0, sizeof *res);
    snprintf(res->error, sizeof res->error, "cannot build the request body");
  } else {
    bench_http_stream(&r->target, r->o->endpoint, body, strlen(body), r->o->timeout_s, res);
  }
  free(body);
  if (res->ok) atomic_fetch_add(&r->completed, 1);
  else atomic_fetch_add(&r->failed, 1);
  sem_post(&r->slots);
  free(j);
  return NULL;
}

static void sample_memory(struct run *r) {
  if (r->stack_root <= 0) return;
  struct bench_mem m;
  if (bench_tree_memory(r->stack_root, &m) != LLB_STATUS_OK) return;
  r->mem_last = m;
  if (m.unique_bytes > r->mem_peak.unique_bytes) r->mem_peak = m;
}

static void draw_progress(struct run *r, bool final) {
  int64_t done = atomic_load(&r->completed) + atomic_load(&r->failed), n = r->ds.num;
  const int width = 40;
  int fill = n ? (int)(width * done / n) : width;
  double el = (double)(llb_now_ns() - r->t_start) / 1e9;
  fprintf(stderr, "\r[%.*s%*s] %lld/%lld  %.1fs%s", fill, "########################################", width - fill, "",
          (long long)done, (long long)n, el, final ? "\n" : "");
  fflush(stderr);
}

static void *monitor_thread(void *arg) {
  struct run *r = arg;
  bool tty = isatty(2);
  int64_t last_mem = 0, last_line = -1;
  while (!atomic_load(&r->finished)) {
    int64_t now = llb_now_ns();
    if (r->o->memory && now - last_mem >= MEM_SAMPLE_NS) {
      sample_memory(r);
      last_mem = now;
    }
    if (r->o->progress) {
      int64_t done = atomic_load(&r->completed) + atomic_load(&r->failed);
      int64_t decile = r->ds.num ? done * 10 / r->ds.num : 0;
      if (tty) draw_progress(r, false);
      else if (decile != last_line) { /* a line per tenth when not a terminal */
        draw_progress(r, true);
        last_line = decile;
      }
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* The model id: --served-model-name, else the first of GET /v1/models. */
static llb_status resolve_model(struct run *r) {
  if (r->o->served_name) {
    snprintf(r->model_name, sizeof r->model_name, "%s", r->o->served_name);
    return LLB_STATUS_OK;
  }
  int status = 0;
  char *body = NULL;
  llb_status st = bench_http_get(&r->target, "/v1/models", 30, &status, &body);
  if (st != LLB_STATUS_OK) return st;
  json_error_t jerr;
  json_t *j = json_loads(body, 0, &jerr);
  json_t *id = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
  if (status == 200 && json_is_string(id)) snprintf(r->model_name, sizeof r->model_name, "%s", json_string_value(id));
  json_decref(j);
  free(body);
  if (!r->model_name[0]) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "GET /v1/models gave no model id (HTTP %d)", status);
  return LLB_STATUS_OK;
}

static llb_status load_dataset(struct run *r) {
  const struct serve_opts *o = r->o;
  struct gguf_file *g = NULL;
  struct tokenizer *tok = NULL;
  llb_status st = LLB_STATUS_OK;
  if (o->model_path) {
    st = gguf_open(o->model_path, &g);
    if (st == LLB_STATUS_OK) st = tokenizer_load(g, &tok);
    if (st != LLB_STATUS_OK) goto done;
  }
  if (!strcmp(o->dataset, "jsonl")) {
    st = bench_dataset_jsonl(o->dataset_path, tok, o->output_len, o->num_prompts, &r->ds);
  } else {
    struct bench_random_spec spec = {.num_prompts = o->num_prompts, .input_len = o->input_len,
                                     .output_len = o->output_len, .range_ratio = o->range_ratio, .seed = o->seed,
                                     .prefix_len = !strcmp(o->dataset, "shared-prefix") ? o->prefix_len
                                                                                         : o->random_prefix_len,
                                     .num_prefixes = o->num_prefixes};
    st = bench_dataset_random(tok, &spec, &r->ds);
  }
  if (st == LLB_STATUS_OK && o->warmup > 0) {
    struct bench_random_spec ws = {.num_prompts = o->warmup, .input_len = 16, .output_len = 8,
                                   .seed = o->seed ^ 0x5eed5eed5eedULL};
    st = bench_dataset_random(tok, &ws, &r->warm);
  }
done:
  tokenizer_destroy(tok);
  gguf_close(g);
  return st;
}

struct summary {
  int64_t completed, failed, in_tokens, out_tokens;
  double duration;
  struct bench_dist ttft, tpot, itl, e2el;
};

static void summarize(struct run *r, struct summary *s) {
  memset(s, 0, sizeof *s);
  int64_t n = r->ds.num;
  size_t n_itl = 0;
  for (int64_t i = 0; i < n; i++) n_itl += r->results[i].num_itl;
  double *ttft = calloc((size_t)n + 1, sizeof *ttft), *tpot = calloc((size_t)n + 1, sizeof *tpot);
  double *e2el = calloc((size_t)n + 1, sizeof *e2el), *itl = calloc(n_itl + 1, sizeof *itl);
  size_t n_tpot = 0, k = 0;
  for (int64_t i = 0; i < n; i++) {
    const struct bench_result *x = &r->results[i];
    if (!x->ok) {
      s->failed++;
      continue;
    }
    s->in_tokens += x->prompt_tokens >= 0 ? x->prompt_tokens : r->ds.prompts[i].input_len;
    s->out_tokens += x->output_tokens;
    if (ttft) ttft[s->completed] = x->ttft * 1e3;
    if (e2el) e2el[s->completed] = x->latency * 1e3;
    if (tpot && x->output_tokens > 1) tpot[n_tpot++] = (x->latency - x->ttft) / (double)(x->output_tokens - 1) * 1e3;
    for (size_t j = 0; itl && j < x->num_itl; j++) itl[k++] = x->itl[j] * 1e3;
    s->completed++;
  }
  if (ttft) bench_dist_of(ttft, (size_t)s->completed, &s->ttft);
  if (e2el) bench_dist_of(e2el, (size_t)s->completed, &s->e2el);
  if (tpot) bench_dist_of(tpot, n_tpot, &s->tpot);
  if (itl) bench_dist_of(itl, k, &s->itl);
  free(ttft);
  free(tpot);
  free(e2el);
  free(itl);
}

static void add_dist(json_t *j, const char *name, const struct bench_dist *d) {
  char key[64];
  snprintf(key, sizeof key, "mean_%s_ms", name);
  json_object_set_new(j, key, json_real(d->mean));
  snprintf(key, sizeof key, "median_%s_ms", name);
  json_object_set_new(j, key, json_real(d->median));
  snprintf(key, sizeof key, "p99_%s_ms", name);
  json_object_set_new(j, key, json_real(d->p99));
  snprintf(key, sizeof key, "std_%s_ms", name);
  json_object_set_new(j, key, json_real(d->std));
}

/* vLLM's per-request fields of a saved result (`vllm bench serve --save-detailed`): ttfts and
 * itls (lists per request) in seconds, output_lens, for the completed requests in order; what
 * ops/bench/plot.py draws the distributions from. */
static void add_samples(json_t *j, const struct run *r) {
  json_t *ttfts = json_array(), *itls = json_array(), *lens = json_array();
  for (int64_t i = 0; i < r->ds.num; i++) {
    const struct bench_result *x = &r->results[i];
    if (!x->ok) continue;
    json_t *gaps = json_array();
    for (size_t k = 0; k < x->num_itl; k++) json_array_append_new(gaps, json_real(x->itl[k]));
    json_array_append_new(ttfts, json_real(x->ttft));
    json_array_append_new(itls, gaps);
    json_array_append_new(lens, json_integer(x->output_tokens));
  }
  json_object_set_new(j, "ttfts", ttfts);
  json_object_set_new(j, "itls", itls);
  json_object_set_new(j, "output_lens", lens);
}

/* User + system CPU seconds of a getrusage result. */
static double rusage_cpu_s(const struct rusage *u) {
  return (double)(u->ru_utime.tv_sec + u->ru_stime.tv_sec) + (double)(u->ru_utime.tv_usec + u->ru_stime.tv_usec) / 1e6;
}

static json_t *result_json(const struct run *r, const struct summary *s) {
  const struct serve_opts *o = r->o;
  double dur = s->duration > 0 ? s->duration : 1e-9;
  json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "label", o->label,
                        "base_url", o->base_url, "model_id", r->model_name, "dataset", o->dataset, "num_prompts",
                        (json_int_t)r->ds.num, "completed", (json_int_t)s->completed, "failed",
                        (json_int_t)s->failed, "total_input_tokens", (json_int_t)s->in_tokens,
                        "total_output_tokens", (json_int_t)s->out_tokens, "duration", s->duration,
                        "request_throughput", (double)s->completed / dur, "output_throughput",
                        (double)s->out_tokens / dur, "total_token_throughput",
                        (double)(s->in_tokens + s->out_tokens) / dur);
  json_object_set_new(j, "request_rate", isinf(o->request_rate) ? json_string("inf") : json_real(o->request_rate));
  json_object_set_new(j, "max_concurrency", o->max_concurrency ? json_integer(o->max_concurrency) : json_null());
  json_object_set_new(j, "response_format", o->response_format ? json_loads(o->response_format, 0, NULL) : json_null());
  json_object_set_new(j, "lora_mix", o->lora_mix ? json_string(o->lora_mix) : json_null());
  json_object_set_new(j, "loadavg_1m_start", json_real(r->load_start));
  json_object_set_new(j, "loadavg_1m_end", json_real(r->load_end));
  json_object_set_new(j, "client_cpu_s", json_real(rusage_cpu_s(&r->ru_end) - rusage_cpu_s(&r->ru_start)));
  json_object_set_new(j, "client_voluntary_ctxt_switches",
                      json_integer((json_int_t)(r->ru_end.ru_nvcsw - r->ru_start.ru_nvcsw)));
  add_dist(j, "ttft", &s->ttft);
  add_dist(j, "tpot", &s->tpot);
  add_dist(j, "itl", &s->itl);
  add_dist(j, "e2el", &s->e2el);
  if (r->mem_peak.num_procs > 0) {
    json_object_set_new(j, "stack_root_comm", json_string(r->mem_peak.root_comm));
    json_object_set_new(j, "stack_procs", json_integer(r->mem_peak.num_procs));
    json_object_set_new(j, "stack_peak_mib", json_real((double)r->mem_peak.unique_bytes / MIB));
    json_object_set_new(j, "stack_peak_pss_mib", json_real((double)r->mem_peak.pss_bytes / MIB));
    json_object_set_new(j, "stack_peak_rss_mib", json_real((double)r->mem_peak.rss_bytes / MIB));
    json_object_set_new(j, "stack_end_mib", json_real((double)r->mem_last.unique_bytes / MIB));
  }
  struct stat sb;
  if (o->model_path && stat(o->model_path, &sb) == 0)
    json_object_set_new(j, "model_file_mib", json_real((double)sb.st_size / MIB));
  if (r->have_spec) {
    const double d = r->spec_after[0] - r->spec_before[0], dt = r->spec_after[1] - r->spec_before[1];
    const double a = r->spec_after[2] - r->spec_before[2];
    json_object_set_new(j, "spec_decode_num_drafts", json_real(d));
    json_object_set_new(j, "spec_decode_num_draft_tokens", json_real(dt));
    json_object_set_new(j, "spec_decode_num_accepted_tokens", json_real(a));
    json_object_set_new(j, "spec_decode_acceptance_rate", dt > 0 ? json_real(a / dt) : json_null());
    json_object_set_new(j, "spec_decode_mean_acceptance_length", d > 0 ? json_real(1.0 + a / d) : json_null());
  }
  add_samples(j, r);
  return j;
}

static void print_table(const struct run *r, const struct summary *s) {
  double dur = s->duration > 0 ? s->duration : 1e-9;
  printf("============ Serving Benchmark Result ============\n");
  if (r->o->label[0]) printf("%-40s %s\n", "Label:", r->o->label);
  printf("%-40s %s\n", "Server:", r->o->base_url);
  printf("%-40s %lld\n", "Successful requests:", (long long)s->completed);
  printf("%-40s %lld\n", "Failed requests:", (long long)s->failed);
  if (r->o->max_concurrency) printf("%-40s %lld\n", "Maximum request concurrency:", (long long)r->o->max_concurrency);
  if (isinf(r->o->request_rate)) printf("%-40s inf\n", "Request rate (req/s):");
  else printf("%-40s %.2f\n", "Request rate (req/s):", r->o->request_rate);
  printf("%-40s %.2f\n", "Benchmark duration (s):", s->duration);
  printf("%-40s %.2f -> %.2f\n", "Load average, 1 min (start -> end):", r->load_start, r->load_end);
  printf("%-40s %lld\n", "Total input tokens:", (long long)s->in_tokens);
  printf("%-40s %lld\n", "Total generated tokens:", (long long)s->out_tokens);
  printf("%-40s %.2f\n", "Request throughput (req/s):", (double)s->completed / dur);
  printf("%-40s %.2f\n", "Output token throughput (tok/s):", (double)s->out_tokens / dur);
  printf("%-40s %.2f\n", "Total token throughput (tok/s):", (double)(s->in_tokens + s->out_tokens) / dur);
  const struct { const char *title, *name; const struct bench_dist *d; } rows[] = {
      {"Time to First Token", "TTFT", &s->ttft},
      {"Time per Output Token (excl. 1st token)", "TPOT", &s->tpot},
      {"Inter-token Latency", "ITL", &s->itl},
      {"End-to-end Latency", "E2EL", &s->e2el}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int pad = (int)(50 - strlen(rows[i].title)) / 2;
    printf("%.*s%s%.*s\n", pad, "--------------------------------------------------", rows[i].title,
           (int)(50 - strlen(rows[i].title) - (size_t)pad), "--------------------------------------------------");
    char k[64];
    snprintf(k, sizeof k, "Mean %s (ms):", rows[i].name);
    printf("%-40s %.2f\n", k, rows[i].d->mean);
    snprintf(k, sizeof k, "Median %s (ms):", rows[i].name);
    printf("%-40s %.2f\n", k, rows[i].d->median);
    snprintf(k, sizeof k, "P99 %s (ms):", rows[i].name);
    printf("%-40s %.2f\n", k, rows[i].d->p99);
  }
  if (r->have_spec) { /* vLLM's SpecDecoding metrics over the run */
    const double d = r->spec_after[0] - r->spec_before[0], dt = r->spec_after[1] - r->spec_before[1];
    const double a = r->spec_after[2] - r->spec_before[2];
    printf("%s\n", "--------------Speculative decoding---------------");
    printf("%-40s %.0f\n", "Draft tokens verified:", dt);
    printf("%-40s %.0f\n", "Draft tokens accepted:", a);
    printf("%-40s %.1f\n", "Draft acceptance rate (%):", dt > 0 ? 100.0 * a / dt : 0.0);
    printf("%-40s %.2f\n", "Mean acceptance length:", d > 0 ? 1.0 + a / d : 0.0);
  }
  if (r->mem_peak.num_procs > 0) {
    printf("%s\n", "-----------Server resident memory (/proc)----------");
    printf("%-40s %s (%d processes)\n", "Process tree of:", r->mem_peak.root_comm, r->mem_peak.num_procs);
    printf("%-40s %.1f\n", "Peak resident, shared once (MiB):", (double)r->mem_peak.unique_bytes / MIB);
    printf("%-40s %.1f\n", "Peak PSS, sum (MiB):", (double)r->mem_peak.pss_bytes / MIB);
    printf("%-40s %.1f\n", "Peak RSS, sum (MiB):", (double)r->mem_peak.rss_bytes / MIB);
    struct stat sb;
    if (r->o->model_path && stat(r->o->model_path, &sb) == 0)
      printf("%-40s %.1f\n", "Model file (MiB):", (double)sb.st_size / MIB);
  }
  printf("==================================================\n");
}

static void warm_up(struct run *r) {
  for (int32_t w = 0; w < r->o->warmup; w++) {
    const struct bench_prompt *p = &r->warm.prompts[w];
    char *body = request_body(r, p, w, p->output_len);
    struct bench_result res;
    if (body) bench_http_stream(&r->target, r->o->endpoint, body, strlen(body), r->o->timeout_s, &res);
    else memset(&res, 0, sizeof res);
    if (!res.ok) fprintf(stderr, "llmbus-bench serve: warm-up request failed: %s\n", body ? res.error : "no body");
    bench_result_free(&res);
    free(body);
  }
}

static int run_benchmark(struct run *r) {
  const struct serve_opts *o = r->o;
  int64_t n = r->ds.num;
  r->results = calloc((size_t)n, sizeof *r->results);
  r->arrivals = calloc((size_t)n, sizeof *r->arrivals);
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  bool *started = calloc((size_t)n, sizeof *started);
  if (!r->results || !r->arrivals || !threads || !started) {
    fprintf(stderr, "llmbus-bench serve: out of memory\n");
    free(threads);
    free(started);
    return 1;
  }
  bench_poisson_arrivals(o->seed, o->request_rate, n, r->arrivals);
  int64_t cap = o->max_concurrency > 0 ? o->max_concurrency : n;
  sem_init(&r->slots, 0, (unsigned)(cap < 1000000 ? cap : 1000000));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, THREAD_STACK);
  pthread_t monitor;
  r->have_spec = o->spec_metrics_url && read_spec_counters(o->spec_metrics_url, r->spec_before);
  r->load_start = bench_loadavg();
  getrusage(RUSAGE_SELF, &r->ru_start);
  r->t_start = llb_now_ns();
  bool have_monitor = pthread_create(&monitor, NULL, monitor_thread, r) == 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t due = r->t_start + (int64_t)(r->arrivals[i] * 1e9);
    int64_t now = llb_now_ns();
    if (due > now) {
      struct timespec ts = {(time_t)((due - now) / 1000000000LL), (long)((due - now) % 1000000000LL)};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    while (sem_wait(&r->slots) != 0 && errno == EINTR) {}
    struct job *j = malloc(sizeof *j);
    if (j) *j = (struct job){r, i};
    if (!j || pthread_create(&threads[i], &attr, request_thread, j) != 0) {
      free(j);
      snprintf(r->results[i].error, sizeof r->results[i].error, "cannot start a thread");
      atomic_fetch_add(&r->failed, 1);
      sem_post(&r->slots);
      continue;
    }
    started[i] = true;
  }
  for (int64_t i = 0; i < n; i++)
    if (started[i]) pthread_join(threads[i], NULL);
  int64_t t_end = llb_now_ns();
  getrusage(RUSAGE_SELF, &r->ru_end);
  r->load_end = bench_loadavg();
  if (r->have_spec) r->have_spec = read_spec_counters(o->spec_metrics_url, r->spec_after);
  atomic_store(&r->finished, true);
  if (have_monitor) pthread_join(monitor, NULL);
  if (o->memory) sample_memory(r);
  if (o->progress) draw_progress(r, true);
  pthread_attr_destroy(&attr);
  sem_destroy(&r->slots);
  free(threads);
  free(started);

  struct summary s;
  summarize(r, &s);
  s.duration = (double)(t_end - r->t_start) / 1e9;
  for (int64_t i = 0, shown = 0; i < n && shown < 3; i++)
    if (!r->results[i].ok) {
      fprintf(stderr, "llmbus-bench serve: request %lld failed: %s\n", (long long)i, r->results[i].error);
      shown++;
    }
  json_t *j = result_json(r, &s);
  if (o->result_file && j && json_dump_file(j, o->result_file, JSON_INDENT(2)) != 0)
    fprintf(stderr, "llmbus-bench serve: cannot write %s\n", o->result_file);
  if (o->json) {
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text) printf("%s\n", text);
    free(text);
  } else {
    print_table(r, &s);
  }
  json_decref(j);
  return s.completed > 0 && s.failed == 0 ? 0 : 1;
}

int bench_serve_main(int argc, char **argv) {
  struct serve_opts o;
  struct flag_args args;
  int rc = parse(argc, argv, &o, &args);
  if (rc != FLAGS_CONTINUE) {
    flag_args_free(&args);
    return rc;
  }
  struct run *r = calloc(1, sizeof *r);
  if (!r) {
    flag_args_free(&args);
    return 1;
  }
  r->o = &o;
  rc = 1;
  if (bench_target_parse(o.base_url, &r->target) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench serve: %s\n", llb_err_last());
    goto done;
  }
  const char *key = o.api_key ? o.api_key : getenv("OPENAI_API_KEY");
  if (key && *key) {
    if (strlen(key) >= sizeof r->target.api_key || strpbrk(key, "\r\n")) {
      fprintf(stderr, "llmbus-bench serve: --api-key: too long or holds a line break\n");
      goto done;
    }
    snprintf(r->target.api_key, sizeof r->target.api_key, "%s", key);
  }
  if (load_dataset(r) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench serve: dataset: %s\n", llb_err_last());
    goto done;
  }
  if (resolve_model(r) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench serve: %s\n", llb_err_last());
    goto done;
  }
  if (o.memory) {
    pid_t pid = o.stack_pid > 0 ? (pid_t)o.stack_pid : bench_find_listener(atoi(r->target.port));
    r->stack_root = pid > 0 && o.stack_pid <= 0 ? bench_stack_root(pid, "llmbus") : pid;
  }
  warm_up(r);
  if (o.memory) sample_memory(r);
  rc = run_benchmark(r);
done:
  if (r->results)
    for (int64_t i = 0; i < r->ds.num; i++) bench_result_free(&r->results[i]);
  free(r->results);
  free(r->arrivals);
  bench_dataset_free(&r->ds);
  bench_dataset_free(&r->warm);
  free(r);
  free(o.response_format);
  flag_args_free(&args);
  return rc;
}

/* `llmbus-bench engine`: the bus overhead per decode step (docs/design.md §4).
 *
 * The same model, prompt tokens and greedy batch-1 decode of N tokens, twice:
 *   in-process  a model/forward/session.h session's forward + sampler_sample in this process, as the
 *               worker does per step
 *               (no bus, no scheduler): the step time is one forward of one token plus its
 *               sampling, timed per step;
 *   bus         a GenerateRequest with the same prompt_token_ids (temperature 0, ignore_eos,
 *               DELTA outputs) to a running stack over NATS: the step time is the gap between
 *               consecutive RequestOutputs at this client (inter-token latency), which in a
 *               steady batch-1 decode is the scheduler's step period: schedule + KV round trip
 *               (if any) + execute round trip + outputs.
 * Overhead = median bus step - median in-process step, and as a % of the in-process step.
 * Without --nats the stack is started here: nats-server on a free loopback port, then
 * `llmbus serve --nats URL --model M --threads T` (the llmbus binary beside this one), and
 * stopped at the end. Repeats interleave the two paths (A/B, then B/A, ...).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bus/bus.h"
#include "base/log.h"
#include "bus/subject.h"
#include "cmd/bench/bench.h"
#include "cmd/flags/flags.h"
#include "model/forward/forward.h"
#include "model/forward/session.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/codec.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define READY_TIMEOUT_NS (180LL * 1000000000LL)

extern char **environ;

#define ENGINE_MAX_SERVE_ARGS 8
/* Processes the CPU breakdown tells apart (the stack has ~10). */
#define ENGINE_MAX_PROCS 24

struct engine_opts {
  const char *model_path, *nats_url, *prefix, *tenant;
  int32_t tokens, prompt_len, threads, repeats;
  int32_t decode_threads; /* of threads, those of a decode step, here and for the worker */
  uint64_t seed;
  bool json, no_async_scheduling;
  struct flag_list serve_args; /* more `llmbus serve` flags (--serve-arg), at most ENGINE_MAX_SERVE_ARGS */
};

static llb_status set_seed(const struct flag *f, const char *v) {
  int64_t n;
  llb_status st = flags_parse_int64(v, 0, INT64_MAX, &n);
  if (!st) *(uint64_t *)f->target = (uint64_t)n;
  return st;
}

static const char engine_usage[] =
    "usage: llmbus-bench engine --model M.gguf [flags]\n"
    "Batch-1 greedy decode of N tokens in-process (llama_forward + sampler, no bus) and through the\n"
    "actors over NATS; prints the median step time of both and the bus overhead per step.\n";

/* FLAGS_CONTINUE, 0 after --help, 2 on a usage error. `args` keeps the values. */
static int parse(int argc, char **argv, struct engine_opts *o, struct flag_args *args) {
  *o = (struct engine_opts){.tokens = 128, .prompt_len = 32, .threads = 2, .decode_threads = 0, .repeats = 3,
                            .prefix = BUS_DEFAULT_PREFIX, .tenant = BUS_DEFAULT_TENANT};
  const struct flag t[] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &o->model_path, .metavar = "M.gguf",
       .help = "the model (required)"},
      {.name = "tokens", .kind = FLAG_KIND_INT32, .target = &o->tokens, .metavar = "N", .min = 2, .max = 100000,
       .help = "decoded tokens per run"},
      {.name = "prompt-len", .kind = FLAG_KIND_INT32, .target = &o->prompt_len, .metavar = "N", .min = 1,
       .max = 100000, .help = "prompt tokens (random ids)"},
      {.name = "threads", .short_name = 't', .kind = FLAG_KIND_INT32, .target = &o->threads, .metavar = "N", .min = 1,
       .max = 256, .help = "forward threads, here and for the worker"},
      {.name = "decode-threads", .kind = FLAG_KIND_INT32, .target = &o->decode_threads, .metavar = "N", .min = 1,
       .max = 256, .help = "of those, the threads of a decode step, here and for the worker (0: all)"},
      {.name = "repeats", .kind = FLAG_KIND_INT32, .target = &o->repeats, .metavar = "N", .min = 1, .max = 1000,
       .help = "runs of each, interleaved"},
      {.name = "seed", .kind = FLAG_KIND_INT64, .target = &o->seed, .metavar = "S", .set = set_seed,
       .help = "prompt seed (default 0)"},
      {.name = "nats", .kind = FLAG_KIND_STRING, .target = &o->nats_url, .metavar = "URL",
       .help = "use the stack already serving there (default: start one)"},
      {.name = "prefix", .kind = FLAG_KIND_STRING, .target = &o->prefix, .metavar = "P", .help = "subject prefix"},
      {.name = "tenant", .kind = FLAG_KIND_STRING, .target = &o->tenant, .metavar = "T", .help = "tenant"},
      {.name = "no-async-scheduling", .kind = FLAG_KIND_BOOL, .target = &o->no_async_scheduling,
       .help = "the stack it starts applies each step before planning the next"},
      {.name = "serve-arg", .kind = FLAG_KIND_LIST, .target = &o->serve_args, .metavar = "A",
       .help = "one more argument for the `llmbus serve` it starts (repeatable, at most 8; e.g. --serve-arg "
               "--otlp-endpoint --serve-arg http://127.0.0.1:4318)"},
      {.name = "json", .kind = FLAG_KIND_BOOL, .target = &o->json, .help = "one JSON object instead of the table"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {.program = "llmbus-bench engine", .usage = engine_usage, .sections = &sec,
                                   .num_sections = 1, .config = true, .max_positional = 0};
  int rc = flags_parse(&cmd, argc, argv, args);
  if (rc != FLAGS_CONTINUE) return rc;
  if (o->serve_args.num > ENGINE_MAX_SERVE_ARGS)
    return flags_usage_error(&cmd, "at most %d --serve-arg", ENGINE_MAX_SERVE_ARGS);
  if (!o->model_path) return flags_usage_error(&cmd, "--model is required");
  if (o->decode_threads == 0 || o->decode_threads > o->threads) o->decode_threads = o->threads; /* the worker's */
  return FLAGS_CONTINUE;
}

/* Growable list of step times (seconds). */
struct steps {
  double *v;
  size_t n, cap;
  double cpu_s;      /* CPU seconds spent on the counted steps (<0: unknown) */
  int64_t cpu_steps; /* steps that cpu_s covers */
  /* cpu_s and sleeps (a thread waiting, then woken) by process command name (the stack's
   * actors, nats-server, this client) */
  struct {
    char comm[32];
    double cpu_s;
    int64_t sleeps;
  } by_proc[ENGINE_MAX_PROCS];
  int n_by_proc;
};

/* Adds the CPU time each process spent between snapshots a and b (matched by pid; a process
 * absent from a started in between) to s->by_proc, by command name. */
static void steps_add_proc_cpu(struct steps *s, const struct bench_proc_cpu *a, size_t na,
                               const struct bench_proc_cpu *b, size_t nb) {
  for (size_t i = 0; i < nb; i++) {
    double d = b[i].cpu_s;
    int64_t ds = b[i].sleeps;
    for (size_t j = 0; j < na; j++)
      if (a[j].pid == b[i].pid) d -= a[j].cpu_s, ds -= a[j].sleeps;
    int k = 0;
    while (k < s->n_by_proc && strcmp(s->by_proc[k].comm, b[i].comm) != 0) k++;
    if (k == s->n_by_proc) {
      if (k == ENGINE_MAX_PROCS) continue;
      snprintf(s->by_proc[k].comm, sizeof s->by_proc[k].comm, "%s", b[i].comm);
      s->by_proc[k].cpu_s = 0;
      s->by_proc[k].sleeps = 0;
      s->n_by_proc++;
    }
    s->by_proc[k].cpu_s += d;
    s->by_proc[k].sleeps += ds;
  }
}

static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool steps_push(struct steps *s, double x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 256;
    double *p = realloc(s->v, cap * sizeof *p);
    if (!p) return false;
    s->v = p;
    s->cap = cap;
  }
  s->v[s->n++] = x;
  return true;
}

/* --- in-process ------------------------------------------------------------------- */

struct inproc {
  struct gguf_file *gguf;
  struct llama_model *model;
  struct llama_session *session;
  struct sampler *sampler;
  int32_t *seq; /* [capacity] */
  int32_t capacity;
};

static void inproc_free(struct inproc *r) {
  free(r->seq);
  sampler_destroy(r->sampler);
  llama_session_destroy(r->session);
  llama_model_destroy(r->model);
  gguf_close(r->gguf);
}

static llb_status inproc_init(struct inproc *r, const struct engine_opts *o, const int32_t *prompt) {
  llb_status st = gguf_open(o->model_path, &r->gguf);
  if (st == LLB_STATUS_OK) st = llama_model_load(r->gguf, &r->model);
  if (st != LLB_STATUS_OK) return st;
  const struct llama_config *cfg = llama_model_config(r->model);
  r->capacity = o->prompt_len + o->tokens;
  if (r->capacity > cfg->context_length)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "prompt + tokens = %d exceeds the context (%d)", r->capacity,
                    cfg->context_length);
  /* the prompt in one step */
  const struct llama_session_options so = {
      .max_context = r->capacity,
      .forward = {.max_num_tokens = o->prompt_len, .n_threads = o->threads, .n_threads_decode = o->decode_threads}};
  st = llama_session_create(r->model, &so, &r->session);
  if (st == LLB_STATUS_OK) st = sampler_create(cfg->vocab_size, &r->sampler);
  if (st != LLB_STATUS_OK) return st;
  r->seq = malloc((size_t)r->capacity * sizeof *r->seq);
  if (!r->seq) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "in-process buffers");
  memcpy(r->seq, prompt, (size_t)o->prompt_len * sizeof *prompt);
  return LLB_STATUS_OK;
}

/* One run: prefill, then tokens - 1 timed steps of (sample + forward one token); the last
 * token is sampled (timed too) without a forward, as the engine stops there. */
static llb_status inproc_run(struct inproc *r, const struct engine_opts *o, struct steps *out, int32_t *tokens_out) {
  struct sampler_params sp; /* greedy, as the engine leg's requests */
  sampler_params_init(&sp);
  sp.temperature = 0;
  float *logits = NULL;
  llb_status st = llama_session_truncate(r->session, 0, 0); /* each run from an empty cache */
  if (st == LLB_STATUS_OK) st = llama_session_eval(r->session, 0, r->seq, o->prompt_len, &logits);
  double cpu0 = process_cpu_s();
  for (int32_t k = 0; st == LLB_STATUS_OK && k < o->tokens; k++) {
    int64_t t0 = llb_now_ns();
    struct sampler_result res;
    const int32_t pos = o->prompt_len + k;
    st = sampler_sample(r->sampler, &sp, logits, r->seq, o->prompt_len, r->seq + o->prompt_len, k, 0, k, &res);
    if (st != LLB_STATUS_OK) break;
    r->seq[pos] = res.token_id;
    tokens_out[k] = res.token_id;
    if (k + 1 == o->tokens) break; /* the step that made token k + 1 is what we time */
    st = llama_session_eval(r->session, 0, r->seq + pos, 1, &logits);
    if (st == LLB_STATUS_OK && !steps_push(out, (double)(llb_now_ns() - t0) / 1e9))
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "steps");
  }
  out->cpu_s += process_cpu_s() - cpu0;
  out->cpu_steps += o->tokens - 1;
  return st;
}

/* --- the stack ------------------------------------------------------------------------ */

struct stack {
  pid_t nats, serve;
  char url[64];
  char js_dir[64]; /* the nats-server's JetStream store (serve's requests are durable) */
};

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static pid_t spawn_quiet(char *const argv[]) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

static void stop_child(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 150; i++) { /* 15 s */
    if (waitpid(pid, NULL, WNOHANG) == pid) return;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static llb_status stack_start(struct stack *s, const struct engine_opts *o) {
  int port = free_port();
  if (port < 0) return LLB_ERRF(LLB_STATUS_IO, "no free loopback port");
  char port_s[16], threads_s[16], decode_s[16], exe[PATH_MAX], llmbus[PATH_MAX + 16];
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(threads_s, sizeof threads_s, "%d", o->threads);
  snprintf(decode_s, sizeof decode_s, "%d", o->decode_threads);
  snprintf(s->url, sizeof s->url, "nats://127.0.0.1:%d", port);
  const char *ns = getenv("NATS_SERVER");
  snprintf(s->js_dir, sizeof s->js_dir, "/tmp/llmbus-bench-js-XXXXXX");
  if (!mkdtemp(s->js_dir)) return LLB_ERRF(LLB_STATUS_IO, "cannot create a JetStream directory: %s", strerror(errno));
  char *nats_argv[] = {(char *)(ns ? ns : "nats-server"), "-a", "127.0.0.1", "-p", port_s, "-js", "-sd", s->js_dir, NULL};
  s->nats = spawn_quiet(nats_argv);
  if (s->nats < 0) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "cannot start nats-server (set NATS_SERVER?)");
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return LLB_ERRF(LLB_STATUS_IO, "cannot read /proc/self/exe");
  exe[len] = '\0';
  snprintf(llmbus, sizeof llmbus, "%s/llmbus", dirname(exe));
  char *serve_argv[12 + ENGINE_MAX_SERVE_ARGS] = {llmbus, "serve", "--nats", s->url, "--model",
                                                 (char *)o->model_path, "--threads", threads_s,
                                                 "--decode-threads", decode_s};
  int n = 10;
  if (o->no_async_scheduling) serve_argv[n++] = "--no-async-scheduling";
  for (int i = 0; i < o->serve_args.num; i++) serve_argv[n++] = (char *)o->serve_args.items[i];
  serve_argv[n] = NULL;
  s->serve = spawn_quiet(serve_argv);
  if (s->serve < 0) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "cannot start %s", llmbus);
  return LLB_STATUS_OK;
}

static void stack_stop(struct stack *s) {
  stop_child(s->serve);
  stop_child(s->nats);
  s->serve = s->nats = -1;
  if (s->js_dir[0]) { /* the store of a finished run: nothing in it is needed again */
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->js_dir);
    if (system(cmd) != 0) fprintf(stderr, "llmbus-bench engine: could not remove %s\n", s->js_dir);
    s->js_dir[0] = '\0';
  }
}

/* --- through the bus ----------------------------------------------------------------- */

/* One request; ITL gaps (per token) into *out unless out is NULL. NOT_FOUND while nobody
 * serves, TIMEOUT on silence, the engine's error. */
/* cpu_root > 0: the CPU time of that process tree between the first and the last output is
 * added to out->cpu_s (the decode steps only, prefill excluded). */
static llb_status bus_run(struct bus *bus, const struct engine_opts *o, const int32_t *prompt, int32_t max_tokens,
                          int64_t timeout_ms, pid_t cpu_root, struct steps *out, int32_t *tokens_out,
                          int32_t *n_tokens) {
  char inbox[BUS_SUBJECT_MAX], subject[BUS_SUBJECT_MAX];
  struct bus_sub *sub = NULL;
  llb_status st = bus_new_inbox(bus, inbox, sizeof inbox);
  if (st == LLB_STATUS_OK) st = bus_subject_generate(bus_prefix(bus), o->tenant, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_subscribe_sync(bus, inbox, &sub);
  if (st != LLB_STATUS_OK) return st;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = max_tokens;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct llb_generate_request gr;
  llb_generate_request_init(&gr);
  gr.request_id = llb_str_c("bench");
  gr.prompt_token_ids = prompt;
  gr.num_prompt_token_ids = o->prompt_len;
  gr.sampling_params = &sp;
  gr.raw = true;
  struct llb_buf buf = {0};
  st = llb_generate_request_encode_buf(&gr, &buf);
  if (st == LLB_STATUS_OK) {
    struct bus_out_msg m = {.subject = subject, .reply = inbox, .data = buf.data, .len = buf.len};
    st = bus_publish_msg(bus, &m);
  }
  llb_buf_free(&buf);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  int64_t prev = 0;
  int32_t got = 0;
  bool finished = false;
  double cpu0 = -1;
  struct bench_proc_cpu *snap0 = NULL;
  size_t n_snap0 = 0;
  while (st == LLB_STATUS_OK && !finished) {
    struct bus_msg *m = NULL;
    st = bus_sub_next_msg(sub, timeout_ms, &m);
    if (st != LLB_STATUS_OK) break;
    int64_t now = llb_now_ns();
    if (m->len == 0) {
      bus_msg_destroy(m);
      st = LLB_ERRF(LLB_STATUS_NOT_FOUND, "no responders");
      break;
    }
    struct llb_request_output ro;
    llb_arena_reset(&arena);
    st = llb_request_output_decode(m->data, m->len, &arena, &ro);
    bus_msg_destroy(m);
    if (st != LLB_STATUS_OK) break;
    if (ro.error.code != 0) {
      st = LLB_ERRF((llb_status)ro.error.code, "engine: %.*s", (int)ro.error.message.len, ro.error.message.data);
      break;
    }
    int32_t k = ro.num_outputs > 0 ? ro.outputs[0].num_token_ids : 0;
    for (int32_t t = 0; t < k && tokens_out && got + t < max_tokens; t++) tokens_out[got + t] = ro.outputs[0].token_ids[t];
    if (k > 0 && got == 0 && out && cpu_root > 0 && bench_tree_cpu(cpu_root, &snap0, &n_snap0) == LLB_STATUS_OK)
      cpu0 = bench_proc_cpu_total(snap0, n_snap0);
    if (k > 0) {
      if (got > 0 && out)
        for (int32_t t = 0; t < k; t++)
          if (!steps_push(out, (double)(now - prev) / 1e9 / k)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "steps");
      prev = now;
      got += k;
    }
    finished = ro.finished;
  }
  llb_arena_destroy(&arena);
  (void)bus_unsubscribe(sub);
  struct bench_proc_cpu *snap1 = NULL;
  size_t n_snap1 = 0;
  if (st == LLB_STATUS_OK && out && cpu0 >= 0 && bench_tree_cpu(cpu_root, &snap1, &n_snap1) == LLB_STATUS_OK) {
    const double cpu1 = bench_proc_cpu_total(snap1, n_snap1);
    if (cpu1 >= cpu0) {
      out->cpu_s += cpu1 - cpu0;
      out->cpu_steps += got - 1;
      steps_add_proc_cpu(out, snap0, n_snap0, snap1, n_snap1);
    }
  }
  free(snap0);
  free(snap1);
  if (n_tokens) *n_tokens = got;
  return st;
}

static llb_status wait_ready(struct bus *bus, const struct engine_opts *o, const int32_t *prompt) {
  int64_t deadline = llb_now_ns() + READY_TIMEOUT_NS;
  llb_status st;
  do {
    st = bus_run(bus, o, prompt, 2, 5000, 0, NULL, NULL, NULL);
    if (st == LLB_STATUS_OK) return st;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
  } while (llb_now_ns() < deadline);
  return st;
}

/* --- report ------------------------------------------------------------------------- */

static void report(const struct engine_opts *o, struct steps *a, struct steps *b, bool same_tokens, double load0) {
  struct bench_dist da, db;
  bench_dist_of(a->v, a->n, &da);
  bench_dist_of(b->v, b->n, &db);
  double over = db.median - da.median, pct = da.median > 0 ? over / da.median * 100 : 0;
  double cpu_a = a->cpu_steps > 0 ? a->cpu_s / (double)a->cpu_steps : -1;
  double cpu_b = b->cpu_steps > 0 ? b->cpu_s / (double)b->cpu_steps : -1;
  if (o->json) {
    json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "model",
                          o->model_path, "tokens", o->tokens, "prompt_len", o->prompt_len, "threads", o->threads,
                          "repeats", o->repeats, "inproc_median_step_ms", da.median * 1e3, "inproc_mean_step_ms",
                          da.mean * 1e3, "inproc_p99_step_ms", da.p99 * 1e3, "bus_median_step_ms", db.median * 1e3,
                          "bus_mean_step_ms", db.mean * 1e3, "bus_p99_step_ms", db.p99 * 1e3, "overhead_ms",
                          over * 1e3, "overhead_pct", pct, "same_tokens", same_tokens);
    if (j) json_object_set_new(j, "loadavg_1m_start", json_real(load0));
    if (j) json_object_set_new(j, "decode_threads", json_integer(o->decode_threads));
    if (j) json_object_set_new(j, "inproc_cpu_ms_per_step", json_real(cpu_a * 1e3));
    if (j && cpu_b >= 0) json_object_set_new(j, "stack_cpu_ms_per_step", json_real(cpu_b * 1e3));
    json_t *bp = j && cpu_b >= 0 ? json_object() : NULL, *bw = bp ? json_object() : NULL;
    for (int i = 0; bp && bw && i < b->n_by_proc; i++) {
      json_object_set_new(bp, b->by_proc[i].comm, json_real(b->by_proc[i].cpu_s / (double)b->cpu_steps * 1e3));
      json_object_set_new(bw, b->by_proc[i].comm, json_real((double)b->by_proc[i].sleeps / (double)b->cpu_steps));
    }
    if (bp) json_object_set_new(j, "stack_cpu_ms_per_step_by_process", bp);
    if (bw) json_object_set_new(j, "stack_wakeups_per_step_by_process", bw);
    if (j) json_object_set_new(j, "loadavg_1m_end", json_real(bench_loadavg()));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
    return;
  }
  printf("============ Engine step: in-process vs bus ============\n");
  printf("model %s, batch 1, prompt %d, %d tokens x %d repeats, %d threads (%d in a decode step)\n", o->model_path,
         o->prompt_len, o->tokens, o->repeats, o->threads, o->decode_threads);
  printf("%-22s %12s %12s\n", "decode step (ms)", "in-process", "bus");
  printf("%-22s %12.3f %12.3f\n", "median", da.median * 1e3, db.median * 1e3);
  printf("%-22s %12.3f %12.3f\n", "mean", da.mean * 1e3, db.mean * 1e3);
  printf("%-22s %12.3f %12.3f\n", "p99", da.p99 * 1e3, db.p99 * 1e3);
  printf("%-22s %12.1f %12.1f\n", "tokens/s (1/median)", da.median > 0 ? 1 / da.median : 0,
         db.median > 0 ? 1 / db.median : 0);
  if (cpu_b >= 0)
    printf("%-22s %12.3f %12.3f\n", "CPU ms per step", cpu_a * 1e3, cpu_b * 1e3);
  printf("bus overhead per step: %+.3f ms (%+.1f%% of the in-process step; docs/design.md §4 target < 5%%)\n",
         over * 1e3, pct);
  if (cpu_b >= 0)
    printf("bus CPU per step: %+.3f ms (%+.1f%%; every process of the stack, nats-server included, and this\n"
           "client, vs this process in-process: what the bus costs whatever else runs on the machine)\n",
           (cpu_b - cpu_a) * 1e3, cpu_a > 0 ? (cpu_b - cpu_a) / cpu_a * 100 : 0);
  if (cpu_b >= 0 && b->n_by_proc > 0) {
    printf("bus path per step, by process: CPU ms / thread wake-ups\n");
    for (int i = 0; i < b->n_by_proc; i++)
      if (b->by_proc[i].cpu_s > 0 || b->by_proc[i].sleeps > 0)
        printf("  %-16s %8.3f %8.2f\n", b->by_proc[i].comm, b->by_proc[i].cpu_s / (double)b->cpu_steps * 1e3,
               (double)b->by_proc[i].sleeps / (double)b->cpu_steps);
  }
  printf("greedy tokens identical in-process and through the bus: %s\n", same_tokens ? "yes" : "NO");
  printf("load average (1 min) %.2f at the start, %.2f at the end (%ld CPUs)\n", load0, bench_loadavg(),
         sysconf(_SC_NPROCESSORS_ONLN));
  printf("========================================================\n");
}

int bench_engine_main(int argc, char **argv) {
  struct engine_opts o;
  struct flag_args args;
  int rc = parse(argc, argv, &o, &args);
  if (rc != FLAGS_CONTINUE) {
    flag_args_free(&args);
    return rc;
  }
  rc = 1;
  struct inproc ip = {0};
  struct stack stack = {.nats = -1, .serve = -1};
  struct bus *bus = NULL;
  struct steps sa = {0}, sb = {0};
  int32_t *prompt = malloc((size_t)o.prompt_len * sizeof *prompt);
  int32_t *tok_a = calloc((size_t)o.tokens, sizeof *tok_a), *tok_b = calloc((size_t)o.tokens, sizeof *tok_b);
  struct tokenizer *tok = NULL;
  if (!prompt || !tok_a || !tok_b) goto done;
  /* Prompt: random non-control ids, the same for both paths. */
  if (gguf_open(o.model_path, &ip.gguf) != LLB_STATUS_OK || tokenizer_load(ip.gguf, &tok) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench engine: %s\n", llb_err_last_where());
    goto done;
  }
  gguf_close(ip.gguf);
  ip.gguf = NULL;
  struct bench_rng rng;
  bench_rng_seed(&rng, o.seed);
  for (int32_t i = 0; i < o.prompt_len; i++) {
    int32_t id;
    do id = (int32_t)bench_rng_range(&rng, 0, tokenizer_vocab_size(tok) - 1);
    while (tokenizer_is_control(tok, id));
    prompt[i] = id;
  }
  if (inproc_init(&ip, &o, prompt) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench engine: in-process set-up: %s\n", llb_err_last_where());
    goto done;
  }
  if (!o.nats_url) {
    if (stack_start(&stack, &o) != LLB_STATUS_OK) {
      fprintf(stderr, "llmbus-bench engine: %s\n", llb_err_last());
      goto done;
    }
    fprintf(stderr, "llmbus-bench engine: started nats-server and llmbus serve on %s\n", stack.url);
  }
  struct bus_options bo;
  bus_options_init(&bo);
  bo.urls = o.nats_url ? o.nats_url : stack.url;
  bo.prefix = o.prefix;
  bo.name = "llmbus-bench";
  bo.install_signal_handlers = false;
  llb_status st = LLB_STATUS_CONNECTION;
  for (int tries = 0; tries < 50 && st != LLB_STATUS_OK; tries++) {
    st = bus_connect(&bo, &bus);
    if (st != LLB_STATUS_OK) {
      struct timespec ts = {0, 200000000};
      nanosleep(&ts, NULL);
    }
  }
  if (st != LLB_STATUS_OK || wait_ready(bus, &o, prompt) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-bench engine: the stack does not answer: %s\n", llb_err_last());
    goto done;
  }
  bool same = true;
  double load0 = bench_loadavg();
  for (int32_t r = 0; r < o.repeats; r++) {
    /* A/B, then B/A: a drift in the machine's load falls on both paths alike. */
    for (int leg = 0; leg < 2; leg++) {
      if ((leg == 0) == (r % 2 == 0)) {
        if (inproc_run(&ip, &o, &sa, tok_a) != LLB_STATUS_OK) {
          fprintf(stderr, "llmbus-bench engine: in-process run: %s\n", llb_err_last_where());
          goto done;
        }
        continue;
      }
      int32_t got = 0;
      if (bus_run(bus, &o, prompt, o.tokens, 60000, o.nats_url ? 0 : getpid(), &sb, tok_b, &got) != LLB_STATUS_OK ||
          got != o.tokens) {
        fprintf(stderr, "llmbus-bench engine: bus run (%d of %d tokens): %s\n", got, o.tokens, llb_err_last());
        goto done;
      }
    }
    same = same && memcmp(tok_a, tok_b, (size_t)o.tokens * sizeof *tok_a) == 0;
    if (!o.json) fprintf(stderr, "llmbus-bench engine: repeat %d/%d done\n", r + 1, o.repeats);
  }
  report(&o, &sa, &sb, same, load0);
  rc = 0;
done:
  bus_destroy(bus);
  stack_stop(&stack);
  inproc_free(&ip);
  tokenizer_destroy(tok);
  free(prompt);
  free(tok_a);
  free(tok_b);
  free(sa.v);
  free(sb.v);
  flag_args_free(&args);
  return rc;
}

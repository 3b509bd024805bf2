/* llmbus-bench: serving and engine benchmarks (after vLLM's benchmarks/benchmark_serving.py,
 * `vllm bench serve`). This header holds the pure parts, unit-tested without a network
 * (library llmbus_bench_core): a seeded RNG and Poisson arrivals, percentiles, the SSE and
 * HTTP chunked-body decoders, the parse of one streamed /v1/completions chunk, the prompt
 * datasets, and the resident memory of a process tree read from /proc.
 */
#ifndef LLB_CMD_BENCH_H
#define LLB_CMD_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"

struct tokenizer;

/* --- random numbers, arrivals, statistics ------------------------------------------- */

/* splitmix64: the same seed gives the same sequence on every machine. */
struct bench_rng {
  uint64_t state;
};
void bench_rng_seed(struct bench_rng *r, uint64_t seed);
/* The next 64 random bits. */
uint64_t bench_rng_next(struct bench_rng *r);
/* Uniform in (0, 1]. */
double bench_rng_uniform(struct bench_rng *r);
/* Uniform integer in [lo, hi] (lo <= hi). */
int64_t bench_rng_range(struct bench_rng *r, int64_t lo, int64_t hi);

/* Arrival times in seconds from the start, out[n]: a Poisson process of `rate` requests/s
 * (exponential gaps, mean 1 / rate, as vLLM's get_request with burstiness 1), out[0] is the
 * first gap. rate <= 0 or infinite: every request at time 0 (all at once). */
void bench_poisson_arrivals(uint64_t seed, double rate, int64_t n, double *out);

/* numpy.percentile (linear interpolation) of sorted[n] ascending, p in [0, 100]; 0 if n = 0. */
double bench_percentile(const double *sorted, size_t n, double p);

/* Mean, median, p99 and standard deviation of vals[n]; sorts vals in place. All 0 if n = 0. */
struct bench_dist {
  double mean, median, p99, std;
  size_t n;
};
void bench_dist_of(double *vals, size_t n, struct bench_dist *out);

/* --- HTTP chunked body and server-sent events ---------------------------------------- */

/* Decoder of a Transfer-Encoding: chunked body (RFC 9112 §7.1): feed raw bytes, get the
 * payload bytes in place. Chunk extensions and trailers are skipped. */
struct bench_chunked {
  int state;          /* internal */
  uint64_t remaining; /* bytes left in the current chunk */
  bool done;          /* the last (0-size) chunk and its trailer were read */
  bool error;         /* malformed size line */
};
/* Starts a decoder at the first chunk-size line. */
void bench_chunked_init(struct bench_chunked *c);
/* Decodes buf[len] in place: the payload bytes are moved to the front of buf; returns their
 * count. Stops consuming after the final chunk (c->done). */
size_t bench_chunked_feed(struct bench_chunked *c, char *buf, size_t len);

/* Server-sent events (WHATWG HTML §9.2.6, the parts an OpenAI stream uses): "data:" lines
 * of one event joined by '\n', dispatched at a blank line; CR, LF and CRLF line ends;
 * comments (":...") and other fields ignored. Lines may be split across feeds. */
typedef void (*bench_sse_event_fn)(void *user, const char *data, size_t len);
struct bench_sse {
  char *line;       /* the current partial line, malloc'd */
  size_t line_len, line_cap;
  char *data;       /* the current event's data, malloc'd */
  size_t data_len, data_cap;
  bool has_data;
  bool last_cr;     /* the previous byte was CR (a following LF is the same line end) */
  bool oom;
  bench_sse_event_fn on_event;
  void *user;
};
/* Starts an empty parser calling on_event(user, data, len) per event (data NUL-terminated,
 * valid during the call only). */
void bench_sse_init(struct bench_sse *s, bench_sse_event_fn on_event, void *user);
/* Feeds bytes; calls on_event for each complete event. OUT_OF_MEMORY if a buffer cannot grow. */
llb_status bench_sse_feed(struct bench_sse *s, const char *buf, size_t len);
/* Frees the parser's buffers (a partial event is dropped). */
void bench_sse_free(struct bench_sse *s);

/* What one SSE data payload of a streamed /v1/completions (or chat) response says. */
struct bench_chunk_info {
  bool done;                /* "[DONE]" */
  bool has_choices;         /* a non-empty "choices" array */
  size_t text_len;          /* bytes of choices[0].text (or .delta.content) */
  int64_t prompt_tokens;    /* usage.prompt_tokens, -1 if absent */
  int64_t completion_tokens;/* usage.completion_tokens, -1 if absent */
  char error[160];          /* an "error" object's message, "" if none */
};
/* Parses one event payload. MALFORMED if it is neither "[DONE]" nor a JSON object. */
llb_status bench_parse_chunk(const char *data, size_t len, struct bench_chunk_info *out);

/* What one streamed request asks for. */
struct bench_request_spec {
  const char *model;       /* the request's "model" */
  const char *text;        /* prompt text, or NULL when ids are sent */
  const int32_t *ids;      /* [num_ids] prompt token ids (completions only), or NULL */
  int32_t num_ids;
  int32_t max_tokens;
  double temperature;
  bool ignore_eos;         /* also sends min_tokens = max_tokens */
  const char *response_format; /* JSON object text sent as "response_format" (structured
                                  output), or NULL */
};

/* True when `endpoint` is a chat endpoint (its path ends in "/chat/completions"). */
bool bench_endpoint_is_chat(const char *endpoint);

/* The JSON body of one streamed request to `endpoint` (stream_options.include_usage on):
 * /v1/completions gets "prompt" (text, or the ids when given); a chat endpoint gets
 * "messages": [{"role": "user", "content": text}] (OpenAI / vLLM ChatCompletionRequest).
 * malloc'd, the caller frees; NULL when out of memory or when a chat request has no text. */
char *bench_request_body(const char *endpoint, const struct bench_request_spec *s);

/* --- datasets ------------------------------------------------------------------------ */

struct bench_prompt {
  char *text;          /* NUL-terminated prompt text (malloc'd); NULL when sent as ids */
  int32_t *ids;        /* [num_ids] prompt token ids (malloc'd) when known, else NULL */
  int32_t num_ids;
  int32_t input_len;   /* expected prompt tokens (tokenizer count; a word estimate without one) */
  int32_t output_len;  /* max_tokens to ask for */
};

struct bench_dataset {
  struct bench_prompt *prompts; /* [num] */
  int64_t num;
};

/* Random prompts (vLLM's RandomDataset, plus its prefix option): request i gets
 * prefix_len shared tokens then an input length uniform in
 * [input_len * (1 - range_ratio), input_len * (1 + range_ratio)] of its own, and an output
 * length drawn the same way. With a tokenizer the tokens are random non-control ids of the
 * vocabulary; the text is their decode, re-encoded and trimmed or extended until it encodes
 * to exactly the wanted count where it can (ids hold that encoding). Without one, the text is
 * random words of a fixed list (about one token each; input_len is the word count). Same
 * seed, same prompts. num_prefixes > 1 (SGLang's generated-shared-prefix dataset): that many
 * distinct prefixes, request i gets prefix i % num_prefixes — what prefix-affinity routing
 * across engines is measured with. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, the tokenizer's. */
struct bench_random_spec {
  int64_t num_prompts;
  int32_t input_len, output_len, prefix_len;
  int32_t num_prefixes; /* 0 or 1: one prefix shared by all */
  double range_ratio; /* [0, 1) */
  uint64_t seed;
};
llb_status bench_dataset_random(const struct tokenizer *tok, const struct bench_random_spec *spec,
                                struct bench_dataset *out);

/* A JSONL file: one object per line with "prompt" (or "text") and optionally "output_len"
 * (or "max_tokens"); default_output_len otherwise. Blank lines are skipped; at most
 * max_prompts are read (<= 0: all). input_len: the tokenizer's count, or the word count.
 * Errors: IO, MALFORMED (names the line), OUT_OF_MEMORY. */
llb_status bench_dataset_jsonl(const char *path, const struct tokenizer *tok, int32_t default_output_len,
                               int64_t max_prompts, struct bench_dataset *out);

/* Frees every prompt and the array; NULL ok; d is left empty. */
void bench_dataset_free(struct bench_dataset *d);

/* --- resident memory of a process tree --------------------------------------------- */

struct bench_mem {
  int64_t rss_bytes;  /* sum of VmRSS (shared pages counted once per process) */
  int64_t pss_bytes;  /* sum of Pss from smaps_rollup: shared pages split among ALL their mappers,
                       * processes outside the tree included (then it undercounts) */
  int64_t unique_bytes; /* sum of private pages + the largest shared resident set of one process:
                         * shared pages (the mmap'd model) counted once, as one machine holds them */
  int32_t num_procs;
  char root_comm[32]; /* the tree root's command name */
};

/* Pid of the process that listens on TCP `port` (IPv4 or IPv6, via /proc/net/tcp{,6} and
 * /proc/<pid>/fd), or -1 if none is visible. */
pid_t bench_find_listener(int port);

/* The root of the stack that `pid` belongs to: pid's ancestors are climbed while their
 * command name starts with comm_prefix (e.g. "llmbus": the api server's supervisor). */
pid_t bench_stack_root(pid_t pid, const char *comm_prefix);

/* Sums the memory of `root` and all its descendants. Errors: NOT_FOUND (no such process). */
llb_status bench_tree_memory(pid_t root, struct bench_mem *out);

/* One process so far, summed over its live threads: CPU seconds (/proc/<pid>/task/<tid>/schedstat,
 * nanosecond resolution), the times a thread went to sleep and was woken again (voluntary
 * context switches), and its command name (15 characters at most, as the kernel keeps it). */
struct bench_proc_cpu {
  pid_t pid;
  char comm[32];
  double cpu_s;
  int64_t sleeps;
};

/* The CPU time and sleeps of `root` and each of its live descendants: *out (malloc'd, *n_out entries,
 * the caller frees it). Errors: NOT_FOUND (root is gone), OUT_OF_MEMORY. */
llb_status bench_tree_cpu(pid_t root, struct bench_proc_cpu **out, size_t *n_out);

/* The CPU seconds of n processes of a bench_tree_cpu snapshot, summed. */
double bench_proc_cpu_total(const struct bench_proc_cpu *v, size_t n);

/* CPU time (user + system, seconds) used so far by `root` and its live descendants, from
 * /proc/<pid>/stat (clock-tick resolution); -1 if root is gone. */
double bench_tree_cpu_seconds(pid_t root);

/* The 1-minute load average of /proc/loadavg (how busy the machine was), -1 if unreadable. */
double bench_loadavg(void);

/* The value of the unlabelled sample `name` (e.g. "llmbus:spec_decode_num_drafts_total") in
 * Prometheus text exposition `text`, summed over its label sets when it has labels; false
 * when absent. */
bool bench_prom_value(const char *text, const char *name, double *out);

/* --- `vllm bench serve` flags (its other spellings are aliases in bench_serve.c's table) --- */

/* The endpoint a vLLM --backend implies: "/v1/completions" (vllm, openai, sglang, ...),
 * "/v1/chat/completions" (openai-chat, vllm-chat); NULL for a backend we do not speak. */
const char *bench_backend_endpoint(const char *backend);

/* "http://HOST:PORT" from vLLM's --host (NULL: 127.0.0.1) and --port (NULL: 8000) into
 * out[cap]. False for an empty host, one with ':' '/' '[' ']' (no IPv6 literal), a port that is
 * not 1-5 digits, or a URL longer than cap. */
bool bench_base_url_of(const char *host, const char *port, char *out, size_t cap);

/* --- subcommands -------------------------------------------------------------------- */

/* `llmbus-bench serve ...` (argv[0] = "serve"): returns the process exit code (0: every
 * request succeeded; 1: a failure; 2: a usage error). */
int bench_serve_main(int argc, char **argv);
/* `llmbus-bench engine ...` (argv[0] = "engine"): returns the process exit code (0, 1 on a
 * failed run, 2 on a usage error). */
int bench_engine_main(int argc, char **argv);

/* llmbus-bench hash: the cost of the keyed hashes (base/hash.h) per block, salt and request id,
 * and their share of a decode step (bench_hash.c). */
int bench_hash_main(int argc, char **argv);

#endif

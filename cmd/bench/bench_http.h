/* llmbus-bench: a minimal blocking HTTP/1.1 client over plain sockets, enough for an
 * OpenAI-compatible server: one GET (whole body) and one streamed POST whose SSE events are
 * timestamped as they arrive (TTFT, inter-token latencies). One connection per request
 * (Connection: close), so a request's timings never wait on another's. Thread-safe: every
 * call uses only its own socket and buffers.
 */
#ifndef LLB_CMD_BENCH_HTTP_H
#define LLB_CMD_BENCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct bench_target {
  char host[256];
  char port[16];
  char api_key[300]; /* sent as `Authorization: Bearer <api_key>` when not empty */
};

/* Parses "http://HOST:PORT" (a trailing '/' allowed; port default 80) into host and port
 * (api_key empty). https is refused. Errors: INVALID_ARGUMENT. */
llb_status bench_target_parse(const char *base_url, struct bench_target *out);

/* GET path; *body_out (malloc'd, NUL-terminated) and *status_out. Errors: CONNECTION, IO,
 * TIMEOUT, MALFORMED (not HTTP), OUT_OF_MEMORY. */
llb_status bench_http_get(const struct bench_target *t, const char *path, double timeout_s, int *status_out,
                          char **body_out);

/* The outcome of one streamed completion. Times in seconds from the request's send. */
struct bench_result {
  bool ok;
  char error[256];
  double ttft;             /* first chunk with text */
  double latency;          /* the last event ([DONE] or the end of the body) */
  int64_t prompt_tokens;   /* usage.prompt_tokens; -1 if the server sent no usage */
  int64_t output_tokens;   /* usage.completion_tokens, else the count of chunks with text */
  int64_t text_chunks;     /* chunks with text */
  double *itl;             /* [num_itl] gaps between consecutive text chunks (malloc'd) */
  size_t num_itl, cap_itl;
};

/* POSTs the JSON body to path with Accept: text/event-stream and reads the SSE stream to
 * its end, filling *r (r->ok false with r->error on any failure: HTTP status, an error
 * event, a broken stream, timeout between reads). */
void bench_http_stream(const struct bench_target *t, const char *path, const char *body, size_t body_len,
                       double timeout_s, struct bench_result *r);

void bench_result_free(struct bench_result *r);

#endif

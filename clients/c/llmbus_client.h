/* libllmbus-client: generate and tokenize against a running llmbus over NATS, from C.
 *
 * A small, self-contained API over the project's bus (NATS on libevent) and schemas
 * (FlatBuffers codec): no llmbus header is needed beside this one. Build flags:
 * `pkg-config --cflags --libs llmbus-client`. Subjects and messages: docs/design.md §2-3 of
 * the llmbus sources; the Python package clients/python offers the same with asyncio.
 *
 *   llmbus_client *c;
 *   llmbus_error err;
 *   llmbus_client_options o = {0};               // all zero: the newest running `llmbus serve`
 *   if (llmbus_client_connect(&o, &c, &err)) { fprintf(stderr, "%s\n", err.message); ... }
 *   llmbus_sampling sp;
 *   llmbus_sampling_init(&sp);
 *   sp.max_tokens = 32;
 *   llmbus_generate(c, "Name three rivers.", &sp, print_piece, NULL, &err);
 *   llmbus_client_close(c);
 *
 * Thread safety: one client may be used by one thread at a time. The library logs only
 * warnings and errors (one logfmt line each, on stderr) unless LLMBUS_LOG_LEVEL says otherwise.
 */
#ifndef LLMBUS_CLIENT_H
#define LLMBUS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LLMBUS_CLIENT_BUILD)
#define LLMBUS_API __attribute__((visibility("default")))
#else
#define LLMBUS_API
#endif

typedef struct llmbus_client llmbus_client; /* opaque: a NATS connection as one tenant */

/* How to reach the engine. Zero-initialise, then set what differs; strings are borrowed for
 * the duration of llmbus_client_connect. */
typedef struct llmbus_client_options {
  const char *nats_url;      /* NULL: the newest live connection file of `llmbus serve`
                              * ($XDG_RUNTIME_DIR/llmbus/ or ~/.cache/llmbus/, *.json) */
  const char *connection;    /* with nats_url NULL: that connection file (a path or NAME) */
  const char *user;          /* NATS user ("tenant-default"), NULL: none */
  const char *password_file; /* a file holding the user's password (first line) */
  const char *tenant;        /* NULL: from user "tenant-X", else "default" */
  const char *prefix;        /* subject prefix, NULL: "llm" */
  int timeout_ms;            /* longest wait for an output, 0: 60000 */
} llmbus_client_options;

/* Sampling parameters (vLLM's names); llmbus_sampling_init sets vLLM's defaults. */
typedef struct llmbus_sampling {
  int max_tokens;    /* default 16 */
  float temperature; /* default 1; 0 = greedy */
  float top_p;       /* default 1 */
  int top_k;         /* default 0 = off */
  int has_seed;      /* 0: the client draws a seed (a resent request repeats its tokens) */
  uint64_t seed;
  int ignore_eos;    /* default 0 */
} llmbus_sampling;

/* A failure, as the engine or the client reports it. code is an llb_status value of the
 * llmbus sources (base/status.h); status is its name ("QUEUE_FULL"). retry_after_ms > 0
 * when the same request may pass after that long (a tenant's token bucket). */
typedef struct llmbus_error {
  int code;
  char status[32];
  char message[512];
  char field[128];   /* the offending request field, "" when none */
  int64_t retry_after_ms;
} llmbus_error;

/* One piece of a streamed answer: the text and token ids new since the previous piece.
 * Pointers are valid during the callback only. */
typedef struct llmbus_piece {
  const char *request_id;   /* the engine's id of the request (for aborts) */
  const char *text;         /* [text_len] bytes of UTF-8, not NUL-terminated */
  size_t text_len;
  const int32_t *token_ids; /* [num_token_ids] */
  int num_token_ids;
  const char *finish_reason; /* NULL while running; "stop", "length", "abort", "error" */
} llmbus_piece;

/* Called for each piece; return non-zero to stop: the request is then aborted on the engine
 * and llmbus_generate returns LLMBUS_ABORTED. */
typedef int (*llmbus_piece_fn)(const llmbus_piece *piece, void *user);

enum { LLMBUS_OK = 0, LLMBUS_ABORTED = 13 /* llb_status ABORTED */ };

LLMBUS_API void llmbus_sampling_init(llmbus_sampling *sp);

/* Connects; on success *out is the caller's (llmbus_client_close). Returns 0, or an llb_status
 * code with *err filled (no server, bad credentials, no connection file: the message says). */
LLMBUS_API int llmbus_client_connect(const llmbus_client_options *o, llmbus_client **out, llmbus_error *err);

/* Closes the connection and frees the client. NULL ok. */
LLMBUS_API void llmbus_client_close(llmbus_client *c);

/* Generates a completion of prompt (raw text, no chat template) and calls fn with each piece
 * until the request finishes. A request no input processor takes is sent again for about
 * 5 s. Returns 0, LLMBUS_ABORTED when fn stopped it, or the code of *err (the engine's
 * ErrorInfo, a timeout, no engine). */
LLMBUS_API int llmbus_generate(llmbus_client *c, const char *prompt, const llmbus_sampling *sp, llmbus_piece_fn fn,
                    void *user, llmbus_error *err);

/* Tokenizes prompt as a generate request would. On success *ids (caller frees with free())
 * holds *num_ids token ids. Returns 0 or the code of *err. */
LLMBUS_API int llmbus_tokenize(llmbus_client *c, const char *prompt, int32_t **ids, int *num_ids, llmbus_error *err);

#ifdef __cplusplus
}
#endif

#endif

/* The connection file of a running `llmbus serve`: how a client on the same host finds it.
 *
 * serve writes one JSON file per run into the connection directory — $XDG_RUNTIME_DIR/llmbus
 * when XDG_RUNTIME_DIR is set, else ~/.cache/llmbus (created with mode 0700) — named
 * <name>.json, mode 0600, and removes it when it stops; a later serve removes the files of
 * serves that are gone (their pid no longer runs). The file says:
 *   {"name": "...", "pid": 1234, "pid_start": 5678, "started_at": 1730000000.5,
 *    "nats_url": "nats://127.0.0.1:PORT", "prefix": "llm", "tenant": "default",
 *    "nats_user": "tenant-default", "nats_password_file": "<run dir>/tenant-default.password",
 *    "operator_user": "operator", "operator_password_file": "<run dir>/operator.password",
 *    "http_url": "http://127.0.0.1:8000/v1", "models": ["SmolLM2-135M-Instruct.Q4_1"],
 *    "model_path": "/abs/path/model.gguf"}
 * (<run dir>: serve's $TMPDIR/llmbus-nats-auth-<random> from run_dir_create; users and
 * password files empty when the bus has no accounts: --no-nats-auth, --nats). The
 * passwords themselves stay in serve's own 0600 files; the connection file only points at them.
 * `pid_start` is the process's start time in clock ticks (/proc/<pid>/stat field 22), so a
 * reused pid does not make a dead serve look alive.
 *
 * `llmbus generate/chat/status/tokenize` read the newest live file (by started_at) unless
 * told --nats / --model, or `--connect NAME` (a name, or a path to a file).
 */
#ifndef LLB_CMD_SUPERVISOR_CONNECTION_H
#define LLB_CMD_SUPERVISOR_CONNECTION_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define SERVE_CONNECTION_MAX_MODELS 8
#define SERVE_CONNECTION_NAME_MAX 96

/* What a client needs to reach one serve. Strings are "" when absent. */
struct serve_connection {
  char name[SERVE_CONNECTION_NAME_MAX]; /* the file's name without .json: [A-Za-z0-9._-]+ */
  long pid;
  unsigned long long pid_start; /* /proc/<pid>/stat starttime; 0 = unknown */
  double started_at;            /* wall clock, seconds since the epoch */
  char nats_url[256];
  char prefix[64];
  char tenant[64];
  char nats_user[96];
  char nats_password_file[PATH_MAX];
  char operator_user[96];
  char operator_password_file[PATH_MAX];
  char http_url[300];
  char models[SERVE_CONNECTION_MAX_MODELS][128];
  int num_models;
  char model_path[PATH_MAX];
};

/* The connection directory (see the top) into buf[cap], created (mode 0700) when missing.
 * Errors: NOT_FOUND when neither XDG_RUNTIME_DIR nor HOME is set, IO when it cannot be made. */
llb_status serve_connection_dir(char *buf, size_t cap);

/* Whether the serve of `c` still runs: its pid exists with the recorded start time. */
bool serve_connection_alive(const struct serve_connection *c);

/* This process's /proc/self/stat start time (for pid_start); 0 when unknown. */
unsigned long long serve_connection_self_start(void);

/* Makes `want` ("" = "llmbus") a file name ([A-Za-z0-9._-], others become '-') that no live
 * serve's file in `dir` has, appending "-<pid>" when needed, into name[cap]. */
void serve_connection_pick_name(const char *dir, const char *want, long pid, char *name, size_t cap);

/* Writes c as <dir>/<c->name>.json (mode 0600, through a temporary file and rename) and puts
 * its path into path[cap]. Errors: IO, OUT_OF_MEMORY. */
llb_status serve_connection_write(const char *dir, const struct serve_connection *c, char *path, size_t cap);

/* `llmbus serve --api-key`'s keys file in the connection directory: this prefix and its pid. */
#define SERVE_CONNECTION_KEYS_PREFIX ".api-keys-"

/* Removes the files in dir whose serve is gone (connection files, and the keys files of
 * SERVE_CONNECTION_KEYS_PREFIX<pid> whose pid no longer runs); returns how many. */
int serve_connection_remove_stale(const char *dir);

/* Removes the connection file at path if it is this process's (another serve may have taken
 * its name since). */
void serve_connection_remove_own(const char *path);

/* Reads one connection file. Errors: IO, MALFORMED (not the JSON above). */
llb_status serve_connection_read(const char *path, struct serve_connection *out);

/* The serve to connect to: `which` NULL or "" = the newest live file of the connection
 * directory; a name = <dir>/<which>.json; a path (contains '/') = that file. A named file must
 * be live. Errors: NOT_FOUND ("no running llmbus serve found in DIR", or naming the live ones),
 * those of serve_connection_read / serve_connection_dir. */
llb_status serve_connection_find(const char *which, struct serve_connection *out);

#endif

/* The locked-down NATS set-up of `llmbus serve`: accounts, users, permissions, credentials.
 *
 * When serve starts its own nats-server, it first generates (per run) a private directory
 * (mkdtemp, mode 0700) holding:
 *   nats.conf               the server's configuration (mode 0600): the accounts below
 *   <user>.password         one random password per user (32 random bytes as hex, mode 0600)
 * and removes it again when serve stops. Passwords are never logged and never put on a
 * command line: each actor gets `--nats-user NAME --nats-password-file PATH`.
 *
 * Accounts (docs/design.md §7):
 *   ENGINE      every engine actor, each its own user with the publish/subscribe permissions
 *               of docs/design.md's subject table (serve_nats_user_permissions); it exports, per
 *               tenant T, the services <prefix>.generate.T (streamed responses),
 *               <prefix>.abort.T and <prefix>.tokenize.T to T's account and to FRONT, and the
 *               streams <prefix>.engine.*.stats and <prefix>.health.> to FRONT only.
 *   FRONT       the api server (user api-server) and the operator's command line (user
 *               operator, used by `llmbus run`): they may publish on every tenant's subjects
 *               and so must establish the tenant themselves (the api server from the API key).
 *   TENANT_<T>  per tenant T, user tenant-<T>: imports only T's three services; publishes only
 *               on them, subscribes only to its own inboxes. Its replies come back only to it.
 * No user without a password is accepted (no `no_auth_user`): a client without
 * credentials cannot connect. Inside ENGINE only the subjects the table names are open to
 * each actor, so a tenant's identity is the account the server routed its request from —
 * the import maps T's subject into ENGINE — never a field or subject the client chooses.
 *
 * Tenants file (`serve --tenants FILE`): one tenant a line, its name (a NATS subject token:
 * letters, digits, '-', '_') and optional per-tenant limits `max_concurrent=N max_queued=N
 * tokens_per_s=R burst_tokens=B` that the input processor enforces (it gets the file as
 * --tenant-limits; actors/input_processor/tenant_limits.h); '#' starts a comment; at most
 * SERVE_NATS_MAX_TENANTS. Without one, the single tenant is `default`, without limits.
 *
 * Source followed: nats-server 2.9 configuration (accounts, exports/imports with
 * `response: stream`, permissions with allow_responses).
 */
#ifndef LLB_CMD_SERVE_NATS_CONFIG_H
#define LLB_CMD_SERVE_NATS_CONFIG_H

#include <stddef.h>

#include "base/status.h"
#include "cmd/supervisor/supervisor.h"

#define SERVE_NATS_MAX_TENANTS 64
#define SERVE_NATS_NAME_MAX 64

/* The tenants of a deployment (names are NATS subject tokens). */
struct serve_tenants {
  char names[SERVE_NATS_MAX_TENANTS][SERVE_NATS_NAME_MAX];
  int num;
};

/* Reads a tenants file (format above) into *out. Errors: IO when it cannot be read,
 * INVALID_ARGUMENT naming the file and line for a bad or duplicate name, none at all, or more
 * than SERVE_NATS_MAX_TENANTS. */
llb_status serve_tenants_read(const char *path, struct serve_tenants *out);

/* The single tenant `default`. */
void serve_tenants_default(struct serve_tenants *out);

/* Writes the publish and subscribe permissions of `user` (an actor's child name, "api-server",
 * "operator", or "tenant-<T>") as a nats.conf `permissions: {...}` block into buf[cap].
 * Returns the length, or -1 for an unknown user or too small a buffer. Exposed for tests. */
int serve_nats_user_permissions(const char *user, const char *prefix, char *buf, size_t cap);

struct serve_nats_auth; /* opaque: the generated directory */

/* Generates the directory, passwords and nats.conf for `tenants` under $TMPDIR (or /tmp).
 * prefix: the subject prefix (NULL = "llm"). Errors: IO (mkdtemp, write, no randomness),
 * INVALID_ARGUMENT (prefix). On success *out: serve_nats_auth_destroy(), which removes the
 * directory. */
llb_status serve_nats_auth_create(const struct serve_tenants *tenants, const char *prefix,
                                  struct serve_nats_auth **out);

/* Removes the directory and frees. NULL ok. */
void serve_nats_auth_destroy(struct serve_nats_auth *a);

/* Path of nats.conf (for `nats-server -c`); owned by a. */
const char *serve_nats_auth_config_path(const struct serve_nats_auth *a);

/* Path of the generated directory; owned by a. */
const char *serve_nats_auth_dir(const struct serve_nats_auth *a);

/* The password file of `user` into buf[cap]; INVALID_ARGUMENT for a user not generated. */
llb_status serve_nats_auth_password_file(const struct serve_nats_auth *a, const char *user, char *buf,
                                         size_t cap);

/* Appends `--nats-user USER --nats-password-file <its file>` to spec, USER being the child's
 * name (an engine actor or api-server), without the "-<engine index>" that `--engines N` adds.
 * INVALID_ARGUMENT for an unknown child. */
llb_status serve_nats_auth_add_child_args(const struct serve_nats_auth *a, struct child_spec *spec);

/* What serve and run call: with an embedded nats-server (so->nats_url NULL) generates the
 * set-up for so->tenants_file (or the tenant `default`) and the prefix engine flag, points
 * cfg->nats_config_file at its nats.conf and gives each of specs[0..n) its user
 * (serve_nats_auth_add_child_args). With --nats the operator's server decides and *out stays
 * NULL; a tenants file is then an INVALID_ARGUMENT (it could not be enforced). *out (may be
 * NULL): serve_nats_auth_destroy() after the supervisor is gone. */
llb_status serve_nats_auth_apply(const struct serve_options *so, struct child_spec *specs, int n,
                                 struct supervisor_config *cfg, struct serve_nats_auth **out);

#endif

/* API keys of the HTTP front door: `Authorization: Bearer KEY` → the tenant it belongs to.
 *
 * The api server publishes each request on <prefix>.generate.<tenant> of the tenant its key
 * maps to; nothing in the request body or headers other than the key chooses the tenant.
 * Keys are compared in constant time (every stored key is compared in full, whatever
 * matched or not), so response timing tells nothing about a key's prefix or its position.
 *
 * Keys file (`--api-keys FILE`): one `KEY TENANT` pair a line, separated by spaces or tabs;
 * '#' at the start of a line makes it a comment; blank lines ignored. A key is 8..256
 * visible ASCII characters; a tenant a NATS subject token. The file must not be readable by
 * group or others (mode 0600), like an ssh key. Source followed: OpenAI API reference
 * (Authentication: `Authorization: Bearer`), RFC 6750 §2.1.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_KEYS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_KEYS_H

#include <stdbool.h>

#include "base/status.h"

#define API_SERVER_KEY_MIN_BYTES 8
#define API_SERVER_KEY_MAX_BYTES 256
#define API_SERVER_KEYS_MAX 1024

struct api_server_keys; /* opaque */

/* An empty key set (no key accepted until one is added). *out: api_server_keys_destroy(). */
llb_status api_server_keys_create(struct api_server_keys **out);

/* Frees. NULL ok. */
void api_server_keys_destroy(struct api_server_keys *k);

/* Adds `key` for `tenant`. INVALID_ARGUMENT (never quoting the key) for a key that is too
 * short or long or holds a non-visible character, a bad tenant name, a duplicate key, or more
 * than API_SERVER_KEYS_MAX keys. */
llb_status api_server_keys_add(struct api_server_keys *k, const char *key, const char *tenant);

/* Adds every pair of a keys file (format above). IO when unreadable, INVALID_ARGUMENT naming
 * the file and line (never the key) for a bad line or a group/world-readable file. */
llb_status api_server_keys_load_file(struct api_server_keys *k, const char *path);

/* How many keys are set. */
int api_server_keys_count(const struct api_server_keys *k);

/* The tenant of the key in an Authorization header value ("Bearer KEY"; the scheme is
 * case-insensitive), or NULL when the header is NULL, not a Bearer credential, or the key is
 * unknown. The returned string lives as long as k. Constant time in the stored keys. */
const char *api_server_keys_tenant_of(const struct api_server_keys *k, const char *authorization);

#endif

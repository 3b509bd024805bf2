/* API keys → tenants, compared in constant time (see api_server_keys.h). */
#include "actors/api_server/api_server_keys.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "bus/subject.h"

struct api_server_key_entry {
  char key[API_SERVER_KEY_MAX_BYTES + 1];
  size_t len;
  char tenant[64];
};

struct api_server_keys {
  struct api_server_key_entry *entries; /* [num] */
  int num, cap;
};

llb_status api_server_keys_create(struct api_server_keys **out) {
  *out = calloc(1, sizeof **out);
  return *out ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api keys");
}

void api_server_keys_destroy(struct api_server_keys *k) {
  if (!k) return;
  if (k->entries) memset(k->entries, 0, (size_t)k->cap * sizeof *k->entries);
  free(k->entries);
  free(k);
}

int api_server_keys_count(const struct api_server_keys *k) { return k ? k->num : 0; }

/* Equal in constant time for strings of up to API_SERVER_KEY_MAX_BYTES: always reads both buffers
 * to their full size (the stored one is NUL-padded, the candidate is copied padded). */
static bool equal_ct(const struct api_server_key_entry *e, const char padded[API_SERVER_KEY_MAX_BYTES + 1], size_t len) {
  volatile unsigned char diff = (unsigned char)(e->len != len);
  for (size_t i = 0; i < API_SERVER_KEY_MAX_BYTES + 1; i++) diff |= (unsigned char)(e->key[i] ^ padded[i]);
  return diff == 0;
}

static bool key_valid(const char *key, size_t len) {
  if (len < API_SERVER_KEY_MIN_BYTES || len > API_SERVER_KEY_MAX_BYTES) return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7E) return false;
  return true;
}

llb_status api_server_keys_add(struct api_server_keys *k, const char *key, const char *tenant) {
  size_t len = key ? strlen(key) : 0;
  if (!key_valid(key ? key : "", len))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "an API key must be %d..%d visible ASCII characters",
                    API_SERVER_KEY_MIN_BYTES, API_SERVER_KEY_MAX_BYTES);
  if (!tenant || !bus_token_valid(tenant) || strlen(tenant) >= sizeof k->entries[0].tenant)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "API key tenant '%s' is not a tenant name", tenant ? tenant : "");
  if (k->num >= API_SERVER_KEYS_MAX) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "more than %d API keys", API_SERVER_KEYS_MAX);
  char padded[API_SERVER_KEY_MAX_BYTES + 1] = {0};
  memcpy(padded, key, len);
  for (int i = 0; i < k->num; i++)
    if (equal_ct(&k->entries[i], padded, len))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the same API key given twice (tenants %s and %s)",
                      k->entries[i].tenant, tenant);
  if (k->num == k->cap) {
    int cap = k->cap ? 2 * k->cap : 8;
    struct api_server_key_entry *e = calloc((size_t)cap, sizeof *e);
    if (!e) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api keys");
    if (k->num) memcpy(e, k->entries, (size_t)k->num * sizeof *e);
    if (k->entries) memset(k->entries, 0, (size_t)k->cap * sizeof *e);
    free(k->entries);
    k->entries = e;
    k->cap = cap;
  }
  struct api_server_key_entry *e = &k->entries[k->num++];
  memset(e, 0, sizeof *e);
  memcpy(e->key, key, len);
  e->len = len;
  snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
  memset(padded, 0, sizeof padded);
  return LLB_STATUS_OK;
}

llb_status api_server_keys_load_file(struct api_server_keys *k, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return LLB_ERRF(LLB_STATUS_IO, "API keys file %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO))) {
    fclose(f);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "API keys file %s: mode %03o lets others read it (chmod 600)", path,
                    (unsigned)(sb.st_mode & 0777));
  }
  char line[1024];
  int lineno = 0;
  llb_status st = LLB_STATUS_OK;
  while (st == LLB_STATUS_OK && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "\r\n")] = '\0';
    char *save = NULL;
    char *key = strtok_r(line, " \t", &save);
    if (!key || key[0] == '#') continue;
    char *tenant = strtok_r(NULL, " \t", &save);
    char *extra = tenant ? strtok_r(NULL, " \t", &save) : NULL;
    if (!tenant || extra)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "API keys file %s:%d: expected `KEY TENANT`", path, lineno);
    else if (api_server_keys_add(k, key, tenant) != LLB_STATUS_OK)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "API keys file %s:%d: %s", path, lineno, llb_err_last());
  }
  memset(line, 0, sizeof line);
  fclose(f);
  return st;
}

const char *api_server_keys_tenant_of(const struct api_server_keys *k, const char *authorization) {
  if (!k || !authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return NULL;
  const char *key = authorization + 7;
  while (*key == ' ') key++;
  size_t len = strlen(key);
  while (len > 0 && key[len - 1] == ' ') len--;
  if (!key_valid(key, len)) return NULL;
  char padded[API_SERVER_KEY_MAX_BYTES + 1] = {0};
  memcpy(padded, key, len);
  const char *tenant = NULL;
  for (int i = 0; i < k->num; i++) { /* no early exit: every key costs the same */
    bool eq = equal_ct(&k->entries[i], padded, len);
    tenant = eq ? k->entries[i].tenant : tenant;
  }
  memset(padded, 0, sizeof padded);
  return tenant;
}

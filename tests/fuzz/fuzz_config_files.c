/* libFuzzer targets for the operator's files that name tenants and keys: FUZZ_FILE_KIND 0 is
 * the tenants file (`serve --tenants`, actors/input_processor/tenant_limits.h, whose names end
 * up in nats.conf), 1 the API-keys file (`--api-keys`, actors/api_server/api_server_keys.h). Built as
 * fuzz_tenants_file and fuzz_api_keys_file. The bytes are written to a private file (0600, as
 * both readers demand) and loaded. Oracles: a refusal says which line; every tenant loaded is a
 * subject token (bus/subject.h's one rule) with limits in their ranges, and the limits run on
 * them; a refused keys file names itself. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/api_server/api_server_keys.h"
#include "actors/input_processor/tenant_limits.h"
#include "bus/subject.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static int file_fd = -1;

/* The bytes as a private file the readers open by path: a memfd (no disk), mode 0600. */
static void write_file(const uint8_t *data, size_t size) {
  if (file_fd < 0) {
    file_fd = memfd_create("llmbus-fuzz-file", MFD_CLOEXEC);
    if (file_fd < 0 || fchmod(file_fd, 0600) != 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", file_fd);
  }
  if (ftruncate(file_fd, 0) != 0 || pwrite(file_fd, data, size, 0) != (ssize_t)size) abort();
}

#if FUZZ_FILE_KIND == 0
static void check(void) {
  static struct tenant_limits_config cfg;
  if (tenant_limits_config_load(path, &cfg) != LLB_STATUS_OK) {
    if (!strstr(llb_err_last(), path)) abort();
    return;
  }
  if (cfg.num < 1 || cfg.num > TENANT_LIMITS_MAX_TENANTS) abort();
  for (int i = 0; i < cfg.num; i++) {
    const struct tenant_limit *t = &cfg.tenants[i];
    if (!bus_token_valid(t->name) || t->max_concurrent < 0 || t->max_queued < 0 || !(t->tokens_per_s >= 0) ||
        !(t->burst_tokens >= 0)) {
      fprintf(stderr, "tenant '%s' loaded with bad values\n", t->name);
      abort();
    }
  }
  struct tenant_limits *tl = NULL;
  if (tenant_limits_create(&cfg, 1000, &tl) != LLB_STATUS_OK) abort();
  int64_t retry;
  const char *ids[1] = {"x-0123abcd0123456789abcdef"};
  (void)tenant_limits_precharge(tl, cfg.tenants[0].name, 1, 10, 0, &retry);
  (void)tenant_limits_admit(tl, cfg.tenants[0].name, ids, 1, 20, 10, 0, &retry);
  tenant_limits_destroy(tl);
}
#else
static void check(void) {
  struct api_server_keys *k = NULL;
  if (api_server_keys_create(&k) != LLB_STATUS_OK) abort();
  if (api_server_keys_load_file(k, path) != LLB_STATUS_OK) {
    if (!strstr(llb_err_last(), path)) abort();
  }
  api_server_keys_destroy(k);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024) return 0;
  write_file(data, size);
  check();
  return 0;
}

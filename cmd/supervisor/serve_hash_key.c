/* The deployment's hash key of serve (serve_hash_key.h). */
#include "cmd/supervisor/serve_hash_key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/log.h"
#include "bus/credentials.h"
#include "cmd/supervisor/run_dir.h"

/* Whether the file holds a key the actors will accept (same reader as theirs). */
static llb_status check_key_file(const char *path) {
  char text[BUS_PASSWORD_MAX + 1];
  struct llb_hash_key k;
  llb_status st = bus_password_file_read(path, text, sizeof text);
  if (st == LLB_STATUS_OK) st = llb_hash_key_from_hex(text, &k);
  memset(text, 0, sizeof text);
  memset(&k, 0, sizeof k);
  return st == LLB_STATUS_OK ? st : LLB_ERRF(st, "hash key file %s: %s", path, llb_err_last());
}

/* A new random key into a new file at path (O_EXCL, 0600). EEXIST comes back as IO. */
static llb_status write_new_key(const char *path) {
  struct llb_hash_key k;
  char hex[2 * LLB_HASH_KEY_BYTES + 2];
  llb_hash_key_generate(&k);
  llb_hash_key_to_hex(&k, hex);
  memset(&k, 0, sizeof k);
  strcat(hex, "\n");
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  llb_status st = LLB_STATUS_OK;
  if (fd < 0) st = LLB_ERRF(LLB_STATUS_IO, "create %s: %s", path, strerror(errno));
  else if (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex)) st = LLB_ERRF(LLB_STATUS_IO, "write %s", path);
  if (fd >= 0 && close(fd) != 0 && st == LLB_STATUS_OK) st = LLB_ERRF(LLB_STATUS_IO, "close %s", path);
  memset(hex, 0, sizeof hex);
  if (st != LLB_STATUS_OK && fd >= 0) unlink(path);
  return st;
}

static llb_status resolve(const struct serve_options *so, struct serve_hash_key *out) {
  if (so->hash_key_file) {
    snprintf(out->path, sizeof out->path, "%s", so->hash_key_file);
    return check_key_file(out->path);
  }
  if (so->state_dir) {
    if (snprintf(out->path, sizeof out->path, "%s/" SERVE_HASH_KEY_FILE, so->state_dir) >= (int)sizeof out->path)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--state-dir path too long");
    if (access(out->path, F_OK) != 0) {
      llb_status st = write_new_key(out->path);
      if (st != LLB_STATUS_OK) return st;
      LLB_LOG_INFO("hash_key_generated", "file=%s scope=state_dir", out->path);
    }
    return check_key_file(out->path);
  }
  llb_status st = run_dir_create("hash-key", out->own_dir, sizeof out->own_dir);
  if (st != LLB_STATUS_OK) return st;
  if (snprintf(out->path, sizeof out->path, "%s/" SERVE_HASH_KEY_FILE, out->own_dir) >= (int)sizeof out->path)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hash key path under %s too long", out->own_dir);
  st = write_new_key(out->path);
  if (st == LLB_STATUS_OK) LLB_LOG_INFO("hash_key_generated", "file=%s scope=run", out->path);
  return st;
}

llb_status serve_hash_key_apply(const struct serve_options *so, struct child_spec *specs, int n,
                                struct serve_hash_key *out) {
  memset(out, 0, sizeof *out);
  llb_status st = resolve(so, out);
  if (st == LLB_STATUS_OK && so->nats_url && !so->hash_key_file)
    LLB_LOG_WARN("hash_key_not_shared", "reason=\"--nats without --hash-key-file: the input processors of "
                 "other hosts cannot recognise this host's request ids (aborts, resumes)\"");
  for (int i = 0; st == LLB_STATUS_OK && i < n; i++) {
    if (strncmp(specs[i].name, "scheduler", 9) != 0 && strncmp(specs[i].name, "input-processor", 15) != 0) continue;
    st = child_spec_add_arg(&specs[i], "--hash-key-file");
    if (st == LLB_STATUS_OK) st = child_spec_add_arg(&specs[i], out->path);
  }
  return st;
}

void serve_hash_key_release(struct serve_hash_key *k) {
  if (!k) return;
  run_dir_remove(k->own_dir);
  memset(k, 0, sizeof *k);
}

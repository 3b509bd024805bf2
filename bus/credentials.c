/* NATS credentials: redacted URLs, password files (see credentials.h). */
#include "bus/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Appends n bytes of s to buf[cap] at *len, truncating. */
static void append(char *buf, size_t cap, size_t *len, const char *s, size_t n) {
  if (*len + 1 >= cap) return;
  size_t room = cap - 1 - *len;
  if (n > room) n = room;
  memcpy(buf + *len, s, n);
  *len += n;
  buf[*len] = '\0';
}

void bus_url_redact(const char *urls, char *buf, size_t cap) {
  if (!cap) return;
  buf[0] = '\0';
  if (!urls) return;
  size_t len = 0;
  const char *p = urls;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *scheme = NULL;
    for (size_t i = 0; i + 3 <= n; i++)
      if (memcmp(p + i, "://", 3) == 0) {
        scheme = p + i + 3;
        break;
      }
    const char *start = scheme ? scheme : p;
    /* the host starts after the last '@' before any '/' of a path */
    const char *at = NULL;
    for (const char *q = start; q < p + n && *q != '/'; q++)
      if (*q == '@') at = q;
    if (at) {
      append(buf, cap, &len, p, (size_t)(start - p));
      append(buf, cap, &len, "***", 3);
      append(buf, cap, &len, at, (size_t)(p + n - at));
    } else {
      append(buf, cap, &len, p, n);
    }
    if (!end) break;
    append(buf, cap, &len, ",", 1);
    p = end + 1;
  }
}

llb_status bus_password_file_read(const char *path, char *buf, size_t cap) {
  if (!path || !buf || !cap) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bus_password_file_read: bad arguments");
  buf[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: %s", path, strerror(errno));
  struct stat sb;
  llb_status st = LLB_STATUS_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: not a regular file", path);
  else if (sb.st_mode & (S_IRWXG | S_IRWXO))
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: mode %03o lets others read it (chmod 600)", path,
                  (unsigned)(sb.st_mode & 0777));
  char tmp[BUS_PASSWORD_MAX + 2];
  ssize_t n = 0;
  if (st == LLB_STATUS_OK) {
    n = read(fd, tmp, sizeof tmp - 1);
    if (n < 0) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: %s", path, strerror(errno));
  }
  close(fd);
  if (st != LLB_STATUS_OK) return st;
  tmp[n] = '\0';
  size_t len = strcspn(tmp, "\r\n");
  if (len == 0) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: empty", path);
  else if (len > BUS_PASSWORD_MAX || len >= cap)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file %s: longer than %zu bytes", path,
                  cap - 1 < BUS_PASSWORD_MAX ? cap - 1 : (size_t)BUS_PASSWORD_MAX);
  if (st == LLB_STATUS_OK) {
    memcpy(buf, tmp, len);
    buf[len] = '\0';
  }
  memset(tmp, 0, sizeof tmp);
  return st;
}

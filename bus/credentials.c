/* NATS credentials: password files (see credentials.h). */
#include "bus/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

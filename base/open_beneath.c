#include "base/open_beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int llb_open_beneath(int dirfd, const char *rel) {
  struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
}

int llb_open_regular_beneath(const char *dir_path, const char *rel) {
  if (!dir_path || !rel || !rel[0]) {
    errno = ENOENT;
    return -1;
  }
  const int dfd = open(dir_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  const int fd = llb_open_beneath(dfd, rel);
  const int open_errno = errno;
  close(dfd);
  if (fd < 0) {
    errno = open_errno == ENOSYS ? ENOSYS : ENOENT;
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    errno = ENOENT;
    return -1;
  }
  return fd;
}

/* Opening a file a client named, confined to one directory: the path is resolved beneath the
 * directory only (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, Linux
 * 5.6: no "..", no absolute path, no symbolic link anywhere on the way), read-only, without
 * blocking on a FIFO or a device (O_NONBLOCK). Used for file:// media (api_server) and for
 * LoRA adapters loaded at run time (gpu_worker --lora-dir). */
#ifndef LLB_BASE_OPEN_BENEATH_H
#define LLB_BASE_OPEN_BENEATH_H

/* Opens rel beneath the open directory dirfd. Returns the descriptor (the caller closes it), or
 * -1 with errno (ENOSYS: the kernel has no openat2). The file may be of any type: callers that
 * read it check S_ISREG on the descriptor. */
int llb_open_beneath(int dirfd, const char *rel);

/* As llb_open_beneath, beneath the directory at dir_path (opened O_PATH for the call), and only
 * a regular file: -1 with errno for anything else (ENOENT for a missing file, a path outside
 * the directory, a symbolic link, a directory, an empty rel alike; ENOSYS: no openat2), so that
 * callers can answer one text for all of them and leak no existence. */
int llb_open_regular_beneath(const char *dir_path, const char *rel);

#endif

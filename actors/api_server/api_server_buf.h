/* A growable byte buffer for the api server's bodies and errors (pure logic). */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_BUF_H
#define LLB_ACTORS_API_SERVER_API_SERVER_BUF_H

#include <stdbool.h>
#include <stddef.h>

/* A growable byte buffer (NUL-terminated after every append). Zero-initialize; free with
 * api_server_buf_free. Appends return false when memory runs out (the buffer is unchanged). */
struct api_server_buf {
  char *data;
  size_t len, cap;
};
bool api_server_buf_append(struct api_server_buf *b, const void *data, size_t len);
bool api_server_buf_printf(struct api_server_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void api_server_buf_free(struct api_server_buf *b);

#endif

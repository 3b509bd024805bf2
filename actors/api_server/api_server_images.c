/* image_url content parts. See api_server_images.h. */
#include "actors/api_server/api_server_images.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/api_server/api_server_embeds.h"
#include "base/open_beneath.h"
#include "model/vision/image.h"

#define BAD(param, ...) api_server_error_bad(err, (param), __VA_ARGS__)

/* The dtype of a magic-byte sniff, or NULL. */
static const char *sniffed(const uint8_t *d, size_t n) {
  enum llb_image_format f = llb_image_sniff(d, n);
  return f == LLB_IMAGE_JPEG ? "jpeg" : f == LLB_IMAGE_PNG ? "png" : NULL;
}

/* data:<media type>;base64,<payload> */
static llb_status read_data_url(const char *url, size_t n, const char *param, uint8_t **data, size_t *len,
                                const char **dtype, struct api_server_error *err) {
  const char *comma = memchr(url, ',', n);
  if (!comma) return BAD(param, "'%s' is a data: URL without a ',' before its payload", param);
  size_t hlen = (size_t)(comma - url) - 5; /* after "data:" */
  const char *h = url + 5;
  const char *want = NULL;
  if (hlen == 16 && strncasecmp(h, "image/png;base64", 16) == 0) want = "png";
  else if ((hlen == 17 && strncasecmp(h, "image/jpeg;base64", 17) == 0) ||
           (hlen == 16 && strncasecmp(h, "image/jpg;base64", 16) == 0))
    want = "jpeg";
  if (!want)
    return BAD(param, "'%s': data URL of type '%.*s' is not supported (supported: data:image/jpeg;base64 and "
               "data:image/png;base64)", param, (int)(hlen > 64 ? 64 : hlen), h);
  size_t blen = n - (size_t)(comma + 1 - url);
  if (blen / 4 * 3 > (size_t)API_SERVER_MAX_IMAGE_BYTES + 3)
    return BAD(param, "'%s': the image is larger than %d bytes", param, API_SERVER_MAX_IMAGE_BYTES);
  llb_status st = api_server_base64_decode(comma + 1, blen, data, len);
  if (st == LLB_STATUS_OUT_OF_MEMORY) return api_server_error_oom(err);
  if (st != LLB_STATUS_OK) return BAD(param, "'%s': the base64 payload is invalid: %s", param, llb_err_last());
  if (*len > (size_t)API_SERVER_MAX_IMAGE_BYTES) {
    free(*data);
    *data = NULL;
    return BAD(param, "'%s': the image has %zu bytes, more than %d", param, *len, API_SERVER_MAX_IMAGE_BYTES);
  }
  const char *got = sniffed(*data, *len);
  if (!got || strcmp(got, want) != 0) {
    free(*data);
    *data = NULL;
    return BAD(param, "'%s': the data is %s, not the declared image/%s", param,
               got ? (strcmp(got, "png") == 0 ? "a PNG file" : "a JPEG file") : "neither JPEG nor PNG", want);
  }
  *dtype = want;
  return LLB_STATUS_OK;
}

/* Reads the regular file fd (at most API_SERVER_MAX_IMAGE_BYTES) into *data. */
static llb_status read_regular(int fd, const char *param, uint8_t **data, size_t *len, struct api_server_error *err) {
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return BAD(param, "'%s': " API_SERVER_LOCAL_MEDIA_NOT_FOUND, param);
  if (sb.st_size > API_SERVER_MAX_IMAGE_BYTES)
    return BAD(param, "'%s': the image is larger than %d bytes", param, API_SERVER_MAX_IMAGE_BYTES);
  *data = malloc((size_t)sb.st_size + 1);
  if (!*data) return api_server_error_oom(err);
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t r = read(fd, *data + got, (size_t)sb.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  *len = got;
  return LLB_STATUS_OK;
}

/* file:///path inside the allowed directory (realpath'd at start), read up to the limit. A path
 * that is missing, outside the directory, through a symbolic link, or not a regular file all get
 * the one answer API_SERVER_LOCAL_MEDIA_NOT_FOUND: a client learns nothing about files it may not read. */
static llb_status read_file_url(const char *url, const char *param, const char *dir, uint8_t **data, size_t *len,
                                const char **dtype, struct api_server_error *err) {
  if (!dir)
    return BAD(param, "'%s': file:// URLs are refused; the server allows local files only under "
               "--allowed-local-media-path", param);
  const char *path = url + 7;
  if (path[0] != '/') return BAD(param, "'%s': a file URL must be file:///absolute/path", param);
  size_t dl = strlen(dir);
  const bool root = dl == 1 && dir[0] == '/';
  const char *rel = root ? path + 1 : path + dl + 1;
  if (!root && (strncmp(path, dir, dl) != 0 || path[dl] != '/'))
    return BAD(param, "'%s': " API_SERVER_LOCAL_MEDIA_NOT_FOUND, param);
  int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int fd = dfd >= 0 && rel[0] ? llb_open_beneath(dfd, rel) : -1;
  const int open_errno = errno;
  if (dfd >= 0) close(dfd);
  if (fd < 0 && open_errno == ENOSYS)
    return BAD(param, "'%s': file:// URLs need Linux 5.6 or later (openat2) on the server", param);
  if (fd < 0) return BAD(param, "'%s': " API_SERVER_LOCAL_MEDIA_NOT_FOUND, param);
  llb_status st = read_regular(fd, param, data, len, err);
  close(fd);
  if (st != LLB_STATUS_OK) return st;
  *dtype = sniffed(*data, *len);
  if (!*dtype) {
    free(*data);
    *data = NULL;
    return BAD(param, "'%s': the file is neither a JPEG nor a PNG image", param);
  }
  return LLB_STATUS_OK;
}

llb_status api_server_image_part_read(json_t *part, const char *pname, const char *local_media_dir, uint8_t **data,
                               size_t *len, const char **dtype, struct api_server_error *err) {
  *data = NULL;
  *len = 0;
  *dtype = NULL;
  char param[160];
  snprintf(param, sizeof param, "%s.image_url", pname);
  const char *key;
  json_t *val;
  json_object_foreach(part, key, val) {
    if (strcmp(key, "type") && strcmp(key, "image_url"))
      return BAD(param, "'%s' has an unknown field '%.40s'", pname, key);
  }
  json_t *iu = json_object_get(part, "image_url"), *u = iu;
  if (json_is_object(iu)) {
    json_object_foreach(iu, key, val) {
      if (strcmp(key, "url") && strcmp(key, "detail"))
        return BAD(param, "'%s' has an unknown field '%.40s' (known: url, detail)", param, key);
    }
    json_t *d = json_object_get(iu, "detail");
    if (d && !json_is_null(d) &&
        (!json_is_string(d) || (strcmp(json_string_value(d), "auto") && strcmp(json_string_value(d), "low") &&
                                strcmp(json_string_value(d), "high"))))
      return BAD(param, "'%s.detail' must be \"auto\", \"low\" or \"high\"", param);
    u = json_object_get(iu, "url");
  }
  if (!json_is_string(u))
    return BAD(param, "'%s' must be {\"url\": string} or a URL string, got %s", param,
               api_server_json_type_name(u));
  const char *url = json_string_value(u);
  size_t n = json_string_length(u);
  if (n >= 5 && strncasecmp(url, "data:", 5) == 0) return read_data_url(url, n, param, data, len, dtype, err);
  if (n >= 7 && strncasecmp(url, "file://", 7) == 0) {
    if (strlen(url) != n) return BAD(param, "'%s': the file URL holds a NUL byte", param);
    return read_file_url(url, param, local_media_dir, data, len, dtype, err);
  }
  if ((n >= 7 && strncasecmp(url, "http://", 7) == 0) || (n >= 8 && strncasecmp(url, "https://", 8) == 0))
    return BAD(param, "'%s': remote image URLs are not fetched by this server; send the image inline as a "
               "data:image/png;base64 or data:image/jpeg;base64 URL", param);
  return BAD(param, "'%s': unsupported URL scheme (use a data:image/png;base64 or data:image/jpeg;base64 URL)",
             param);
}

void api_server_images_map_error(const struct api_server_request *r, struct api_server_error *e) {
  if (r->endpoint != API_SERVER_ENDPOINT_CHAT || strncmp(e->param, "prompt_embeds", 13) != 0) return;
  int i = -1;
  if (sscanf(e->param + 13, "[%d]", &i) != 1) i = -1;
  char msg[sizeof e->message + 64];
  if (i >= 0) snprintf(msg, sizeof msg, "image %d (image_url part %d of the request): %s", i + 1, i + 1, e->message);
  else snprintf(msg, sizeof msg, "images: %s", e->message);
  snprintf(e->message, sizeof e->message, "%.*s", (int)sizeof e->message - 1, msg);
  snprintf(e->param, sizeof e->param, "messages");
}

/* `image_url` content parts of /v1/chat/completions messages → GenerateRequest "image" items.
 *
 * Accepted parts (OpenAI's, and the forms vLLM takes): {"type": "image_url", "image_url":
 * {"url": URL, "detail": "auto" | "low" | "high"}} and {"type": "image_url", "image_url": URL}.
 * URL:
 *  - data:image/png;base64,... or data:image/jpeg;base64,... (image/jpg too): decoded, at most
 *    API_SERVER_MAX_IMAGE_BYTES, the bytes' magic must match the declared type;
 *  - file:///abs/path only when the server runs with --allowed-local-media-path DIR (vLLM's
 *    flag), the path is textually under DIR's realpath and opens under it with openat2
 *    (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: no "..", no symbolic link anywhere), O_NONBLOCK, as
 *    a regular file; read up to API_SERVER_MAX_IMAGE_BYTES. Missing, outside, through a link or not a
 *    regular file: one answer, API_SERVER_LOCAL_MEDIA_NOT_FOUND (no existence oracle);
 *  - http(s):// is refused: the engine does not fetch (send the image as a data: URL).
 * At most API_SERVER_MAX_IMAGES images per request. Everything else (bad base64, another media type,
 * a non-base64 data URL) is a 400 naming the part ("messages[1].content[0].image_url"). The
 * decode of the pixels (truncated files, oversized headers) is the input processor's
 * (actors/input_processor/mm_images.h), so that NATS clients get the same checks; its
 * errors come back as 400 too, before any engine sees the request.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_IMAGES_H
#define LLB_ACTORS_API_SERVER_API_SERVER_IMAGES_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"

#define API_SERVER_MAX_IMAGES 8                  /* image parts in one request */
#define API_SERVER_MAX_IMAGE_BYTES (640 * 1024)  /* one decoded file: the request travels as one NATS
                                             message (1 MiB by default) */
/* The one error text of a file:// URL that cannot be read (after "'<param>': "). */
#define API_SERVER_LOCAL_MEDIA_NOT_FOUND "no readable regular file at that path inside --allowed-local-media-path"

/* Reads the image of content part `part` (named `pname` in errors) into a malloc'd *data of
 * *len bytes (caller frees) and its dtype ("jpeg" or "png", static). `local_media_dir` is the
 * realpath of --allowed-local-media-path, or NULL. Errors: INVALID_ARGUMENT (400, err set),
 * OUT_OF_MEMORY (500). */
llb_status api_server_image_part_read(json_t *part, const char *pname, const char *local_media_dir, uint8_t **data,
                               size_t *len, const char **dtype, struct api_server_error *err);

/* An engine error about item i of a chat request names "prompt_embeds[i]..." after
 * api_server_error_from_status; for chat those items are the images: the param becomes "messages"
 * and the message says which image ("image 2 (the second image_url part): ..."). */
void api_server_images_map_error(const struct api_server_request *r, struct api_server_error *e);

#endif

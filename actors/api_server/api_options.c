/* The api server's option strings; see api_options.h. */
#include "actors/api_server/api_options.h"

#include <stdlib.h>
#include <string.h>

llb_status api_parse_host_port(const char *addr, char *host, size_t cap, int *port) {
  const char *colon = strrchr(addr, ':');
  char *end = NULL;
  long p = colon ? strtol(colon + 1, &end, 10) : -1;
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  if (!colon || !end || *end || colon[1] == '\0' || p < 0 || p > 65535 || hl == 0 || hl >= cap)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: --http \"%s\" is not HOST:PORT", addr);
  memcpy(host, addr, hl);
  host[hl] = '\0';
  if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [::1] */
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = '\0';
  }
  *port = (int)p;
  return LLB_STATUS_OK;
}

int api_parse_name_list(const char *list, char *names, size_t name_cap, int max) {
  int kept = 0;
  while (*list && kept < max) {
    size_t n = strcspn(list, ",");
    if (n > 0 && n < name_cap) {
      memcpy(names + (size_t)kept * name_cap, list, n);
      names[(size_t)kept * name_cap + n] = '\0';
      kept++;
    }
    list += n;
    if (*list == ',') list++;
  }
  return kept;
}

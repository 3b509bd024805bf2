/* The api server's option strings, parsed (pure functions, no state). */
#ifndef LLB_ACTORS_API_SERVER_API_OPTIONS_H
#define LLB_ACTORS_API_SERVER_API_OPTIONS_H

#include <stddef.h>

#include "base/status.h"

/* "HOST:PORT" (the port after the last ':', 0..65535; "[::1]:8000" gives host "::1") into
 * host[cap] and *port. INVALID_ARGUMENT naming the text when it is not that. */
llb_status api_parse_host_port(const char *addr, char *host, size_t cap, int *port);

/* A comma-separated list of names into names[max][name_cap]; empty or too long names are
 * skipped. Returns how many were kept. */
int api_parse_name_list(const char *list, char *names, size_t name_cap, int max);

#endif

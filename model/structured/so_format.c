/* String formats of JSON Schema as regexes over the decoded string (whole-string matches),
 * each a subset of what its RFC allows, chosen so that every text also passes the checks of
 * Python's jsonschema FormatChecker (datetime.date.fromisoformat, rfc3339-validator,
 * uuid.UUID, ipaddress.IPv4Address / IPv6Address, rfc3986-validator's URI rule). Calendar
 * dates are exact: the days of each month, February 29 only in leap years. */
#include <string.h>

#include "model/structured/so_internal.h"

#define YEAR "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})" /* 0001-9999 */
#define MONTH_DAY                                                                                  \
  "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define LEAP_DAY "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29"
#define DATE "(?:" YEAR "-" MONTH_DAY "|" LEAP_DAY ")"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define HEX4 "[0-9a-fA-F]{4}"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define LABEL "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
#define PCT "%[0-9a-fA-F]{2}"
#define PCHAR "(?:[a-zA-Z0-9._~!$&'()*+,;=:@-]|" PCT ")"
/* RFC 3986's IPv6address: 8 groups, or fewer around one "::", the last two as dotted IPv4 */
#define H16 "[0-9a-fA-F]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" OCTET "\\." OCTET "\\." OCTET "\\." OCTET ")"
#define IPV6                                                                                          \
  "(?:(?:" H16 ":){6}" LS32 "|::(?:" H16 ":){5}" LS32 "|(?:" H16 ")?::(?:" H16 ":){4}" LS32             \
  "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32 "|(?:(?:" H16 ":){0,2}" H16 ")?::(?:" H16       \
  ":){2}" LS32 "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32 "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32 \
  "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16 "|(?:(?:" H16 ":){0,6}" H16 ")?::)"

static const struct {
  const char *name;
  const char *regex;
} formats[] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "T" TIME},
    {"uuid", HEX4 HEX4 "-" HEX4 "-" HEX4 "-" HEX4 "-" HEX4 HEX4 HEX4},
    {"email", "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@" LABEL "(?:\\." LABEL ")+"},
    {"ipv4", OCTET "\\." OCTET "\\." OCTET "\\." OCTET},
    {"ipv6", IPV6}, /* no zone id: jsonschema refuses "fe80::1%eth0" */
    /* RFC 3986: scheme ":" ("//" host [":" port] path-abempty / path-absolute / path-rootless) [?query] [#fragment] */
    {"uri", "[a-zA-Z][a-zA-Z0-9+.-]*:(?://(?:[a-zA-Z0-9._~-]|" PCT ")+(?::[0-9]{1,5})?(?:/" PCHAR "*)*|/(?:" PCHAR
            "+(?:/" PCHAR "*)*)?|" PCHAR "+(?:/" PCHAR "*)*)?(?:\\?(?:" PCHAR "|[/?])*)?(?:#(?:" PCHAR "|[/?])*)?"},
};

const char *so_format_regex(const char *name) {
  for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
    if (strcmp(formats[i].name, name) == 0) return formats[i].regex;
  return NULL;
}

const char *so_format_names(void) { return "date, time, date-time, uuid, email, ipv4, ipv6, uri"; }

/* libFuzzer target for the request-id parsers of the input processor (input_processor.h) that
 * read what a client sends back: an AbortRequest's id and the Llmbus-Resume-Of header
 * (input_processor_id_owned_by: the tenant tag, a keyed MAC; input_processor_engine_of_id: the engine after '@'),
 * and the cache-salt composition of a tenant with a client salt. Input: one byte, the tenant's
 * length, the tenant, then the id (or salt). Oracles: an engine read from an id is a subject
 * token; an id is never owned by a tenant it was not made for, and an id made here (its tag
 * from the key) is owned by its tenant and names its engine; the salt encodes its two parts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/input_processor.h"
#include "bus/subject.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct llb_hash_key key = {{0x5a, 1, 2, 3}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t tl = data[0] % 40;
  if (tl > size - 1) tl = size - 1;
  char tenant[64], id[600];
  memcpy(tenant, data + 1, tl);
  tenant[tl] = '\0';
  size_t il = size - 1 - tl < 500 ? size - 1 - tl : 500;
  memcpy(id, data + 1 + tl, il);
  id[il] = '\0';
  const size_t idlen = strlen(id); /* what a decoded FlatBuffers string holds */
  char eid[BUS_TOKEN_MAX + 1];
  if (input_processor_engine_of_id(id, idlen, eid, sizeof eid) && !bus_token_valid(eid)) {
    fprintf(stderr, "engine '%s' read from an id is not a token\n", eid);
    abort();
  }
  const bool owned = input_processor_id_owned_by(&key, id, idlen, tenant);
  char other[80];
  snprintf(other, sizeof other, "%s-x", tenant);
  if (owned && input_processor_id_owned_by(&key, id, idlen, other)) {
    fprintf(stderr, "one id owned by two tenants\n");
    abort();
  }
  /* an id made here for the tenant, with the fuzzed text as the client's part */
  char base[300], tag[INPUT_PROCESSOR_TENANT_TAG_HEX + 1], made[400];
  int bl = snprintf(base, sizeof base, "%.127s-0123abcd", id);
  input_processor_tenant_tag(&key, tenant, base, (size_t)bl, tag);
  int ml = snprintf(made, sizeof made, "%s%s@e0", base, tag);
  if (strlen(made) == (size_t)ml && strlen(id) == il && !input_processor_id_owned_by(&key, made, (size_t)ml, tenant)) {
    fprintf(stderr, "an id made for '%s' is not owned by it: %s\n", tenant, made);
    abort();
  }
  if (strlen(made) == (size_t)ml && (!input_processor_engine_of_id(made, (size_t)ml, eid, sizeof eid) || strcmp(eid, "e0")))
    abort();
  char salt[INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES + 256];
  size_t n = input_processor_cache_salt_compose(tenant, id, il, salt, sizeof salt);
  if (n < sizeof salt && strncmp(salt, "0:", 2) != 0 && (size_t)atoi(salt) != strlen(tenant)) abort();
  return 0;
}

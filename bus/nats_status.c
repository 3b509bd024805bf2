/* The one mapping of NATS return codes to our status (bus_internal.h), behind every checked
 * NATS call of bus/ (BUS_NATS_ERR). A leaf: connection, messages and JetStream all use it. */
#include <nats/nats.h>

#include "bus/bus_internal.h"

llb_status bus_map_nats(natsStatus s) {
  switch (s) {
    case NATS_OK: return LLB_STATUS_OK;
    case NATS_TIMEOUT: return LLB_STATUS_TIMEOUT;
    case NATS_NO_SERVER: return LLB_STATUS_NO_SERVER;
    case NATS_NO_RESPONDERS: return LLB_STATUS_NOT_FOUND;
    case NATS_CONNECTION_CLOSED:
    case NATS_DRAINING:
    case NATS_INVALID_SUBSCRIPTION: return LLB_STATUS_CLOSED;
    case NATS_NO_MEMORY: return LLB_STATUS_OUT_OF_MEMORY;
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_QUEUE_NAME: return LLB_STATUS_INVALID_ARGUMENT;
    case NATS_MAX_PAYLOAD: return LLB_STATUS_TOO_LARGE;
    case NATS_SSL_ERROR: return LLB_STATUS_INVALID_ARGUMENT;
    default: return LLB_STATUS_CONNECTION;
  }
}

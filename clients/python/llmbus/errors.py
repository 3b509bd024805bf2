"""Exceptions of the llmbus client. Every error the engine reports arrives as ErrorInfo
(schemas/common.fbs) inside the final RequestOutput; RequestError carries all of it."""

# ErrorInfo.code values: llb_status of base/status.h, in its order.
STATUS_NAMES = ("OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "IO", "MALFORMED", "UNSUPPORTED",
                "NOT_FOUND", "TOO_LARGE", "TIMEOUT", "NO_SERVER", "CONNECTION", "CLOSED",
                "QUEUE_FULL", "ABORTED", "DEVICE", "INTERNAL", "STATE_LOST")


def status_name(code):
    """The llb_status name of an ErrorInfo code ("QUEUE_FULL"), or "code N" when unknown."""
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"code {code}"


class LlmbusError(Exception):
    """Base of every error this package raises."""


class ConnectionFileError(LlmbusError):
    """No usable connection file (no `llmbus serve` running here, or the named one is gone)."""


class NoEngineError(LlmbusError):
    """Nobody listens on the generate subject (NATS "no responders") after the retries."""


class RequestTimeoutError(LlmbusError):
    """No output arrived within the client's timeout; the request was aborted."""


class RequestError(LlmbusError):
    """The engine refused or failed a request.

    code:        ErrorInfo.code (an llb_status value; `status` is its name, "QUEUE_FULL")
    message:     the engine's explanation
    field:       the offending request field ("sampling_params.temperature"), or None
    retry_after: seconds after which the same request may succeed (a tenant limit that clears
                 with time), or None
    request_id:  the request's id, when the engine had assigned one
    """

    def __init__(self, code, message, field=None, retry_after=None, request_id=None):
        self.code = code
        self.status = status_name(code)
        self.message = message
        self.field = field or None
        self.retry_after = retry_after
        self.request_id = request_id or None
        where = f" ({self.field})" if self.field else ""
        wait = f"; retry after {retry_after:.3f} s" if retry_after else ""
        super().__init__(f"{self.status}{where}: {message}{wait}")


class RateLimitError(RequestError):
    """A RequestError that clears with time (retry_after is set): a tenant's limits."""

"""Rendering errors as OpenAI's error JSON, for whole responses and for streams.

One place decides how a `SlorouterError` looks on the wire: status, `Retry-After`,
`x-should-retry` and the body `{"error": {"message", "type", "param", "code"}}`. Unexpected
exceptions become a generic 500 whose message names no internals.
"""

from __future__ import annotations

import logging
import math
import random

from starlette.responses import Response

from router.errors import (
    ClientStalledError,
    NoEligibleModelError,
    OverloadedError,
    ProviderMisconfiguredError,
    RequestTimeoutError,
    SlorouterError,
    UnknownCommitError,
)
from router.outcomes import CLIENT_CLOSED
from router.providers import lone_surrogates

log = logging.getLogger("slorouter.http")

INTERNAL = SlorouterError("internal error in the router", code="internal_error")


class ShuttingDown(OverloadedError):
    """Ends a request still in flight when the server's shutdown grace is over (`InFlight`)."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down and its grace for requests in flight is "
                         "over; retry the request", code="server_shutting_down")


SHUTTING_DOWN = ShuttingDown()  # what a stream ended so reports (`WatchedStreamingResponse`)
# A stream whose client stopped reading until past the request's deadline: cut, its slot freed.
STALLED = ClientStalledError("request deadline exceeded: the client stopped reading the stream",
                             code="deadline_exceeded")


def as_project_error(exc: BaseException) -> SlorouterError:
    if isinstance(exc, SlorouterError):
        return exc
    log.exception("unhandled_error", exc_info=exc)
    return INTERNAL


class ClientGone(Exception):
    """The client disconnected before the response was ready."""


# The longest wait a client is told: openai-python ignores a longer hint (and backs off on its
# own), the Vercel AI SDK caps it there, but openai-node 6 sleeps out any hint, and an abort does
# not wake it: an upstream's `retry-after: 3600`, relayed, held a call an hour (the JavaScript
# SDK audit of 2026-12-07; a `circuit_open` spread to twice a 60 s hold, two minutes). A client
# back after a minute is refused again cheaply if it is still too soon.
MAX_RETRY_AFTER_S = 60.0


def error_response(exc: BaseException, headers: dict[str, str] | None = None) -> Response:
    if isinstance(exc, ClientGone):  # no one reads an answer
        return Response(status_code=CLIENT_CLOSED)
    err = as_project_error(exc)
    all_headers = dict(headers) if headers else {}
    if err.retry_after is not None:
        # refused together (`spread_retry_after`), clients must not all come back at once
        spread = 1.0 + random.random() if err.spread_retry_after else 1.0
        wait_s = min(err.retry_after * spread, MAX_RETRY_AFTER_S)
        if err.spread_retry_after:
            all_headers["retry-after-ms"] = str(round(wait_s * 1000))  # the SDKs read it first
        all_headers["retry-after"] = str(max(1, math.ceil(wait_s)))
    if not client_may_retry(err):
        all_headers["x-should-retry"] = "false"
    if isinstance(err, RequestTimeoutError):  # its body never ended: the connection is unusable
        all_headers["connection"] = "close"
    # lone_surrogates.dumps: an upstream's message may hold half an emoji, which orjson refuses
    return Response(lone_surrogates.dumps(err.to_openai()), status_code=err.status_code,
                    headers=all_headers, media_type="application/json")


def client_may_retry(err: SlorouterError) -> bool:
    """False for the errors that docs/errors.md says not to retry (the configuration must
    change) or not blindly (a side effect may have run), among the statuses the OpenAI SDKs
    retry by themselves (408, 409, 429, 5xx): sent as `x-should-retry: false`, which they obey.
    Without it an SDK's default two retries would run an `unknown_commit` action up to twice
    more, with no `Idempotency-Key` to stop them."""
    if isinstance(err, UnknownCommitError | ProviderMisconfiguredError):
        return False
    if err.code in ("idempotency_store_misconfigured", "experiments_store_misconfigured"):
        return False
    return not (err.code == "no_candidates"
                or (isinstance(err, NoEligibleModelError) and err.retry_after is None))


def error_event(exc: BaseException) -> bytes:
    """An SSE event the OpenAI SDKs raise as an APIError (a stream must not end cleanly)."""
    return b"data: " + lone_surrogates.dumps(as_project_error(exc).to_openai()) + b"\n\n"

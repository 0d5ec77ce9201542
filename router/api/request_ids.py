"""Request ids: the client's `x-request-id`, or one made here."""

from __future__ import annotations

import os
from collections.abc import Callable

from router.errors import RequestError

HEADER = "x-request-id"
# The longest id a client may choose: what `POST /v1/feedback` takes as its `request_id`. The
# id is echoed and kept with each request's experiment exposure (200,000 a tenant, in memory or
# Redis): unbounded, one tenant's megabyte ids would fill the process every tenant shares.
MAX_REQUEST_ID_LENGTH = 128


def new_request_id() -> str:
    """A random 128-bit id (32 hex digits), each drawn on its own: ids made from a counter
    would let a tenant read, from two of its own ids, how many requests everyone else sent in
    between. One `getrandom` call, about 0.5 µs."""
    return os.urandom(16).hex()


def usable(given: str) -> bool:
    """Whether a client's `x-request-id` is one to adopt: 1-128 printable ASCII characters."""
    return 0 < len(given) <= MAX_REQUEST_ID_LENGTH and given.isascii() and given.isprintable()


def _holds_none(_: str) -> bool:
    return False


def request_id_refusal(given: str | None,
                       holds_key: Callable[[str], bool] = _holds_none) -> RequestError | None:
    """The 400 for a client's `x-request-id` not to adopt, None for one to adopt (or none sent):
    one not `usable`, or one holding an API key (`router.auth.holds_key`). The id is written
    to every log line and span of its request: a caller's key pasted there reached the access
    log and the exported traces as sent when it was a `key_sha256` key, which no redaction
    list holds (the telemetry audit of 2026-12-07)."""
    if not given:
        return None
    if not usable(given):
        return RequestError(
            f"{HEADER} must be 1-{MAX_REQUEST_ID_LENGTH} printable ASCII characters",
            param=HEADER, code="invalid_request_id")
    if holds_key(given):  # the message does not quote it: error bodies are logged by proxies
        return RequestError(f"{HEADER} holds an API key, and request ids are logged: send an "
                            "id without it", param=HEADER, code="invalid_request_id")
    return None


def check_request_id(given: str | None, holds_key: Callable[[str], bool] = _holds_none) -> None:
    """Raise `request_id_refusal`'s 400, if any."""
    refusal = request_id_refusal(given, holds_key)
    if refusal is not None:
        raise refusal
